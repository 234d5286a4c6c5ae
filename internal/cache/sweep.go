package cache

import "time"

// Sweeps (OFC §6.3): besides evicting to make room, the cache can be
// swept of the entries that do not earn their place, which gives their
// memory back (to the function, through the memory daemon) before it is
// needed. Every Get counts a read of its entry and stamps it; Sweep drops
// the entries read fewer than MinReads times or not read for Idle.
//
// When the count starts. An entry admitted by a read (a fill after a
// miss, the usual way in) faces the read count once it has been cached
// MinAge (a whole sweep period), as in OFC. An entry admitted without a
// read (pre-warmed, written, migrated in by a peer: the caller says so
// with MarkUnread) would face it before anyone had asked for it: a
// pre-warmed object is fetched while its function is idle, often more
// than a period before its next invocation. Such an entry's count starts
// at its first read instead (it faces the count MinAge after that read),
// and until that read only the idle rule applies, from its admission: an
// entry nobody reads is dropped once Idle has passed since it came in
// (OFC's "no read for 30 min"), so nothing is spared for ever. At most,
// an unread entry stays Idle plus a sweep period.

// SweepRule says which entries a sweep drops. OFC's (DefaultSweepRule):
// fewer than 5 reads, or none for 30 minutes.
type SweepRule struct {
	// MinReads: an entry read fewer times since it was added is dropped.
	MinReads int
	// Idle: an entry not read for this long (since it was added, if never
	// read) is dropped.
	Idle time.Duration
	// MinAge spares the entries whose read count started less than this
	// long ago (at their Add, or at their first read for those admitted
	// unread): they have not had the chance to be read MinReads times. A
	// sweep run every period passes the period, so an entry faces the
	// read count after a whole period.
	MinAge time.Duration
}

// DefaultSweepRule is OFC's, with its period (300 s) as MinAge.
var DefaultSweepRule = SweepRule{MinReads: 5, Idle: 30 * time.Minute, MinAge: 300 * time.Second}

// MarkUnread says that e, k's entry, came into the cache without a read
// (pre-warmed, written, installed by a peer): its read count starts at
// its first read, and until then only the idle rule of a sweep applies
// to it (see the top of this file). e may still be filling: its Add
// takes the mark. It does nothing (false) once e has been read in the
// cache or has left it, or without Config.TrackReads.
func (c *Cache) MarkUnread(k Key, e *Entry) bool {
	if !c.cfg.TrackReads || e == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.items[k] == e && e.reads == 0:
		e.counting = time.Time{}
		return true
	case !e.inCache && !e.left:
		e.unread = true // not added yet: Add starts no count
		return true
	}
	return false
}

// condemned reports whether rule drops e at now. Called with mu held.
func (rule SweepRule) condemned(e *Entry, now time.Time) bool {
	if e.counting.IsZero() {
		// Admitted unread and not read since: only the idle rule,
		// from its admission.
		return now.Sub(e.added) >= rule.Idle
	}
	last := e.lastRead
	if last.IsZero() {
		last = e.added
	}
	if now.Sub(last) >= rule.Idle {
		return true
	}
	return now.Sub(e.counting) >= rule.MinAge && int(e.reads) < rule.MinReads
}

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
		if !rule.condemned(e, now) {
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
