package sim

import (
	"time"

	"github.com/hoard-io/hoard/internal/scaling"
)

// DefaultMaxInstances bounds an application's instances under
// Config.Scale when Config.MaxInstances is 0.
const DefaultMaxInstances = 16

// appScale is one application's instance count over time under
// Config.Scale.
type appScale struct {
	since   time.Time // when the count last changed (or the first access)
	first   time.Time
	seconds float64 // instance-seconds before since
	peak    int
}

func (c *cacheRun) scaleState(app string) *appScale {
	a := c.scale[app]
	if a == nil {
		now := c.sim.now
		a = &appScale{since: now, first: now, peak: len(c.apps[app])}
		c.scale[app] = a
	}
	return a
}

// apply acts on one round of app's votes as the controller does:
// scaling.Combine within limits. Scale-in removes an idle instance, so
// none when every instance runs an invocation; the instance removed (the
// last) takes its cache with it, and the ring's survivors own its
// objects. Instances added start with an empty cache, take their share
// of the ring and, after their load time, the first waiting invocations.
func (c *cacheRun) apply(app string, votes []scaling.Vote, now time.Time, limits scaling.Limits) {
	cs := c.apps[app]
	d := scaling.Combine(len(cs), votes, limits)
	if d.Delta < 0 {
		if a := c.compute[app]; a != nil && a.running > (d.Target)*c.sim.cfg.Concurrency {
			return // no idle instance to unload
		}
	}
	if d.Delta == 0 {
		return
	}
	if d.Delta > 0 {
		c.scaling.Outs += int64(d.Delta)
	} else {
		c.scaling.Ins += int64(-d.Delta)
	}
	c.resize(app, d.Target, now)
	c.dispatch(app, now)
}

// resize gives app n instances at now, adding instances with empty
// caches or removing the last ones with theirs.
func (c *cacheRun) resize(app string, n int, now time.Time) {
	cs := c.apps[app]
	a := c.scaleState(app)
	a.seconds += float64(len(cs)) * now.Sub(a.since).Seconds()
	a.since = now
	for len(cs) < n {
		// Grown before the cache is made: its eviction hook counts into
		// the new slot.
		cs = append(cs, nil)
		c.apps[app] = cs
		cs[len(cs)-1] = c.newCache(app, len(cs)-1)
	}
	for len(cs) > n {
		last := cs[len(cs)-1]
		c.droppedEvictions += last.Stats().Evictions
		c.swept += last.Stats().Swept
		last.Clear()
		cs[len(cs)-1] = nil
		cs = cs[:len(cs)-1]
		c.apps[app] = cs
		if v := c.votes[app]; v != nil {
			v.shrink(len(cs))
		}
	}
	a.peak = max(a.peak, len(cs))
}

func (c *cacheRun) scaleResult() *ScaleResult {
	r := c.scaling
	var lifetime float64
	for app, a := range c.scale {
		r.InstanceSeconds += a.seconds + float64(len(c.apps[app]))*c.sim.now.Sub(a.since).Seconds()
		lifetime += c.sim.now.Sub(a.first).Seconds()
		r.PeakInstances = max(r.PeakInstances, a.peak)
	}
	if lifetime > 0 {
		r.MeanInstances = r.InstanceSeconds / lifetime
	}
	r.CacheGBs = r.InstanceSeconds * float64(c.size) / (1 << 30)
	r.FixedCacheGBs = float64(c.sim.cfg.Instances) * lifetime * float64(c.size) / (1 << 30)
	return &r
}

// ScaleResult is what applying the cache-size votes did (Config.Scale).
type ScaleResult struct {
	// Outs and Ins count instances added and removed.
	Outs int64 `json:"outs"`
	Ins  int64 `json:"ins"`
	// InstanceSeconds sums every application's instances over time, from
	// its first access; MeanInstances is that over the applications'
	// time, PeakInstances the most one application had.
	InstanceSeconds float64 `json:"instance_seconds"`
	MeanInstances   float64 `json:"mean_instances"`
	PeakInstances   int     `json:"peak_instances"`
	// CacheGBs is the cache memory those instances booked, GB·s;
	// FixedCacheGBs what Config.Instances instances would have booked
	// over the same time.
	CacheGBs      float64 `json:"cache_gb_s"`
	FixedCacheGBs float64 `json:"fixed_cache_gb_s"`
}
