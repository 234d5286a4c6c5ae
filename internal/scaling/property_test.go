package scaling

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// The property tests run over seeded random inputs, so every failure
// reproduces from its seed.

// TestRangesProperty: for every size and count, the ranges are contiguous
// and in order, cover [0, size) exactly, are not empty, number min(n,
// size), and differ in length by at most one byte, longer ones first.
func TestRangesProperty(t *testing.T) {
	check := func(size int64, n int) {
		t.Helper()
		rs := Ranges(size, n)
		if size <= 0 || n <= 0 {
			if rs != nil {
				t.Fatalf("Ranges(%d, %d) = %v, want nil", size, n, rs)
			}
			return
		}
		if want := min(int64(n), size); int64(len(rs)) != want {
			t.Fatalf("Ranges(%d, %d): %d ranges, want %d", size, n, len(rs), want)
		}
		var off int64
		short, long := rs[0].Len, rs[0].Len
		for i, r := range rs {
			if r.Off != off || r.Len < 1 {
				t.Fatalf("Ranges(%d, %d)[%d] = %+v, want offset %d and a length", size, n, i, r, off)
			}
			if i > 0 && r.Len > rs[i-1].Len {
				t.Fatalf("Ranges(%d, %d)[%d] = %+v is longer than the one before", size, n, i, r)
			}
			short, long = min(short, r.Len), max(long, r.Len)
			off += r.Len
		}
		if off != size {
			t.Fatalf("Ranges(%d, %d) cover %d bytes", size, n, off)
		}
		if long-short > 1 {
			t.Fatalf("Ranges(%d, %d) lengths from %d to %d", size, n, short, long)
		}
	}
	for size := int64(-2); size <= 300; size++ {
		for n := -1; n <= 40; n++ {
			check(size, n)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		check(rng.Int64N(1<<42), 1+rng.IntN(64))
	}
	check(math.MaxInt64, 64)
	check(math.MaxInt64, 7)
}

// TestCombineProperties checks the combining rules on random rounds,
// against the limits and independently of the votes' order.
func TestCombineProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 50000 {
		current := rng.IntN(12) - 1
		limits := Limits{Min: rng.IntN(6) - 1, Max: rng.IntN(12) - 1, Busy: rng.IntN(2) == 0}
		votes := make([]Vote, rng.IntN(5))
		for j := range votes {
			votes[j] = Vote{Policy: []string{PolicyCompute, PolicyCache, PolicyBandwidth}[rng.IntN(3)],
				Delta: rng.IntN(9) - 4, Urgent: rng.IntN(4) == 0}
		}
		before := slices.Clone(votes)
		d := Combine(current, votes, limits)
		if !slices.Equal(votes, before) {
			t.Fatalf("%d: Combine changed the votes", i)
		}

		cur := max(current, 0)
		lo, hi := max(limits.Min, 0), max(limits.Max, 1)
		floor := lo
		if limits.Busy {
			floor = max(floor, 1)
		}
		clamp := func(n int) int { return min(max(n, floor), hi) }
		maxOut, anyNonNeg, urgentOut := 0, false, false
		for _, v := range votes {
			maxOut = max(maxOut, v.Delta)
			anyNonNeg = anyNonNeg || v.Delta >= 0
			urgentOut = urgentOut || v.Delta > 0 && v.Urgent
		}
		var want int
		switch {
		case maxOut > 0: // any out
			want = clamp(cur + maxOut)
		case len(votes) > 0 && !anyNonNeg: // all in, by one
			want = clamp(cur - 1)
		default:
			want = clamp(cur)
		}
		if d.Target != want || d.Delta != d.Target-cur || d.Urgent != (urgentOut && d.Delta > 0) {
			t.Fatalf("%d: Combine(%d, %v, %+v) = %+v, want target %d", i, current, votes, limits, d, want)
		}
		if d.Target > hi || d.Target < min(lo, hi) || limits.Busy && d.Target < 1 {
			t.Fatalf("%d: Combine(%d, %v, %+v) = %+v breaks the limits", i, current, votes, limits, d)
		}
		if d.Delta < -1 && cur <= hi {
			t.Fatalf("%d: Combine(%d, %v, %+v) = %+v scales in by more than one", i, current, votes, limits, d)
		}

		rng.Shuffle(len(votes), func(a, b int) { votes[a], votes[b] = votes[b], votes[a] })
		if e := Combine(current, votes, limits); e.Target != d.Target || e.Urgent != d.Urgent {
			t.Fatalf("%d: Combine depends on the votes' order: %+v, then %+v", i, d, e)
		}
	}
}

// TestPlanProperties checks the bandwidth plan on random objects and
// measurements: it never plans beyond its bounds, scales out only for a
// gain of MinGain, and reports the T of the N it chose.
func TestPlanProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var cfg Config
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	outs := 0
	for i := range 20000 {
		size := cfg.MinObjectSize + rng.Int64N(10e9)
		current, maxN := 1+rng.IntN(8), 1+rng.IntN(16)
		m := Measurements{
			LoadTime: time.Duration(rng.Int64N(int64(5 * time.Second))),
			StoreBW:  1e6 + rng.Float64()*1e9,
			PeerBW:   1e6 + rng.Float64()*2e9,
		}
		p, err := PlanBandwidth(size, current, maxN, m, Config{})
		if err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		if p.Size != size || p.Current != current || len(p.Steps) == 0 || p.T != TransferTime(size, p.N, current, m) {
			t.Fatalf("%d: plan %+v for size %d, current %d, %+v", i, p, size, current, m)
		}
		v := p.Vote()
		if v.Policy != PolicyBandwidth || v.Delta != 0 && v.Delta != p.N-p.Current || v.Urgent != p.ScaleOut {
			t.Fatalf("%d: plan %+v votes %+v", i, p, v)
		}
		if m.PeerBW <= m.StoreBW {
			if p.N != 1 || p.ScaleOut {
				t.Fatalf("%d: with peers slower than the store, plan %+v", i, p)
			}
			continue
		}
		if p.Steps[0].N != current {
			t.Fatalf("%d: plan %+v does not start at current %d", i, p, current)
		}
		for j, s := range p.Steps {
			if s.N != current+j || s.N > max(maxN, current) {
				t.Fatalf("%d: plan %+v steps out of order or past max %d", i, p, maxN)
			}
		}
		tCur := transferSeconds(size, current, current, m)
		switch {
		case p.ScaleOut:
			outs++
			if p.N <= current || p.N > maxN || p.T.Seconds() > (1-cfg.MinGain)*tCur+1e-9 {
				t.Fatalf("%d: plan %+v scales out beyond its rules (T(current) %.3fs)", i, p, tCur)
			}
			v := p.Vote()
			if v.Delta != p.N-current || !v.Urgent {
				t.Fatalf("%d: plan %+v votes %+v", i, p, v)
			}
		case p.N != current:
			t.Fatalf("%d: plan %+v neither scales out nor stays at current %d", i, p, current)
		}
	}
	if outs < 1000 {
		t.Fatalf("only %d of 20000 random plans scaled out: the test covers too little", outs)
	}
}

func TestConfigValidate(t *testing.T) {
	var c Config
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	want := Config{
		QueuedPerInstance: DefaultQueuedPerInstance, ScaleInUtilisation: DefaultScaleInUtilisation,
		RareAccessRate: DefaultRareAccessRate, MinObjectSize: DefaultMinObjectSize, MinGain: DefaultMinGain,
		EstimatorWindow: DefaultEstimatorWindow, MinSampleBytes: DefaultMinSampleBytes,
	}
	if c != want {
		t.Fatalf("defaults %+v, want %+v", c, want)
	}
	for _, bad := range []Config{
		{QueuedPerInstance: -1},
		{ScaleInUtilisation: 1.5},
		{ScaleInUtilisation: math.NaN()},
		{RareAccessRate: -0.1},
		{RareAccessRate: math.Inf(1)},
		{MinObjectSize: -1},
		{MinGain: 1},
		{MinGain: -0.1},
		{EstimatorWindow: -1},
		{EstimatorWindow: 1025},
		{MinSampleBytes: -1},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("Validate(%+v) succeeded", bad)
		}
	}
}

func TestTransferTimeEdges(t *testing.T) {
	m := Measurements{LoadTime: 2 * time.Second, StoreBW: 90e6, PeerBW: 500e6}
	for _, tc := range []struct {
		size       int64
		n, current int
		m          Measurements
		want       time.Duration
	}{
		{800e6, 0, 1, m, 0},
		{0, 4, 1, m, 0},
		{-1, 4, 1, m, 0},
		{90e6, 1, 1, m, time.Second},
		{90e6, 1, 0, m, 3 * time.Second}, // nothing running: the one must load
		{800e6, 4, 4, Measurements{StoreBW: 0, PeerBW: 500e6}, math.MaxInt64},
		{math.MaxInt64, 1, 1, Measurements{StoreBW: 1, PeerBW: 1}, math.MaxInt64},
	} {
		if got := TransferTime(tc.size, tc.n, tc.current, tc.m); got != tc.want {
			t.Errorf("TransferTime(%d, %d, %d, %+v) = %v, want %v", tc.size, tc.n, tc.current, tc.m, got, tc.want)
		}
	}
}

func TestPlanRefusesUnmeasured(t *testing.T) {
	for _, m := range []Measurements{
		{},
		Measure(nil, nil, nil),
		Measure(&LoadEstimator{}, &Estimator{}, &Estimator{}),
		{LoadTime: -1, StoreBW: 90e6, PeerBW: 500e6},
		{StoreBW: math.NaN(), PeerBW: 500e6},
		{StoreBW: 90e6, PeerBW: math.Inf(1)},
	} {
		if p, err := PlanBandwidth(800e6, 1, 4, m, Config{}); !errors.Is(err, ErrUnmeasured) {
			t.Errorf("PlanBandwidth with %+v = %+v, %v; want ErrUnmeasured", m, p, err)
		}
	}
	if _, err := PlanBandwidth(-1, 1, 4, Measurements{StoreBW: 90e6, PeerBW: 500e6}, Config{}); err == nil || errors.Is(err, ErrUnmeasured) {
		t.Errorf("PlanBandwidth of a negative size: %v", err)
	}
}

// TestEstimatorZeroValue: the zero values use the default config.
func TestEstimatorZeroValue(t *testing.T) {
	var e Estimator
	if bw, ok := e.Bandwidth(); ok || bw != 0 {
		t.Fatalf("empty estimator: %v, %v", bw, ok)
	}
	if e.Add(DefaultMinSampleBytes-1, time.Second) {
		t.Fatal("took a sample under the default minimum")
	}
	for i := range 2 * DefaultEstimatorWindow {
		// The first window's samples are slow, the second's fast: only
		// the second's are left.
		d := time.Second
		if i < DefaultEstimatorWindow {
			d = 10 * time.Second
		}
		if !e.Add(100e6, d) {
			t.Fatalf("sample %d not taken", i)
		}
	}
	if bw, ok := e.Bandwidth(); !ok || bw != 100e6 || e.Len() != DefaultEstimatorWindow {
		t.Fatalf("estimator after two windows: %v, %v over %d samples", bw, ok, e.Len())
	}

	var l LoadEstimator
	if d, ok := l.LoadTime(); ok || d != 0 {
		t.Fatalf("empty load estimator: %v, %v", d, ok)
	}
	if l.Add(-time.Second) {
		t.Fatal("took a negative load time")
	}
	for _, d := range []time.Duration{3, 1, 2, 100, 2} {
		l.Add(d * time.Second)
	}
	if d, ok := l.LoadTime(); !ok || d != 2*time.Second || l.Len() != 5 {
		t.Fatalf("load estimator: %v, %v over %d", d, ok, l.Len())
	}
}

// TestEstimatorOutliers: fewer than half the window's samples, however
// far off, do not move the estimate beyond the good samples' range.
func TestEstimatorOutliers(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for i := range 1000 {
		e := NewEstimator(Config{EstimatorWindow: 9})
		bad := 0
		for range 9 {
			d := time.Duration(900+rng.IntN(200)) * time.Millisecond // 82-111 MB/s
			if bad < 4 && rng.IntN(2) == 0 {
				bad++
				d = []time.Duration{time.Millisecond, time.Hour}[rng.IntN(2)]
			}
			e.Add(100e6, d)
		}
		if bw, _ := e.Bandwidth(); bw < 100e6/1.1 || bw > 100e6/0.9 {
			t.Fatalf("%d: %d outliers of 9 moved the estimate to %.0f B/s", i, bad, bw)
		}
	}
}
