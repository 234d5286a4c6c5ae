package sim

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"
)

// AzureInvocations reads one day of the Azure Functions invocation trace
// (Shahrad et al., 2020): invocations_per_function_md.anon.dNN.csv, with
// the columns HashOwner, HashApp, HashFunction, Trigger and 1 to 1440, the
// invocations of the function in each minute of the day. Optional
// companions give each invocation its duration
// (function_durations_percentiles: HashFunction and Average, in ms) and
// memory (app_memory_percentiles: HashApp and AverageAllocatedMb).
//
// The counts file's rows are functions, its columns minutes, so the day is
// read whole before the first event, holding the non-zero counts (at most
// 1440 per function) rather than the invocations; events are then made a
// minute at a time, each minute's invocations of a function spread evenly
// over it, in time order. The companions are read whole too (one row per
// function or application).
type AzureInvocations struct {
	start      time.Time
	minutes    [1440][]cell // by minute, the functions invoked in it
	fns        []azureFn
	minute     int
	pending    []Event // the current minute's events, in time order
	next       int
	invocation uint64
}

type cell struct {
	fn    int32
	count uint32
}

type azureFn struct {
	app, fn  string
	duration time.Duration
	memoryMB int
}

// AzureStart is when the day of an Azure trace starts (the trace is
// anonymised: its days have no dates).
var AzureStart = time.Date(2019, 7, 15, 0, 0, 0, 0, time.UTC)

// NewAzureInvocations reads the counts and the optional companions (nil
// for none). It returns an error wrapping ErrFormat for a malformed file.
func NewAzureInvocations(counts, durations, memory io.Reader) (*AzureInvocations, error) {
	dur := map[string]time.Duration{}
	if durations != nil {
		s, err := newCSVSource(durations, "durations", "hashfunction", "average")
		if err != nil {
			return nil, err
		}
		for {
			rec, err := s.next()
			if err == io.EOF {
				break
			}
			if err != nil {
				return nil, err
			}
			ms, err := strconv.ParseFloat(s.field(rec, "average"), 64)
			if err != nil || ms < 0 {
				return nil, s.errorf("Average %q is not milliseconds", s.field(rec, "average"))
			}
			dur[s.field(rec, "hashfunction")] = time.Duration(ms * float64(time.Millisecond))
		}
	}
	mem := map[string]int{}
	if memory != nil {
		s, err := newCSVSource(memory, "memory", "hashapp", "averageallocatedmb")
		if err != nil {
			return nil, err
		}
		for {
			rec, err := s.next()
			if err == io.EOF {
				break
			}
			if err != nil {
				return nil, err
			}
			mb, err := strconv.ParseFloat(s.field(rec, "averageallocatedmb"), 64)
			if err != nil || mb < 0 {
				return nil, s.errorf("AverageAllocatedMb %q is not megabytes", s.field(rec, "averageallocatedmb"))
			}
			mem[s.field(rec, "hashapp")] = max(1, int(mb+0.5))
		}
	}
	s, err := newCSVSource(counts, "invocation counts", "hashapp", "hashfunction", "1", "1440")
	if err != nil {
		return nil, err
	}
	a := &AzureInvocations{start: AzureStart, minute: -1}
	first := s.col["1"]
	for m := 2; m <= 1440; m++ {
		if s.col[strconv.Itoa(m)] != first+m-1 {
			return nil, fmt.Errorf("%w: invocation counts: the minute columns 1 to 1440 must be consecutive", ErrFormat)
		}
	}
	for {
		rec, err := s.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		fn := int32(len(a.fns))
		f := azureFn{app: s.field(rec, "hashapp"), fn: s.field(rec, "hashfunction"), duration: dur[s.field(rec, "hashfunction")], memoryMB: mem[s.field(rec, "hashapp")]}
		a.fns = append(a.fns, f)
		for m := range 1440 {
			v := rec[first+m]
			if v == "0" || v == "" {
				continue
			}
			n, err := strconv.ParseUint(v, 10, 32)
			if err != nil {
				return nil, s.errorf("minute %d: %q is not a count", m+1, v)
			}
			if n > 0 {
				a.minutes[m] = append(a.minutes[m], cell{fn: fn, count: uint32(n)})
			}
		}
	}
	return a, nil
}

// Next implements Source.
func (a *AzureInvocations) Next() (Event, error) {
	for a.next >= len(a.pending) {
		a.minute++
		if a.minute >= 1440 {
			return Event{}, io.EOF
		}
		a.fill()
	}
	a.next++
	return a.pending[a.next-1], nil
}

// fill makes the current minute's events.
func (a *AzureInvocations) fill() {
	a.pending, a.next = a.pending[:0], 0
	base := a.start.Add(time.Duration(a.minute) * time.Minute)
	for _, c := range a.minutes[a.minute] {
		f := a.fns[c.fn]
		step := time.Minute / time.Duration(c.count)
		for j := range time.Duration(c.count) {
			a.invocation++
			a.pending = append(a.pending, Event{
				Time: base.Add(step*j + step/2), Kind: Invoke, App: f.app, Function: f.fn,
				Invocation: a.invocation, Duration: f.duration, MemoryMB: f.memoryMB,
			})
		}
	}
	a.minutes[a.minute] = nil
	slices.SortStableFunc(a.pending, func(x, y Event) int { return x.Time.Compare(y.Time) })
}
