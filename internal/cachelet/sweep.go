package cachelet

import (
	"errors"
	"time"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/cacheconfig"
)

// Sweeps (OFC §6.3) and proactive expiry: one goroutine, started by New
// when either is on and stopped by Close, drops from memory the entries
// that do not earn their place (cache.Sweep) and, under the ttl policy,
// those whose TTL has passed (cache.Expire), instead of waiting for room
// to be needed or for a lookup to find them. Swept entries go to the disk
// tier like evicted ones.

// SweepConfig is the periodic sweep of the memory tier. The zero value
// is OFC's: every 300 s, fewer than 5 reads or none for 30 minutes.
// Entries admitted without a read (pre-warmed, written, installed by a
// peer) face the read count only a whole interval after their first
// read, and until then only the idle rule, from their admission
// (cache.MarkUnread): nothing pre-warmed is swept before its function
// could read it, and nothing unread stays past Idle plus an interval.
type SweepConfig struct {
	// Off: no sweep.
	Off bool
	// Interval between sweeps; 0: OFC's 300 s.
	Interval time.Duration
	// MinReads: entries read fewer times are swept. Default 5.
	MinReads int
	// Idle: entries not read for this long are swept. Default 30 min.
	Idle time.Duration
}

func (s *SweepConfig) validate() error {
	if s.Interval < 0 || s.MinReads < 0 || s.Idle < 0 {
		return errors.New("cachelet: sweep settings must not be negative")
	}
	if s.Off {
		if s.Interval != 0 || s.MinReads != 0 || s.Idle != 0 {
			return errors.New("cachelet: the sweep is off: no interval, reads or idle time to set")
		}
		return nil
	}
	if s.Interval == 0 {
		s.Interval = cacheconfig.OFCSweepInterval
	}
	if s.MinReads == 0 {
		s.MinReads = cacheconfig.OFCSweepMinReads
	}
	if s.Idle == 0 {
		s.Idle = cacheconfig.OFCSweepIdle
	}
	return nil
}

// expireEvery is how often expired entries are dropped under the ttl
// policy: a quarter of the TTL, between 1 s and 1 min.
func expireEvery(ttl time.Duration) time.Duration {
	return min(max(ttl/4, time.Second), time.Minute)
}

// startSweeps starts the sweeping goroutine when a sweep or the ttl
// policy asks for one.
func (c *Cachelet) startSweeps() {
	sweep := c.cfg.Sweep
	var every time.Duration
	if !sweep.Off && sweep.Interval > 0 {
		every = sweep.Interval
	}
	if c.cfg.Cache.Policy == cache.PolicyTTL {
		e := expireEvery(c.cfg.Cache.TTL)
		if every == 0 || e < every {
			every = e
		}
	}
	if every == 0 {
		return
	}
	rule := cache.SweepRule{MinReads: sweep.MinReads, Idle: sweep.Idle, MinAge: sweep.Interval}
	c.sweeping.Add(1)
	go func() {
		defer c.sweeping.Done()
		last := c.clock.Now()
		for {
			select {
			case <-c.stopped.Done():
				return
			case <-c.clock.After(every):
			}
			if n := c.cache.Expire(); n > 0 {
				c.log.Debug("expired cached objects", "objects", n)
			}
			if !sweep.Off && sweep.Interval > 0 && c.clock.Now().Sub(last) >= sweep.Interval {
				last = c.clock.Now()
				n, bytes := c.cache.Sweep(rule, c.spill)
				c.m.sweptBytes.Add(float64(bytes))
				c.log.Debug("swept the memory tier", "objects", n, "bytes", bytes)
			}
		}
	}()
}
