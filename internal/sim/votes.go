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
// over every application and round: one vote per application, from its
// instances' counters summed, as the controller's.
type Votes struct {
	Up   int64 `json:"up"`   // +1: an owned object was evicted again
	Stay int64 `json:"stay"` // 0: substantial traffic, or a first reading
	Down int64 `json:"down"` // -1: rare accesses
}

// appVotes is what the controller reads from an application's cachelets
// between rounds, per instance: reads, evictions of owned objects evicted
// before, and whether it was read at an earlier round.
type appVotes struct {
	reads, again []int64
	counted      []bool // read at an earlier round
	evicted      []map[cache.Key]struct{}
}

// grow makes room for instance i.
func (v *appVotes) grow(i int) {
	for len(v.reads) <= i {
		v.reads = append(v.reads, 0)
		v.again = append(v.again, 0)
		v.counted = append(v.counted, false)
		v.evicted = append(v.evicted, nil)
	}
}

// shrink forgets the instances from n on.
func (v *appVotes) shrink(n int) {
	v.reads, v.again, v.counted = v.reads[:n], v.again[:n], v.counted[:n]
	clear(v.evicted[n:])
	v.evicted = v.evicted[:n]
}

// onEvict returns the eviction hook of app's instance i, counting
// evictions of owned objects evicted before.
func (c *cacheRun) onEvict(app string, i int) func(*cache.Entry) {
	v := c.votes[app]
	if v == nil {
		v = &appVotes{}
		c.votes[app] = v
	}
	v.grow(i)
	return func(e *cache.Entry) {
		if !e.Owned() || i >= len(v.evicted) {
			return
		}
		seen := v.evicted[i]
		if _, ok := seen[e.Key()]; ok {
			v.again[i]++
			return
		}
		if seen == nil || len(seen) >= maxEvictedKeys {
			seen = map[cache.Key]struct{}{}
			v.evicted[i] = seen
		}
		seen[e.Key()] = struct{}{}
	}
}

// vote runs a round of the scale controller over every application at
// at (round), as the controller's scaler does every VoteInterval.
func (c *cacheRun) vote(at time.Time) {
	for app := range c.apps {
		c.round(app, at, nil)
	}
}

// cacheVote is the cache policy's vote for app, as controller.cacheVote
// takes it: the evictions again and reads of the instances read at an
// earlier round summed; a first reading of some instance with nothing
// evicted again is a 0; no instance read before, no vote.
func (c *cacheRun) cacheVote(app string, window time.Duration) (scaling.Vote, bool) {
	v := c.votes[app]
	if v == nil {
		return scaling.Vote{}, false
	}
	var again, reads int64
	seen, fresh := 0, 0
	for i := range v.reads {
		if v.counted[i] {
			again += v.again[i]
			reads += v.reads[i]
			seen++
		} else {
			fresh++
		}
		v.reads[i], v.again[i], v.counted[i] = 0, 0, true
	}
	switch {
	case again == 0 && fresh > 0:
		// The controller's first reading of an instance: no rate to
		// judge yet.
		return scaling.Vote{Policy: scaling.PolicyCache}, true
	case seen == 0:
		return scaling.Vote{}, false
	}
	return scaling.CacheVote(scaling.CacheStats{EvictedMoreThanOnce: int(again), Accesses: int(reads), Window: window}, scaling.Config{}), true
}
