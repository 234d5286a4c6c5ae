package cachelet

import (
	"context"
	"strings"
	"sync"

	"github.com/hoard-io/hoard/internal/cache"
)

// DropPrefix drops from memory every object of bucket whose key starts
// with prefix (an empty prefix: the whole bucket), and dooms the fills and
// store requests of such keys still in flight, so that none of them lands
// afterwards: a read that starts once DropPrefix returned fetches afresh.
// The store is not touched.
//
// Writes the store does not have yet stay: those this cachelet queued for
// the store under the owner and local write targets (async ones, and those
// it took as the key's owner) are the only copy until they are persisted,
// and reads must keep finding them. They are not counted. A write this
// cachelet queued for the key's owner (owner-async) is dropped from its
// memory like any copy; the queue still delivers it.
//
// It returns how many cached objects it dropped. Pipelines call it over
// the peer protocol to drop a run's intermediate objects when the run ends.
// It costs one pass over the cache's entries under the cache's lock (see
// keysWhere), so it suits such occasional bulk drops, not per-request use.
func (c *Cachelet) DropPrefix(bucket, prefix string) int {
	match := func(k cache.Key) bool { return k.Bucket == bucket && strings.HasPrefix(k.Object, prefix) }

	// First what is in flight: fills, store requests whose answer is not
	// in, writes about to cache their bytes. Dooming them before the cache
	// is searched means a fill either ends before the search (and is found
	// there) or is refused when it ends.
	c.mu.Lock()
	inFlight := map[cache.Key]bool{}
	for k := range c.filling {
		inFlight[k] = true
	}
	for k := range c.pending {
		inFlight[k] = true
	}
	for k := range c.asking {
		inFlight[k] = true
	}
	for k := range inFlight {
		if match(k) && c.unpersisted[k] == nil {
			c.doomLocked(k)
		}
	}
	c.mu.Unlock()

	// Then the cached copies. wmu keeps buffered writes out meanwhile: one
	// cached but not yet recorded as unpersisted would be dropped.
	keys := c.keysWhere(match)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, k := range keys {
		if c.unpersisted[k] != nil {
			continue
		}
		c.doomLocked(k)
		if c.cache.Remove(k) {
			n++
		}
	}
	c.log.Debug("dropped cached objects", "bucket", bucket, "prefix", prefix, "objects", n)
	return n
}

// doomLocked is Invalidate's first half: it dooms what writes and reads of
// k have in flight. Called with mu held.
func (c *Cachelet) doomLocked(k cache.Key) {
	if e := c.pending[k]; e != nil {
		c.cache.Doom(e)
		delete(c.pending, k)
	}
	c.doomReadsLocked(k)
}

// PeerDrop drops cached objects at a peer's request (see DropPrefix). It
// implements peer.Owner.
func (c *Cachelet) PeerDrop(_ context.Context, bucket, prefix string) (int, error) {
	return c.DropPrefix(bucket, prefix), nil
}

// census collects the cached keys a keysWhere call looks for.
type census struct {
	match func(cache.Key) bool
	mu    sync.Mutex
	keys  []cache.Key
}

func (s *census) saw(k cache.Key) {
	if s.match(k) {
		s.mu.Lock()
		s.keys = append(s.keys, k)
		s.mu.Unlock()
	}
}

// keysWhere returns the keys of the cached objects that match (and
// possibly of some added meanwhile). The cache offers no iteration; its
// OwnershipChanged asks Config.Owns about every entry under its lock, and
// the Owns that New installs reports those keys to the census in progress.
// Re-asking ownership is harmless: it is what the cache would learn at the
// next ring change (about 10 ms per 100k entries). A cache method listing
// keys would say this directly; until the cache has one, this is it.
func (c *Cachelet) keysWhere(match func(cache.Key) bool) []cache.Key {
	c.censusMu.Lock()
	defer c.censusMu.Unlock()
	s := &census{match: match}
	c.census.Store(s)
	c.cache.OwnershipChanged()
	c.census.Store(nil)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keys
}
