package scaling

import (
	"slices"
	"time"
)

// Estimator profiles a bandwidth (the store's, BW_BS, or the instance
// network's, BW_inst) from measured transfers, so that the bandwidth plan
// runs on what the network does now rather than on configured figures
// [Faa$T §4: "Faa$T periodically profiles T_Load, BW_BS, and BW_inst"].
//
// Its estimate is the median bandwidth of the last EstimatorWindow
// samples, not an EWMA. Transfer times have a heavy tail (a retried
// request, a stalled connection, a GC pause): one transfer ten times
// slower moves an EWMA with weight 0.2 by 18%, and the plan with it, while
// the median ignores outliers as long as they are fewer than half the
// window. The price is reacting to a lasting change only after half the
// window's samples, which matters little because bandwidth changes slowly
// compared with how often large objects are read, and the median is
// always a bandwidth that was actually seen. Transfers under
// MinSampleBytes are not samples (see Config.MinSampleBytes). Samples
// carry no time: a plan after a long quiet spell uses the last window
// seen, the best information there is.
//
// With no samples it reports the bandwidth unknown, and Measure passes
// that on, so PlanBandwidth refuses. The zero value is an estimator with
// the default config. An Estimator is not safe for concurrent use.
type Estimator struct {
	w        window
	minBytes int64
}

// NewEstimator returns an estimator with cfg's EstimatorWindow and
// MinSampleBytes (defaults for zero fields).
func NewEstimator(cfg Config) *Estimator {
	cfg = cfg.withDefaults()
	return &Estimator{w: window{size: cfg.EstimatorWindow}, minBytes: cfg.MinSampleBytes}
}

// Add records a transfer of bytes that took d, measured from the request
// to the last byte, one transfer at a time per instance (concurrent
// transfers each see a share of the bandwidth). It reports whether the
// transfer was taken as a sample: one under MinSampleBytes, or with a
// duration that is not positive, is not.
func (e *Estimator) Add(bytes int64, d time.Duration) bool {
	minBytes := e.minBytes
	if minBytes == 0 {
		minBytes = DefaultMinSampleBytes
	}
	if bytes < minBytes || d <= 0 {
		return false
	}
	e.w.add(float64(bytes) / d.Seconds())
	return true
}

// Bandwidth returns the estimate in bytes per second, and false (with 0)
// when there are no samples.
func (e *Estimator) Bandwidth() (float64, bool) {
	return e.w.median()
}

// Len returns the number of samples the estimate is over.
func (e *Estimator) Len() int { return len(e.w.vals) }

// LoadEstimator profiles T_load, the time a new instance takes to load,
// from measured instance starts: the median of the last EstimatorWindow,
// for the reasons given for Estimator (a start that waited on a busy node
// is an outlier). The zero value is an estimator with the default config.
// A LoadEstimator is not safe for concurrent use.
type LoadEstimator struct {
	w window
}

// NewLoadEstimator returns an estimator with cfg's EstimatorWindow.
func NewLoadEstimator(cfg Config) *LoadEstimator {
	cfg = cfg.withDefaults()
	return &LoadEstimator{w: window{size: cfg.EstimatorWindow}}
}

// Add records an instance start that took d, and reports whether it was
// taken as a sample (a negative duration is not).
func (e *LoadEstimator) Add(d time.Duration) bool {
	if d < 0 {
		return false
	}
	e.w.add(float64(d))
	return true
}

// LoadTime returns the estimate, and false (with 0) when there are no
// samples.
func (e *LoadEstimator) LoadTime() (time.Duration, bool) {
	m, ok := e.w.median()
	return time.Duration(m), ok
}

// Len returns the number of samples the estimate is over.
func (e *LoadEstimator) Len() int { return len(e.w.vals) }

// Measure returns the current estimates as Measurements, each one marked
// not measured where its estimator has no samples (or is nil), so that
// PlanBandwidth refuses rather than plan on a guess.
func Measure(load *LoadEstimator, store, peer *Estimator) Measurements {
	m := Measurements{LoadTime: -1}
	if load != nil {
		if d, ok := load.LoadTime(); ok {
			m.LoadTime = d
		}
	}
	if store != nil {
		m.StoreBW, _ = store.Bandwidth()
	}
	if peer != nil {
		m.PeerBW, _ = peer.Bandwidth()
	}
	return m
}

// window keeps the last size values (DefaultEstimatorWindow when size is
// 0).
type window struct {
	size int
	vals []float64 // a ring once full; next is the oldest
	next int
}

func (w *window) add(v float64) {
	size := w.size
	if size <= 0 {
		size = DefaultEstimatorWindow
	}
	if len(w.vals) < size {
		w.vals = append(w.vals, v)
		return
	}
	w.vals[w.next] = v
	w.next = (w.next + 1) % size
}

// median returns the median of the values (the mean of the middle two for
// an even count), and false when there are none.
func (w *window) median() (float64, bool) {
	n := len(w.vals)
	if n == 0 {
		return 0, false
	}
	s := slices.Clone(w.vals)
	slices.Sort(s)
	if n%2 == 1 {
		return s[n/2], true
	}
	return (s[n/2-1] + s[n/2]) / 2, true
}
