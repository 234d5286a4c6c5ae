package loadgen

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// maxTraceLine is the longest trace line (an event included).
const maxTraceLine = 16 << 20

// maxOffset is the largest offset a trace may give, in seconds (a year).
const maxOffset = 366 * 24 * 3600

// ParseTrace reads a trace: one invocation per line, as CSV or as a JSON
// object, the two forms mixed freely.
//
//	# a comment; blank lines are skipped too
//	offset_seconds,app,function,event
//	0,image-processing,thumbnail
//	0.25,wordcount,pipeline:count,{"input": "corpus/a.txt", "n": 3}
//	{"offset": 1.5, "app": "ml-inference", "function": "detect", "event": {"image": "x.jpg"}}
//	{"offset": 2, "app": "wordcount", "pipeline": "count"}
//
// A CSV line is offset_seconds,app,function[,event]: the offset from the
// start of the run in seconds (a decimal number, 0 or more), the
// application, the function — pipeline:NAME for a pipeline — and
// optionally the event, which is the rest of the line taken verbatim as
// JSON (commas included, no CSV quoting). Spaces around the first three
// fields are ignored. A first line starting "offset" is a header.
//
// A line starting with "{" is a JSON object with the fields offset
// (seconds), app, function or pipeline (exactly one), and optionally
// event; other fields are errors.
//
// A row without an event gets the run's default one. Rows need not be in
// order: the arrivals are sorted by offset, rows with equal offsets
// keeping the file's order. Every error names the file (name) and the
// line.
func ParseTrace(r io.Reader, name string) ([]Arrival, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxTraceLine)
	var out []Arrival
	first := true
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		header := first && strings.HasPrefix(line, "offset")
		first = false
		if header {
			continue
		}
		var a Arrival
		var err error
		if strings.HasPrefix(line, "{") {
			a, err = parseJSONRow(line)
		} else {
			a, err = parseCSVRow(line)
		}
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, n, err)
		}
		out = append(out, a)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("%s: a line is longer than %d MiB", name, maxTraceLine>>20)
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no invocations in the trace", name)
	}
	slices.SortStableFunc(out, func(a, b Arrival) int { return cmp.Compare(a.At, b.At) })
	return out, nil
}

func parseCSVRow(line string) (Arrival, error) {
	fields := strings.SplitN(line, ",", 4)
	if len(fields) < 3 {
		return Arrival{}, fmt.Errorf("want offset_seconds,app,function[,event], got %d field(s)", len(fields))
	}
	at, err := parseOffset(strings.TrimSpace(fields[0]))
	if err != nil {
		return Arrival{}, err
	}
	a := Arrival{At: at, Target: Target{App: strings.TrimSpace(fields[1]), Function: strings.TrimSpace(fields[2])}}
	if p, ok := strings.CutPrefix(a.Target.Function, "pipeline:"); ok {
		a.Target.Function, a.Target.Pipeline = p, true
	}
	if err := checkTarget(a.Target); err != nil {
		return Arrival{}, err
	}
	if len(fields) == 4 {
		ev := strings.TrimSpace(fields[3])
		if !json.Valid([]byte(ev)) {
			return Arrival{}, fmt.Errorf("the event (field 4 to the end of the line) is not valid JSON: %.40q", ev)
		}
		a.Event = json.RawMessage(ev)
	}
	return a, nil
}

func parseJSONRow(line string) (Arrival, error) {
	var row struct {
		Offset   *float64        `json:"offset"`
		App      string          `json:"app"`
		Function string          `json:"function"`
		Pipeline string          `json:"pipeline"`
		Event    json.RawMessage `json:"event"`
	}
	dec := json.NewDecoder(strings.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&row); err != nil {
		return Arrival{}, fmt.Errorf("bad JSON row: %v", err)
	}
	if dec.More() {
		return Arrival{}, errors.New("bad JSON row: more than one value on the line")
	}
	if row.Offset == nil {
		return Arrival{}, errors.New("the JSON row has no offset")
	}
	at, err := offset(*row.Offset, strconv.FormatFloat(*row.Offset, 'g', -1, 64))
	if err != nil {
		return Arrival{}, err
	}
	if (row.Function == "") == (row.Pipeline == "") {
		return Arrival{}, errors.New("the JSON row needs exactly one of function and pipeline")
	}
	a := Arrival{At: at, Target: Target{App: row.App, Function: row.Function}}
	if row.Pipeline != "" {
		a.Target.Function, a.Target.Pipeline = row.Pipeline, true
	}
	if err := checkTarget(a.Target); err != nil {
		return Arrival{}, err
	}
	if len(row.Event) > 0 && !bytes.Equal(row.Event, []byte("null")) {
		a.Event = row.Event
	}
	return a, nil
}

func parseOffset(s string) (time.Duration, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("bad offset %q: want seconds from the start, like 1.5", s)
	}
	return offset(f, s)
}

// offset converts f seconds (s as written) to a duration.
func offset(f float64, s string) (time.Duration, error) {
	if f < 0 || f > maxOffset {
		return 0, fmt.Errorf("offset %s out of range: want 0 to %d seconds", s, maxOffset)
	}
	return time.Duration(math.Round(f * float64(time.Second))), nil
}

// checkTarget refuses empty names and names that cannot be part of a URL
// path as they are.
func checkTarget(t Target) error {
	what := "function"
	if t.Pipeline {
		what = "pipeline"
	}
	for _, f := range []struct{ what, name string }{{"app", t.App}, {what, t.Function}} {
		if f.name == "" {
			return fmt.Errorf("no %s", f.what)
		}
		if strings.ContainsAny(f.name, " \t/?#%") {
			return fmt.Errorf("bad %s name %q", f.what, f.name)
		}
	}
	return nil
}
