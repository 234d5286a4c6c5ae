package sim

import (
	"slices"
	"time"

	"github.com/hoard-io/hoard/internal/cache"
)

// Outcome is how a read was served.
type Outcome int

// The outcomes of a read, in hoard's vocabulary.
const (
	LocalHit    Outcome = iota // LH: the reading instance held it
	RemoteHit                  // RH: its owner held it
	LocalMiss                  // LM: the reader owns it and fetched it
	RemoteMiss                 // RM: the owner fetched it for the reader
	PassThrough                // PT: too large to cache; read from the store
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"LH", "RH", "LM", "RM", "PT"}

func (o Outcome) String() string { return outcomeNames[o] }

// Tally counts reads and their bytes.
type Tally struct {
	Count int64 `json:"count"`
	Bytes int64 `json:"bytes"`
}

func (t *Tally) add(n int64) { t.Count++; t.Bytes += n }

// cacheRun is one (eviction policy, cache size): the caches of every
// application's instances under it.
type cacheRun struct {
	sim    *Simulator
	policy Eviction
	size   int64
	cfg    cache.Config // validated; Owns set per instance
	apps   map[string][]*cache.Cache

	reads    [numOutcomes]Tally
	writes   Tally
	gets     int64 // store GETs
	getBytes int64 // bytes read from the store

	lives                     map[string]*lives // with Config.Lifecycle
	unloads                   int64
	preWarmGets, preWarmBytes int64

	votes   map[string]*appVotes // with Config.VoteInterval
	tally   Votes
	compute map[string]*appCompute // with Config.VoteInterval
	runs    runHeap                // invocations in flight, by end
	comp    ComputeResult
	admit   *admitRun            // with Config.Admission
	lat     []float64            // scratch for appCompute.recentLoad
	first   map[string]time.Time // each application's first access, for its caches' memory-time

	scale            map[string]*appScale // with Config.Scale
	scaling          ScaleResult
	droppedEvictions uint64 // of the caches of instances removed

	times map[string]*accessTimes // per application, by Config.Access

	swept       uint64  // by the sweeps (Config.Sweep), of the caches of instances removed
	heldSum     float64 // bytes held, summed over the samples (Config.HeldEvery)
	heldSamples int64
}

// sweep sweeps every cache with rule.
func (c *cacheRun) sweep(rule cache.SweepRule) {
	for _, cs := range c.apps {
		for _, cc := range cs {
			cc.Sweep(rule, nil)
		}
	}
}

// sampleHeld adds the bytes every cache holds now to the samples.
func (c *cacheRun) sampleHeld() {
	var n int64
	for _, cs := range c.apps {
		for _, cc := range cs {
			n += cc.Stats().Bytes
		}
	}
	c.heldSum += float64(n)
	c.heldSamples++
}

// instances returns app's caches, made on its first access.
func (c *cacheRun) instances(app string) []*cache.Cache {
	cs := c.apps[app]
	if cs != nil {
		return cs
	}
	n := c.sim.cfg.Instances
	cs = make([]*cache.Cache, n)
	for i := range cs {
		cs[i] = c.newCache(app, i)
	}
	c.apps[app] = cs
	c.first[app] = c.sim.now
	if c.sim.cfg.Scale {
		c.scaleState(app)
	}
	return cs
}

// newCache makes the cache of app's instance i.
func (c *cacheRun) newCache(app string, i int) *cache.Cache {
	cfg := c.cfg
	if c.sim.cfg.Instances > 1 || c.sim.cfg.Scale {
		cfg.Owns = func(k cache.Key) bool { return c.owner(app, k.Bucket, k.Object) == i }
	}
	if c.sim.cfg.VoteInterval > 0 {
		cfg.OnEvict = c.onEvict(app, i)
	}
	cc, err := cache.New(cfg)
	if err != nil {
		// The config was validated in New.
		panic("sim: " + err.Error())
	}
	return cc
}

// owner is the instance of app owning an object, on the ring of app's
// instances now.
func (c *cacheRun) owner(app, bucket, key string) int {
	return c.sim.owner(len(c.apps[app]), bucket, key)
}

// holds reports whether cc holds e's object at e's version (any version
// when e names none), dropping a stale one. A hit counts with the policy.
func holds(cc *cache.Cache, e *Event) bool {
	k := cache.Key{Bucket: e.Bucket, Object: e.Key}
	ent := cc.Get(k)
	if ent == nil {
		return false
	}
	if e.Version != "" && ent.Info().ETag != e.Version {
		cc.RemoveIf(k, ent)
		return false
	}
	return true
}

// fill adds e's object to cc, as a completed fill does, if cc admits it.
func fill(cc *cache.Cache, e *Event) {
	if !cc.Reserve(e.Size) {
		return
	}
	cc.Add(cache.NewAccountedEntry(cache.Key{Bucket: e.Bucket, Object: e.Key}, objectInfo(e)))
}

func (c *cacheRun) read(e *Event) {
	cs := c.instances(e.App)
	inst := c.sim.instance(e.Invocation, len(cs))
	owner := c.owner(e.App, e.Bucket, e.Key)
	n := e.Size
	if e.Length > 0 {
		n = e.Length
	}
	var o Outcome
	noCache := c.admit != nil && c.admit.noCache(e.Invocation)
	switch {
	case holds(cs[inst], e):
		o = LocalHit
	case noCache:
		// Not admitted: straight to the store, nothing kept.
		o = PassThrough
		c.gets++
		c.getBytes += n
		c.admit.res.ReadsNotAdmitted++
	case owner != inst && holds(cs[owner], e):
		o = RemoteHit
		fill(cs[inst], e)
	case !cs[owner].Admissible(e.Size):
		o = PassThrough
		c.gets++
		c.getBytes += n
	default:
		o = LocalMiss
		if owner != inst {
			o = RemoteMiss
		}
		c.gets++
		c.getBytes += e.Size
		fill(cs[owner], e)
		if owner != inst {
			fill(cs[inst], e)
		}
	}
	c.reads[o].add(n)
	t := c.times[e.App]
	if t == nil {
		t = &accessTimes{}
		c.times[e.App] = t
	}
	secs := c.sim.cfg.Access.seconds(o, n)
	if (o == LocalMiss || o == RemoteMiss) && c.sim.cfg.VoteInterval > 0 {
		// A large miss may be split among cachelets (the bandwidth
		// policy): its fetch takes the plan's time.
		if fetch, ok := c.plan(e); ok {
			secs += fetch - c.sim.cfg.Access.Store.seconds(n)
		}
	}
	t.hoard += secs
	t.direct += c.sim.cfg.Access.Store.seconds(n)
	if c.admit != nil {
		c.admit.read(e.Invocation, secs, c.sim.cfg.Access.Store.seconds(n))
	}
	if v := c.votes[e.App]; v != nil {
		v.reads[inst]++
	}
	if c.sim.cfg.PreWarm {
		c.recordAccess(e, o, false)
	}
}

func (c *cacheRun) write(e *Event) {
	cs := c.instances(e.App)
	owner := c.owner(e.App, e.Bucket, e.Key)
	c.writes.add(e.Size)
	k := cache.Key{Bucket: e.Bucket, Object: e.Key}
	for i, cc := range cs {
		if i != owner {
			cc.Remove(k)
		}
	}
	cs[owner].Remove(k)
	fill(cs[owner], e)
	if c.sim.cfg.Sweep != nil && !c.sim.cfg.SweepFromAdmission {
		cs[owner].MarkUnread(k, cs[owner].Peek(k)) // written, not read (as the cachelet marks it)
	}
	if c.sim.cfg.PreWarm {
		c.recordAccess(e, 0, true)
	}
}

func (c *cacheRun) result(p Prices) CacheResult {
	r := CacheResult{
		Policy:       c.policy.String(),
		CacheBytes:   c.size,
		Apps:         len(c.apps),
		Outcomes:     map[string]Tally{},
		Writes:       c.writes,
		StoreGets:    c.gets + c.preWarmGets,
		StoreBytes:   c.getBytes + c.preWarmBytes,
		Unloads:      c.unloads,
		PreWarmGets:  c.preWarmGets,
		PreWarmBytes: c.preWarmBytes,
	}
	if c.sim.cfg.VoteInterval > 0 {
		v, comp := c.tally, c.comp
		r.CacheVotes, r.Compute = &v, &comp
	}
	for o, t := range c.reads {
		r.Reads.Count += t.Count
		r.Reads.Bytes += t.Bytes
		r.Outcomes[Outcome(o).String()] = t
	}
	hits := Tally{c.reads[LocalHit].Count + c.reads[RemoteHit].Count, c.reads[LocalHit].Bytes + c.reads[RemoteHit].Bytes}
	r.HitRatio = ratio(hits.Count, r.Reads.Count)
	r.ByteHitRatio = ratio(hits.Bytes, r.Reads.Bytes)
	r.Evictions = c.droppedEvictions
	r.Swept = c.swept
	for _, cs := range c.apps {
		for _, cc := range cs {
			r.Evictions += cc.Stats().Evictions
			r.Swept += cc.Stats().Swept
		}
	}
	if c.heldSamples > 0 {
		r.MeanHeldBytes = c.heldSum / float64(c.heldSamples)
	}
	if c.sim.cfg.Scale {
		r.Scaling = c.scaleResult()
	}
	if c.admit != nil {
		r.Admission = c.admit.result()
	}
	r.CostUSD = float64(c.gets+c.preWarmGets)*p.S3Get + float64(c.writes.Count)*p.S3Put
	if r.Scaling != nil {
		r.CacheGBs = r.Scaling.CacheGBs
	} else {
		// In a fixed order, so that the sum is the same however the
		// configurations were split (Config.Split).
		apps := make([]string, 0, len(c.first))
		for app := range c.first {
			apps = append(apps, app)
		}
		slices.Sort(apps)
		for _, app := range apps {
			r.CacheGBs += float64(len(c.apps[app])) * gbs(c.size, c.sim.now.Sub(c.first[app]).Seconds())
		}
	}
	r.CacheCostUSD = r.CacheGBs * p.LambdaGBSecond
	r.TotalCostUSD = r.CostUSD + r.CacheCostUSD
	r.Improvement = improvements(c.times)
	return r
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}
