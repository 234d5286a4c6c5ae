package erasure

import (
	"math"
	"time"
)

// The risk of losing an object coded k+r (docs/design/erasure-coding.md
// derives it). Each of the n = k+r holders departs as a Poisson process of
// rate λ; a departed holder's shard is missing for the repair window W
// (the lease that notices it, the rebuild's delay and the rebuild), and
// when the member rebuilding an object's missing shards departs too, their
// rebuilds start again from its departure (the next holder notices it and
// waits its own delay). The object is lost when more than r shards are
// missing at the same moment.
//
// The number missing is no Markov chain with a fixed W, so the model
// keeps the ages of the missing shards: time goes in steps of
// Δ = W/(m - 1/2), a shard is missing for m steps (the half step makes
// the time two departures overlap W on average, as in continuous time),
// each present holder departs within a step with probability 1 - e^(-λΔ),
// and the rebuilder's departure resets every missing shard's age. The
// states are the sorted ages of at most r missing shards, C(m+r, r) of
// them; m is 32, or less so that there are at most maxStates (and r at
// most 89, which errs high). The chain
// runs from every shard present for at most 32 windows; past that its
// hazard per step (its quasi-stationary loss rate) carries it on; between
// steps the cumulative hazard is interpolated as a power of the horizon.
// Before the first repair can end the figure is exact: more than r
// holders departed.

const (
	maxSteps   = 32      // steps per window at most
	maxStates  = 4096    // states of the chain at most
	maxWindows = 32      // windows run before the hazard carries on
	maxRate    = 1 << 20 // losses per instance-second at most
	maxHorizon = 1 << 40 // seconds
	minLogS    = -1000   // survival e^-1000: a loss is certain
)

// LossProbability is the probability that an object coded k+r has more
// than r shards missing at once within horizon, its holders departing at
// rate (per instance per second, as observed) and a departed holder's
// shard missing for window (the time to notice the loss, wait and
// rebuild; with backups, the mean of the restore and the rebuild). The
// rebuilder's own departure restarts the rebuilds it had in hand. A zero
// rate, window or horizon is 0; the result is in [0, 1].
func LossProbability(k, r int, rate float64, window, horizon time.Duration) float64 {
	return NewLossCurve(k, r, rate, window, horizon).At(horizon)
}

// LossCurve is LossProbability at every horizon up to the one it was made
// for (and beyond, at the chain's quasi-stationary rate), for one code,
// rate and window: one chain for many objects' lives.
type LossCurve struct {
	n, r   int
	lambda float64 // per second
	w      float64 // window, seconds
	dt     float64 // step, seconds
	m      int     // steps a shard is missing
	zero   bool
	// logS[i]: log of the probability that no loss happened by step i.
	logS []float64
}

// NewLossCurve runs the chain for k+r shards, rate and window far enough
// to answer At up to upTo (at most 32 windows; beyond, the hazard of the
// last step carries on).
func NewLossCurve(k, r int, rate float64, window, upTo time.Duration) *LossCurve {
	c := &LossCurve{n: k + r, r: r, lambda: rate, w: window.Seconds()}
	if k <= 0 || r < 0 || !(rate > 0) || window <= 0 {
		c.zero = true
		return c
	}
	c.lambda = min(rate, maxRate)
	// More parity than the chain can hold at 2 steps a window (r > 89)
	// counts as the most it can: a higher figure, never a lower one.
	for states(2, c.r) > maxStates {
		c.r--
	}
	c.m = maxSteps
	for c.m > 2 && states(c.m, c.r) > maxStates {
		c.m--
	}
	c.dt = c.w / (float64(c.m) - 0.5)
	steps := int(math.Ceil(min(upTo.Seconds(), maxHorizon)/c.dt)) + 1
	steps = min(max(steps, c.m+1), maxWindows*c.m)
	c.run(steps)
	return c
}

// At is the probability of a loss within horizon.
func (c *LossCurve) At(horizon time.Duration) float64 {
	h := min(horizon.Seconds(), maxHorizon)
	if c.zero || !(h > 0) {
		return 0
	}
	// Before a repair can end (m-1 steps, under W): more than r of the n
	// holders departed, exactly (the chain agrees at its steps).
	if h <= float64(c.m-1)*c.dt {
		return binomialTail(c.n, c.r+1, -math.Expm1(-c.lambda*h))
	}
	x := h / c.dt
	last := len(c.logS) - 1
	if x >= float64(last) {
		hazard := c.logS[last] - c.logS[last-1] // log of survival per step
		return clamp(-math.Expm1(c.logS[last] + (x-float64(last))*hazard))
	}
	// Between two steps the cumulative hazard y = -log S grows about as
	// a power of h (h^(r+1) while repairs are rare): interpolated as one.
	i := int(x)
	y0, y1 := -c.logS[i], -c.logS[i+1]
	var y float64
	if y0 > 0 && y1 > y0 {
		y = y0 * math.Exp(math.Log(y1/y0)*math.Log(x/float64(i))/math.Log(float64(i+1)/float64(i)))
	} else {
		y = y0 + (x-float64(i))*(y1-y0)
	}
	return clamp(-math.Expm1(-y))
}

func clamp(p float64) float64 { return min(max(p, 0), 1) }

// run steps the chain from no shard missing.
func (c *LossCurve) run(steps int) {
	n, r, m := c.n, c.r, c.m
	p := -math.Expm1(-c.lambda * c.dt) // one present holder departs in a step
	// The states: ascending ages in [0, m) of 0..r missing shards.
	var all [][]uint8
	index := map[string]int{}
	var gen func(prefix []uint8, from int)
	gen = func(prefix []uint8, from int) {
		index[string(prefix)] = len(all)
		all = append(all, append([]uint8(nil), prefix...))
		if len(prefix) == r {
			return
		}
		for a := from; a < m; a++ {
			gen(append(prefix, uint8(a)), a)
		}
	}
	gen(nil, 0)
	// zeros[j]: j shards just gone missing (or restarted).
	zeros := make([]int, r+1)
	for j := range zeros {
		zeros[j] = index[string(make([]uint8, j))]
	}
	// For each state: the missing after a step's repairs (aged, those of
	// age m back), and the state with f more gone missing.
	rem := make([]int, len(all))
	next := make([][]int, len(all))
	buf := make([]uint8, 0, r)
	for s, ages := range all {
		buf = buf[:0]
		for _, a := range ages {
			if int(a)+1 < m {
				buf = append(buf, a+1)
			}
		}
		rem[s] = len(buf)
		for f := 0; len(buf)+f <= r; f++ {
			key := string(make([]uint8, f)) + string(buf)
			next[s] = append(next[s], index[key])
		}
	}
	// With j missing after the repairs, the rebuilder (j > 0) departs
	// with probability p, each other present holder likewise:
	// Binomial(others, p) new ones; more than r missing is a loss.
	pmf := make([][]float64, r+1)
	loss := make([]float64, r+1)
	for j := 0; j <= r; j++ {
		others := n - j
		if j > 0 {
			others--
		}
		pmf[j] = make([]float64, r+2)
		for f := range pmf[j] {
			pmf[j][f] = binomialPMF(others, f, p)
		}
		if j == 0 {
			loss[j] = binomialTail(others, r+1, p)
		} else {
			loss[j] = (1-p)*binomialTail(others, r+1-j, p) + p*binomialTail(others, r-j, p)
		}
	}
	cur := make([]float64, len(all))
	nxt := make([]float64, len(all))
	cur[0] = 1
	c.logS = make([]float64, steps+1)
	logS := 0.0
	for i := 1; i <= steps; i++ {
		clear(nxt)
		lost, alive := 0.0, 0.0
		for s, mass := range cur {
			if mass == 0 {
				continue
			}
			j := rem[s]
			lost += mass * loss[j]
			stay := mass
			if j > 0 {
				stay = mass * (1 - p)
				restart := mass * p
				for f := 0; j+1+f <= r; f++ {
					nxt[zeros[j+1+f]] += restart * pmf[j][f]
				}
			}
			for f, t := range next[s] {
				nxt[t] += stay * pmf[j][f]
			}
			alive += mass
		}
		// Survival is kept as a log and the mass renormalised, so that
		// tiny risks keep their digits.
		logS += math.Log1p(-min(lost/alive, 1))
		logS = max(logS, minLogS)
		c.logS[i] = logS
		total := 0.0
		for _, v := range nxt {
			total += v
		}
		if total <= 0 || logS < minLogS {
			// Certain loss (as far as float64 goes).
			for j := i; j <= steps; j++ {
				c.logS[j] = minLogS
			}
			return
		}
		for s := range nxt {
			nxt[s] /= total
		}
		cur, nxt = nxt, cur
	}
}

// states is C(m+r, r), the chain's size, as a float (it may be huge).
func states(m, r int) float64 {
	return math.Round(math.Exp(lgamma(m+r) - lgamma(m) - lgamma(r)))
}

func lgamma(x int) float64 { v, _ := math.Lgamma(float64(x + 1)); return v }

func binomialPMF(n, k int, p float64) float64 {
	if k < 0 || k > n {
		return 0
	}
	if p <= 0 {
		if k == 0 {
			return 1
		}
		return 0
	}
	if p >= 1 {
		if k == n {
			return 1
		}
		return 0
	}
	return math.Exp(lgamma(n) - lgamma(k) - lgamma(n-k) + float64(k)*math.Log(p) + float64(n-k)*math.Log1p(-p))
}

// binomialTail is P(Binomial(n, p) >= k), summed from k up so that tiny
// tails keep their digits.
func binomialTail(n, k int, p float64) float64 {
	if k <= 0 {
		return 1
	}
	s := 0.0
	for i := k; i <= n; i++ {
		s += binomialPMF(n, i, p)
	}
	return min(s, 1)
}
