// Package scaling holds the scale controller's policies and the rule that
// combines their votes [Faa$T §4].
//
// The controller periodically asks every instance of an application for a
// vote on how many instances to add: positive to scale out, zero to stay,
// negative to scale in. Three policies vote:
//
//   - compute (ComputeVote): queued invocations, response time against a
//     target, and utilisation over the query window;
//   - cache size (CacheVote): +1 when the working set does not fit (an
//     object was evicted more than once since the last query), 0 while
//     traffic is substantial, -1 when accesses are rare;
//   - bandwidth (PlanBandwidth): for a large object, how many cachelets
//     should each download a byte range of it (Ranges) so that the whole
//     arrives soonest, from measured bandwidths (Estimator) and instance
//     load time (LoadEstimator). It votes out at once, unrequested (an
//     urgent vote); its scale-in is the cache policy's rare-access vote, as
//     in Faa$T.
//
// Combine turns the votes of one round into a decision: out if any vote
// wants out, in only if every vote wants in, in by one instance at a time,
// within the application's limits.
//
// The package does no I/O, starts no goroutines and reads no clock: stats,
// measurements and windows come in as arguments, so every decision is a
// pure function of them and the data-driven scripts in testdata replay
// them exactly. The loop that queries instances and starts or unloads them
// lives with the controller.
package scaling

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Policy names, as they appear in Vote.Policy.
const (
	PolicyCompute   = "compute"
	PolicyCache     = "cache"
	PolicyBandwidth = "bandwidth"
)

// Defaults for the zero fields of Config. Each is justified where its field
// is documented.
const (
	DefaultQueuedPerInstance  = 2
	DefaultScaleInUtilisation = 0.5
	DefaultRareAccessRate     = 0.1
	DefaultMinObjectSize      = 16 << 20
	DefaultMinGain            = 0.10
	DefaultEstimatorWindow    = 15
	DefaultMinSampleBytes     = 1 << 20
)

// ErrUnmeasured is returned by PlanBandwidth when a bandwidth or the
// instance load time has not been measured: the plan does not scale on
// guesses.
var ErrUnmeasured = errors.New("not measured")

// Config holds the policies' thresholds. The zero value of every field
// means its default; Validate fills them in and rejects values out of
// range. The policy functions apply the defaults themselves, so a zero
// Config is the default config.
type Config struct {
	// QueuedPerInstance is how many queued invocations make the compute
	// policy ask for one more instance: it votes +ceil(queued /
	// QueuedPerInstance). Each worker runs one invocation at a time, so a
	// queued invocation is, at worst, a missing instance (1); but an
	// instance that finishes its invocation takes the next from the queue
	// in a function's run time, usually well under a cold start, so about
	// half the queue drains without new instances. Default 2: still one
	// instance per two waiting invocations every round the queue persists,
	// so capacity keeps growing geometrically under sustained overload.
	QueuedPerInstance int
	// ScaleInUtilisation bounds the demand under which the compute policy
	// votes -1: it does when the demand (busy instances, now and on
	// average over the window) would keep the remaining instances at most
	// this busy after one is removed. Default 0.5: the instances left can
	// absorb a burst of twice the load before invocations queue, and the
	// gap to the scale-out trigger (every instance busy) keeps decisions
	// from flapping. In (0, 1].
	ScaleInUtilisation float64
	// RareAccessRate, in accesses per second per cachelet, is the rate
	// under which the cache policy votes -1; at or above it (and with no
	// object evicted twice) it votes 0. A single threshold suffices: Faa$T
	// votes 0 for "substantial" traffic, and a band between the two would
	// vote 0 as well; hysteresis comes from Combine instead (every vote
	// must agree, one instance at a time). Default 0.1, one access every
	// ten seconds: a cachelet read that rarely serves a handful of reads
	// per query round, which the others can take over for at most one
	// store fetch per object, while its instance's memory is booked all
	// the time. Positive.
	RareAccessRate float64
	// MinObjectSize is the size under which an object never triggers
	// bandwidth scaling (nor a split download). The T(N) model leaves out
	// each request's fixed cost (time to first byte from the store, one
	// more peer hop), tens of milliseconds; Faa$T measured a 400 KB object
	// getting slower with more instances although the model says faster.
	// At 90 MB/s from the store and 500 MB/s between instances, splitting
	// a download in two saves about 4.6 ms per MB, which outweighs 50 ms of
	// fixed cost from about 11 MB; Faa$T calls objects from 10 MB large
	// [§3]. Default 16 MiB. Positive.
	MinObjectSize int64
	// MinGain is the least relative improvement of T(N) that is worth
	// another instance: the bandwidth plan stops raising N when one more
	// instance improves T by less, and scales out only when the new
	// instances improve T(current) by at least this much [Faa$T §4: 10%].
	// Default 0.10. In (0, 1).
	MinGain float64
	// EstimatorWindow is how many recent samples an Estimator or
	// LoadEstimator keeps; its estimate is their median. Default 15: the
	// estimate ignores up to 7 outliers and follows a lasting change
	// after 8 samples. At most 1024.
	EstimatorWindow int
	// MinSampleBytes is the smallest transfer an Estimator takes as a
	// sample. Small transfers measure request latency rather than
	// bandwidth (4 KiB in 10 ms reads as 0.4 MB/s), and the plan only
	// cares about large ones. Default 1 MiB. Positive.
	MinSampleBytes int64
}

// Validate checks the config and fills in defaults.
func (c *Config) Validate() error {
	c.setDefaults()
	switch {
	case c.QueuedPerInstance < 1:
		return fmt.Errorf("scaling: queued per instance %d must be at least 1", c.QueuedPerInstance)
	case !(c.ScaleInUtilisation > 0 && c.ScaleInUtilisation <= 1):
		return fmt.Errorf("scaling: scale-in utilisation %v must be in (0, 1]", c.ScaleInUtilisation)
	case !(c.RareAccessRate > 0) || math.IsInf(c.RareAccessRate, 0):
		return fmt.Errorf("scaling: rare access rate %v must be positive", c.RareAccessRate)
	case c.MinObjectSize < 1:
		return fmt.Errorf("scaling: min object size %d must be positive", c.MinObjectSize)
	case !(c.MinGain > 0 && c.MinGain < 1):
		return fmt.Errorf("scaling: min gain %v must be in (0, 1)", c.MinGain)
	case c.EstimatorWindow < 1 || c.EstimatorWindow > 1024:
		return fmt.Errorf("scaling: estimator window %d must be in [1, 1024]", c.EstimatorWindow)
	case c.MinSampleBytes < 1:
		return fmt.Errorf("scaling: min sample bytes %d must be positive", c.MinSampleBytes)
	}
	return nil
}

// setDefaults fills the zero fields.
func (c *Config) setDefaults() {
	if c.QueuedPerInstance == 0 {
		c.QueuedPerInstance = DefaultQueuedPerInstance
	}
	if c.ScaleInUtilisation == 0 {
		c.ScaleInUtilisation = DefaultScaleInUtilisation
	}
	if c.RareAccessRate == 0 {
		c.RareAccessRate = DefaultRareAccessRate
	}
	if c.MinObjectSize == 0 {
		c.MinObjectSize = DefaultMinObjectSize
	}
	if c.MinGain == 0 {
		c.MinGain = DefaultMinGain
	}
	if c.EstimatorWindow == 0 {
		c.EstimatorWindow = DefaultEstimatorWindow
	}
	if c.MinSampleBytes == 0 {
		c.MinSampleBytes = DefaultMinSampleBytes
	}
}

// withDefaults returns c with its zero fields filled.
func (c Config) withDefaults() Config {
	c.setDefaults()
	return c
}

// Vote is one policy's opinion of how many instances to add.
type Vote struct {
	// Policy names the policy that voted (PolicyCompute, ...).
	Policy string
	// Delta is how many instances to add: +n to scale out, 0 to stay, -n
	// to scale in.
	Delta int
	// Urgent marks an unrequested vote that should be acted on now rather
	// than at the next round [Faa$T §4]. Only scale-out is urgent; scale-in
	// never is.
	Urgent bool
	// Reason says why, for logs and decisions; it may be empty.
	Reason string
}

// String writes the vote as policy and signed delta ("compute+2",
// "cache0", "cache-1"), "!" when urgent, then the reason in parentheses.
func (v Vote) String() string {
	var b strings.Builder
	b.WriteString(v.Policy)
	if v.Delta > 0 {
		b.WriteByte('+')
	}
	b.WriteString(strconv.Itoa(v.Delta))
	if v.Urgent {
		b.WriteByte('!')
	}
	if v.Reason != "" {
		b.WriteString(" (" + v.Reason + ")")
	}
	return b.String()
}

// Limits bound a decision.
type Limits struct {
	// Min is the fewest instances to keep (e.g. pre-warmed ones); negative
	// counts as 0.
	Min int
	// Max is the most instances (the application's max_instances). There
	// is no unbounded setting: a Max below 1 counts as 1, so a forgotten
	// limit cannot run away, and still lets a busy application run.
	Max int
	// Busy reports that the application has invocations running or
	// queued.
	Busy bool
}

// Decision is what Combine decided.
type Decision struct {
	// Target is the number of instances the application should have.
	Target int
	// Delta is Target minus the current count.
	Delta int
	// Reason names the vote or rule that decided, then any limit that
	// changed the outcome.
	Reason string
	// Urgent reports a scale-out asked for by an urgent vote: act now.
	Urgent bool
}

// Combine decides how many instances an application should have, given its
// current count and the votes of one round: every policy's vote from every
// instance, or an unrequested urgent vote. Votes are not modified. The
// rules, in order:
//
//  1. Any out: if any vote is positive, the target is current plus the
//     largest positive delta. One policy that needs capacity (a queue, a
//     working set that does not fit, a large download) must not wait for
//     the others, which cannot know what it sees [Faa$T §4]. The decision
//     is urgent if any positive vote is.
//  2. All in: if every vote is negative (and there is at least one), the
//     target is current minus one. Removing an instance drops its cache
//     and its share of the ring, so it happens only when no policy says it
//     would hurt [Faa$T §4], and gradually: one instance per round
//     whatever the votes ask, so that a wrong vote costs one instance, and
//     the next round sees the effect before going further.
//  3. Otherwise (no votes, or some vote is 0 with none positive) the
//     target is current: no information is no reason to act.
//  4. Never below Min.
//  5. Never below 1 when Busy: the last instance of an application with
//     invocations running or queued is never dropped; unloading idle
//     applications is keep-alive's business.
//  6. Never above Max, even when current is: the limit wins over the
//     votes and over Min. Rules 4-6 are hard bounds, so a current count
//     outside them is brought inside at once, not gradually.
//
// A negative current counts as 0.
func Combine(current int, votes []Vote, limits Limits) Decision {
	current = max(current, 0)
	d := Decision{Target: current}
	var out *Vote
	allIn := len(votes) > 0
	var veto *Vote
	for i := range votes {
		v := &votes[i]
		if v.Delta > 0 {
			// The largest delta wins; among equal ones an urgent one,
			// then the first.
			if out == nil || v.Delta > out.Delta || v.Delta == out.Delta && v.Urgent && !out.Urgent {
				out = v
			}
			d.Urgent = d.Urgent || v.Urgent
		}
		if v.Delta >= 0 {
			allIn = false
			if veto == nil {
				veto = v
			}
		}
	}
	switch {
	case out != nil:
		d.Target = current + min(out.Delta, math.MaxInt-current)
		d.Reason = "out: " + out.String()
	case allIn:
		d.Target = current - 1
		d.Reason = fmt.Sprintf("in: all %d votes agree", len(votes))
	case veto != nil:
		d.Reason = "hold: " + veto.String()
	default:
		d.Reason = "hold: no votes"
	}

	lo, hi := max(limits.Min, 0), max(limits.Max, 1)
	if d.Target < lo {
		d.Target = lo
		d.Reason += fmt.Sprintf("; raised to min %d", lo)
	}
	if limits.Busy && d.Target < 1 {
		d.Target = 1
		d.Reason += "; busy: keeping 1"
	}
	if d.Target > hi {
		d.Target = hi
		d.Reason += fmt.Sprintf("; capped at max %d", hi)
	}
	d.Delta = d.Target - current
	d.Urgent = d.Urgent && d.Delta > 0
	return d
}

// String writes the decision as "target=T delta=±D[ urgent] | reason".
func (d Decision) String() string {
	s := fmt.Sprintf("target=%d delta=%+d", d.Target, d.Delta)
	if d.Urgent {
		s += " urgent"
	}
	return s + " | " + d.Reason
}
