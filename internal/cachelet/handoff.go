package cachelet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/peer"
	"github.com/hoard-io/hoard/internal/store"
)

// Ownership handoff under the owner settings.
//
// An owner answers from memory and persists writes in the background, so
// when the ring moves a key, its new owner must not serve the key before
// the old owner's queued writes of it reached the store, and the old owner
// must stop taking writes for it. On every ring change each cachelet runs
// a handoff: it drops what it holds, delivers its own queues, and asks
// every other member to deliver theirs once they too have seen the new
// membership revision (so none takes writes for keys it gave up). Until
// the handoff ends, its owner-trusting reads and its writes wait, and
// writes offered to it by peers are refused (the writer goes to the
// store). Under the store-confirmed default nothing is trusted, and no
// handoff is needed.
//
// The hot objects it held as their owner are not lost with the clear: it
// keeps references to them through the handoff and offers them to their
// new owners once it ends (migrate.go, ADR 32).

// handoffTimeout bounds one handoff; past it the cachelet serves again
// (an unreachable member's lease ends within its TTL, and it claims
// nothing after that).
const handoffTimeout = 10 * time.Second

// Revisioner knows the membership revision this cachelet has seen
// (cluster.Member does; see Config.Revision). Without it handoffs flush
// without waiting for peers to catch up. Safe for concurrent use.
type Revisioner interface {
	Revision() int64
}

// ownerMode reports whether this cachelet trusts owners (and so needs
// handoffs).
func (c *Config) ownerMode() bool {
	return c.Router != nil && c.Peers != nil &&
		(c.ReadMode == ReadOwner || c.WriteTarget == WriteOwner)
}

// everyKey matches every key (doomInFlight).
func everyKey(cache.Key) bool { return true }

// OwnershipChanging tells the cachelet that the ring is about to change
// (the membership watcher calls it before the new ring answers Owner, and
// OwnershipChanged after). Under the owner settings the handoff begins
// here: were it to begin only after the swap, a read arriving in between
// would find this cachelet the owner by the new ring and trust a copy it
// kept as a mere writer or reader, which the old owner may have replaced.
func (c *Cachelet) OwnershipChanging() {
	if !c.cfg.ownerMode() {
		return
	}
	c.hmu.Lock()
	defer c.hmu.Unlock()
	if c.begun != nil {
		return // begun already; OwnershipChanged has not run yet
	}
	id, done := c.keys.beginHandoff()
	c.keys.doomInFlight(everyKey)
	hot := c.hotOwned() // held through the clear, offered once the handoff ends
	c.cache.Clear()
	if c.ec != nil {
		c.ec.distrustAll() // the versions of sharded objects seen so far, too
	}
	c.begun = &begunHandoff{id: id, done: done, hot: hot}
}

// begunHandoff is a handoff OwnershipChanging began for startHandoff to
// carry out.
type begunHandoff struct {
	id   uint64
	done chan struct{}
	hot  []candidate // hot entries held for migration (migrate.go)
}

// startHandoff begins a handoff for the current ring (or carries out the
// one OwnershipChanging began); a newer one supersedes an older one still
// running (waiters wait for the newest).
func (c *Cachelet) startHandoff() {
	c.hmu.Lock()
	b := c.begun
	c.begun = nil
	c.hmu.Unlock()
	var id uint64
	var done chan struct{}
	var hot []candidate
	if b != nil {
		id, done, hot = b.id, b.done, b.hot
	} else {
		id, done = c.keys.beginHandoff()
	}
	// Fills and store requests already in flight began before the flushes:
	// doomed, they cannot land after the clears below and be trusted.
	c.keys.doomInFlight(everyKey)
	if b == nil {
		hot = c.hotOwned() // held through the clears, offered at the end
	}
	c.cache.Clear()
	if c.ec != nil {
		c.ec.distrustAll()
	}
	var rev int64
	if c.cfg.Revision != nil {
		rev = c.cfg.Revision.Revision()
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		start := c.clock.Now()
		ctx, cancel := context.WithTimeout(c.stopped, handoffTimeout)
		defer cancel()
		c.fenceWrites() // writes logged meanwhile are queued, or refused
		err := c.Drain(ctx)
		if c.cfg.Members != nil {
			for _, addr := range c.cfg.Members.PeerAddrs() {
				if ferr := c.cfg.Peers.Flush(ctx, addr, rev); ferr != nil {
					err = errors.Join(err, fmt.Errorf("peer %s: %w", addr, ferr))
				}
			}
		}
		c.keys.doomInFlight(everyKey)
		c.cache.Clear() // nothing fetched meanwhile predates the flushes
		if c.ec != nil {
			c.ec.distrustAll()
		}
		// Offers are refused after a handoff with errors until the
		// newest one ends cleanly (migrate.go): set before the end, so
		// no offer finds the end without it.
		if err != nil {
			c.mig.handoffFailed.Store(true)
		}
		newest := c.keys.endHandoff(id)
		if newest && err == nil {
			c.mig.handoffFailed.Store(false)
		}
		close(done)
		c.m.handoffs.Inc()
		took := c.clock.Now().Sub(start).Seconds()
		if err != nil {
			c.log.Warn("ownership handoff finished with errors", "revision", rev, "seconds", took, "err", err)
		} else {
			c.log.Info("ownership handoff done", "revision", rev, "seconds", took)
		}
		if !newest {
			// Superseded: the ring changed again; the newer handoff
			// offers what it found (nothing: this one cleared it).
			c.dropCandidates(migrateHandoff, hot)
			return
		}
		// The hot objects held through the clears go to their new owners,
		// which verify them (migrate.go): they, too, have seen the new
		// revision, since their flushes above waited for it.
		c.offer(migrateHandoff, hot)
	}()
}

// inHandoff reports whether a handoff is running.
func (c *Cachelet) inHandoff() bool {
	running, _ := c.keys.handingOff()
	return running
}

// waitHandoff returns once no handoff runs, or with ctx's error.
func (c *Cachelet) waitHandoff(ctx context.Context) error {
	for {
		running, done := c.keys.handingOff()
		if !running {
			return nil
		}
		select {
		case <-done:
		case <-ctx.Done():
			return fmt.Errorf("%w: ownership handoff in progress: %v", store.ErrUnavailable, ctx.Err())
		}
	}
}

// PeerFlush delivers everything this cachelet has queued (see
// peer.Owner), once it has seen membership revision rev.
func (c *Cachelet) PeerFlush(ctx context.Context, rev int64) error {
	if r := c.cfg.Revision; r != nil && rev > 0 {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for r.Revision() < rev {
			select {
			case <-tick.C:
			case <-ctx.Done():
				return fmt.Errorf("membership revision %d not seen here yet: %w", rev, ctx.Err())
			}
		}
	}
	// The writes this cachelet backs up for members gone by rev are
	// queued first: the caller (a new owner's handoff) must not serve
	// their keys from the store before they are in it.
	c.takeOver()
	return c.Drain(ctx)
}

// errHandoff refuses a peer's write during a handoff.
var errHandoff = fmt.Errorf("%w: ownership handoff in progress", peer.ErrNotOwner)

// broadcastInvalidate tells every other member to drop its copy of a key
// written straight to the store because its owner could not take it (the
// owner by this cachelet's ring may not be the owner by theirs), or
// changed in a way their copies' validation cannot see (see Change).
func (c *Cachelet) broadcastInvalidate(ctx context.Context, bucket, key string) {
	if c.cfg.Members == nil || c.cfg.Peers == nil {
		return
	}
	for _, addr := range c.cfg.Members.PeerAddrs() {
		if err := c.cfg.Peers.Invalidate(ctx, addr, []peer.Key{{Bucket: bucket, Key: key}}); err != nil {
			c.log.Debug("invalidate after a store fallback failed", "peer", addr, "err", err)
		}
	}
}
