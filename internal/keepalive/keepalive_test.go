package keepalive

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

// nearestRank returns the ⌈q·n⌉-th smallest of sorted (n > 0), as Decide
// ranks.
func nearestRank(sorted []time.Duration, q float64) time.Duration {
	rank := int(math.Ceil(q*float64(len(sorted)) - 1e-9))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// randomIdleTimes returns between 1 and 400 idle times around one to three
// modes, some of them beyond rangeD.
func randomIdleTimes(rng *rand.Rand, rangeD time.Duration) []time.Duration {
	modes := make([]time.Duration, 1+rng.IntN(3))
	for i := range modes {
		modes[i] = time.Duration(rng.Int64N(int64(rangeD)))
	}
	spread := time.Duration(rng.Int64N(int64(10 * time.Minute)))
	oob := rng.Float64() * 0.6
	idle := make([]time.Duration, 1+rng.IntN(400))
	for i := range idle {
		switch {
		case rng.Float64() < oob:
			idle[i] = rangeD + time.Duration(rng.Int64N(int64(24*time.Hour)))
		case rng.IntN(20) == 0: // some noise anywhere in the range
			idle[i] = time.Duration(rng.Int64N(int64(rangeD)))
		default:
			d := modes[rng.IntN(len(modes))] + time.Duration(rng.NormFloat64()*float64(spread))
			idle[i] = max(d, 0)
		}
	}
	return idle
}

// TestPropertyWindowsCoverPercentiles checks, for random idle times and
// configs, that a histogram decision loads the instance no later than the
// head percentile of the in-range idle times and keeps it loaded at least
// until the tail percentile, and the invariants of every decision.
func TestPropertyWindowsCoverPercentiles(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	modes := map[Mode]int{}
	for iter := range 3000 {
		cfg := Config{
			BinWidth:   []time.Duration{30 * time.Second, time.Minute, 5 * time.Minute}[rng.IntN(3)],
			Margin:     []float64{-1, 0.05, 0.1, 0.25}[rng.IntN(4)],
			MinSamples: 1 + rng.IntN(20),
			Fixed:      time.Duration(1+rng.IntN(30)) * time.Minute,
		}
		cfg.Range = cfg.BinWidth * time.Duration(1+rng.IntN(480))
		if rng.IntN(2) == 0 {
			cfg.PreWarmPercentile = 0.01 + rng.Float64()*0.3
			cfg.KeepAlivePercentile = cfg.PreWarmPercentile + (1-cfg.PreWarmPercentile)*rng.Float64()
			if cfg.KeepAlivePercentile <= cfg.PreWarmPercentile {
				cfg.KeepAlivePercentile = 1
			}
		}
		p := mustNew(t, cfg)
		cfg = p.Config()
		idle := randomIdleTimes(rng, cfg.Range)
		var in []time.Duration
		for _, d := range idle {
			p.Observe(d)
			if d < cfg.Range {
				in = append(in, d)
			}
		}
		slices.Sort(in)
		d := p.Decide()
		modes[d.Mode]++
		if d.Observed != uint64(len(idle)) || d.OutOfBounds != uint64(len(idle)-len(in)) {
			t.Fatalf("%d: counts %d/%d, want %d/%d", iter, d.Observed, d.OutOfBounds, len(idle), len(idle)-len(in))
		}
		if d.Reason == "" || d.KeepAlive <= 0 || d.PreWarm < 0 {
			t.Fatalf("%d: bad decision %+v", iter, d)
		}
		if d.Mode != ModeHistogram {
			if d.PreWarm != 0 || d.KeepAlive != cfg.Fixed {
				t.Fatalf("%d: %s decision %+v is not the fixed keep-alive %s", iter, d.Mode, d, cfg.Fixed)
			}
			continue
		}
		if len(in) < cfg.MinSamples {
			t.Fatalf("%d: histogram from %d in-range idle times, min %d", iter, len(in), cfg.MinSamples)
		}
		head, tail := nearestRank(in, cfg.PreWarmPercentile), nearestRank(in, cfg.KeepAlivePercentile)
		if d.PreWarm > head {
			t.Fatalf("%d: pre-warm %s after the head percentile %s (config %+v)", iter, d.PreWarm, head, cfg)
		}
		if d.PreWarm+d.KeepAlive < tail {
			t.Fatalf("%d: loaded until %s, before the tail percentile %s (config %+v)", iter, d.PreWarm+d.KeepAlive, tail, cfg)
		}
		if d.PreWarm%cfg.BinWidth != 0 || d.KeepAlive%cfg.BinWidth != 0 {
			t.Fatalf("%d: windows %s, %s are not whole bins of %s", iter, d.PreWarm, d.KeepAlive, cfg.BinWidth)
		}
		// And not absurdly generous: the margin over the tail bin, one bin.
		if limit := time.Duration(float64(cfg.Range)*(1+max(cfg.Margin, 0))) + cfg.BinWidth; d.PreWarm+d.KeepAlive > limit {
			t.Fatalf("%d: loaded until %s, past %s", iter, d.PreWarm+d.KeepAlive, limit)
		}
	}
	t.Logf("modes: %v", modes)
	for _, m := range []Mode{ModeHistogram, ModeFixed, ModeOutOfBounds} {
		if modes[m] < 100 {
			t.Errorf("only %d %s decisions of 3000: the generator does not exercise them", modes[m], m)
		}
	}
}

// TestSnapshotRoundTripRandom restores random histograms and checks that the
// decisions and snapshots are identical, and the snapshot's size bound.
func TestSnapshotRoundTripRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for iter := range 500 {
		cfg := Config{Fixed: 10 * time.Minute, MinSamples: 1 + rng.IntN(10)}
		p := mustNew(t, cfg)
		for _, d := range randomIdleTimes(rng, DefaultRange) {
			p.Observe(d)
		}
		snap := p.Snapshot()
		if bound := 24 + 12*len(p.counts); len(snap) > bound {
			t.Fatalf("%d: snapshot of %d bytes, bound %d", iter, len(snap), bound)
		}
		q := mustNew(t, cfg)
		if err := q.Restore(snap); err != nil {
			t.Fatalf("%d: %v", iter, err)
		}
		if got, want := q.Decide(), p.Decide(); got != want {
			t.Fatalf("%d: restored %+v, original %+v", iter, got, want)
		}
		if got := q.Snapshot(); !bytes.Equal(got, snap) {
			t.Fatalf("%d: restored snapshot %x, original %x", iter, got, snap)
		}
	}
}

// TestSnapshotSizeBound fills every bin with counts of long varints.
func TestSnapshotSizeBound(t *testing.T) {
	for _, cfg := range []Config{
		{Fixed: time.Minute},
		{Fixed: time.Minute, BinWidth: time.Minute, Range: MaxBins * time.Minute},
		{Fixed: time.Minute, BinWidth: math.MaxInt64 / MaxBins, Range: math.MaxInt64 / MaxBins * MaxBins},
	} {
		p := mustNew(t, cfg)
		for i := range p.counts {
			p.counts[i] = math.MaxUint64 / uint64(len(p.counts)+1)
			p.inRange += p.counts[i]
		}
		p.oob = math.MaxUint64 - p.inRange
		snap := p.Snapshot()
		if bound := 24 + 12*len(p.counts); len(snap) > bound {
			t.Errorf("%d bins of %s: snapshot of %d bytes, bound %d", len(p.counts), p.cfg.BinWidth, len(snap), bound)
		}
		q := mustNew(t, cfg)
		if err := q.Restore(snap); err != nil {
			t.Fatal(err)
		}
		// A full histogram takes no more idle times, and still decides.
		q.Observe(time.Minute)
		if d := q.Decide(); d.Observed != math.MaxUint64 {
			t.Errorf("observed %d after a saturating Observe", d.Observed)
		}
	}
	p := mustNew(t, Config{Fixed: time.Minute})
	if n := len(p.Snapshot()); n > 16 {
		t.Errorf("empty snapshot of %d bytes", n)
	}
}

func TestRestoreErrors(t *testing.T) {
	p := mustNew(t, Config{Fixed: time.Minute})
	p.Observe(10 * time.Minute)
	good := p.Snapshot()
	q := mustNew(t, Config{Fixed: time.Minute})
	// Every proper prefix is rejected with ErrSnapshot.
	for n := range len(good) {
		if err := q.Restore(good[:n]); !errors.Is(err, ErrSnapshot) {
			t.Errorf("prefix of %d bytes: %v", n, err)
		}
	}
	if err := q.Restore(good); err != nil {
		t.Fatal(err)
	}
}

// FuzzRestore checks that Restore never panics and that what it accepts
// snapshots back to the same bytes (every histogram has one encoding).
func FuzzRestore(f *testing.F) {
	p := mustNew(f, Config{Fixed: time.Minute})
	f.Add(p.Snapshot())
	for _, d := range []time.Duration{0, time.Minute, 10 * time.Minute, 10 * time.Minute, 3*time.Hour + 59*time.Minute, 5 * time.Hour} {
		p.Observe(d)
	}
	f.Add(p.Snapshot())
	f.Add([]byte{})
	f.Add([]byte{1, 0x80, 0xb0, 0x9d, 0xc2, 0xdf, 0x01, 0xf0, 0x01, 0x80, 0x00, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		p := mustNew(t, Config{Fixed: time.Minute})
		if err := p.Restore(b); err != nil {
			if !errors.Is(err, ErrSnapshot) {
				t.Fatalf("error %v does not wrap ErrSnapshot", err)
			}
			return
		}
		if got := p.Snapshot(); !bytes.Equal(got, b) {
			t.Fatalf("restored %x, snapshots %x", b, got)
		}
		p.Decide()
	})
}

// TestConcurrent uses one Policy from several goroutines; run with -race.
func TestConcurrent(t *testing.T) {
	p := mustNew(t, Config{Fixed: time.Minute, MinSamples: 1})
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 200 {
				at := start.Add(time.Duration(g*1000+i) * time.Minute)
				p.Invoked(at)
				p.Observe(time.Duration(i) * time.Second)
				p.Finished(at.Add(time.Second))
				if i%50 == 0 {
					// Snapshot only: a Restore here would replace what the
					// other goroutines observed since the snapshot.
					_ = p.Decide()
					if len(p.Snapshot()) == 0 {
						t.Error("empty snapshot")
					}
				}
			}
		})
	}
	wg.Wait()
	if d := p.Decide(); d.Observed < 800 {
		t.Errorf("observed %d idle times, want at least the 800 observed directly", d.Observed)
	}
}

func TestConfigDefaults(t *testing.T) {
	p := mustNew(t, Config{Fixed: 10 * time.Minute})
	want := Config{
		BinWidth:            time.Minute,
		Range:               4 * time.Hour,
		KeepAlivePercentile: 0.99,
		PreWarmPercentile:   0.05,
		Margin:              0.10,
		MinSamples:          10,
		CVThreshold:         2,
		MaxOutOfBounds:      0.5,
		Fixed:               10 * time.Minute,
	}
	if got := p.Config(); got != want {
		t.Errorf("defaults %+v, want %+v", got, want)
	}
	if len(p.counts) != 240 {
		t.Errorf("%d bins, want 240", len(p.counts))
	}
	// Validate may be called again on its result, negative fields included.
	cfg := Config{Fixed: time.Minute, Margin: -1, CVThreshold: -1, MaxOutOfBounds: -1}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	again := cfg
	if err := again.Validate(); err != nil || again != cfg {
		t.Errorf("second Validate: %v, %+v, want %+v", err, again, cfg)
	}
}

func TestObserveNegative(t *testing.T) {
	p := mustNew(t, Config{Fixed: time.Minute})
	p.Observe(-time.Second)
	if d := p.Decide(); d.Observed != 0 {
		t.Errorf("observed %d, want 0", d.Observed)
	}
}

func TestFormat(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                             "0",
		time.Second:                   "1s",
		9 * time.Minute:               "9m",
		90 * time.Second:              "1m30s",
		time.Hour:                     "1h",
		time.Hour + 3*time.Minute:     "1h3m",
		time.Hour + 30*time.Second:    "1h0m30s",
		1500 * time.Millisecond:       "1.5s",
		-time.Minute:                  "-1m",
		24*time.Hour + 10*time.Minute: "24h10m",
	} {
		if got := FormatDuration(d); got != want {
			t.Errorf("FormatDuration(%v) = %q, want %q", d, got, want)
		}
	}
	for q, want := range map[float64]string{
		0.01: "1st", 0.02: "2nd", 0.03: "3rd", 0.05: "5th", 0.11: "11th", 0.12: "12th",
		0.13: "13th", 0.21: "21st", 0.5: "50th", 0.99: "99th", 0.999: "99.9th", 1: "100th",
	} {
		if got := ordinal(q); got != want {
			t.Errorf("ordinal(%g) = %q, want %q", q, got, want)
		}
	}
}
