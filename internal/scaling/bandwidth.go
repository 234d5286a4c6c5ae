package scaling

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/hoard-io/hoard/internal/bytesize"
)

// Measurements are the profiled quantities the bandwidth plan needs. The
// zero value is "not measured": PlanBandwidth refuses it.
type Measurements struct {
	// LoadTime is how long a new instance takes to load (start its sandbox,
	// cachelet and worker and join the ring). 0 is a valid measurement;
	// negative means not measured.
	LoadTime time.Duration
	// StoreBW is one instance's bandwidth from the store, in bytes per
	// second; 0 (or less) means not measured.
	StoreBW float64
	// PeerBW is the bandwidth from one instance to another, in bytes per
	// second; 0 (or less) means not measured.
	PeerBW float64
}

// check returns an error wrapping ErrUnmeasured for a quantity that is not
// measured.
func (m Measurements) check() error {
	switch {
	case !(m.StoreBW > 0) || math.IsInf(m.StoreBW, 0):
		return fmt.Errorf("scaling: store bandwidth %v: %w", m.StoreBW, ErrUnmeasured)
	case !(m.PeerBW > 0) || math.IsInf(m.PeerBW, 0):
		return fmt.Errorf("scaling: peer bandwidth %v: %w", m.PeerBW, ErrUnmeasured)
	case m.LoadTime < 0:
		return fmt.Errorf("scaling: load time: %w", ErrUnmeasured)
	}
	return nil
}

// TransferTime returns T(n), the modelled time for n cachelets to bring an
// object of size bytes to the one that needs it, when current instances
// are running [Faa$T §4]:
//
//	T(n) = T_load + (S/n)/BW_BS + (S - S/n)/BW_inst
//
// Each of the n cachelets downloads S/n bytes from the store at BW_BS, in
// parallel, and the S - S/n bytes fetched by the others reach the reader
// over the instance network at BW_inst. T_load is the load time of the
// instances that must be started: LoadTime when n > current, and 0 when n
// <= current, for running instances need no loading. The new instances
// load in parallel, so T_load counts once however many start, and it is
// added in full, because their ranges (on the critical path, being the
// same size as the others') cannot start before they are loaded.
// Faa$T's formula has T_load in every case; in its measurements (Figure
// 14) it applies to the instances that had to be started.
//
// It returns 0 for n < 1 or size <= 0, and the longest Duration if the
// time does not fit. Measurements are not checked: with a zero bandwidth
// the time is the longest Duration.
func TransferTime(size int64, n, current int, m Measurements) time.Duration {
	if n < 1 || size <= 0 {
		return 0
	}
	return seconds(transferSeconds(size, n, current, m))
}

func transferSeconds(size int64, n, current int, m Measurements) float64 {
	s := float64(size)
	part := s / float64(n)
	t := part/m.StoreBW + (s-part)/m.PeerBW
	if n > current {
		t += m.LoadTime.Seconds()
	}
	return t
}

// seconds converts to a Duration, saturating.
func seconds(s float64) time.Duration {
	if !(s < float64(math.MaxInt64)/1e9) {
		return math.MaxInt64
	}
	return time.Duration(math.Round(s * 1e9))
}

// Step is T(N) for one N the plan considered.
type Step struct {
	N int
	T time.Duration
}

// BandwidthPlan is how an object should be downloaded.
type BandwidthPlan struct {
	// Size is the object's size and Current the instances running when the
	// plan was made.
	Size    int64
	Current int
	// N is how many cachelets should each download a range of the object
	// (see Ranges); 1 means the reader's owner downloads it alone.
	N int
	// ScaleOut reports that N is more than Current: ask for N - Current
	// instances now (Vote).
	ScaleOut bool
	// T is the modelled T(N); 0 when no time was modelled (a small object).
	T time.Duration
	// Steps are T(n) for every n considered, in order, including the one
	// that stopped the search.
	Steps []Step
	// Reason says why N.
	Reason string
}

// Vote is the plan as a vote: urgent, for N - Current instances when the
// plan scales out, and 0 otherwise (the bandwidth policy never votes in;
// see the package comment).
func (p BandwidthPlan) Vote() Vote {
	v := Vote{Policy: PolicyBandwidth, Reason: p.Reason}
	if p.ScaleOut {
		v.Delta, v.Urgent = p.N-p.Current, true
	}
	return v
}

// PlanBandwidth is the bandwidth policy [Faa$T §4]: how many cachelets
// should each download a byte range of an object of size bytes, with
// current instances running and at most maxInstances, so that it arrives
// soonest. The rules:
//
//   - An object under MinObjectSize is downloaded by one cachelet (N = 1)
//     and never scales out: the model leaves out fixed per-request costs,
//     which dominate small downloads (see Config.MinObjectSize). No
//     measurements are needed.
//   - Refusal: with a bandwidth or the load time not measured, it returns
//     an error wrapping ErrUnmeasured, and the caller does not scale.
//   - When peers are no faster than the store (PeerBW <= StoreBW),
//     splitting never helps (T(n) >= T(1) for every n), so N = 1.
//   - Otherwise N starts at current: the running cachelets cost nothing to
//     involve and T falls with every one of them. It is raised one at a
//     time up to maxInstances; the search stops at the N where one more
//     instance would improve T by less than MinGain (10%), or make it
//     grow [Faa$T §4]. One refinement: the first step past current pays
//     T_load, which may make T grow although more instances would win it
//     back (T_load is paid once however many start, see TransferTime); so
//     that step alone does not stop the search, and instead the plan
//     scales out only if the N found improves on T(current) by at least
//     MinGain. Where the paper's search goes past the first step, the two
//     agree.
//
// It returns an error for a negative size or current or maxInstances under
// 1. A maxInstances under current only keeps the plan from scaling out.
func PlanBandwidth(size int64, current, maxInstances int, m Measurements, cfg Config) (BandwidthPlan, error) {
	if size < 0 || current < 1 || maxInstances < 1 {
		return BandwidthPlan{}, fmt.Errorf("scaling: bandwidth plan for size %d, current %d, max %d: want size >= 0, current and max >= 1", size, current, maxInstances)
	}
	cfg = cfg.withDefaults()
	p := BandwidthPlan{Size: size, Current: current, N: 1}
	if size < cfg.MinObjectSize {
		p.Reason = fmt.Sprintf("%s is under %s", bytesize.Human(size), bytesize.Human(cfg.MinObjectSize))
		return p, nil
	}
	if err := m.check(); err != nil {
		return BandwidthPlan{}, err
	}
	t := func(n int) float64 { return transferSeconds(size, n, current, m) }
	step := func(n int, s float64) { p.Steps = append(p.Steps, Step{n, seconds(s)}) }
	if m.PeerBW <= m.StoreBW {
		step(1, t(1))
		p.T = p.Steps[0].T
		p.Reason = "peers are no faster than the store"
		return p, nil
	}

	tCur := t(current)
	step(current, tCur)
	best, tBest := current, tCur
	for n := current + 1; n <= maxInstances; n++ {
		tn := t(n)
		step(n, tn)
		if n > current+1 && (tn >= tBest || (tBest-tn)/tBest < cfg.MinGain) {
			break
		}
		best, tBest = n, tn
	}
	p.N, p.T = current, seconds(tCur)
	switch {
	case best == current:
		p.Reason = fmt.Sprintf("%d running", current)
		if maxInstances <= current {
			p.Reason += fmt.Sprintf(", max %d", maxInstances)
		}
	case tBest > (1-cfg.MinGain)*tCur:
		p.Reason = fmt.Sprintf("%d would take %v, not %.0f%% under %v with %d",
			best, round(seconds(tBest)), 100*cfg.MinGain, round(seconds(tCur)), current)
	default:
		p.N, p.T, p.ScaleOut = best, seconds(tBest), true
		p.Reason = fmt.Sprintf("%s in %v with %d instead of %v with %d",
			bytesize.Human(size), round(p.T), best, round(seconds(tCur)), current)
	}
	return p, nil
}

// String writes the plan as "N=n[ out] T=n:t n:t ... | reason".
func (p BandwidthPlan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "N=%d", p.N)
	if p.ScaleOut {
		b.WriteString(" out")
	}
	if len(p.Steps) > 0 {
		b.WriteString(" T=")
		for i, s := range p.Steps {
			if i > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%d:%v", s.N, round(s.T))
		}
	}
	return b.String() + " | " + p.Reason
}

// round keeps four significant digits of d, for reasons and logs.
func round(d time.Duration) time.Duration {
	unit := time.Duration(1)
	for d/unit >= 10000 {
		unit *= 10
	}
	return d.Round(unit)
}

// Range is a byte range of an object: Len bytes from Off.
type Range struct {
	Off, Len int64
}

// Ranges splits an object of size bytes into the ranges that n cachelets
// download: contiguous and in order, covering [0, size) exactly, none
// empty, and of sizes that differ by at most one byte (the first size % n
// are one byte longer). Equal sizes make the slowest cachelet, which the
// reader waits for, as fast as it can be, and match the S/N of the model;
// aligning ranges to blocks would buy nothing, since store range reads are
// byte-granular and cached objects are not blocked. There are min(n, size)
// ranges (a range of zero bytes cannot be requested); nil when size or n
// is not positive.
func Ranges(size int64, n int) []Range {
	if size <= 0 || n <= 0 {
		return nil
	}
	k := int64(n)
	if k > size {
		k = size
	}
	base, extra := size/k, size%k
	out := make([]Range, k)
	var off int64
	for i := range out {
		l := base
		if int64(i) < extra {
			l++
		}
		out[i] = Range{off, l}
		off += l
	}
	return out
}
