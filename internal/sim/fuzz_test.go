package sim

import (
	"errors"
	"io"
	"strings"
	"testing"
)

// The parsers take any bytes: every error is ErrFormat's, no input
// panics, and what they accept replays.
func fuzzSource(f *testing.F, open func(io.Reader) (Source, error)) {
	f.Fuzz(func(t *testing.T, in string) {
		src, err := open(strings.NewReader(in))
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error %v is not ErrFormat's", err)
			}
			return
		}
		s, err := New(Config{CacheSizes: []int64{1 << 10}, Instances: 2})
		if err != nil {
			t.Fatal(err)
		}
		for range 1000 {
			e, err := src.Next()
			if err == io.EOF {
				return
			}
			if err != nil {
				if !errors.Is(err, ErrFormat) {
					t.Fatalf("error %v is not ErrFormat's", err)
				}
				return
			}
			if err := s.Step(e); err != nil && !errors.Is(err, ErrOutOfOrder) && e.Kind != 0 {
				t.Fatalf("event %+v: %v", e, err)
			}
		}
	})
}

func FuzzAccessLog(f *testing.F) {
	f.Add("time,op,key,size,offset,length\n0,GET,k,10,2,3\n1,PUT,k,5,,\n")
	f.Add("time,op,key,size\n2020-01-01T00:00:00Z,GET,\"a,b\",1\n")
	fuzzSource(f, func(r io.Reader) (Source, error) { return NewAccessLog(r) })
}

func FuzzBlobTrace(f *testing.F) {
	f.Add("Timestamp,AnonUserId,AnonAppName,AnonFunctionInvocationId,AnonBlobName,AnonBlobETag,BlobBytes,Read,Write\n1,u,a,1,b,e,28.0,True,False\n")
	fuzzSource(f, func(r io.Reader) (Source, error) { return NewBlobTrace(r) })
}

func FuzzRecords(f *testing.F) {
	f.Add(`{"version":1,"app":"a","unloaded_at":"2025-01-01T01:00:00Z","objects":[{"bucket":"b","key":"k","size":9,"lh":3,"lm":1,"out":1,"mean_gap_ms":1000,"last":"2025-01-01T00:10:00Z"}]}`)
	fuzzSource(f, func(r io.Reader) (Source, error) { return NewRecords(r), nil })
}
