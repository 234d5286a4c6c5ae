package erasure

import (
	"math"
	"time"
)

// LossProbability is the probability that an object coded k+r loses more
// than r shards within one repair window, accumulated over horizon
// (docs/design/erasure-coding.md derives it):
//
//	p      = 1 - exp(-rate * window)            one holder lost in a window
//	P_w    = sum_{i=r+1}^{k+r} C(k+r, i) p^i (1-p)^(k+r-i)
//	P_loss = 1 - (1 - P_w)^(horizon / window)
//
// rate is the loss rate of one instance (losses per instance per second,
// as observed: losses in the last hour over the members); window is how
// long a lost shard stays missing: the time to notice the loss, wait and
// rebuild (or, with backups, the backup interval). A zero rate or window
// is 0; the result is in [0, 1].
func LossProbability(k, r int, rate float64, window, horizon time.Duration) float64 {
	if k <= 0 || r < 0 || rate <= 0 || window <= 0 || horizon <= 0 {
		return 0
	}
	n := k + r
	p := -math.Expm1(-rate * window.Seconds())
	var pw float64
	for i := r + 1; i <= n; i++ {
		pw += binomial(n, i) * math.Pow(p, float64(i)) * math.Pow(1-p, float64(n-i))
	}
	pw = min(max(pw, 0), 1)
	windows := horizon.Seconds() / window.Seconds()
	// 1 - (1-pw)^windows, accurate for tiny pw.
	return min(max(-math.Expm1(windows*math.Log1p(-pw)), 0), 1)
}

func binomial(n, k int) float64 {
	lg := func(x int) float64 { v, _ := math.Lgamma(float64(x + 1)); return v }
	return math.Exp(lg(n) - lg(k) - lg(n-k))
}
