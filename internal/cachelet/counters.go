package cachelet

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hoard-io/hoard/internal/admission"
	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/erasure"
)

// Counters is a snapshot of what the cachelet has served since it started,
// for a platform that diffs two snapshots to learn one invocation's reads
// (the instance serves it as JSON at /stats). The counters only grow; the
// cache fields are occupancy at the time of the snapshot.
type Counters struct {
	Reads ReadCounters `json:"reads"`
	// Writes counts objects written by this cachelet's clients and
	// acknowledged: PutObject (whatever the write target), CopyObject and
	// CompleteMultipartUpload. Writes taken for a peer as the key's owner
	// are not counted (the peer counts them).
	Writes       int64 `json:"writes"`
	CacheBytes   int64 `json:"cache_bytes"`
	CacheObjects int64 `json:"cache_objects"`
	BudgetBytes  int64 `json:"budget_bytes"`
	// EvictedAgain counts evictions of objects this cachelet owns and had
	// evicted before: the cache-size scaling policy's sign that its share
	// of the working set does not fit (Faa$T §4). Copies of other
	// cachelets' objects are not counted: they churn whatever the number
	// of instances, while an owned share shrinks as instances are added.
	EvictedAgain int64 `json:"evicted_again"`
	// Erasure is the erasure-coded path's figures; nil when it is off.
	Erasure *erasure.Health `json:"erasure,omitempty"`
	// NotAdmitted counts reads served from the store without keeping a
	// copy because the running function's inputs are not worth caching
	// (SetAdmit); they count as pass-through reads too.
	NotAdmitted int64 `json:"not_admitted"`
	// WriteNanos is the time clients' acknowledged writes took, request
	// to acknowledgement.
	WriteNanos int64 `json:"write_nanos"`
	// StoreFit holds the whole-object reads the store served (misses and
	// pass-throughs), size against time: what a read would cost without a
	// cache (package admission).
	StoreFit admission.StoreFit `json:"store_fit"`
}

// ReadCounters splits reads by how they were served. A read counts once
// its body is closed, with the bytes the client read. Reads served to a
// peer as the key's owner are not counted (the peer counts them as remote
// hits or misses).
type ReadCounters struct {
	LocalHit    ReadCount `json:"local_hit"`
	LocalMiss   ReadCount `json:"local_miss"`
	RemoteHit   ReadCount `json:"remote_hit"`
	RemoteMiss  ReadCount `json:"remote_miss"`
	PassThrough ReadCount `json:"pass_through"`
	// DiskHit: served from the node's disk tier (disk.go).
	DiskHit ReadCount `json:"disk_hit"`
}

// ReadCount is how many reads of one kind ended, the bytes they sent and
// the time they took (from the request to the body's close).
type ReadCount struct {
	Count int64 `json:"count"`
	Bytes int64 `json:"bytes"`
	Nanos int64 `json:"nanos"`
}

// counters are the atomic counterparts of Counters, updated next to the
// Prometheus series (which are costlier to read back).
type counters struct {
	localHit, localMiss, remoteHit, remoteMiss, passThrough, diskHit readCounter
	writes                                                           atomic.Int64
	// open is the reads handed to a client whose body is not closed yet:
	// they count when it is.
	open                    atomic.Int64
	notAdmitted, writeNanos atomic.Int64
	fitMu                   sync.Mutex
	fit                     admission.StoreFit
}

type readCounter struct{ n, bytes, nanos atomic.Int64 }

func (r *readCounter) load() ReadCount {
	return ReadCount{Count: r.n.Load(), Bytes: r.bytes.Load(), Nanos: r.nanos.Load()}
}

// storeFit is a copy of the store reads' fit.
func (c *counters) storeFit() admission.StoreFit {
	c.fitMu.Lock()
	defer c.fitMu.Unlock()
	return c.fit
}

// read records one finished read that took d; outcomes outside the six
// (reads for a peer) are not counted. A whole object the store served
// (a miss or a pass-through read to its end) joins the store's fit.
func (c *counters) read(o Outcome, bytes int64, d time.Duration, whole bool) {
	if whole && (o == LocalMiss || o == PassThrough) {
		c.fitMu.Lock()
		c.fit.Add(bytes, d)
		c.fitMu.Unlock()
	}
	var r *readCounter
	switch o {
	case LocalHit, StaleHit:
		r = &c.localHit
	case LocalMiss:
		r = &c.localMiss
	case RemoteHit, ErasureHit:
		r = &c.remoteHit
	case RemoteMiss:
		r = &c.remoteMiss
	case PassThrough:
		r = &c.passThrough
	case DiskHit:
		r = &c.diskHit
	default:
		return
	}
	r.n.Add(1)
	r.bytes.Add(bytes)
	r.nanos.Add(int64(d))
}

// SettledCounters is Counters once no read is open: a client that has
// read a body's last byte may get its answer before the server has closed
// the body and counted the read, so a platform reading one invocation's
// reads right after it ended waits for them. It waits at most until ctx
// ends, polling every millisecond, and then returns what is counted.
func (c *Cachelet) SettledCounters(ctx context.Context) Counters {
	for c.m.counts.open.Load() > 0 && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-c.cfg.Clock.After(time.Millisecond):
		}
	}
	return c.Counters()
}

// Counters returns a snapshot of the read and write counters and of the
// occupancy of the whole budget (Budget: the memory tier and the shards
// held for the application). It is cheap: atomic loads and one look at the
// cache's totals.
func (c *Cachelet) Counters() Counters {
	k := &c.m.counts
	s := c.cache.Stats()
	var ec *erasure.Health
	if c.ec != nil {
		ec = c.ec.health()
	}
	budget, used := c.Budget()
	return Counters{
		Erasure: ec,
		Reads: ReadCounters{
			LocalHit: k.localHit.load(), LocalMiss: k.localMiss.load(),
			RemoteHit: k.remoteHit.load(), RemoteMiss: k.remoteMiss.load(),
			PassThrough: k.passThrough.load(), DiskHit: k.diskHit.load(),
		},
		Writes:       k.writes.Load(),
		CacheBytes:   used,
		CacheObjects: int64(s.Objects),
		BudgetBytes:  budget,
		EvictedAgain: c.evicted.again.Load(),
		NotAdmitted:  k.notAdmitted.Load(),
		WriteNanos:   k.writeNanos.Load(),
		StoreFit:     k.storeFit(),
	}
}

// maxEvictedKeys bounds the keys remembered as evicted; when full the
// memory starts over (an object evicted again after that is missed once).
const maxEvictedKeys = 100000

// evictionLog remembers which keys were evicted, to count repeat
// evictions.
type evictionLog struct {
	mu    sync.Mutex
	seen  map[cache.Key]struct{}
	again atomic.Int64
}

func (l *evictionLog) note(k cache.Key) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.seen[k]; ok {
		l.again.Add(1)
		return
	}
	if l.seen == nil || len(l.seen) >= maxEvictedKeys {
		l.seen = map[cache.Key]struct{}{}
	}
	l.seen[k] = struct{}{}
}
