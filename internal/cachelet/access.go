package cachelet

import (
	"context"
	"io"
	"sort"
	"sync"
	"time"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/media"
	"github.com/hoard-io/hoard/internal/prewarm"
)

// MaxAccessObjects bounds the access metadata a cachelet keeps: beyond it,
// the objects accessed longest ago are forgotten (a tenth at a time).
const MaxAccessObjects = 20000

// accessLog is the cachelet's access metadata (Faa$T §3.3): per object,
// size, version, reads by access type, outputs written, the mean time
// between reads, and the media features of a version written through the
// cachelet (package media). It lives outside the cache's budget and survives
// evictions: it says what the application reads, not what is cached.
type accessLog struct {
	mu   sync.Mutex
	objs map[cache.Key]*accessEntry
}

type accessEntry struct {
	o     prewarm.Object
	first time.Time // first read
}

func (a *accessLog) entry(k cache.Key, now time.Time) *accessEntry {
	if a.objs == nil {
		a.objs = map[cache.Key]*accessEntry{}
	}
	e := a.objs[k]
	if e == nil {
		if len(a.objs) >= MaxAccessObjects {
			a.forgetOldest()
		}
		e = &accessEntry{o: prewarm.Object{Bucket: k.Bucket, Key: k.Object}}
		a.objs[k] = e
	}
	e.o.Last = now
	return e
}

// forgetOldest drops the tenth of the objects accessed longest ago.
func (a *accessLog) forgetOldest() {
	all := make([]*accessEntry, 0, len(a.objs))
	for _, e := range a.objs {
		all = append(all, e)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].o.Last.Before(all[j].o.Last) })
	for _, e := range all[:len(all)/10+1] {
		delete(a.objs, cache.Key{Bucket: e.o.Bucket, Object: e.o.Key})
	}
}

// read records a read of k served as outcome. Reads for peers and
// pass-through reads are not the application's cache accesses; a
// pass-through read counts as a local miss (the store served it).
func (a *accessLog) read(k cache.Key, etag string, size int64, o Outcome, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	e := a.entry(k, now)
	if etag != e.o.ETag {
		e.o.Media = nil // another version: its features are unknown
	}
	e.o.ETag, e.o.Size = etag, size
	switch o {
	case LocalHit, StaleHit:
		e.o.LH++
	case RemoteHit, ErasureHit:
		e.o.RH++
	case LocalMiss, PassThrough:
		e.o.LM++
	case RemoteMiss:
		e.o.RM++
	case DiskHit:
		e.o.DH++
	default:
		return
	}
	if reads := e.o.Reads(); reads == 1 {
		e.first = now
	} else {
		e.o.MeanGapMS = float64(now.Sub(e.first).Milliseconds()) / float64(reads-1)
	}
}

// wrote records an object written by a client (a function's output),
// and the media features read from its first bytes (nil for none).
func (a *accessLog) wrote(k cache.Key, etag string, size int64, m *media.Features, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	e := a.entry(k, now)
	e.o.Out++
	e.o.ETag = etag
	e.o.Media = m
	if size >= 0 {
		e.o.Size = size
	}
}

// Media returns the media features of bucket/key's version etag as read
// when that version was written through this cachelet (package media);
// ok is false when it was not, or is no media, or the cachelet has
// forgotten it (MaxAccessObjects) or seen another version since. Safe
// for concurrent use.
func (c *Cachelet) Media(bucket, key, etag string) (media.Features, bool) {
	c.access.mu.Lock()
	defer c.access.mu.Unlock()
	e := c.access.objs[cache.Key{Bucket: bucket, Object: key}]
	if e == nil || e.o.Media == nil || etag == "" || e.o.ETag != etag {
		return media.Features{}, false
	}
	return *e.o.Media, true
}

// AccessMetadata returns the access metadata recorded so far, sorted by
// bucket and key.
func (c *Cachelet) AccessMetadata() []prewarm.Object {
	c.access.mu.Lock()
	out := make([]prewarm.Object, 0, len(c.access.objs))
	for _, e := range c.access.objs {
		out = append(out, e.o)
	}
	c.access.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Bucket != out[j].Bucket {
			return out[i].Bucket < out[j].Bucket
		}
		return out[i].Key < out[j].Key
	})
	return out
}

// PrewarmResult says what a Prewarm did: of the keys given, how many this
// cachelet owns, already held, fetched (with their bytes), skipped as too
// large for memory, and failed to fetch.
type PrewarmResult struct {
	Owned, Cached, Fetched, Skipped, Failed int
	Bytes                                   int64
}

// Prewarm fetches into memory the given objects this cachelet owns on its
// application's ring (all of them when it is on its own) and does not hold
// yet, one at a time, stopping when ctx ends. Objects too large for the
// memory tier are skipped. Pre-warm fetches are not reads: they count in
// neither the read counters nor the access metadata; a later local hit on
// a pre-warmed object counts in hoard_cachelet_prewarm_hits_total.
//
// The node agent calls it over the control API (package control), only
// while the instance is idle.
func (c *Cachelet) Prewarm(ctx context.Context, keys []cache.Key) (PrewarmResult, error) {
	var res PrewarmResult
	for _, k := range keys {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		if _, self := c.cfg.owner(k); !self {
			continue
		}
		res.Owned++
		if c.cache.Peek(k) != nil { // not a read: the sweep's count is left alone
			res.Cached++
			continue
		}
		sv, err := c.acquire(ctx, k, false)
		switch {
		case err != nil:
			res.Failed++
			c.log.Debug("pre-warm fetch failed", "bucket", k.Bucket, "key", k.Object, "err", err)
			continue
		case sv.body != nil:
			sv.body.Close()
			res.Skipped++
			continue
		}
		// Wait for the fill to complete (reading from memory as it grows).
		info := sv.objectInfo()
		r := sv.entry.ReadCloser(0, info.Size)
		_, err = io.Copy(io.Discard, r)
		r.Close()
		if err != nil {
			res.Failed++
			continue
		}
		res.Fetched++
		res.Bytes += info.Size
		// Fetched ahead of its reads: the sweep counts its reads from
		// the first, sparing it until then for at most the sweep's idle
		// time (sweep.go).
		c.cache.MarkUnread(k, sv.entry)
		c.m.prewarmed.Inc()
		c.keys.prewarmed(k)
	}
	return res, nil
}

// notePrewarmHit counts the first local hit on a pre-warmed object.
func (c *Cachelet) notePrewarmHit(k cache.Key) {
	if c.keys.localHit(k) {
		c.m.prewarmHits.Inc()
	}
}
