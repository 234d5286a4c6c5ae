package cachelet

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hoard-io/hoard/internal/peer"
	"github.com/hoard-io/hoard/internal/store"
)

// Writes held in memory (the owner and local write targets) are
// acknowledged before the store has them, so their answers can carry only
// what the cachelet knows: the ETag and the checksum, never the version id
// a versioned bucket's store gives each write, nor what a bucket's default
// object-lock retention adds. Writes to versioned buckets (Enabled or
// Suspended; object lock implies versioning) therefore go to the store
// before they are acknowledged, as conditional writes do, and so do writes
// to a bucket the store says is missing, which then get the store's own
// NoSuchBucket rather than an acknowledgement the store would refuse.

// VersioningReader is the optional store capability that says whether a
// bucket's writes get version ids (s3store.Store has it). Safe for
// concurrent use.
type VersioningReader interface {
	// Versioned reports whether bucket's versioning is Enabled or
	// Suspended. It returns store.ErrNoSuchBucket for a missing bucket
	// and store.ErrUnavailable when the store does not answer in time.
	Versioned(ctx context.Context, bucket string) (bool, error)
}

// unversionedFor is how long a bucket the store called unversioned (or
// whose versioning it could not tell) is taken as such without asking
// again. Versioning, once on, can be suspended but never removed, so a
// versioned bucket is remembered for as long as it is in the table. A
// bucket whose versioning changes through any cachelet of the application
// is asked again at its next write (BucketChanged); one changed behind
// them, at the store, may have its writes acknowledged without a version
// id for up to this long.
const unversionedFor = 5 * time.Second

// maxVersioningEntries bounds the table; when full it starts over.
const maxVersioningEntries = 4096

// versioning remembers buckets' versioning (zero value ready).
type versioning struct {
	mu sync.Mutex
	m  map[string]versioningEntry
}

type versioningEntry struct {
	versioned bool
	at        time.Time
}

// forget drops what is known of bucket's versioning.
func (v *versioning) forget(bucket string) {
	v.mu.Lock()
	delete(v.m, bucket)
	v.mu.Unlock()
}

func (v *versioning) lookup(bucket string, now time.Time) (versioned, ok bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	e, ok := v.m[bucket]
	if !ok || (!e.versioned && now.Sub(e.at) >= unversionedFor) {
		return false, false
	}
	return e.versioned, true
}

func (v *versioning) note(bucket string, versioned bool, now time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.m == nil || len(v.m) >= maxVersioningEntries {
		v.m = make(map[string]versioningEntry)
	}
	v.m[bucket] = versioningEntry{versioned: versioned, at: now}
}

// BucketVersioned reports whether bucket's versioning is Enabled or
// Suspended, as the store last said (asked at most every 5 s for a
// bucket it called unversioned); false when the store cannot say. Safe
// for concurrent use.
func (c *Cachelet) BucketVersioned(ctx context.Context, bucket string) bool {
	versioned, _ := c.versioned(ctx, bucket)
	return versioned
}

// writeThrough reports whether a write to bucket, which the write target
// would hold in memory, must reach the store before it is acknowledged:
// the bucket is versioned or missing. A store that cannot tell (no such
// capability, or no answer within its call timeout) leaves the write to
// the write target: its answer then lacks a version id, as before.
func (c *Cachelet) writeThrough(ctx context.Context, bucket string) bool {
	versioned, missing := c.versioned(ctx, bucket)
	return versioned || missing
}

// versioned asks the store, or the table, whether bucket is versioned,
// and whether the store said it is missing (never remembered).
func (c *Cachelet) versioned(ctx context.Context, bucket string) (versioned, missing bool) {
	vr, ok := c.store.(VersioningReader)
	if !ok {
		return false, false
	}
	now := c.clock.Now()
	if versioned, ok := c.vers.lookup(bucket, now); ok {
		return versioned, false
	}
	versioned, err := vr.Versioned(ctx, bucket)
	switch {
	case errors.Is(err, store.ErrNoSuchBucket):
		c.m.versioningChecks.WithLabelValues("missing").Inc()
		return false, true
	case err != nil:
		c.m.versioningChecks.WithLabelValues("error").Inc()
		c.vers.note(bucket, false, now)
		return false, false
	case versioned:
		c.m.versioningChecks.WithLabelValues("versioned").Inc()
	default:
		c.m.versioningChecks.WithLabelValues("unversioned").Inc()
	}
	c.vers.note(bucket, versioned, now)
	return versioned, false
}

// BucketChanged forgets what the cachelet, and under the owner and local
// write targets every other member, knows of bucket's settings (its
// versioning), after a request through it that may have changed them:
// created or deleted the bucket, or set its versioning or object lock.
// Telling the members is best effort, bounded by ctx. Safe for concurrent
// use.
func (c *Cachelet) BucketChanged(ctx context.Context, bucket string) {
	c.vers.forget(bucket)
	if c.cfg.WriteTarget == WriteStore || c.cfg.Members == nil || c.cfg.Peers == nil {
		return
	}
	for _, addr := range c.cfg.Members.PeerAddrs() {
		// An empty key names the bucket itself (peer.Key).
		if err := c.cfg.Peers.Invalidate(ctx, addr, []peer.Key{{Bucket: bucket}}); err != nil {
			c.log.Debug("could not tell a member that a bucket changed", "peer", addr, "bucket", bucket, "err", err)
		}
	}
}

func newVersioningChecks() *prometheus.CounterVec {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hoard_cachelet_versioning_checks_total",
		Help: "Buckets' versioning asked of the store (before a write held in memory under the owner and local write targets, after a read of a missing key), by answer: versioned and missing buckets are written through to the store before the write is acknowledged, unversioned ones (and error: the store could not tell) are not; a missing key of a versioned bucket is asked whether it is a delete marker.",
	}, []string{"result"})
	for _, r := range []string{"versioned", "unversioned", "missing", "error"} {
		v.WithLabelValues(r)
	}
	return v
}
