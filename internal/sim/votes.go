package sim

import (
	"time"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/scaling"
)

// maxEvictedKeys bounds the keys an instance remembers as evicted, as
// its cachelet does: when full, the memory starts over.
const maxEvictedKeys = 100000

// Votes tallies the cache-size scaling policy's votes (scaling.CacheVote)
// over every application and round.
type Votes struct {
	Up   int64 `json:"up"`   // +1: an owned object was evicted again
	Stay int64 `json:"stay"` // 0: substantial traffic, or a first reading
	Down int64 `json:"down"` // -1: rare accesses
}

// appVotes is what the controller reads from an application's cachelets
// between rounds: reads, and evictions of owned objects evicted before.
type appVotes struct {
	reads, again int64
	counted      bool // read at an earlier round
	evicted      []map[cache.Key]struct{}
}

// onEvict returns the eviction hook of app's instance i, counting
// evictions of owned objects evicted before.
func (c *cacheRun) onEvict(app string, i int) func(*cache.Entry) {
	v := c.votes[app]
	if v == nil {
		v = &appVotes{evicted: make([]map[cache.Key]struct{}, len(c.sim.names))}
		c.votes[app] = v
	}
	return func(e *cache.Entry) {
		if !e.Owned() {
			return
		}
		seen := v.evicted[i]
		if _, ok := seen[e.Key()]; ok {
			v.again++
			return
		}
		if seen == nil || len(seen) >= maxEvictedKeys {
			seen = map[cache.Key]struct{}{}
			v.evicted[i] = seen
		}
		seen[e.Key()] = struct{}{}
	}
}

// vote runs one round of the cache policy's votes over every application.
func (c *cacheRun) vote(window time.Duration) {
	for _, v := range c.votes {
		if !v.counted {
			// The controller's first reading of an instance: no rate to
			// judge yet.
			v.counted = v.again == 0
			if v.counted {
				c.tally.Stay++
				v.reads = 0
				continue
			}
		}
		d := scaling.CacheVote(scaling.CacheStats{EvictedMoreThanOnce: int(v.again), Accesses: int(v.reads), Window: window}, scaling.Config{})
		switch {
		case d.Delta > 0:
			c.tally.Up++
		case d.Delta < 0:
			c.tally.Down++
		default:
			c.tally.Stay++
		}
		v.reads, v.again, v.counted = 0, 0, true
	}
}
