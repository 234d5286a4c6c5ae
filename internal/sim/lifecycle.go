package sim

import (
	"time"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/prewarm"
)

// maxRecords bounds the access records kept per application: the
// newest, which are also the ones prewarm.Merge's window favours.
const maxRecords = 16

// lives is one cacheRun's per-application state of Config.Lifecycle: what
// its instances' cachelets record about their objects during a life, and
// the records saved at its unloads.
type lives struct {
	tally   map[cache.Key]*prewarm.Object
	records []prewarm.Record
}

// life returns app's lifecycle state, made on first use.
func (c *cacheRun) life(app string) *lives {
	l := c.lives[app]
	if l == nil {
		l = &lives{tally: map[cache.Key]*prewarm.Object{}}
		c.lives[app] = l
	}
	return l
}

// recordAccess counts a read (by outcome) or a write (o < 0) of e's
// object, as the cachelet's access metadata does.
func (c *cacheRun) recordAccess(e *Event, o Outcome, write bool) {
	l := c.life(e.App)
	k := cache.Key{Bucket: e.Bucket, Object: e.Key}
	obj := l.tally[k]
	if obj == nil {
		obj = &prewarm.Object{Bucket: e.Bucket, Key: e.Key}
		l.tally[k] = obj
	}
	if write {
		obj.Out++
	} else {
		if n := obj.Reads(); n > 0 {
			gap := float64(e.Time.Sub(obj.Last)) / float64(time.Millisecond)
			obj.MeanGapMS += (gap - obj.MeanGapMS) / float64(n)
		}
		switch o {
		case LocalHit:
			obj.LH++
		case RemoteHit:
			obj.RH++
		case RemoteMiss:
			obj.RM++
		default:
			obj.LM++
		}
	}
	obj.Size, obj.ETag, obj.Last = e.Size, e.Version, e.Time
}

// unload drops app's caches, as its instances are unloaded at time at,
// saving their access record first.
func (c *cacheRun) unload(app string, at time.Time) {
	for _, cc := range c.apps[app] {
		cc.Clear()
	}
	c.unloads++
	if !c.sim.cfg.PreWarm {
		return
	}
	l := c.life(app)
	if len(l.tally) == 0 {
		return
	}
	r := prewarm.Record{Version: prewarm.RecordVersion, App: app, UnloadedAt: at, Objects: make([]prewarm.Object, 0, len(l.tally))}
	for _, o := range l.tally {
		r.Objects = append(r.Objects, *o)
	}
	clear(l.tally)
	if len(l.records) == maxRecords {
		l.records = append(l.records[:0], l.records[1:]...)
	}
	l.records = append(l.records, r)
}

// preWarm fills app's caches, its instances loaded again at now, with
// prewarm's selection from the saved records: each object at its owner.
func (c *cacheRun) preWarm(app string, now time.Time, meanGap time.Duration) {
	l := c.life(app)
	if len(l.records) == 0 {
		return
	}
	var cfg prewarm.Config
	merged := prewarm.Merge(l.records, now, cfg.Window(meanGap))
	cfg.MaxBytes = c.size
	sel, err := prewarm.Select(merged, cfg)
	if err != nil {
		panic("sim: " + err.Error()) // the default config is valid
	}
	cs := c.instances(app)
	for _, o := range sel {
		e := Event{App: app, Bucket: o.Bucket, Key: o.Key, Size: o.Size, Version: o.ETag}
		cc := cs[c.owner(app, o.Bucket, o.Key)]
		if !cc.Admissible(o.Size) {
			continue
		}
		fill(cc, &e)
		if c.sim.cfg.Sweep != nil && !c.sim.cfg.SweepFromAdmission {
			k := cache.Key{Bucket: o.Bucket, Object: o.Key}
			cc.MarkUnread(k, cc.Peek(k)) // fetched ahead of its reads (as the cachelet marks it)
		}
		c.preWarmGets++
		c.preWarmBytes += o.Size
	}
}
