package cachelet

import (
	"strings"

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
// It returns how many cached objects it dropped. The node agent calls it
// over the control API (package control) to drop a pipeline run's
// intermediate objects when the run ends.
// It costs one pass over the cache's entries under the cache's lock, so it
// suits such occasional bulk drops, not per-request use.
func (c *Cachelet) DropPrefix(bucket, prefix string) int {
	match := func(k cache.Key) bool { return k.Bucket == bucket && strings.HasPrefix(k.Object, prefix) }

	// First what is in flight: fills, store requests whose answer is not
	// in, writes about to cache their bytes. Dooming them before the cache
	// is searched means a fill either ends before the search (and is found
	// there) or is refused when it ends.
	c.keys.doomInFlight(match)

	// Then the cached copies. wmu keeps buffered writes out meanwhile: one
	// cached but not yet recorded as unpersisted would be dropped.
	keys := c.cache.Keys(match)
	c.wmu.Lock()
	n := c.keys.dropCached(keys)
	c.wmu.Unlock()
	if c.cfg.Disk != nil {
		// Their disk copies too (those this process wrote or read):
		// they would only take the room of objects still of use.
		c.cfg.Disk.RemovePrefix(bucket, prefix)
	}
	c.log.Debug("dropped cached objects", "bucket", bucket, "prefix", prefix, "objects", n)
	return n
}
