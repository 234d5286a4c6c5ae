package sim

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// ErrFormat is wrapped by every error about a trace's contents.
var ErrFormat = errors.New("sim: bad trace")

// csvSource reads a CSV file with a header row, one record at a time.
type csvSource struct {
	name string // of the format, for errors
	r    *csv.Reader
	col  map[string]int
	line int
}

func newCSVSource(r io.Reader, name string, required ...string) (*csvSource, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	head, err := cr.Read()
	if err == io.EOF {
		return nil, fmt.Errorf("%w: %s: empty file", ErrFormat, name)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: header: %w", ErrFormat, name, err)
	}
	s := &csvSource{name: name, r: cr, col: map[string]int{}, line: 1}
	for i, h := range head {
		s.col[strings.ToLower(strings.TrimSpace(strings.TrimPrefix(h, "\ufeff")))] = i
	}
	for _, c := range required {
		if _, ok := s.col[c]; !ok {
			return nil, fmt.Errorf("%w: %s: header has no %q column (it has %s)", ErrFormat, name, c, strings.Join(head, ","))
		}
	}
	return s, nil
}

// next returns the next record, io.EOF at the end.
func (s *csvSource) next() ([]string, error) {
	rec, err := s.r.Read()
	s.line++
	if err == io.EOF {
		return nil, io.EOF
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrFormat, s.name, err)
	}
	if len(rec) < len(s.col) {
		return nil, fmt.Errorf("%w: %s line %d: %d fields, the header has %d", ErrFormat, s.name, s.line, len(rec), len(s.col))
	}
	return rec, nil
}

// field returns column c of rec ("" for a column the file lacks).
func (s *csvSource) field(rec []string, c string) string {
	if i, ok := s.col[c]; ok {
		return strings.TrimSpace(rec[i])
	}
	return ""
}

func (s *csvSource) errorf(format string, args ...any) error {
	return fmt.Errorf("%w: %s line %d: %s", ErrFormat, s.name, s.line, fmt.Sprintf(format, args...))
}

// BlobTrace reads the Azure Functions blob-access trace (2020): a CSV with
// the columns Timestamp (ms since the epoch), AnonUserId, AnonAppName,
// AnonFunctionInvocationId, AnonBlobName, AnonBlobETag, BlobBytes, Read
// and Write (others are ignored). A row is a Read event unless only Write
// is True; the object is AnonBlobName in the bucket AnonUserId, at the
// version AnonBlobETag.
type BlobTrace struct{ csv *csvSource }

// NewBlobTrace reads the header and returns the trace's Source, or an
// error wrapping ErrFormat when a required column is missing.
func NewBlobTrace(r io.Reader) (*BlobTrace, error) {
	s, err := newCSVSource(r, "blob trace", "timestamp", "anonuserid", "anonappname", "anonfunctioninvocationid", "anonblobname", "anonblobetag", "blobbytes", "read", "write")
	if err != nil {
		return nil, err
	}
	return &BlobTrace{csv: s}, nil
}

// Next implements Source.
func (b *BlobTrace) Next() (Event, error) {
	s := b.csv
	rec, err := s.next()
	if err != nil {
		return Event{}, err
	}
	ms, err := strconv.ParseInt(s.field(rec, "timestamp"), 10, 64)
	if err != nil {
		return Event{}, s.errorf("timestamp %q is not milliseconds since the epoch", s.field(rec, "timestamp"))
	}
	size, err := strconv.ParseFloat(s.field(rec, "blobbytes"), 64)
	if err != nil || size < 0 || size > math.MaxInt64/2 || math.IsNaN(size) {
		return Event{}, s.errorf("BlobBytes %q is not a size", s.field(rec, "blobbytes"))
	}
	rd, err1 := parseBool(s.field(rec, "read"))
	wr, err2 := parseBool(s.field(rec, "write"))
	if err := errors.Join(err1, err2); err != nil {
		return Event{}, s.errorf("%v", err)
	}
	e := Event{
		Time:    time.UnixMilli(ms).UTC(),
		Kind:    Read,
		App:     s.field(rec, "anonappname"),
		Bucket:  s.field(rec, "anonuserid"),
		Key:     s.field(rec, "anonblobname"),
		Version: s.field(rec, "anonblobetag"),
		Size:    int64(size),
	}
	if wr && !rd {
		e.Kind = Write
	}
	if id := s.field(rec, "anonfunctioninvocationid"); id != "" {
		n, err := strconv.ParseUint(id, 10, 64)
		if err != nil {
			n = hashString(id)
		}
		e.Invocation = n + 1 // 0 means none
	}
	if e.Key == "" {
		return Event{}, s.errorf("no AnonBlobName")
	}
	return e, nil
}

func parseBool(s string) (bool, error) {
	switch strings.ToLower(s) {
	case "true", "1":
		return true, nil
	case "false", "0", "":
		return false, nil
	}
	return false, fmt.Errorf("%q is neither True nor False", s)
}

// hashString is FNV-1a, for identifiers that are not numbers.
func hashString(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// AccessLog reads an object-store access log: a CSV whose header names
// its columns, in any order. Required: time (RFC 3339, or seconds since
// the log's start as a decimal number), op (GET or PUT; read and write are
// synonyms), key and size (the whole object's bytes). Optional: bucket
// (default "bucket"), app (default "app"), version, offset and length (a
// ranged GET), invocation (an identifier of the invocation that made it).
//
//	time,op,key,size,offset,length
//	0.000,GET,models/resnet.bin,102400000,,
//	0.250,GET,models/resnet.bin,102400000,0,1048576
//	1.5,PUT,out/result.json,2048,,
type AccessLog struct {
	csv   *csvSource
	start time.Time
}

// AccessLogStart is when an access log whose times are offsets in
// seconds starts.
var AccessLogStart = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)

// NewAccessLog reads the header and returns the log's Source, or an
// error wrapping ErrFormat when a required column is missing.
func NewAccessLog(r io.Reader) (*AccessLog, error) {
	s, err := newCSVSource(r, "access log", "time", "op", "key", "size")
	if err != nil {
		return nil, err
	}
	return &AccessLog{csv: s, start: AccessLogStart}, nil
}

// Next implements Source.
func (a *AccessLog) Next() (Event, error) {
	s := a.csv
	rec, err := s.next()
	if err != nil {
		return Event{}, err
	}
	var e Event
	ts := s.field(rec, "time")
	if t, err := time.Parse(time.RFC3339Nano, ts); err == nil {
		e.Time = t
	} else if sec, err := strconv.ParseFloat(ts, 64); err == nil && sec >= 0 && sec < 1e12 {
		e.Time = a.start.Add(time.Duration(sec * float64(time.Second)))
	} else {
		return Event{}, s.errorf("time %q is neither RFC 3339 nor seconds", ts)
	}
	switch op := strings.ToUpper(s.field(rec, "op")); op {
	case "GET", "READ":
		e.Kind = Read
	case "PUT", "WRITE":
		e.Kind = Write
	default:
		return Event{}, s.errorf("op %q is not GET or PUT", s.field(rec, "op"))
	}
	e.Key = s.field(rec, "key")
	if e.Key == "" {
		return Event{}, s.errorf("empty key")
	}
	if e.Size, err = parseSize(s.field(rec, "size")); err != nil {
		return Event{}, s.errorf("size: %v", err)
	}
	e.Bucket, e.App, e.Version = s.field(rec, "bucket"), s.field(rec, "app"), s.field(rec, "version")
	if e.Bucket == "" {
		e.Bucket = "bucket"
	}
	if e.App == "" {
		e.App = "app"
	}
	if off := s.field(rec, "offset"); off != "" {
		if e.Offset, err = parseSize(off); err != nil {
			return Event{}, s.errorf("offset: %v", err)
		}
	}
	if n := s.field(rec, "length"); n != "" {
		if e.Length, err = parseSize(n); err != nil {
			return Event{}, s.errorf("length: %v", err)
		}
	}
	if e.Offset+e.Length > e.Size {
		return Event{}, s.errorf("range [%d, %d) is beyond the object's %d bytes", e.Offset, e.Offset+e.Length, e.Size)
	}
	if id := s.field(rec, "invocation"); id != "" {
		e.Invocation = hashString(id) | 1
	}
	return e, nil
}

func parseSize(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a byte count", s)
	}
	return n, nil
}
