package controller

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/scaling"
)

const maxEvents = 100

// event records an event; the caller holds c.mu.
func (a *app) event(now time.Time, kind, format string, args ...any) {
	a.events = append(a.events, api.Event{Time: now, Kind: kind, Detail: fmt.Sprintf(format, args...)})
	if len(a.events) > maxEvents {
		a.events = append(a.events[:0:0], a.events[len(a.events)-maxEvents:]...)
	}
}

// Vote queues an unrequested vote from an instance or an operator (an
// urgent scale-out, say); it counts in the next round, which an urgent
// vote starts at once.
func (c *Controller) Vote(appName string, v scaling.Vote) error {
	a, err := c.app(appName)
	if err != nil {
		return err
	}
	if v.Policy == "" {
		v.Policy = "external"
	}
	c.mu.Lock()
	a.pendingVotes = append(a.pendingVotes, v)
	c.mu.Unlock()
	if v.Urgent {
		go c.scaleApp(c.ctx, appName)
	}
	return nil
}

// scaler asks every loaded application for votes every VoteInterval.
func (c *Controller) scaler() {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.VoteInterval)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
		c.mu.Lock()
		names := make([]string, 0, len(c.apps))
		for n := range c.apps {
			names = append(names, n)
		}
		c.mu.Unlock()
		for _, n := range names {
			c.scaleApp(c.ctx, n)
		}
	}
}

// scaleApp runs one round of the scale controller for an application
// (Faa$T §4): each policy votes, the votes combine (out if any policy
// wants out, in only if all agree, one instance at a time, never the last
// of a busy application), and the decision is applied. An application
// with nothing loaded is keep-alive's, not the scaler's.
func (c *Controller) scaleApp(ctx context.Context, name string) {
	a, err := c.app(name)
	if err != nil {
		return
	}
	a.scaleMu.Lock()
	defer a.scaleMu.Unlock()
	now := c.clk.Now()
	c.mu.Lock()
	current, busy := 0, 0
	var insts []*inst
	for _, in := range a.instances {
		if in.rev != a.rec.Package.SHA256 {
			continue
		}
		current++
		insts = append(insts, in)
		if in.busy {
			busy++
		}
	}
	queued := len(a.waiters)
	window := now.Sub(a.lastVote)
	if a.lastVote.IsZero() || window > 10*c.cfg.VoteInterval {
		window = c.cfg.VoteInterval
	}
	a.lastVote = now
	rate, p50 := a.recentLoad(now, window)
	votes := a.pendingVotes
	a.pendingVotes = nil
	limits := scaling.Limits{Min: max(1, a.spec.Scaling.MinInstances), Max: a.spec.MaxInstances, Busy: busy > 0 || queued > 0 || a.inFlight > 0}
	target := a.spec.Scaling.LatencyTarget.D()
	c.mu.Unlock()
	if current == 0 && len(votes) == 0 {
		return
	}
	cfg := scaling.Config{}
	votes = append(votes, scaling.ComputeVote(scaling.ComputeStats{
		Instances: current, Busy: busy, Queued: queued, P50: p50, Target: target, RequestRate: rate,
	}, cfg))
	if v, ok := c.cacheVote(ctx, a, insts, window, cfg); ok {
		votes = append(votes, v)
	}
	d := scaling.Combine(current, votes, limits)
	for _, v := range votes {
		dir := "hold"
		switch {
		case v.Delta > 0:
			dir = "out"
		case v.Delta < 0:
			dir = "in"
		}
		c.m.votes.WithLabelValues(name, v.Policy, dir).Inc()
	}
	if d.Delta == 0 {
		return
	}
	var parts []string
	for _, v := range votes {
		parts = append(parts, fmt.Sprintf("%s%+d (%s)", v.Policy, v.Delta, v.Reason))
	}
	c.mu.Lock()
	a.event(c.clk.Now(), "scale", "%d -> %d: %s; votes: %s", current, d.Target, d.Reason, strings.Join(parts, "; "))
	c.mu.Unlock()
	c.log.Info("scale decision", "app", name, "from", current, "to", d.Target, "reason", d.Reason, "votes", strings.Join(parts, "; "))
	if d.Delta > 0 {
		c.m.decisions.WithLabelValues(name, "out").Inc()
		for range d.Delta {
			go c.scaleOut(a)
		}
		return
	}
	c.m.decisions.WithLabelValues(name, "in").Inc()
	c.scaleIn(a)
}

// cacheVote is the cache-size policy's vote from the instances' cachelet
// counters since the last round: +1 when an object was evicted more than
// once, 0 while traffic is substantial, -1 when accesses are rare.
func (c *Controller) cacheVote(ctx context.Context, a *app, insts []*inst, window time.Duration, cfg scaling.Config) (scaling.Vote, bool) {
	var again, reads int64
	seen, fresh := 0, 0
	for _, in := range insts {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		info, err := c.agents.at(in.agentURL).Instance(cctx, in.id)
		cancel()
		if err != nil {
			continue
		}
		c.mu.Lock()
		if in.counted {
			again += max(info.Cache.EvictedAgain-in.lastCache.EvictedAgain, 0)
			reads += max(info.Cache.Reads-in.lastCache.Reads, 0)
			seen++
		} else {
			fresh++
		}
		in.lastCache, in.counted = info.Cache, true
		c.mu.Unlock()
	}
	if again == 0 && fresh > 0 {
		// A first reading of some instance: no rate to judge yet, and no
		// data is no reason to scale in.
		return scaling.Vote{Policy: scaling.PolicyCache, Reason: "first reading of an instance's counters"}, true
	}
	if seen == 0 {
		return scaling.Vote{}, false
	}
	return scaling.CacheVote(scaling.CacheStats{EvictedMoreThanOnce: int(again), Accesses: int(reads), Window: window}, cfg), true
}

// recentLoad is the application's invocation rate and median latency over
// the window; the caller holds c.mu.
func (a *app) recentLoad(now time.Time, window time.Duration) (rate float64, p50 time.Duration) {
	var lat []float64
	for i := len(a.records) - 1; i >= 0; i-- {
		r := a.records[i]
		if now.Sub(r.Start) > window {
			break
		}
		lat = append(lat, r.TotalMS)
	}
	if len(lat) == 0 || window <= 0 {
		return 0, 0
	}
	sort.Float64s(lat)
	return float64(len(lat)) / window.Seconds(), time.Duration(quantile(lat, 0.5) * float64(time.Millisecond))
}

// scaleOut starts one instance of the application's deployed version and
// hands it to the first queued invocation, or leaves it idle.
func (c *Controller) scaleOut(a *app) {
	ctx, cancel := context.WithTimeout(c.ctx, 2*time.Minute)
	defer cancel()
	c.mu.Lock()
	if a.current()+a.starting >= a.spec.MaxInstances {
		c.mu.Unlock()
		return
	}
	a.starting++
	req := c.startRequest(a)
	c.mu.Unlock()
	in, err := c.start(ctx, a, req)
	c.mu.Lock()
	a.starting--
	if err != nil {
		c.mu.Unlock()
		c.log.Warn("scale-out failed", "app", a.rec.Name, "err", err)
		return
	}
	in.busy = true
	a.admit(in)
	c.mu.Unlock()
	c.release(a, in)
}

// scaleIn unloads the application's least recently used idle instance.
func (c *Controller) scaleIn(a *app) {
	c.mu.Lock()
	var victim *inst
	for _, in := range a.instances {
		if in.busy || in.rev != a.rec.Package.SHA256 {
			continue
		}
		if victim == nil || in.lastUsed.Before(victim.lastUsed) {
			victim = in
		}
	}
	if victim != nil {
		delete(a.instances, victim.id)
	}
	c.mu.Unlock()
	if victim != nil {
		go c.unload(victim, "scaled in")
	}
}

// Scaling returns an application's api.ScalingInfo.
func (c *Controller) Scaling(appName string) (api.ScalingInfo, error) {
	a, err := c.app(appName)
	if err != nil {
		return api.ScalingInfo{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	si := api.ScalingInfo{Instances: a.current(), MaxInstances: a.spec.MaxInstances}
	if a.loads != nil {
		if d, ok := a.loads.LoadTime(); ok {
			ms := float64(d) / float64(time.Millisecond)
			si.LoadTimeMS, si.LoadSamples = &ms, a.loads.Len()
		}
	}
	return si, nil
}
