package admission

import (
	"errors"
	"math"
	"testing"
	"time"
)

func TestFitRecoversLine(t *testing.T) {
	var f StoreFit
	// 2 ms a read plus 10 ns a byte (100 MB/s).
	for _, size := range []int64{4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20} {
		f.Add(size, 2*time.Millisecond+time.Duration(size)*10)
	}
	m, ok := f.Model()
	if !ok {
		t.Fatal("no model")
	}
	if d := m.Fixed - 2*time.Millisecond; d < -time.Microsecond || d > time.Microsecond {
		t.Errorf("fixed %v, want 2ms", m.Fixed)
	}
	if math.Abs(m.PerByte-10e-9) > 1e-12 {
		t.Errorf("per byte %g, want 1e-8", m.PerByte)
	}
	if got := m.Cost(3, 1<<20); got < 16*time.Millisecond || got > 17*time.Millisecond {
		t.Errorf("cost of 3 reads, 1 MiB = %v, want 6 ms + 10.5 ms", got)
	}
}

func TestFitOneSizeAndEmpty(t *testing.T) {
	var f StoreFit
	if _, ok := f.Model(); ok {
		t.Fatal("an empty fit has a model")
	}
	f.Add(1000, time.Millisecond)
	f.Add(1000, 3*time.Millisecond)
	m, ok := f.Model()
	if !ok || m.Fixed != 0 || math.Abs(m.PerByte-2e-6) > 1e-12 {
		t.Fatalf("one size: %+v %v, want all per byte (2 µs/B)", m, ok)
	}
	// Noise giving a negative slope never makes a negative cost.
	var g StoreFit
	g.Add(10, 5*time.Millisecond)
	g.Add(1<<20, time.Millisecond)
	m, ok = g.Model()
	if !ok || m.PerByte != 0 || m.Fixed != 3*time.Millisecond {
		t.Fatalf("negative slope: %+v, want fixed 3ms, per byte 0", m)
	}
	// Sub gives an invocation's share of the reads.
	h := g
	h.Add(100, time.Millisecond)
	if d := h.Sub(g); d.N != 1 || d.SumS != 100 {
		t.Fatalf("sub: %+v", d)
	}
}

func TestShare(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    Sample
		want float64
	}{
		{"io bound, missed", Sample{Run: 100 * time.Millisecond, Served: 80 * time.Millisecond, Store: 80 * time.Millisecond}, 0.8},
		// The same function once its reads hit: the estimate keeps the
		// share where it was, so the decision does not flap.
		{"io bound, hit", Sample{Run: 22 * time.Millisecond, Served: 2 * time.Millisecond, Store: 80 * time.Millisecond}, 0.8},
		{"compute bound", Sample{Run: 1000 * time.Millisecond, Served: 10 * time.Millisecond, Store: 10 * time.Millisecond}, 0.01},
		{"served longer than run (clock skew)", Sample{Run: time.Millisecond, Served: 2 * time.Millisecond, Store: 2 * time.Millisecond}, 1},
		{"nothing", Sample{}, 0},
	} {
		if got := tc.s.Share(); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: share %g, want %g", tc.name, got, tc.want)
		}
	}
}

func TestDecider(t *testing.T) {
	io := Sample{Run: 100 * time.Millisecond, Served: 80 * time.Millisecond, Store: 80 * time.Millisecond}
	cpu := Sample{Run: 500 * time.Millisecond, Served: 10 * time.Millisecond, Store: 10 * time.Millisecond}
	var d Decider
	for i := 0; i < DefaultMinSamples-1; i++ {
		if err := d.Observe(cpu); err != nil {
			t.Fatal(err)
		}
		if dec := d.Decide(); !dec.Admit {
			t.Fatalf("after %d samples: refused while learning: %+v", i+1, dec)
		}
	}
	d.Observe(cpu)
	if dec := d.Decide(); dec.Admit || dec.Samples != DefaultMinSamples {
		t.Fatalf("compute-bound function admitted: %+v", dec)
	}
	// The window moves on: a run of I/O-bound invocations turns it on.
	for i := 0; i < DefaultWindow; i++ {
		d.Observe(io)
	}
	if dec := d.Decide(); !dec.Admit || dec.Samples != DefaultWindow || math.Abs(dec.Share-0.8) > 1e-9 {
		t.Fatalf("I/O-bound function refused: %+v", dec)
	}
	// Exactly half is not more than half (OFC: > 0.5).
	var h Decider
	for i := 0; i < DefaultMinSamples; i++ {
		h.Observe(Sample{Run: 20 * time.Millisecond, Served: 10 * time.Millisecond, Store: 10 * time.Millisecond})
	}
	if dec := h.Decide(); dec.Admit {
		t.Fatalf("half admitted: %+v", dec)
	}
	// A bad sample changes nothing.
	before := h.Decide()
	if err := h.Observe(Sample{Run: -1}); !errors.Is(err, ErrSample) {
		t.Fatalf("negative sample: %v", err)
	}
	if after := h.Decide(); after != before {
		t.Fatalf("a refused sample changed the decision: %+v -> %+v", before, after)
	}
	var z Decider
	if dec := z.Decide(); !dec.Admit || dec.Share != -1 {
		t.Fatalf("no samples: %+v", dec)
	}
}

// One slow outlier does not flip a function's decision: the window votes.
func TestDeciderOutlier(t *testing.T) {
	io := Sample{Run: 100 * time.Millisecond, Served: 80 * time.Millisecond, Store: 80 * time.Millisecond}
	var d Decider
	for range 9 {
		d.Observe(io)
	}
	// A pause of a second (a garbage collection, a busy machine).
	d.Observe(Sample{Run: 1100 * time.Millisecond, Served: 80 * time.Millisecond, Store: 80 * time.Millisecond})
	if dec := d.Decide(); !dec.Admit || dec.Benefit != 9 || math.Abs(dec.Share-0.8) > 1e-9 {
		t.Fatalf("one outlier: %+v, want cached, 9 of 10, median 0.8", dec)
	}
	// Half and half keeps caching.
	var h Decider
	for range 3 {
		h.Observe(io)
		h.Observe(Sample{Run: time.Second, Served: time.Millisecond, Store: time.Millisecond})
	}
	if dec := h.Decide(); !dec.Admit || dec.Benefit != 3 {
		t.Fatalf("a tie: %+v, want cached", dec)
	}
}
