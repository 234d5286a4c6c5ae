package bench

import (
	"bytes"
	"io"
	"testing"
	"time"
)

func TestPatternReader(t *testing.T) {
	a, err := io.ReadAll(&patternReader{n: 1<<20 + 7})
	if err != nil || len(a) != 1<<20+7 {
		t.Fatalf("%d bytes, %v", len(a), err)
	}
	// Read in odd pieces: the same bytes.
	var b bytes.Buffer
	p := &patternReader{n: 1<<20 + 7}
	buf := make([]byte, 4093)
	for {
		n, err := p.Read(buf)
		b.Write(buf[:n])
		if err == io.EOF {
			break
		}
	}
	if !bytes.Equal(a, b.Bytes()) {
		t.Fatal("pattern depends on the read size")
	}
	if bytes.Count(a, a[:64]) > 1 {
		t.Fatal("pattern repeats every 64 bytes")
	}
}

func TestBandwidthResult(t *testing.T) {
	sizes := []int64{400_000, 800_000_000}
	times := map[int64]map[string][]time.Duration{}
	for _, s := range sizes {
		times[s] = map[string][]time.Duration{
			"warm": {10 * time.Second, 6 * time.Second, 5 * time.Second, 4 * time.Second},
			"cold": {10 * time.Second, 7 * time.Second, 6 * time.Second, 5 * time.Second},
		}
	}
	res := bandwidthResult(Options{}, "faast", sizes, 2, times, time.Minute)
	if err := res.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(res.Plots) != 2 || len(res.Rows) != 4 {
		t.Fatalf("%d plots, %d rows", len(res.Plots), len(res.Rows))
	}
	var paperRows int
	for _, r := range res.Rows {
		if r.Paper != nil {
			paperRows++
			if *r.Hoard != 60 || r.Short {
				t.Errorf("800 MB warm: hoard %v short %v; want 60%%, level with the paper", *r.Hoard, r.Short)
			}
		}
	}
	if paperRows != 1 {
		t.Fatalf("%d rows with a paper figure, want 1 (800 MB, 4 warm)", paperRows)
	}
}
