// Package admission decides, per function, whether caching its inputs is
// worth it, as OFC's Predictor does (OFC §5.2): caching helps an
// invocation when extracting and loading its data would take more than
// half of its run time, (Te + Tl) / (Te + Tt + Tl) > 0.5.
//
// The time a function spends reading cannot be taken from its reads as
// served: hits make it small, which would turn caching off, and then
// misses make it large again, which would turn it back on. What reads
// would cost from the store is estimated instead, from a model fitted to
// the reads the store served (StoreFit: a fixed cost per read plus a cost
// per byte, least squares), and the transform time is the run time less
// the reads and writes as they were served. Writes go to the store
// whatever the decision, so their time as served is counted as load time.
//
// The package is pure: no I/O, no clock, no goroutines.
package admission

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"time"
)

// Threshold is OFC's: caching is worth it when the share of the run time
// spent extracting and loading data exceeds it.
const Threshold = 0.5

// Defaults of Decider.
const (
	// DefaultWindow is how many recent invocations a decision is taken
	// over.
	DefaultWindow = 20
	// DefaultMinSamples is how many invocations with an estimate a
	// function needs before its inputs may be refused: until then they
	// are cached (a doubt is the old behaviour).
	DefaultMinSamples = 5
)

// StoreFit accumulates reads the store served, size against time, and
// fits time = Fixed + PerByte × size by least squares. The zero value is
// empty. Fields are exported so a fit travels in JSON; Merge adds two.
type StoreFit struct {
	N     int64   `json:"n"`
	SumS  float64 `json:"sum_s"` // bytes
	SumT  float64 `json:"sum_t"` // seconds
	SumS2 float64 `json:"sum_s2"`
	SumST float64 `json:"sum_st"`
}

// Add records one read of size bytes served by the store in d.
func (f *StoreFit) Add(size int64, d time.Duration) {
	if size < 0 || d < 0 {
		return
	}
	s, t := float64(size), d.Seconds()
	f.N++
	f.SumS += s
	f.SumT += t
	f.SumS2 += s * s
	f.SumST += s * t
}

// Sub is the reads in f that are not in before (f's counts only grow).
func (f StoreFit) Sub(before StoreFit) StoreFit {
	return StoreFit{N: f.N - before.N, SumS: f.SumS - before.SumS, SumT: f.SumT - before.SumT,
		SumS2: f.SumS2 - before.SumS2, SumST: f.SumST - before.SumST}
}

// Model is a fitted store cost: a read of s bytes costs Fixed + PerByte×s.
type Model struct {
	Fixed   time.Duration `json:"fixed"`
	PerByte float64       `json:"per_byte"` // seconds per byte
}

// Cost is the estimated time to read reads objects holding bytes bytes
// from the store.
func (m Model) Cost(reads, bytes int64) time.Duration {
	s := float64(reads)*m.Fixed.Seconds() + float64(bytes)*m.PerByte
	return time.Duration(s * float64(time.Second))
}

// Model fits the reads recorded. ok is false with no reads. With one size
// only (or one read) the cost per byte cannot be told from the fixed
// cost: the mean time per byte is the cost, none of it fixed. A negative
// slope or intercept (noise) is clamped to 0 and the other refitted
// through the means, so no estimate is ever negative.
func (f StoreFit) Model() (Model, bool) {
	if f.N <= 0 || f.SumT < 0 {
		return Model{}, false
	}
	n := float64(f.N)
	ms, mt := f.SumS/n, f.SumT/n
	varS := f.SumS2/n - ms*ms
	perByte := 0.0
	if varS > 1e-9*(ms*ms+1) {
		perByte = (f.SumST/n - ms*mt) / varS
	} else if ms > 0 {
		perByte = mt / ms
	}
	if perByte < 0 {
		perByte = 0
	}
	fixed := mt - perByte*ms
	if fixed < 0 {
		fixed = 0
		if ms > 0 {
			perByte = mt / ms
		}
	}
	if math.IsNaN(fixed) || math.IsNaN(perByte) || math.IsInf(perByte, 0) {
		return Model{}, false
	}
	return Model{Fixed: time.Duration(fixed * float64(time.Second)), PerByte: perByte}, true
}

// Sample is one invocation's timings.
type Sample struct {
	// Run is the function's run time as its worker measured it.
	Run time.Duration
	// Served is the time its reads and writes took as they were served
	// (hits fast, misses slow).
	Served time.Duration
	// Store is the estimated time of its reads from the store (Model.Cost)
	// plus its writes as served: extract and load without a cache.
	Store time.Duration
}

// ErrSample marks a sample that cannot be used.
var ErrSample = errors.New("admission: invalid sample")

// Validate checks a sample.
func (s Sample) Validate() error {
	if s.Run < 0 || s.Served < 0 || s.Store < 0 {
		return fmt.Errorf("%w: negative time", ErrSample)
	}
	return nil
}

// Transform is the run time less the data's time as served: the
// function's own computation (never negative).
func (s Sample) Transform() time.Duration {
	return max(s.Run-s.Served, 0)
}

// Share is (Te+Tl)/(Te+Tt+Tl) with Te+Tl the store estimate; 0 for an
// invocation with neither data nor computation.
func (s Sample) Share() float64 {
	tot := s.Store + s.Transform()
	if tot <= 0 {
		return 0
	}
	return float64(s.Store) / float64(tot)
}

// Decider keeps one function's recent samples and says whether its
// inputs are worth caching. The zero value uses the defaults.
type Decider struct {
	Window, MinSamples int
	samples            []Sample
	next               int
}

// Observe records an invocation's sample; an invalid one is refused and
// changes nothing.
func (d *Decider) Observe(s Sample) error {
	if err := s.Validate(); err != nil {
		return err
	}
	w := d.Window
	if w <= 0 {
		w = DefaultWindow
	}
	if len(d.samples) < w {
		d.samples = append(d.samples, s)
		return nil
	}
	d.samples[d.next%len(d.samples)] = s
	d.next = (d.next + 1) % len(d.samples)
	return nil
}

// Decision is a function's admission state.
type Decision struct {
	// Admit says whether its reads are cached.
	Admit bool `json:"admit"`
	// Share is the median of the window's invocations' data shares
	// (Sample.Share); -1 before any sample.
	Share float64 `json:"share"`
	// Samples is how many invocations it is taken over; Benefit how many
	// of them caching helps (share above Threshold).
	Samples int `json:"samples"`
	Benefit int `json:"benefit"`
	// Reason says why, in words.
	Reason string `json:"reason"`
}

// Decide says whether the function's inputs are cached. Each invocation
// in the window is labelled as OFC labels one: caching helps it when its
// data's share of run time exceeds Threshold. The inputs are cached
// until MinSamples invocations were seen, then while at least half of
// the window's invocations are helped (a majority vote, so one slow
// outlier does not flip the decision; a tie keeps caching, the old
// behaviour).
func (d *Decider) Decide() Decision {
	need := d.MinSamples
	if need <= 0 {
		need = DefaultMinSamples
	}
	shares := make([]float64, len(d.samples))
	benefit := 0
	for i, s := range d.samples {
		shares[i] = s.Share()
		if shares[i] > Threshold {
			benefit++
		}
	}
	dec := Decision{Share: median(shares), Samples: len(d.samples), Benefit: benefit}
	switch {
	case len(d.samples) < need:
		dec.Admit = true
		dec.Reason = fmt.Sprintf("learning (%d of %d invocations)", len(d.samples), need)
	case 2*benefit >= len(d.samples):
		dec.Admit = true
		dec.Reason = fmt.Sprintf("data over %.0f%% of run time in %d of %d invocations (median %.0f%%)", 100*Threshold, benefit, len(d.samples), 100*dec.Share)
	default:
		dec.Reason = fmt.Sprintf("data over %.0f%% of run time in only %d of %d invocations (median %.0f%%): reads not cached",
			100*Threshold, benefit, len(d.samples), 100*dec.Share)
	}
	return dec
}

// median of xs (the mean of the middle two for an even count); -1 for
// none. xs is sorted in place.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return -1
	}
	sort.Float64s(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}
