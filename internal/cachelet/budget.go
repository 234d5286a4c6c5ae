package cachelet

import (
	"runtime/debug"
	"time"

	"github.com/hoard-io/hoard/internal/erasure"
)

// SetBudget changes the cachelet's budget to n bytes (a negative n is 0)
// while the cachelet runs: with erasure coding, the shard store and the
// backups keep the share of it Erasure.Memory and Erasure.BackupMemory
// were of Cache.Budget and the memory tier has
// the rest, each evicting to fit, and returns the bytes of the cached objects
// it evicted to fit: complete objects go in the eviction policy's order,
// fills in flight keep their reservations (and are not kept if they no
// longer fit when they end; see cache.SetBudget). Raising the budget evicts
// nothing; the cache grows back as objects are read.
//
// After a shrink that evicted anything, the freed memory is returned to
// the operating system at once (runtime/debug.FreeOSMemory): an instance's
// memory cgroup charges every page the Go runtime still holds, so without
// it the evicted bytes would keep counting against the function's memory
// until the runtime's scavenger got to them. With
// Config.MemoryLimitOverhead, the process's soft memory limit follows the
// budget.
//
// A shrink evicts the outputs the store has first (writes persisted and
// not read since), then the rest in the eviction policy's order
// (cache.SetBudget). Objects evicted from the memory tier are dropped,
// not lost: writes the store does not have yet stay readable
// (consistency.go keeps them apart), and everything else is read from the
// store or its owner again; hot ones whose owner is another member are
// offered to it first, in the background (migrate.go, ADR 32). The node
// agent's memory daemon calls it over the control API (package control).
func (c *Cachelet) SetBudget(n int64) (freed int64) {
	n = max(n, 0)
	c.budgetMu.Lock()
	defer c.budgetMu.Unlock()
	start := c.clock.Now()
	old, _ := c.Budget()
	// The shards and backups held for the application keep their share
	// of the budget (Erasure.Memory and BackupMemory of Cache.Budget at
	// the start).
	tier, shards := n, int64(0)
	if c.ec != nil {
		shards = c.ec.shareOf(n)
		tier = n - shards
	}
	if n < old {
		// Evict first, then lower the runtime's limit: the collection
		// the lower limit brings on then finds the evicted bytes garbage.
		// The hot objects evicted are held to be offered to their
		// owners (migrate.go), bounded by Migrate.MaxBytes.
		each, hot := c.shrinkCollector()
		shed := c.cache.BufferStats().Shed
		freed = c.cache.SetBudgetEach(tier, each)
		// Free chunks kept in the room the budget had are dropped
		// with it (cache.Buffers): memory to return as well.
		shed = c.cache.BufferStats().Shed - shed
		if hot != nil {
			if len(*hot) == 0 {
				c.endShrink()
			} else {
				c.wg.Add(1)
				go func(cs []candidate) {
					defer c.wg.Done()
					c.offer(migrateShrink, cs)
					debug.FreeOSMemory() // the bytes held for the offers
				}(*hot)
			}
		}
		if c.ec != nil {
			freed += c.ec.setBudget(shards)
		}
		c.cfg.applyMemoryLimit(n)
		if freed > 0 || shed > 0 {
			debug.FreeOSMemory()
		}
		c.m.budgetChanges.WithLabelValues("shrink").Inc()
		c.m.budgetEvicted.Add(float64(freed))
	} else {
		c.cfg.applyMemoryLimit(n)
		freed = c.cache.SetBudget(tier)
		if c.ec != nil {
			freed += c.ec.setBudget(shards)
		}
		if n > old {
			c.m.budgetChanges.WithLabelValues("raise").Inc()
		}
	}
	if n != old {
		s := c.cache.Stats()
		c.log.Info("cache budget changed", "from_bytes", old, "to_bytes", n, "shard_bytes", shards, "freed_bytes", freed,
			"cache_bytes", s.Bytes, "reserved_bytes", s.Reserved, "objects", s.Objects, "took", c.clock.Now().Sub(start).Round(time.Microsecond))
	}
	return freed
}

// Budget is the cachelet's whole budget (the memory tier's and the shard
// store's, what Config.Cache.Budget and SetBudget set) and the bytes
// held within it.
func (c *Cachelet) Budget() (budget, used int64) {
	s := c.cache.Stats()
	budget, used = s.Budget, s.Bytes
	if c.ec != nil {
		for _, st := range []*erasure.Store{c.ec.shards, c.ec.bk.store} {
			es := st.Stats()
			budget += es.Budget
			used += es.Bytes
		}
	}
	return budget, used
}

// applyMemoryLimit sets the Go runtime's soft memory limit to
// MemoryLimit(budget), when Config.MemoryLimitOverhead is set.
func (c *Config) applyMemoryLimit(budget int64) {
	if c.MemoryLimitOverhead > 0 {
		debug.SetMemoryLimit(c.MemoryLimit(budget))
	}
}

// MemoryLimit is the Go runtime's soft memory limit for a budget: the
// budget plus MemoryLimitOverhead, less ResidentBase (the resident memory
// the runtime does not count) and a quarter of the overhead (the limit is
// soft: allocations go on while a collection runs, and the binary's pages
// that the process touches later count too), keeping at least a
// quarter of the overhead for the runtime. 0 without MemoryLimitOverhead.
func (c *Config) MemoryLimit(budget int64) int64 {
	o := c.MemoryLimitOverhead
	if o <= 0 {
		return 0
	}
	return budget + max(o-c.ResidentBase-o/4, o/4)
}
