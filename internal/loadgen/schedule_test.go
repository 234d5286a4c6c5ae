package loadgen

import (
	"math"
	"slices"
	"testing"
	"time"
)

var fn = Target{App: "app", Function: "fn"}

func offsets(as []Arrival) []time.Duration {
	out := make([]time.Duration, len(as))
	for i, a := range as {
		out[i] = a.At
	}
	return out
}

func TestPeriodicIsExact(t *testing.T) {
	got := offsets(Collect(Periodic(fn, 300*time.Millisecond), 5))
	want := []time.Duration{0, 300 * time.Millisecond, 600 * time.Millisecond, 900 * time.Millisecond, 1200 * time.Millisecond}
	if !slices.Equal(got, want) {
		t.Fatalf("offsets %v, want %v", got, want)
	}
	// No drift after many arrivals.
	s := Periodic(fn, time.Second/3)
	var a Arrival
	for range 1_000_001 {
		a, _ = s.Next()
	}
	if a.At != 1_000_000*(time.Second/3) || a.Target != fn || a.Event != nil {
		t.Errorf("arrival 1,000,000: %+v", a)
	}
}

func TestLimit(t *testing.T) {
	tests := []struct {
		name  string
		count int
		d     time.Duration
		want  int
	}{
		{"duration", 0, time.Second, 4}, // 0, 300, 600, 900 ms: the one at 1.2 s is past it
		{"duration on an arrival", 0, 900 * time.Millisecond, 3},
		{"count", 2, 0, 2},
		{"count first", 2, time.Minute, 2},
		{"duration first", 100, time.Second, 4},
	}
	for _, tt := range tests {
		got := Collect(Limit(Periodic(fn, 300*time.Millisecond), tt.count, tt.d), 1000)
		if len(got) != tt.want {
			t.Errorf("%s: %d arrivals, want %d", tt.name, len(got), tt.want)
		}
	}
	// An exhausted limit stays exhausted.
	s := Limit(Replay([]Arrival{{At: 0}, {At: time.Hour}}), 0, time.Minute)
	Collect(s, 10)
	if _, ok := s.Next(); ok {
		t.Error("Next after the end")
	}
}

func TestPoissonMeanAndSpread(t *testing.T) {
	const n = 200_000
	mean := 250 * time.Millisecond
	as := Collect(Poisson(fn, mean, 42), n)
	var sum, sumSq float64
	prev := time.Duration(0)
	for _, a := range as {
		gap := (a.At - prev).Seconds()
		if gap < 0 {
			t.Fatalf("arrivals out of order at %v", a.At)
		}
		prev = a.At
		sum += gap
		sumSq += gap * gap
	}
	m := sum / n
	sd := math.Sqrt(sumSq/n - m*m)
	// The sample mean's standard error is mean/sqrt(n), 0.22% here: 1% is
	// more than four of them. An exponential's deviation equals its mean.
	if math.Abs(m-mean.Seconds())/mean.Seconds() > 0.01 {
		t.Errorf("mean gap %.4fs, want %.4fs ±1%%", m, mean.Seconds())
	}
	if cv := sd / m; math.Abs(cv-1) > 0.02 {
		t.Errorf("coefficient of variation %.3f, want 1 ±0.02 (exponential)", cv)
	}
	// Memoryless: about e^-1 of the gaps exceed the mean.
	over := 0
	prev = 0
	for _, a := range as {
		if a.At-prev > mean {
			over++
		}
		prev = a.At
	}
	if frac := float64(over) / n; math.Abs(frac-math.Exp(-1)) > 0.01 {
		t.Errorf("%.3f of the gaps exceed the mean, want %.3f", frac, math.Exp(-1))
	}
}

func TestPoissonIsReproducible(t *testing.T) {
	a := offsets(Collect(Poisson(fn, time.Second, 7), 100))
	b := offsets(Collect(Poisson(fn, time.Second, 7), 100))
	c := offsets(Collect(Poisson(fn, time.Second, 8), 100))
	if !slices.Equal(a, b) {
		t.Error("the same seed gave different schedules")
	}
	if slices.Equal(a, c) {
		t.Error("different seeds gave the same schedule")
	}
	if a[0] == 0 {
		t.Error("the first arrival should come after an exponential gap, not at 0")
	}
}

func TestScale(t *testing.T) {
	trace := []Arrival{{At: 0, Target: fn}, {At: time.Minute, Target: fn}, {At: 90 * time.Second, Target: fn}, {At: time.Hour, Target: fn}}
	got := offsets(Collect(Scale(Replay(trace), 60), 10))
	want := []time.Duration{0, time.Second, 1500 * time.Millisecond, time.Minute}
	if !slices.Equal(got, want) {
		t.Errorf("at speed 60: %v, want %v", got, want)
	}
	got = offsets(Collect(Scale(Periodic(fn, time.Second), 0.5), 3))
	want = []time.Duration{0, 2 * time.Second, 4 * time.Second}
	if !slices.Equal(got, want) {
		t.Errorf("at speed 0.5: %v, want %v", got, want)
	}
	// The limit applies on the clock, after scaling: an hour of trace at
	// speed 60 fits in a minute and a bit.
	got = offsets(Collect(Limit(Scale(Replay(trace), 60), 0, 30*time.Second), 10))
	if len(got) != 3 {
		t.Errorf("30 s of a trace at speed 60: %v, want the first 3 arrivals", got)
	}
	for _, bad := range []float64{0, -1, math.NaN(), math.Inf(1)} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Scale(%v) did not panic", bad)
				}
			}()
			Scale(Replay(nil), bad)
		}()
	}
}
