package sim

import (
	"container/heap"
	"slices"
	"time"

	"github.com/hoard-io/hoard/internal/scaling"
)

// The compute and bandwidth policies' inputs (with Config.VoteInterval):
// invocations run on an application's instances, Config.Concurrency at a
// time each, as the controller hands them out. An invocation takes a free
// slot; with none free it starts an instance while the application has
// fewer than its maximum (Config.MaxInstances with Config.Scale, else
// Config.Instances), which takes Config.LoadTime before it runs; else it
// waits in the application's queue, first come first served, for the
// next slot that frees or instance that starts. Its end-to-end time
// (queueing and loading included) is recorded when it ends, as the
// controller records an api.Invocation, and each round reads the rate
// and the median over the window as controller.recentLoad does.

// maxLoadRecords is how many ended invocations an application keeps for its
// rate and median latency, the controller's bound.
const maxLoadRecords = 1000

// maxQueued bounds an application's queue; an invocation arriving at a
// full queue is refused (ComputeResult.Refused).
const maxQueued = 1 << 16

// DefaultLoadTime is an instance's load time when Config.LoadTime is 0.
const DefaultLoadTime = time.Second

// appCompute is one application's invocations on its instances.
type appCompute struct {
	running  int // invocations running (each holds a slot)
	queue    []waiting
	records  []record // the last maxLoadRecords ended, in end order (a ring once full)
	next     int      // the ring's oldest
	lastVote time.Time
}

type waiting struct {
	at  time.Time
	dur time.Duration
}

type record struct {
	start time.Time
	total time.Duration
}

// running is an invocation in flight under one configuration.
type running struct {
	at    time.Time // its end
	start time.Time // its arrival
	app   string
}

type runHeap []running

func (h runHeap) Len() int           { return len(h) }
func (h runHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h runHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *runHeap) Push(x any)        { *h = append(*h, x.(running)) }
func (h *runHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// ComputeResult is what the invocations met on the instances
// (Config.VoteInterval), and the compute and bandwidth policies' votes.
type ComputeResult struct {
	Invocations int64 `json:"invocations"`
	// Started: invocations that started an instance (none free, below
	// the maximum), and waited its load time; Queued: invocations that
	// waited for a slot (QueueSeconds in all); Refused: arrived at a full
	// queue (maxQueued) and not run.
	Started      int64   `json:"started"`
	Queued       int64   `json:"queued"`
	QueueSeconds float64 `json:"queue_seconds"`
	Refused      int64   `json:"refused,omitempty"`
	// ComputeVotes tallies scaling.ComputeVote; BandwidthVotes the plans
	// of large misses (scaling.PlanBandwidth: up when it scales out, 0
	// otherwise); Splits the misses downloaded by more than one
	// cachelet.
	ComputeVotes   Votes `json:"compute_votes"`
	BandwidthVotes Votes `json:"bandwidth_votes"`
	Splits         int64 `json:"splits"`
}

func (c *cacheRun) computeState(app string) *appCompute {
	a := c.compute[app]
	if a == nil {
		a = &appCompute{}
		c.compute[app] = a
	}
	return a
}

// maxInstances is the most instances an application may have.
func (c *cacheRun) maxInstances() int {
	if c.sim.cfg.Scale {
		return c.sim.cfg.MaxInstances
	}
	return c.sim.cfg.Instances
}

// invoke places one invocation on app's instances, as the controller's
// acquire does: a free slot, else a new instance, else the queue.
func (c *cacheRun) invoke(e *Event) {
	cs := c.instances(e.App)
	a := c.computeState(e.App)
	r := &c.comp
	r.Invocations++
	conc := c.sim.cfg.Concurrency
	switch {
	case a.running < len(cs)*conc:
		a.running++
		heap.Push(&c.runs, running{at: e.Time.Add(e.Duration), start: e.Time, app: e.App})
	case len(cs) < c.maxInstances():
		r.Started++
		c.resize(e.App, len(cs)+1, e.Time)
		a.running++
		heap.Push(&c.runs, running{at: e.Time.Add(c.sim.cfg.LoadTime + e.Duration), start: e.Time, app: e.App})
	case len(a.queue) >= maxQueued:
		r.Refused++
	default:
		r.Queued++
		a.queue = append(a.queue, waiting{at: e.Time, dur: e.Duration})
	}
}

// advance ends the invocations due by t, in time order: each records its
// time and hands its slot to the first waiting, as the controller's
// release does.
func (c *cacheRun) advance(t time.Time) {
	for len(c.runs) > 0 && !c.runs[0].at.After(t) {
		x := heap.Pop(&c.runs).(running)
		a := c.compute[x.app]
		a.record(record{start: x.start, total: x.at.Sub(x.start)})
		if len(a.queue) > 0 {
			w := a.queue[0]
			a.queue = a.queue[1:]
			c.comp.QueueSeconds += x.at.Sub(w.at).Seconds()
			heap.Push(&c.runs, running{at: x.at.Add(w.dur), start: w.at, app: x.app})
			continue
		}
		a.running--
	}
}

// dispatch hands the free slots of app's instances (some just started,
// loading for LoadTime) to the first waiting, as scaleOut's release does.
func (c *cacheRun) dispatch(app string, now time.Time) {
	a := c.compute[app]
	if a == nil {
		return
	}
	for len(a.queue) > 0 && a.running < len(c.apps[app])*c.sim.cfg.Concurrency {
		w := a.queue[0]
		a.queue = a.queue[1:]
		a.running++
		start := now.Add(c.sim.cfg.LoadTime)
		c.comp.QueueSeconds += start.Sub(w.at).Seconds()
		heap.Push(&c.runs, running{at: start.Add(w.dur), start: w.at, app: app})
	}
}

func (a *appCompute) record(r record) {
	if len(a.records) < maxLoadRecords {
		a.records = append(a.records, r)
		return
	}
	a.records[a.next] = r
	a.next = (a.next + 1) % maxLoadRecords
}

// recentLoad is the application's invocation rate and median end-to-end
// time over the window, as controller.recentLoad computes them: the
// ended invocations, newest first, until one started before the window.
func (a *appCompute) recentLoad(now time.Time, window time.Duration, lat []float64) (float64, time.Duration, []float64) {
	lat = lat[:0]
	n := len(a.records)
	for i := range n {
		// The newest is just before next (next stays 0 until the ring
		// is full).
		r := a.records[((a.next-1-i)%n+n)%n]
		if now.Sub(r.start) > window {
			break
		}
		lat = append(lat, float64(r.total)/float64(time.Millisecond))
	}
	if len(lat) == 0 || window <= 0 {
		return 0, 0, lat
	}
	slices.Sort(lat)
	// The controller's quantile: the nearest rank.
	i := int(0.5*float64(len(lat))+0.5) - 1
	p50 := lat[min(max(i, 0), len(lat)-1)]
	return float64(len(lat)) / window.Seconds(), time.Duration(p50 * float64(time.Millisecond)), lat
}

// busy is how many of app's instances run an invocation: its running
// invocations packed Concurrency to an instance.
func (c *cacheRun) busy(a *appCompute) int {
	conc := c.sim.cfg.Concurrency
	return (a.running + conc - 1) / conc
}

// round runs one round of the scale controller for app at now, as
// controller.scaleApp does: the pending votes (an urgent bandwidth vote),
// the compute policy's vote over the window since the last round, and
// the cache policy's; with Config.Scale, scaling.Combine's decision is
// applied.
func (c *cacheRun) round(app string, now time.Time, pending []scaling.Vote) {
	cs := c.apps[app]
	a := c.computeState(app)
	iv := c.sim.cfg.VoteInterval
	window := now.Sub(a.lastVote)
	if a.lastVote.IsZero() || window > 10*iv {
		window = iv
	}
	a.lastVote = now
	var rate float64
	var p50 time.Duration
	rate, p50, c.lat = a.recentLoad(now, window, c.lat)
	votes := pending
	busy := c.busy(a)
	cv := scaling.ComputeVote(scaling.ComputeStats{
		Instances: len(cs), Busy: busy, Queued: len(a.queue), P50: p50, Target: c.sim.cfg.LatencyTarget, RequestRate: rate,
	}, scaling.Config{})
	c.comp.ComputeVotes.add(cv)
	votes = append(votes, cv)
	if v, ok := c.cacheVote(app, window); ok {
		c.tally.add(v)
		votes = append(votes, v)
	}
	if c.sim.cfg.Scale {
		c.apply(app, votes, now, scaling.Limits{Min: 1, Max: c.sim.cfg.MaxInstances, Busy: a.running > 0 || len(a.queue) > 0})
	}
}

func (v *Votes) add(d scaling.Vote) {
	switch {
	case d.Delta > 0:
		v.Up++
	case d.Delta < 0:
		v.Down++
	default:
		v.Stay++
	}
}

// plan is the bandwidth policy at a miss of e's whole object (the owner
// fetching it from the store), as the cachelet's splitter plans it: the
// prefix read alone, the rest planned by scaling.PlanBandwidth over the
// store's and the peers' bandwidths of Config.Access and Config.LoadTime,
// up to the application's maximum; a plan that scales out is an urgent
// vote, whose round runs at once. It returns the modelled time of the
// fetch, which replaces the store's in the read's time, and false for an
// object the policy leaves alone.
func (c *cacheRun) plan(e *Event) (float64, bool) {
	const prefix = 8 << 20 // BandwidthConfig.PrefixBytes' default
	if e.Size < scaling.DefaultMinObjectSize || e.Size <= prefix || e.Length > 0 && e.Length < e.Size {
		return 0, false
	}
	acc := c.sim.cfg.Access
	m := scaling.Measurements{LoadTime: c.sim.cfg.LoadTime, StoreBW: acc.Store.BytesPerSecond, PeerBW: acc.Remote.BytesPerSecond}
	current := len(c.apps[e.App])
	rest := e.Size - prefix
	p, err := scaling.PlanBandwidth(rest, current, max(c.maxInstances(), current), m, scaling.Config{})
	if err != nil {
		// The measurements come from a validated access model.
		panic("sim: " + err.Error())
	}
	c.comp.BandwidthVotes.add(p.Vote())
	if p.ScaleOut && c.sim.cfg.Scale {
		c.round(e.App, e.Time, []scaling.Vote{p.Vote()})
	}
	n := min(p.N, len(c.apps[e.App]))
	if n > 1 {
		c.comp.Splits++
	}
	t := acc.Store.seconds(prefix) + scaling.TransferTime(rest, n, current, m).Seconds()
	return t, true
}
