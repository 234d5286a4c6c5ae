package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/predict"
	"github.com/hoard-io/hoard/internal/scaling"
)

// Invoke runs a function of an application with an event and waits for
// its outcome. A function's failure is an api.Invocation with OK false; an
// error means it could not run (unknown function, no instance could be
// started, the caller gave up).
func (c *Controller) Invoke(ctx context.Context, appName, function string, event json.RawMessage, trigger string) (*api.Invocation, error) {
	a, err := c.app(appName)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	fn := a.spec.Functions[function]
	c.mu.Unlock()
	if fn == nil {
		return nil, fmt.Errorf("%w: application %s has no function %q", ErrNotFound, appName, function)
	}
	if len(event) == 0 {
		event = json.RawMessage("{}")
	}
	if !json.Valid(event) {
		return nil, errors.New("the event is not valid JSON")
	}
	rec := &api.Invocation{RequestID: randHex(16), App: appName, Function: function, Trigger: trigger, Start: c.clk.Now()}
	fm := c.model(ctx, appName, function)
	var fs predict.Features
	class := -1
	bucket, key, _ := inputObject(event)
	etag := inputETag(event)
	if fm != nil {
		fs = features(event)
		if bucket != "" {
			fs, rec.InputMedia = c.inputFeatures(ctx, a, fs, bucket, key, etag, fm.needsInput())
		}
		rec.Predicted, class = fm.limit(fs)
	}
	rec.NoCache = c.noCache(a, function)
	c.began(a, trigger)
	defer c.ended(a, trigger)
	// An instance that dies under us is replaced once.
	for attempt := 0; ; attempt++ {
		rb, rk := bucket, key
		if c.cfg.DisableDataRouting {
			rb, rk = "", ""
		}
		in, cold, route, err := c.acquireFor(ctx, a, rb, rk)
		if err != nil {
			return nil, err
		}
		rec.Route = route
		rec.Cold = rec.Cold || cold
		rec.QueueMS = ms(c.clk.Now().Sub(rec.Start))
		res, err := c.agents.at(in.agentURL).Invoke(ctx, in.id, api.InvokeRequest{RequestID: rec.RequestID, Function: function, Event: event, MemoryLimit: rec.Predicted, NoCache: rec.NoCache})
		if err != nil {
			c.drop(a, in, "invocation failed: "+err.Error())
			if attempt == 0 && ctx.Err() == nil {
				c.log.Warn("instance lost; retrying on another", "app", appName, "instance", in.id, "err", err)
				continue
			}
			return nil, fmt.Errorf("invoking %s/%s: %w", appName, function, err)
		}
		c.release(a, in)
		if bucket != "" && res.OK {
			c.mu.Lock()
			a.readers.set(bucket, key, in.id)
			c.mu.Unlock()
		}
		rec.Instance, rec.OK, rec.Result, rec.Error, rec.Log, rec.ExecMS, rec.Reads = in.id, res.OK, res.Result, res.Error, res.Log, res.DurationMS, res.Reads
		rec.Memory, rec.IO, rec.NotAdmitted = res.Memory, res.IO, res.NotAdmitted
		rec.TotalMS = ms(c.clk.Now().Sub(rec.Start))
		c.record(a, rec)
		c.observeAdmission(a, rec)
		c.observe(a, function, fm, fs, class, rec, bucket, key, etag)
		return rec, nil
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }

// acquire returns an idle instance of the deployed version, marked busy:
// a warm one if any, else one started now (cold) while the application
// has fewer than max_instances, else the first to become idle.
func (c *Controller) acquire(ctx context.Context, a *app) (*inst, bool, error) {
	in, cold, _, err := c.acquireFor(ctx, a, "", "")
	return in, cold, err
}

// acquireFor is acquire for an invocation whose input is bucket/key
// (bucket "" for none): an idle instance is chosen for the data
// (locality.go); it also says why the instance was chosen.
func (c *Controller) acquireFor(ctx context.Context, a *app, bucket, key string) (*inst, bool, string, error) {
	in, cold, route, err := c.acquireRoute(ctx, a, bucket, key)
	if err == nil {
		c.m.routes.WithLabelValues(a.rec.Name, route).Inc()
	}
	return in, cold, route, err
}

func (c *Controller) acquireRoute(ctx context.Context, a *app, bucket, key string) (*inst, bool, string, error) {
	c.mu.Lock()
	if in, route, why := a.idleForInput(bucket, key); in != nil {
		in.busy = true
		if why != "" {
			a.event(c.clk.Now(), "route", "%s", why)
		}
		c.mu.Unlock()
		return in, false, route, nil
	}
	if a.current()+a.starting < a.spec.MaxInstances {
		a.starting++
		req := c.startRequest(a)
		near, owner := a.ownerNode(bucket, key)
		c.mu.Unlock()
		in, err := c.startNear(ctx, a, req, near)
		c.mu.Lock()
		a.starting--
		if err != nil {
			c.mu.Unlock()
			return nil, false, "", err
		}
		if c.apps[a.rec.Name] != a {
			a.unreserve(in.agentID)
			c.mu.Unlock()
			c.unload(in, "application removed")
			return nil, false, "", fmt.Errorf("%w: application %s was removed", ErrNotFound, a.rec.Name)
		}
		in.busy = true
		a.admit(in)
		route := routeStarted
		if near != "" && in.agentID == near {
			route = routeStartedOwnerNode
			a.event(c.clk.Now(), "route", "started %s on node %s, where %s owns the input %s/%s", in.id, near, owner, bucket, key)
		}
		c.mu.Unlock()
		return in, true, route, nil
	}
	w := &waiter{ch: make(chan *inst, 1)}
	a.waiters = append(a.waiters, w)
	c.mu.Unlock()
	select {
	case in, ok := <-w.ch:
		if !ok {
			return nil, false, "", fmt.Errorf("%w: application %s was removed", ErrNotFound, a.rec.Name)
		}
		return in, false, routeQueued, nil
	case <-ctx.Done():
		c.mu.Lock()
		for i, x := range a.waiters {
			if x == w {
				a.waiters = append(a.waiters[:i], a.waiters[i+1:]...)
				c.mu.Unlock()
				return nil, false, "", ctx.Err()
			}
		}
		c.mu.Unlock()
		// Handed an instance just as we gave up: pass it on.
		if in, ok := <-w.ch; ok {
			c.release(a, in)
		}
		return nil, false, "", ctx.Err()
	}
}

// startRequest is the agent's request for a new instance of the
// application's deployed version; the caller holds c.mu.
func (c *Controller) startRequest(a *app) api.StartRequest {
	a.seq++
	return api.StartRequest{App: a.rec.Name, ID: fmt.Sprintf("%s-%d-%s", a.rec.Name, a.rec.Version, randHex(3)),
		Spec: a.rec.Spec, Package: a.rec.Package, Credentials: a.rec.Credentials, Store: a.rec.Store, Metadata: c.metadataLocation(a.rec.Name)}
}

// idle picks the most recently used idle instance of the deployed
// version, so that the others' keep-alive can expire when load drops;
// the caller holds c.mu.
func (a *app) idle() *inst {
	var best *inst
	for _, in := range a.instances {
		if in.busy || in.rev != a.rec.Package.SHA256 {
			continue
		}
		if best == nil || in.lastUsed.After(best.lastUsed) {
			best = in
		}
	}
	return best
}

// current counts the instances of the deployed version (those of older
// versions are on their way out); the caller holds c.mu.
func (a *app) current() int {
	n := 0
	for _, in := range a.instances {
		if in.rev == a.rec.Package.SHA256 {
			n++
		}
	}
	return n
}

// release returns an instance: to the first waiter, else idle.
func (c *Controller) release(a *app, in *inst) {
	c.mu.Lock()
	in.lastUsed = c.clk.Now()
	in.preloaded = false
	if in.rev == a.rec.Package.SHA256 && len(a.waiters) > 0 {
		w := a.waiters[0]
		a.waiters = a.waiters[1:]
		c.mu.Unlock()
		w.ch <- in
		return
	}
	in.busy = false
	c.mu.Unlock()
}

// releaseIdle returns an instance keeping its preloaded mark (a pre-load
// that has served no invocation).
func (c *Controller) releaseIdle(a *app, in *inst) {
	c.mu.Lock()
	pre := in.preloaded
	c.mu.Unlock()
	c.release(a, in)
	c.mu.Lock()
	in.preloaded = pre && !in.busy
	c.mu.Unlock()
}

// drop forgets an instance that failed and asks its agent to unload it.
func (c *Controller) drop(a *app, in *inst, why string) {
	c.mu.Lock()
	delete(a.instances, in.id)
	a.event(c.clk.Now(), "drop", "instance %s dropped: %s", in.id, why)
	c.mu.Unlock()
	go c.unload(in, why)
}

// start asks an agent, chosen by place, to load an instance of a. An
// agent that cannot be reached (a node lost, its registration not
// expired yet) is passed over for the next choice. The instance started
// stays counted in a.placing, where place sees it, until the caller
// records it with a.admit (or gives it up with a.unreserve) under c.mu:
// a placement in between sees it one way or the other.
func (c *Controller) start(ctx context.Context, a *app, req api.StartRequest) (*inst, error) {
	return c.startNear(ctx, a, req, "")
}

// startNear is start placing the instance on agent near when it is
// registered (the node of the cachelet that owns the invocation's input),
// by place's rule otherwise.
func (c *Controller) startNear(ctx context.Context, a *app, req api.StartRequest, near string) (_ *inst, err error) {
	if c.cfg.EtcdUsers != nil {
		creds, err := c.cfg.EtcdUsers.AddInstance(ctx, req.App, req.ID)
		if err != nil {
			return nil, fmt.Errorf("the instance's etcd user: %w", err)
		}
		req.Etcd = &creds
		defer func() {
			if err != nil {
				c.removeEtcdUser(req.ID)
			}
		}()
	}
	agents, err := c.agents.list(ctx)
	if err != nil {
		return nil, err
	}
	if len(agents) == 0 {
		return nil, errors.New("no node agent is registered")
	}
	for {
		in, ag, err := c.startOn(ctx, a, agents, req, near)
		var uerr *url.Error
		if err == nil || !errors.As(err, &uerr) || len(agents) == 1 || ctx.Err() != nil {
			return in, err
		}
		c.log.Warn("agent unreachable; placing the instance elsewhere", "app", req.App, "agent", ag.ID, "err", err)
		agents = slices.DeleteFunc(agents, func(x api.Registration) bool { return x.ID == ag.ID })
	}
}

// startOn places an instance of a among agents and starts it there;
// the place is reserved in a.placing from the choice on, and released
// here only if the start fails (start says who releases it otherwise).
func (c *Controller) startOn(ctx context.Context, a *app, agents []api.Registration, req api.StartRequest, near string) (*inst, api.Registration, error) {
	ofApp, total := map[string]int{}, map[string]int{}
	c.mu.Lock()
	for _, x := range c.apps {
		for _, in := range x.instances {
			total[in.agentID]++
			if x == a {
				ofApp[in.agentID]++
			}
		}
		for id, n := range x.placing {
			total[id] += n
			if x == a {
				ofApp[id] += n
			}
		}
	}
	ag := place(agents, ofApp, total, near)
	a.reserve(ag.ID)
	// Joined in the order placed (trees.go).
	req.Parent, req.Ancestors = c.treeJoin(req.App, req.Package.SHA256, ag.ID, agents)
	c.mu.Unlock()
	t0 := c.clk.Now()
	info, err := c.agents.at(ag.URL).Start(ctx, req)
	if err != nil {
		c.mu.Lock()
		a.unreserve(ag.ID)
		c.mu.Unlock()
		c.m.coldStarts.WithLabelValues(req.App, "error").Inc()
		return nil, ag, fmt.Errorf("starting an instance of %s on %s: %w", req.App, ag.ID, err)
	}
	took := c.clk.Now().Sub(t0)
	c.m.coldStarts.WithLabelValues(req.App, "ok").Inc()
	c.m.coldStartSeconds.WithLabelValues(req.App).Observe(took.Seconds())
	c.mu.Lock()
	if a.loads == nil {
		a.loads = scaling.NewLoadEstimator(scaling.Config{})
	}
	a.loads.Add(took)
	c.mu.Unlock()
	c.log.Info("instance started", "app", req.App, "instance", info.ID, "agent", ag.ID, "took", c.clk.Now().Sub(t0).Round(time.Millisecond))
	return &inst{id: info.ID, agentID: ag.ID, agentURL: ag.URL, rev: info.Rev, endpoint: info.Endpoint, lastUsed: c.clk.Now()}, ag, nil
}

// reserve counts an instance being started on agent id in a.placing;
// the caller holds c.mu.
func (a *app) reserve(id string) {
	if a.placing == nil {
		a.placing = map[string]int{}
	}
	a.placing[id]++
}

// unreserve takes back a reserve; the caller holds c.mu.
func (a *app) unreserve(id string) {
	if a.placing[id]--; a.placing[id] <= 0 {
		delete(a.placing, id)
	}
}

// admit records an instance start returned, in place of its
// reservation, so that place counts it all along; the caller holds c.mu.
func (a *app) admit(in *inst) {
	a.instances[in.id] = in
	a.unreserve(in.agentID)
}

// place chooses the agent for a new instance of an application: the
// one holding the fewest instances of that application (so that its
// instances, and its ring, spread over the nodes: a node lost costs the
// application one share of its cache, and its remote hits cross
// nodes), then the least loaded (fewest instances of any application),
// then the first by ID. Instances being started count where they are
// going. ofApp and total are per agent ID; agents is not empty.
func place(agents []api.Registration, ofApp, total map[string]int, near string) api.Registration {
	for _, ag := range agents {
		if near != "" && ag.ID == near {
			return ag
		}
	}
	best := agents[0]
	for _, ag := range agents[1:] {
		a, b := ofApp[ag.ID], ofApp[best.ID]
		if a < b || a == b && (total[ag.ID] < total[best.ID] || total[ag.ID] == total[best.ID] && ag.ID < best.ID) {
			best = ag
		}
	}
	return best
}

// unload asks an instance's agent to unload it.
func (c *Controller) unload(in *inst, why string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := c.agents.at(in.agentURL).Stop(ctx, in.id)
	c.log.Info("instance unloaded", "instance", in.id, "why", why, "err", err)
	c.removeEtcdUser(in.id)
}

// removeEtcdUser removes an instance's etcd user, if it has one.
func (c *Controller) removeEtcdUser(id string) {
	if c.cfg.EtcdUsers == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.cfg.EtcdUsers.RemoveInstance(ctx, id); err != nil {
		c.log.Warn("cannot remove an instance's etcd user", "instance", id, "err", err)
	}
}

// scan runs keep-alive: idle instances unused for the application's
// keep_alive, and idle instances of an older version, are unloaded;
// instances adopted busy are polled until idle.
func (c *Controller) scan() {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.ScanInterval)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
		type job struct {
			a   *app
			in  *inst
			why string
		}
		var unload, poll []job
		var preload []string
		now := c.clk.Now()
		c.mu.Lock()
		for name, a := range c.apps {
			prev := a.decision
			a.decision = a.policy.Decide()
			if a.decision.Mode != prev.Mode || a.decision.PreWarm != prev.PreWarm || a.decision.KeepAlive != prev.KeepAlive {
				a.event(c.clk.Now(), "keepalive", "%s: pre-warm after %s, keep alive %s (%s)", a.decision.Mode, a.decision.PreWarm, a.decision.KeepAlive, a.decision.Reason)
				c.log.Info("keep-alive policy", "app", name, "mode", a.decision.Mode, "prewarm", a.decision.PreWarm,
					"keepalive", a.decision.KeepAlive, "reason", a.decision.Reason)
			}
			if a.preloadDue(now) {
				a.preloadedAt = a.lastEnd
				preload = append(preload, name)
			}
			kept := 0 // loaded instances of the deployed version, for scaling.min_instances
			for _, in := range a.instances {
				if !in.orphan && in.rev == a.rec.Package.SHA256 {
					kept++
				}
			}
			for _, in := range a.instances {
				switch {
				case in.orphan:
					poll = append(poll, job{a: a, in: in})
				case in.busy:
				case in.rev != a.rec.Package.SHA256:
					unload = append(unload, job{a, in, "a newer version was deployed"})
				case now.Sub(in.lastUsed) >= a.keepFor(in) && a.idleFor(now, in) >= a.keepFor(in) && kept > a.spec.Scaling.MinInstances:
					kept--
					unload = append(unload, job{a, in, "idle for its keep-alive of " + a.keepFor(in).String() + " (" + string(a.decision.Mode) + ")"})
				}
			}
			for _, j := range unload {
				if j.a == a {
					delete(a.instances, j.in.id)
				}
			}
		}
		c.mu.Unlock()
		for _, j := range unload {
			c.m.unloads.WithLabelValues(j.a.rec.Name).Inc()
			go c.unload(j.in, j.why)
		}
		for _, name := range preload {
			c.m.preloads.WithLabelValues(name).Inc()
			go func() {
				ctx, cancel := context.WithTimeout(c.ctx, 5*time.Minute)
				defer cancel()
				if _, err := c.preloadNow(ctx, name); err != nil {
					c.log.Warn("scheduled pre-load failed", "app", name, "err", err)
				}
			}()
		}
		for _, j := range poll {
			info, err := c.agents.at(j.in.agentURL).Instance(c.ctx, j.in.id)
			switch {
			case err != nil || info.State == api.StateDead:
				c.drop(j.a, j.in, "lost while adopted")
			case info.State == api.StateIdle:
				c.mu.Lock()
				j.in.orphan = false
				c.mu.Unlock()
				c.release(j.a, j.in)
			}
		}
	}
}

// list reads the registered agents from etcd.
func (ac *agentClient) list(ctx context.Context) ([]api.Registration, error) {
	resp, err := ac.etcd.Get(ctx, api.EtcdPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("reading agents from etcd: %w", err)
	}
	var out []api.Registration
	for _, kv := range resp.Kvs {
		var r api.Registration
		if json.Unmarshal(kv.Value, &r) == nil && r.URL != "" {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}
