package controller

import (
	"context"
	"time"

	"github.com/hoard-io/hoard/internal/appspec"
	"github.com/hoard-io/hoard/internal/keepalive"
)

// EtcdKeepAlive is where each application's idle-time histogram is kept
// across controller restarts (key: prefix + name).
const EtcdKeepAlive = "/hoard/platform/keepalive/"

// newPolicy makes an application's hybrid-histogram policy, its fixed
// fallback the spec's keep_alive, carrying over the history of old (a
// redeploy keeps what was learned about the application's invocations).
func newPolicy(spec *appspec.Spec, tmpl keepalive.Config, old *keepalive.Policy) *keepalive.Policy {
	tmpl.Fixed = spec.KeepAlive.D()
	p, err := keepalive.New(tmpl)
	if err != nil {
		// A bad template is the operator's: fall back to the defaults.
		p, _ = keepalive.New(keepalive.Config{Fixed: spec.KeepAlive.D()})
	}
	if old != nil {
		_ = p.Restore(old.Snapshot())
	}
	return p
}

// restorePolicy loads an application's histogram saved by an earlier
// controller.
func (c *Controller) restorePolicy(ctx context.Context, a *app) {
	resp, err := c.cfg.Etcd.Get(ctx, EtcdKeepAlive+a.rec.Name)
	if err != nil || len(resp.Kvs) == 0 {
		return
	}
	if err := a.policy.Restore(resp.Kvs[0].Value); err != nil {
		c.log.Warn("ignoring a saved keep-alive histogram", "app", a.rec.Name, "err", err)
	}
}

// savePolicies saves every application's histogram in etcd.
func (c *Controller) savePolicies() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c.mu.Lock()
	snaps := map[string][]byte{}
	for name, a := range c.apps {
		snaps[name] = a.policy.Snapshot()
	}
	c.mu.Unlock()
	for name, b := range snaps {
		if _, err := c.cfg.Etcd.Put(ctx, EtcdKeepAlive+name, string(b)); err != nil {
			c.log.Warn("saving a keep-alive histogram", "app", name, "err", err)
		}
	}
}

// began and ended feed the application's idle-time histogram; a pipeline
// run counts as one invocation (its stages are not the application's
// arrivals).
func (c *Controller) began(a *app, trigger string) {
	if trigger == "pipeline" {
		return
	}
	c.mu.Lock()
	a.inFlight++
	c.mu.Unlock()
	a.policy.Invoked(c.clk.Now())
}

func (c *Controller) ended(a *app, trigger string) {
	if trigger == "pipeline" {
		return
	}
	now := c.clk.Now()
	a.policy.Finished(now)
	c.mu.Lock()
	a.inFlight--
	a.lastEnd = now
	c.mu.Unlock()
}

// keepFor is how long an idle instance stays loaded under the current
// decision: the application's keep_alive until its histogram is
// representative; then, with a pre-warm window, an instance that has run
// an invocation unloads at once (the next load is scheduled), and one
// pre-loaded stays for the keep-alive window; without one, every idle
// instance stays for the keep-alive window. An application with erasure
// coding is the exception: any of its instances may hold shards of its
// large objects, which a pre-load does not bring back, so none unloads
// sooner than keep_alive (its cachelet's warm-up keeps the shards
// resident meanwhile; ADR 0023). The caller holds c.mu.
func (a *app) keepFor(in *inst) time.Duration {
	d := a.decision
	switch {
	case d.Mode != keepalive.ModeHistogram:
		return a.spec.KeepAlive.D()
	case a.spec.Cache.Erasure != nil:
		return max(d.KeepAlive, a.spec.KeepAlive.D())
	case d.PreWarm > 0 && !in.preloaded:
		return 0
	default:
		return d.KeepAlive
	}
}

// idleFor is how long the application has been idle, for the keep-alive
// of its idle instance in: keep-alive unloads an application that stopped
// being invoked, not one instance of a busy one. An instance the router
// leaves idle while others serve invocations may still hold a share of
// the application's cache (its ring), and whether the application needs
// fewer instances is the scale controller's question (scale.go), which
// scales in only when every policy agrees. The caller holds c.mu.
func (a *app) idleFor(now time.Time, in *inst) time.Duration {
	switch {
	case a.inFlight > 0:
		return 0
	case a.lastEnd.IsZero():
		return now.Sub(in.lastUsed)
	}
	return now.Sub(a.lastEnd)
}

// preloadDue reports whether the application should be pre-loaded now:
// its histogram has a pre-warm window, nothing is loaded or running, and
// the window since the last invocation ended has passed, once per idle
// period. The caller holds c.mu.
func (a *app) preloadDue(now time.Time) bool {
	d := a.decision
	return d.Mode == keepalive.ModeHistogram && d.PreWarm > 0 && !a.lastEnd.IsZero() &&
		a.inFlight == 0 && len(a.instances) == 0 && a.starting == 0 && len(a.waiters) == 0 &&
		!now.Before(a.lastEnd.Add(d.PreWarm)) && !a.preloadedAt.Equal(a.lastEnd) &&
		now.Before(a.lastEnd.Add(d.PreWarm+d.KeepAlive))
}
