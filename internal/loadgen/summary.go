package loadgen

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// Summary describes the invocations of one target, or of a whole run.
//
// Latency percentiles are exact (nearest rank over the sorted samples, as
// in internal/bench) over the invocations the platform answered, the
// function's failures included; failures to send are left out. Rates are
// invocations per second measured over the gaps between them, (n-1)/(last
// - first): over the scheduled offsets for the intended rate and over the
// actual sending times for the achieved one, so a periodic schedule's
// intended rate is exactly 1/interval. Lateness is how long after its
// scheduled time each invocation was sent.
type Summary struct {
	Target
	// Invocations counts those started; Sent those the platform answered.
	Invocations int `json:"invocations"`
	Sent        int `json:"sent"`
	// FunctionErrors counts answers with OK false, SendErrors the
	// invocations that could not be sent or were refused; ErrorTypes both
	// by type.
	FunctionErrors int            `json:"function_errors"`
	SendErrors     int            `json:"send_errors"`
	ErrorTypes     map[string]int `json:"error_types,omitempty"`
	Cold           int            `json:"cold"`
	Delayed        int            `json:"delayed"`
	P50            time.Duration  `json:"p50_ns"`
	P90            time.Duration  `json:"p90_ns"`
	P99            time.Duration  `json:"p99_ns"`
	Max            time.Duration  `json:"max_ns"`
	// IntendedRate and AchievedRate are 0 with fewer than two invocations.
	IntendedRate float64       `json:"intended_per_s"`
	AchievedRate float64       `json:"achieved_per_s"`
	LatenessP50  time.Duration `json:"lateness_p50_ns"`
	LatenessP99  time.Duration `json:"lateness_p99_ns"`
	LatenessMax  time.Duration `json:"lateness_max_ns"`
}

// Errors counts the failed invocations, of both kinds.
func (s Summary) Errors() int { return s.FunctionErrors + s.SendErrors }

// Summarize summarises results as a whole (total, whose Target is zero)
// and per target, ordered by application, name, and functions before
// pipelines.
func Summarize(results []Result) (total Summary, targets []Summary) {
	groups := map[Target][]Result{}
	for _, r := range results {
		groups[r.Target] = append(groups[r.Target], r)
	}
	for t, rs := range groups {
		s := summarize(rs)
		s.Target = t
		targets = append(targets, s)
	}
	slices.SortFunc(targets, func(a, b Summary) int {
		if c := cmp.Compare(a.App, b.App); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Function, b.Function); c != 0 {
			return c
		}
		switch {
		case a.Pipeline == b.Pipeline:
			return 0
		case b.Pipeline:
			return -1
		default:
			return 1
		}
	})
	return summarize(results), targets
}

func summarize(results []Result) Summary {
	s := Summary{Invocations: len(results)}
	var lat, late []time.Duration
	sched := make([]time.Duration, 0, len(results))
	starts := make([]time.Duration, 0, len(results))
	for _, r := range results {
		sched = append(sched, r.Scheduled)
		starts = append(starts, r.Start)
		late = append(late, max(r.Start-r.Scheduled, 0))
		if r.Delayed {
			s.Delayed++
		}
		if r.Sent {
			s.Sent++
			lat = append(lat, r.Latency)
			if r.Cold {
				s.Cold++
			}
		}
		if r.OK {
			continue
		}
		if r.Sent {
			s.FunctionErrors++
		} else {
			s.SendErrors++
		}
		if s.ErrorTypes == nil {
			s.ErrorTypes = map[string]int{}
		}
		s.ErrorTypes[r.ErrorType]++
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		s.P50, s.P90, s.P99 = percentile(lat, 50), percentile(lat, 90), percentile(lat, 99)
		s.Max = lat[len(lat)-1]
	}
	if len(late) > 0 {
		slices.Sort(late)
		s.LatenessP50, s.LatenessP99 = percentile(late, 50), percentile(late, 99)
		s.LatenessMax = late[len(late)-1]
	}
	s.IntendedRate, s.AchievedRate = rate(sched), rate(starts)
	return s
}

// percentile returns the p-th percentile of sorted (ascending, not empty)
// by the nearest-rank method: the smallest sample such that at least p% of
// the samples are less than or equal to it.
func percentile(sorted []time.Duration, p float64) time.Duration {
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// rate is (n-1)/(last-first) per second over the offsets, in any order; 0
// with fewer than two or no time between them.
func rate(offsets []time.Duration) float64 {
	if len(offsets) < 2 {
		return 0
	}
	span := slices.Max(offsets) - slices.Min(offsets)
	if span <= 0 {
		return 0
	}
	return float64(len(offsets)-1) / span.Seconds()
}
