package erasure

import (
	"math"
	"testing"
	"time"
)

// binomTail is P(Binomial(n, q) > r), written out for the tests.
func binomTail(n, r int, q float64) float64 {
	s := 0.0
	for i := r + 1; i <= n; i++ {
		c := 1.0
		for j := 1; j <= i; j++ {
			c = c * float64(n-i+j) / float64(j)
		}
		s += c * math.Pow(q, float64(i)) * math.Pow(1-q, float64(n-i))
	}
	return s
}

func TestLossProbability(t *testing.T) {
	const hour = time.Hour
	perHour := func(x float64) float64 { return x / 3600 }
	for _, tc := range []struct {
		describe      string
		k, r          int
		rate          float64 // per instance per second
		window, horiz time.Duration
		want, rel     float64 // relative tolerance
	}{
		// No parity: the first departure loses the object, whatever
		// the window: 1 - e^(-nλH).
		{"r = 0, a tiny window", 10, 0, perHour(1), time.Millisecond, hour, -math.Expm1(-10), 1e-9},
		{"r = 0, 10 s", 4, 0, perHour(0.01), 10 * time.Second, hour, -math.Expm1(-0.04), 1e-9},
		// A window longer than the horizon: nothing is repaired in time,
		// so more than r of the n holders departing within H loses it.
		{"no repair within H", 4, 2, perHour(1), 2 * hour, hour, binomTail(6, 2, -math.Expm1(-1)), 1e-9},
		{"no repair, 10+2", 10, 2, perHour(0.1), 3 * hour, 2 * hour, binomTail(12, 2, -math.Expm1(-0.2)), 1e-9},
		// Rare losses, r = 1: a second departure within W of the first,
		// rate n(n-1)λ²W.
		{"r = 1, rare", 10, 1, perHour(0.01), 10 * time.Second, hour, -math.Expm1(-110 * math.Pow(perHour(0.01), 2) * 10 * 3600), 0.01},
		// Rare losses, r = 2: n(n-1)(n-2)λ³W²/2 without restarts; the
		// second departure is the rebuilder's one time in n-1, and then
		// both shards stay missing W from it: times (1 + 1/(n-1)).
		{"r = 2, rare", 10, 2, perHour(0.01), 10 * time.Second, hour,
			-math.Expm1(-12 * 11 * 10 * math.Pow(perHour(0.01), 3) * 100 / 2 * (1 + 1.0/11) * 3600), 0.01},
		// Checked by a Monte Carlo of the same rule (10^5 to 2·10^5
		// objects; its standard error beside): RS(10+2) over 12
		// instances, one lost a minute, 10 s to repair: 0.4282 ± 0.0011;
		// 4+2 at 3 per instance-hour, W = 26.07 s, over 2 h: 0.1580 ±
		// 0.0008 (internal/sim's replay: 0.158); 10+4 at 12 per hour:
		// 0.1449 ± 0.0018; 4+10 at 60 per hour: 0.0792 ± 0.0014.
		{"10+2, one lost a minute", 10, 2, 1.0 / 60 / 12, 10 * time.Second, hour, 0.4282, 0.01},
		{"4+2, the sim's test", 4, 2, perHour(3), 26074 * time.Millisecond, 2 * hour, 0.1580, 0.015},
		{"10+4", 10, 4, perHour(12), 10 * time.Second, hour, 0.1449, 0.04},
		{"4+10", 4, 10, perHour(60), 10 * time.Second, hour, 0.0792, 0.06},
		{"no losses", 10, 2, 0, 10 * time.Second, hour, 0, 0},
		{"no window", 10, 2, 1, 0, hour, 0, 0},
		{"no horizon", 10, 2, 1, time.Second, 0, 0, 0},
		{"every instance lost at once", 10, 2, 1, hour, hour, 1, 1e-12},
		{"certain loss, repairs or not", 10, 2, 1, time.Second, hour, 1, 1e-12},
		// More parity than the chain holds is computed as r = 89 (an
		// upper bound): no repair within H, so the binomial tail.
		{"r = 200, counted as 89", 10, 200, perHour(0.6), 2 * hour, hour, binomTail(210, 89, -math.Expm1(-0.6)), 1e-9},
	} {
		got := LossProbability(tc.k, tc.r, tc.rate, tc.window, tc.horiz)
		if math.Abs(got-tc.want) > tc.rel*tc.want || got < 0 || got > 1 {
			t.Errorf("%s: RS(%d+%d) = %.6g, want %.6g (within %g)", tc.describe, tc.k, tc.r, got, tc.want, tc.rel)
		}
	}
}

// More departures, a longer window or horizon never lower the risk; more
// parity never raises it. Up to the grid: where a horizon falls between
// two of the chain's steps it is interpolated, which errs by about 1e-4
// of the figure (seen: 1.1e-4 where the window nears the horizon), so
// the test allows 1e-3.
func TestLossProbabilityMonotone(t *testing.T) {
	const tol = 1e-3
	rates := []float64{1e-5, 1e-4, 1e-3, 1e-2, 0.1}
	windows := []time.Duration{time.Second, 7 * time.Second, 10 * time.Minute, 59 * time.Minute, time.Hour, 2 * time.Hour}
	horizons := []time.Duration{time.Second, 30 * time.Second, 5 * time.Minute, time.Hour, 6 * time.Hour}
	for _, k := range []int{4, 10} {
		for r := 0; r <= 2; r++ {
			for _, w := range windows {
				for _, h := range []time.Duration{time.Minute, time.Hour} {
					prev := 0.0
					for _, rate := range rates {
						p := LossProbability(k, r, rate, w, h)
						if p < prev*(1-tol) {
							t.Errorf("RS(%d+%d) W %v H %v: rate %g gives %g < %g", k, r, w, h, rate, p, prev)
						}
						prev = p
					}
				}
			}
			for _, rate := range rates[1:3] {
				for _, h := range []time.Duration{time.Minute, time.Hour} {
					prev := 0.0
					for _, w := range windows {
						p := LossProbability(k, r, rate, w, h)
						if p < prev*(1-tol) {
							t.Errorf("RS(%d+%d) rate %g H %v: W %v gives %g < %g", k, r, rate, h, w, p, prev)
						}
						prev = p
					}
				}
				for _, w := range windows[:4] {
					prev := 0.0
					c := NewLossCurve(k, r, rate, w, 6*time.Hour)
					for _, h := range horizons {
						p := LossProbability(k, r, rate, w, h)
						if p < prev*(1-tol) {
							t.Errorf("RS(%d+%d) rate %g W %v: H %v gives %g < %g", k, r, rate, w, h, p, prev)
						}
						if a := c.At(h); math.Abs(a-p) > 1e-12*max(p, 1e-300) && h <= time.Hour {
							t.Errorf("RS(%d+%d) rate %g W %v H %v: the curve %g, LossProbability %g", k, r, rate, w, h, a, p)
						}
						prev = p
					}
				}
			}
		}
		for _, rate := range rates {
			for _, w := range windows {
				prev := 2.0
				for r := 0; r <= 4; r++ {
					p := LossProbability(k, r, rate, w, time.Hour)
					if p > prev*(1+tol) {
						t.Errorf("RS(%d+%d) rate %g W %v: %g > %g with one parity shard less", k, r, rate, w, p, prev)
					}
					prev = p
				}
			}
		}
	}
}
