package cache

import "time"

// Sweeps (OFC §6.3): besides evicting to make room, the cache can be
// swept of the entries that do not earn their place, which gives their
// memory back (to the function, through the memory daemon) before it is
// needed. Every Get counts a read of its entry and stamps it; Sweep drops
// the entries read fewer than MinReads times or not read for Idle.

// SweepRule says which entries a sweep drops. OFC's (DefaultSweepRule):
// fewer than 5 reads, or none for 30 minutes.
type SweepRule struct {
	// MinReads: an entry read fewer times since it was added is dropped.
	MinReads int
	// Idle: an entry not read for this long (since it was added, if never
	// read) is dropped.
	Idle time.Duration
	// MinAge spares the entries added less than this long ago: they have
	// not had the chance to be read MinReads times. A sweep run every
	// period passes the period, so an entry faces the read count after a
	// whole period in the cache.
	MinAge time.Duration
}

// DefaultSweepRule is OFC's, with its period (300 s) as MinAge.
var DefaultSweepRule = SweepRule{MinReads: 5, Idle: 30 * time.Minute, MinAge: 300 * time.Second}

// Sweep drops the complete entries that rule condemns, calling each (if
// set) for every one under the cache's lock while the cache still holds
// it (as OnEvict: quick, no calls back into the cache; a reference taken
// there keeps the bytes). It returns how many it dropped and their
// bytes. Swept entries count in Stats.Swept, not as evictions. It takes
// one pass over the entries under the cache's lock. It needs
// Config.TrackReads (without it, it drops nothing).
func (c *Cache) Sweep(rule SweepRule, each func(*Entry)) (n int, bytes int64) {
	if !c.cfg.TrackReads {
		return 0, 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.cfg.Clock.Now()
	for _, e := range c.items {
		if now.Sub(e.added) < rule.MinAge {
			continue
		}
		last := e.lastRead
		if last.IsZero() {
			last = e.added
		}
		if int(e.reads) >= rule.MinReads && now.Sub(last) < rule.Idle {
			continue
		}
		if each != nil {
			each(e)
		}
		n++
		bytes += e.Charge()
		c.remove(e)
		c.stats.Swept++
	}
	return n, bytes
}

// Expire drops every entry whose TTL has passed (PolicyTTL), rather than
// waiting for a lookup to find it, and returns how many. They count in
// Stats.Expired. Under the other policies it does nothing.
func (c *Cache) Expire() int {
	if c.expiry == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for {
		e := c.order.victim() // PolicyTTL's victim is the entry closest to expiry
		if e == nil || !c.expiry.expired(e) {
			return n
		}
		c.remove(e)
		c.stats.Expired++
		n++
	}
}
