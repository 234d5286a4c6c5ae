package cachelet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/erasure"
	"github.com/hoard-io/hoard/internal/peer"
	"github.com/hoard-io/hoard/internal/store"
)

// The holder's side (peer.ShardHolder).

// PeerShardPut keeps a shard a peer sends, once verified.
func (c *Cachelet) PeerShardPut(_ context.Context, bucket, key, etag string, index int, manifest string, body io.Reader, size int64) error {
	if c.ec == nil {
		return fmt.Errorf("%w: erasure coding is off here", peer.ErrBadRequest)
	}
	inv := c.ec.invalidations()
	err := c.ec.shards.Receive(erasure.ShardKey{Bucket: bucket, Key: key, ETag: etag, Index: index}, manifest, body, size)
	if err == nil {
		c.ec.stored.Inc()
		c.ec.noteHeld(cache.Key{Bucket: bucket, Object: key}, etag, manifest, inv)
		return nil
	}
	if errors.Is(err, erasure.ErrCorrupt) || errors.Is(err, erasure.ErrBadManifest) {
		c.log.Warn("shard refused", "bucket", bucket, "key", key, "shard", index, "err", err)
	}
	return shardError(err)
}

// noteHeld notes that k at etag is large, from the manifest of a shard
// this cachelet now holds, unless it knows that version already: a read
// here of a key it never read then goes to the shards (after the version
// check its read mode makes; a version noted so carries no store
// metadata, so it is never trusted without the store's word once:
// erasure_check.go), instead of asking the owner, which would read the
// object from the store again to answer. inv is the invalidation count
// read before the shard was received (sawSince).
func (e *ecPath) noteHeld(k cache.Key, etag, manifest string, inv uint64) {
	if known, _ := e.version(k); known.ETag == etag && e.knows(k) {
		return
	}
	m, err := erasure.ParseManifest(manifest)
	if err != nil {
		return
	}
	e.sawSince(k, store.ObjectInfo{Bucket: k.Bucket, Key: k.Object, ETag: etag, Size: m.Size}, inv)
}

// shardError is a shard store's refusal as the peer protocol's error.
func shardError(err error) error {
	switch {
	case errors.Is(err, erasure.ErrCorrupt), errors.Is(err, erasure.ErrBadManifest):
		return fmt.Errorf("%w: %v", peer.ErrBadRequest, err)
	case errors.Is(err, erasure.ErrTooLarge):
		return fmt.Errorf("%w: %v", store.ErrUnavailable, err)
	}
	return err
}

// errNoBackups: a backup sent to a cachelet that keeps none.
var errNoBackups = fmt.Errorf("%w: this cachelet keeps no shard backups", peer.ErrBadRequest)

// PeerShard serves the pieces of a shard this cachelet holds.
func (c *Cachelet) PeerShard(_ context.Context, bucket, key, etag string, first, end int) (int, string, []byte, error) {
	if c.ec == nil {
		return 0, "", nil, store.ErrNoSuchKey
	}
	i, m, b, err := c.ec.shards.Pieces(bucket, key, etag, first, end)
	switch {
	case errors.Is(err, erasure.ErrNotHeld):
		err = store.ErrNoSuchKey
	case errors.Is(err, erasure.ErrBadManifest):
		err = fmt.Errorf("%w: %v", peer.ErrBadRequest, err)
	}
	return i, m, b, err
}

// PeerShardDelete drops the shards of bucket/key at version etag ("": all).
func (c *Cachelet) PeerShardDelete(_ context.Context, bucket, key, etag string) {
	if c.ec != nil {
		c.ec.shards.Delete(bucket, key, etag)
		c.ec.dropVersion(bucket, key, etag)
	}
}

// ErasureCounters counts a cachelet's erasure-coded reads and rebuilds.
type ErasureCounters struct {
	// Hits: reads decoded from shards; Misses: reads that found fewer
	// than k (served the ordinary way); Fallbacks: reads whose later
	// window did (the store served the rest).
	Hits, Misses, Fallbacks int64
	// Rebuilt: shards this cachelet rebuilt and wrote to a new holder.
	// Restored: backed-up shards of departed members it wrote to their
	// object's placement.
	Rebuilt, Restored int64
	// BackedUp: the shards held that the last backup sent and that have
	// not changed since.
	BackedUp int
	// WarmUps and WarmUpBytes: warm-ups run and the bytes they read;
	// LastWarmUp: when the last ended (zero before the first).
	WarmUps, WarmUpBytes int64
	LastWarmUp           time.Time
}

// ErasureCounters returns the counts so far (zero when off).
func (c *Cachelet) ErasureCounters() ErasureCounters {
	if c.ec == nil {
		return ErasureCounters{}
	}
	n := &c.ec.counts
	held := c.ec.shards.Stats().Shards
	return ErasureCounters{Hits: n.hits.Load(), Misses: n.misses.Load(), Fallbacks: n.fallbacks.Load(), Rebuilt: n.rebuilt.Load(),
		Restored: n.restored.Load(), BackedUp: int(c.ec.backedUpShare(held)*float64(held) + 0.5),
		WarmUps: n.warmUps.Load(), WarmUpBytes: n.warmBytes.Load(), LastWarmUp: c.ec.lastWarmUp()}
}

// ErasureStats is what the erasure path holds (nil when off).
func (c *Cachelet) ErasureStats() *erasure.Stats {
	if c.ec == nil {
		return nil
	}
	s := c.ec.shards.Stats()
	return &s
}
