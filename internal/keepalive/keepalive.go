// Package keepalive decides, per application, how long an idle instance
// stays loaded and when to load it again before the next invocation: the
// hybrid histogram policy of Shahrad et al., "Serverless in the Wild" (ATC
// '20), which Faa$T's frontend uses to schedule application loads [Faa$T
// §3.3; DESIGN.md §4].
//
// A Policy keeps a histogram of the application's idle times: the time from
// the end of an invocation to the start of the next, while no other
// invocation of the application was running. The bins are BinWidth wide
// (default 1 minute) and cover [0, Range) (default 4 hours); a longer idle
// time is counted as out of bounds. Decide reads the histogram and takes the
// first rule that applies:
//
//  1. Fewer than MinSamples idle times in all: mode "fixed", the
//     application's own keep-alive (Config.Fixed). A few idle times say
//     little about the head or the tail of their distribution, and the
//     representativeness test (4) cannot tell: the coefficient of variation
//     of the bin counts does not depend on how many idle times there are, so
//     a single one looks perfectly concentrated.
//  2. More than MaxOutOfBounds of them (default half) beyond Range: mode
//     "out-of-bounds". The histogram cannot place the next invocation of an
//     application that is mostly idle for longer than its range. The paper
//     forecasts such idle times with a time-series model (ARIMA); hoard has
//     none, so it falls back to the fixed keep-alive and says so in the
//     reason.
//  3. Fewer than MinSamples idle times within Range: mode "fixed", as in 1.
//  4. The coefficient of variation (CV: standard deviation over mean) of the
//     counts of all bins not above CVThreshold (default 2, the paper's):
//     mode "fixed". The histogram is not representative: its idle times are
//     spread over many bins rather than gathered in a few, so it does not
//     tell when the next invocation will come.
//  5. Otherwise mode "histogram", with windows from the head
//     (PreWarmPercentile, default 5th) and the tail (KeepAlivePercentile,
//     default 99th) of the in-range idle times.
//
// A percentile is the bin that holds the idle time of that nearest rank (the
// ⌈p·n⌉-th smallest of n), and the windows are:
//
//	pre-warm   = head bin's start × (1 − Margin), rounded down to a bin
//	end        = tail bin's start × (1 + Margin), rounded up to a bin,
//	             and at least the tail bin's end
//	keep-alive = end − pre-warm
//
// The paper's reasoning: few invocations (5%) follow the previous one sooner
// than the head, so when an invocation ends the instance is unloaded at once,
// saving its memory while it would only wait, and loaded again when the
// pre-warm window has passed; it then stays loaded for the keep-alive window,
// until the tail, so that 99% of next invocations find it warm, and is
// unloaded if none comes. The percentiles describe past idle times, which the
// next one only resembles, so the margin (10%) errs on the side of warm
// starts: it loads earlier and unloads later. The rounding to bins makes the
// same choice: the pre-warm window ends no later than the start of the head's
// bin, before any idle time in it, and the loaded period lasts at least to
// the end of the tail's bin, past every idle time in it. A pre-warm window of
// 0 (the head is in one of the first bins: invocations often follow each
// other closely) means that the instance is not unloaded after an
// invocation: it stays loaded for the keep-alive window from the
// invocation's end. In the other modes PreWarm is 0 and KeepAlive is
// Config.Fixed.
//
// Time comes in as arguments: the package reads no clock, does no I/O and
// starts no goroutines. A Policy may be used by several goroutines at once.
// Snapshot and Restore carry the histogram across controller restarts.
package keepalive

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"time"
)

// Defaults for the zero fields of a Config, the paper's settings unless
// noted.
const (
	// DefaultBinWidth: the paper's 1-minute bins.
	DefaultBinWidth = time.Minute
	// DefaultRange: the paper's 4 hours, 240 bins of 1 minute per
	// application.
	DefaultRange = 4 * time.Hour
	// DefaultKeepAlivePercentile: the paper's tail, the 99th percentile.
	DefaultKeepAlivePercentile = 0.99
	// DefaultPreWarmPercentile: the paper's head, the 5th percentile.
	DefaultPreWarmPercentile = 0.05
	// DefaultMargin: the paper's 10% on both windows.
	DefaultMargin = 0.10
	// DefaultMinSamples is hoard's choice; the paper relies on the CV test
	// alone, which cannot tell few idle times from concentrated ones (see
	// the package comment). With n idle times the 99th percentile is their
	// maximum for n <= 100, and if they are independent and alike, the next
	// one exceeds all of n with probability 1/(n+1): 9% for 10, against the
	// 1% the policy aims at. Ten is a compromise: an application invoked
	// every 10 minutes gets its own windows after about 2 hours, one invoked
	// hourly after about 10, and a couple of coincidental gaps cannot
	// replace its configured keep-alive.
	DefaultMinSamples = 10
	// DefaultCVThreshold: the paper's, a histogram is representative when
	// the CV of its bin counts is above 2.
	DefaultCVThreshold = 2
	// DefaultMaxOutOfBounds is hoard's choice (the paper says only "too
	// many"): the histogram applies while at least half of the idle times
	// fall within Range. It then predicts most next invocations, and no
	// keep-alive shorter than Range would have kept the instance warm for
	// the others; when most idle times are beyond Range, the in-range
	// minority says little about the next invocation.
	DefaultMaxOutOfBounds = 0.5
	// MaxBins bounds Range/BinWidth, and so the memory of a Policy and the
	// size of its snapshot: one week of 1-minute bins.
	MaxBins = 7 * 24 * 60
)

// Config shapes a Policy. Zero fields take their defaults, except Fixed,
// which is required.
type Config struct {
	// BinWidth is the histogram's resolution, and that of the windows it
	// gives. Default (0): DefaultBinWidth.
	BinWidth time.Duration
	// Range bounds the idle times the histogram holds, [0, Range); longer
	// ones are out of bounds. A multiple of BinWidth, of at most MaxBins
	// bins. Default (0): DefaultRange.
	Range time.Duration
	// KeepAlivePercentile is the tail, in (0, 1]: the share of in-range idle
	// times the loaded period should cover. Default (0):
	// DefaultKeepAlivePercentile.
	KeepAlivePercentile float64
	// PreWarmPercentile is the head, in (0, KeepAlivePercentile): the share
	// of in-range idle times that may end before the instance is loaded
	// again. Default (0): DefaultPreWarmPercentile.
	PreWarmPercentile float64
	// Margin, in [0, 1), shrinks the pre-warm window and stretches the end of
	// the loaded period by this fraction. Default (0): DefaultMargin; a
	// negative value means no margin.
	Margin float64
	// MinSamples is the number of idle times, in all and within Range, the
	// histogram needs to be used. Default (0): DefaultMinSamples.
	MinSamples int
	// CVThreshold: the histogram is representative when the coefficient of
	// variation of its bin counts is above it. Default (0):
	// DefaultCVThreshold; a negative value means 0 (every histogram not
	// perfectly flat is representative).
	CVThreshold float64
	// MaxOutOfBounds, in [0, 1], is the fraction of idle times beyond Range
	// above which the histogram is not used (mode "out-of-bounds"). Default
	// (0): DefaultMaxOutOfBounds; a negative value means 0 (any
	// out-of-bounds idle time is too many).
	MaxOutOfBounds float64
	// Fixed is the keep-alive of the other modes: the application's
	// keep_alive. Required, positive.
	Fixed time.Duration
}

// Validate checks the config and fills in defaults. It leaves negative
// Margin, CVThreshold and MaxOutOfBounds as they are, so that it may be
// called again.
func (c *Config) Validate() error {
	if c.BinWidth == 0 {
		c.BinWidth = DefaultBinWidth
	}
	if c.Range == 0 {
		c.Range = DefaultRange
	}
	if c.KeepAlivePercentile == 0 {
		c.KeepAlivePercentile = DefaultKeepAlivePercentile
	}
	if c.PreWarmPercentile == 0 {
		c.PreWarmPercentile = DefaultPreWarmPercentile
	}
	if c.Margin == 0 {
		c.Margin = DefaultMargin
	}
	if c.MinSamples == 0 {
		c.MinSamples = DefaultMinSamples
	}
	if c.CVThreshold == 0 {
		c.CVThreshold = DefaultCVThreshold
	}
	if c.MaxOutOfBounds == 0 {
		c.MaxOutOfBounds = DefaultMaxOutOfBounds
	}
	switch {
	case c.BinWidth < 0:
		return fmt.Errorf("keepalive: bin width %s must be positive", FormatDuration(c.BinWidth))
	case c.Range < c.BinWidth || c.Range%c.BinWidth != 0:
		return fmt.Errorf("keepalive: range %s must be a positive multiple of the bin width %s", FormatDuration(c.Range), FormatDuration(c.BinWidth))
	case c.Range/c.BinWidth > MaxBins:
		return fmt.Errorf("keepalive: range %s holds %d bins of %s, more than %d", FormatDuration(c.Range), c.Range/c.BinWidth, FormatDuration(c.BinWidth), MaxBins)
	case !(c.KeepAlivePercentile > 0 && c.KeepAlivePercentile <= 1):
		return fmt.Errorf("keepalive: keep-alive percentile %g must be in (0, 1]", c.KeepAlivePercentile)
	case !(c.PreWarmPercentile > 0 && c.PreWarmPercentile < c.KeepAlivePercentile):
		return fmt.Errorf("keepalive: pre-warm percentile %g must be in (0, keep-alive percentile %g)", c.PreWarmPercentile, c.KeepAlivePercentile)
	case !(c.Margin < 1) || math.IsNaN(c.Margin):
		return fmt.Errorf("keepalive: margin %g must be below 1", c.Margin)
	case c.MinSamples < 0:
		return fmt.Errorf("keepalive: min samples %d must not be negative", c.MinSamples)
	case math.IsNaN(c.CVThreshold) || math.IsInf(c.CVThreshold, 0):
		return fmt.Errorf("keepalive: CV threshold %g must be finite", c.CVThreshold)
	case !(c.MaxOutOfBounds <= 1) || math.IsNaN(c.MaxOutOfBounds):
		return fmt.Errorf("keepalive: max out-of-bounds fraction %g must be at most 1", c.MaxOutOfBounds)
	case c.Fixed <= 0:
		return fmt.Errorf("keepalive: fixed keep-alive %s must be positive", FormatDuration(c.Fixed))
	}
	return nil
}

// Mode names the rule a Decision comes from.
type Mode string

// The modes of a Decision.
const (
	// ModeHistogram: the windows come from the histogram.
	ModeHistogram Mode = "histogram"
	// ModeFixed: too few idle times, or a histogram that is not
	// representative; the fixed keep-alive applies.
	ModeFixed Mode = "fixed"
	// ModeOutOfBounds: too many idle times beyond Range; the fixed
	// keep-alive applies.
	ModeOutOfBounds Mode = "out-of-bounds"
)

// Decision is what to do with the application's instances after an
// invocation ends. An instance still idle when its keep-alive window ends is
// unloaded; the next invocation then starts it cold.
type Decision struct {
	Mode Mode
	// PreWarm: when positive, unload the instance as soon as the invocation
	// ends and load it again PreWarm later. When 0, keep it loaded.
	PreWarm time.Duration
	// KeepAlive is how long the instance stays loaded while idle: from its
	// pre-load when PreWarm is positive, else from the invocation's end.
	// Always positive.
	KeepAlive time.Duration
	// Reason explains the decision in a sentence, for logs.
	Reason string
	// Observed is the number of idle times the decision was made from, and
	// OutOfBounds how many of them were beyond Range.
	Observed, OutOfBounds uint64
}

// Policy is the hybrid histogram policy of one application. Build it with
// New.
type Policy struct {
	// Immutable after New: the validated config, with negative Margin,
	// CVThreshold and MaxOutOfBounds read as 0.
	cfg                   Config
	margin, cvMin, maxOOB float64

	mu      sync.Mutex
	counts  []uint64 // idle times per bin; len Range/BinWidth
	inRange uint64   // sum of counts
	oob     uint64   // idle times >= Range

	// Invocation tracking (Invoked, Finished).
	running int       // invocations in flight
	lastEnd time.Time // the latest end, if haveEnd
	haveEnd bool      // an end not yet followed by an invocation
}

// New returns a Policy with an empty histogram, or an error for an invalid
// config.
func New(cfg Config) (*Policy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Policy{
		cfg:    cfg,
		margin: max(cfg.Margin, 0),
		cvMin:  max(cfg.CVThreshold, 0),
		maxOOB: max(cfg.MaxOutOfBounds, 0),
		counts: make([]uint64, cfg.Range/cfg.BinWidth),
	}, nil
}

// Config returns the validated config, defaults filled in.
func (p *Policy) Config() Config { return p.cfg }

// Invoked records that an invocation of the application started at time at.
// If none was in flight and one ended before, the time since the latest end
// is an idle time. An invocation that starts before that end (reported out
// of order, so it overlapped) records none.
func (p *Policy) Invoked(at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running == 0 && p.haveEnd {
		p.haveEnd = false
		if idle := at.Sub(p.lastEnd); idle >= 0 {
			p.observe(idle)
		}
	}
	p.running++
}

// Finished records that an invocation ended at time at. Every Invoked must be
// matched by one Finished, or the application never becomes idle again; a
// Finished without an Invoked (an invocation in flight across a controller
// restart) is allowed.
func (p *Policy) Finished(at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running > 0 {
		p.running--
	}
	if !p.haveEnd || at.After(p.lastEnd) {
		p.lastEnd = at
	}
	p.haveEnd = true
}

// Observe records an idle time directly, for tests and for importing
// history. A negative idle time is ignored.
func (p *Policy) Observe(idle time.Duration) {
	if idle < 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.observe(idle)
}

func (p *Policy) observe(idle time.Duration) {
	if p.inRange+p.oob == math.MaxUint64 {
		return // only a restored snapshot can get here
	}
	if idle >= p.cfg.Range {
		p.oob++
		return
	}
	p.counts[idle/p.cfg.BinWidth]++
	p.inRange++
}

// Decide returns the decision for the histogram as it stands.
func (p *Policy) Decide() Decision {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.inRange + p.oob
	minN := uint64(p.cfg.MinSamples)
	d := Decision{Mode: ModeFixed, KeepAlive: p.cfg.Fixed, Observed: n, OutOfBounds: p.oob}
	fixed := "fixed keep-alive " + FormatDuration(p.cfg.Fixed)
	switch {
	case n < minN:
		d.Reason = fmt.Sprintf("%d idle times observed, fewer than %d: %s", n, minN, fixed)
	case float64(p.oob) > p.maxOOB*float64(n):
		d.Mode = ModeOutOfBounds
		d.Reason = fmt.Sprintf("%d of %d idle times exceed the %s range, more than %s: the histogram does not apply "+
			"(Shahrad et al. forecast such idle times with ARIMA, which hoard does not have): %s",
			p.oob, n, FormatDuration(p.cfg.Range), percent(p.maxOOB), fixed)
	case p.inRange < minN:
		d.Reason = fmt.Sprintf("%d idle times within the %s range, fewer than %d: %s",
			p.inRange, FormatDuration(p.cfg.Range), minN, fixed)
	default:
		if cv := p.cv(); !(cv > p.cvMin) {
			d.Reason = fmt.Sprintf("the histogram is not representative: the CV of its bin counts, %.2f, is not above %g: %s",
				cv, p.cvMin, fixed)
		} else {
			p.histogram(&d, cv)
		}
	}
	return d
}

// cv is the coefficient of variation of the bin counts, over all bins. It
// needs inRange > 0.
func (p *Policy) cv() float64 {
	mean := float64(p.inRange) / float64(len(p.counts))
	var sum float64
	for _, c := range p.counts {
		dev := float64(c) - mean
		sum += dev * dev
	}
	return math.Sqrt(sum/float64(len(p.counts))) / mean
}

// histogram fills in d's windows from the head and tail bins. It needs
// inRange > 0.
func (p *Policy) histogram(d *Decision, cv float64) {
	head, tail := p.bin(p.cfg.PreWarmPercentile), p.bin(p.cfg.KeepAlivePercentile)
	// The windows in bins; eps keeps float rounding (10 × 1.1 =
	// 11.000000000000002) from moving a bin edge.
	const eps = 1e-9
	preWarm := int(math.Floor(float64(head)*(1-p.margin) + eps))
	end := max(int(math.Ceil(float64(tail)*(1+p.margin)-eps)), tail+1)
	w := p.cfg.BinWidth
	d.Mode = ModeHistogram
	d.PreWarm = time.Duration(preWarm) * w
	d.KeepAlive = time.Duration(end-preWarm) * w
	var what string
	if d.PreWarm == 0 {
		what = "stay loaded " + FormatDuration(d.KeepAlive) + " after the invocation"
	} else {
		what = "unload, pre-load after " + FormatDuration(d.PreWarm) + ", keep alive " + FormatDuration(d.KeepAlive)
	}
	d.Reason = fmt.Sprintf("%d idle times within %s, CV %.2f: the %s percentile is in [%s, %s), the %s in [%s, %s); with a %s margin: %s",
		p.inRange, FormatDuration(p.cfg.Range), cv,
		ordinal(p.cfg.PreWarmPercentile), FormatDuration(time.Duration(head)*w), FormatDuration(time.Duration(head+1)*w),
		ordinal(p.cfg.KeepAlivePercentile), FormatDuration(time.Duration(tail)*w), FormatDuration(time.Duration(tail+1)*w),
		percent(p.margin), what)
}

// bin returns the bin holding the in-range idle time of nearest rank
// ⌈q·inRange⌉. It needs inRange > 0.
func (p *Policy) bin(q float64) int {
	rank := uint64(math.Ceil(q*float64(p.inRange) - 1e-9))
	rank = min(max(rank, 1), p.inRange)
	var cum uint64
	for i, c := range p.counts {
		cum += c
		if cum >= rank {
			return i
		}
	}
	return len(p.counts) - 1 // unreachable: the counts sum to inRange
}

// FormatDuration writes d as time.Duration.String does, without its zero
// minutes and seconds: "9m", "1h", "1h0m30s", "0".
func FormatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	if s == "0s" {
		s = "0"
	}
	return s
}

func percent(f float64) string { return fmt.Sprintf("%.4g%%", f*100) }

// ordinal writes percentile q as "5th", "99th", "99.9th", "1st".
func ordinal(q float64) string {
	s := fmt.Sprintf("%.4g", q*100)
	switch {
	case strings.Contains(s, "."), strings.HasSuffix(s, "11"), strings.HasSuffix(s, "12"), strings.HasSuffix(s, "13"):
		return s + "th"
	case strings.HasSuffix(s, "1"):
		return s + "st"
	case strings.HasSuffix(s, "2"):
		return s + "nd"
	case strings.HasSuffix(s, "3"):
		return s + "rd"
	}
	return s + "th"
}
