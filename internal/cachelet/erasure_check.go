package cachelet

import (
	"context"
	"errors"
	"sync"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/store"
)

// Version checks of sharded objects.
//
// Shards are keyed by the object's version, so a read served from them
// must know the version first. How it learns it follows the read mode, as
// a read of a cached copy does (get.go's confirm):
//
//   - strong (ReadVersionCheck): the store's word, one HEAD, shared as ADR
//     0019 shares validations: the reads of one key that arrive together
//     share one request, provided it is sent after each of them began. Per
//     key at most one HEAD is on the wire and one pending; a read joins
//     only the pending one, which is sent as soon as the one on the wire is
//     answered. Every sharer linearizes at the instant the store judged
//     the request, inside its own interval (the ADR's argument holds
//     word for word: a HEAD is judged at one instant, as a conditional GET
//     is).
//   - local (ReadLocal): the version this cachelet last saw, with no
//     request, unless changes made outside hoard are not followed now
//     (untrusted).
//   - owner (ReadOwner): the key's owner trusts the version it last saw,
//     with no request (else the store's word); any other cachelet asks the
//     owner whether the version it saw is current, a conditional peer GET
//     that the owner answers 304 from what it knows (PeerGet), without the
//     store. An owner that knows another version, or none, answers with
//     the object, and a cachelet that trusts no version has nothing to
//     ask: the ordinary path then serves the read from the owner (the
//     store may lag the owner's writes). An owner that cannot be reached
//     leaves the store's word, as for cached copies.
//
// Two kinds of versions are never trusted without the store's word once: a
// version noted from a write through this cachelet (its info carries no
// LastModified; the store's other metadata, which a read returns, is not
// known yet), and one noted before an ownership change (the new owner's
// copy may be newer: each ring change starts a new trust generation, as
// the handoff clears the memory tier).

// largeKey is what a cachelet knows of a large key: the version it saw
// last, and the trust generation it saw it in.
type largeKey struct {
	info store.ObjectInfo
	gen  uint64
}

// version returns the version of k this cachelet saw last, and whether
// it was seen in the current trust generation.
func (e *ecPath) version(k cache.Key) (info store.ObjectInfo, current bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	lk, ok := e.large[k]
	return lk.info, ok && lk.gen == e.trustGen
}

// trusted returns the version of k a read may serve without asking
// anyone: seen in the current generation, with the store's metadata.
func (e *ecPath) trusted(k cache.Key) (store.ObjectInfo, bool) {
	info, current := e.version(k)
	return info, current && !info.LastModified.IsZero()
}

// distrustAll starts a new trust generation: every version seen so far is
// checked once more before it is trusted (the ring changed).
func (e *ecPath) distrustAll() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.trustGen++
}

// invalidations reads the count of writes' invalidations, for sawSince.
func (e *ecPath) invalidations() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.invalidated
}

// sawSince notes info as saw does unless a write invalidated a key since
// inv was read: an answer judged before a write must not be noted after
// it, where a later read could trust it.
func (e *ecPath) sawSince(k cache.Key, info store.ObjectInfo, inv uint64) {
	if e.invalidations() != inv {
		return
	}
	e.saw(k, info)
}

// ecVersion is the version of k a read from shards serves, checked as the
// read mode says (above); ok false: the ordinary path serves the read.
func (c *Cachelet) ecVersion(ctx context.Context, k cache.Key) (_ store.ObjectInfo, ok bool) {
	e := c.ec
	inv := e.invalidations()
	switch c.cfg.ReadMode {
	case ReadLocal:
		if known, trusted := e.trusted(k); trusted && !c.untrusted(k) {
			return known, true
		}
	case ReadOwner:
		c.ext.trusted(k.Bucket) // subscribes, as confirm does
		known, trusted := e.trusted(k)
		addr, self := c.cfg.owner(k)
		switch {
		case self:
			if trusted && !c.untrusted(k) {
				return known, true
			}
		case addr == "" || c.distrusted(addr):
			// No owner to ask: the store's word, below.
		case !trusted:
			// Nothing to ask the owner about: the ordinary path reads
			// from it (the store may lag the owner's writes).
			return store.ObjectInfo{}, false
		default:
			if fresh, handled := c.ecConfirmWithOwner(ctx, k, known.ETag, addr); handled {
				return known, fresh
			}
		}
	}
	info, err := e.checkShared(ctx, k)
	if err != nil {
		return store.ObjectInfo{}, false
	}
	// The version read is the one a later write invalidates (its shards
	// and their backups), and the one the next read may trust.
	e.sawSince(k, info, inv)
	return info, true
}

// ecConfirmWithOwner asks k's owner at addr whether etag is current. fresh:
// it is. handled false: the owner could not answer, and the store's word is
// the fallback (under replicated durable writes the ordinary path reads
// instead: handled, not fresh).
func (c *Cachelet) ecConfirmWithOwner(ctx context.Context, k cache.Key, etag, addr string) (fresh, handled bool) {
	fctx, cancel := context.WithTimeout(ctx, c.ec.cfg.Timeout)
	defer cancel()
	obj, err := c.cfg.Peers.Get(fctx, addr, k.Bucket, k.Object, etag)
	switch {
	case errors.Is(err, store.ErrNotModified):
		c.m.validations.WithLabelValues("fresh").Inc()
		return true, true
	case err == nil:
		// Another version: the ordinary path reads it from the owner.
		obj.Body.Close()
		c.m.validations.WithLabelValues("changed").Inc()
		return false, true
	case errors.Is(err, store.ErrNoSuchKey), errors.Is(err, store.ErrNoSuchBucket):
		c.m.validations.WithLabelValues("gone").Inc()
		return false, true
	}
	c.notePeerAnswer(err, k, addr)
	if c.bk != nil {
		// Replicated durable writes: the store may lag the owner's
		// acknowledged writes; the ordinary path asks the key's
		// backups (durable_read.go).
		return false, true
	}
	c.m.peerFallbacks.Inc()
	return false, false
}

// ecPeerNotModified says whether this cachelet, asked as k's owner whether
// etag is current, can answer yes from what it knows of a sharded object,
// without the store (ReadOwner): the version it saw last in the current
// trust generation, with no newer write held here and changes outside
// hoard followed.
func (c *Cachelet) ecPeerNotModified(k cache.Key, etag string) bool {
	if c.ec == nil || etag == "" || c.cfg.ReadMode != ReadOwner {
		return false
	}
	if _, self := c.cfg.owner(k); !self || c.keys.isUnpersisted(k) {
		return false
	}
	info, current := c.ec.version(k)
	return current && info.ETag == etag && !c.untrusted(k)
}

// check is one HEAD of a large key that reads share.
type check struct {
	done chan struct{} // closed once info and err are set

	ctx context.Context // once sent; the cachelet's, not a reader's

	// Under checks.mu.
	waiters  int
	sent     bool // on the wire (or about to be): nobody joins
	answered bool
	cancel   context.CancelFunc

	info store.ObjectInfo
	err  error
}

// checkSlot is a key's checks: the one on the wire and the one its next
// readers join.
type checkSlot struct{ inflight, pending *check }

// checks is the cachelet's shared version checks of large keys.
type checks struct {
	mu     sync.Mutex
	slots  map[cache.Key]*checkSlot
	closed bool // Close began: reads check alone
}

// checkShared asks the store for k's version, sharing the request with the
// reads of k that arrive before it is sent.
func (e *ecPath) checkShared(ctx context.Context, k cache.Key) (store.ObjectInfo, error) {
	c, cs := e.c, &e.checks
	cs.mu.Lock()
	if cs.closed {
		cs.mu.Unlock()
		return c.store.Stat(ctx, k.Bucket, k.Object)
	}
	if cs.slots == nil {
		cs.slots = make(map[cache.Key]*checkSlot)
	}
	s := cs.slots[k]
	if s == nil {
		s = &checkSlot{}
		cs.slots[k] = s
	}
	if s.inflight == nil && s.pending == nil {
		// Nobody else is checking k: this read sends its own request at
		// once; nobody joins a request already sent.
		s.inflight = &check{sent: true}
		cs.mu.Unlock()
		defer e.promoteCheck(k, s, true)
		return c.store.Stat(ctx, k.Bucket, k.Object)
	}
	v := s.pending
	if v == nil {
		v = &check{done: make(chan struct{})}
		s.pending = v
	}
	v.waiters++
	c.m.validationJoins.Inc()
	cs.mu.Unlock()
	select {
	case <-v.done:
		return v.info, v.err
	case <-ctx.Done():
		cs.mu.Lock()
		v.waiters--
		if v.waiters == 0 && v.sent && !v.answered {
			v.cancel()
		}
		cs.mu.Unlock()
		return store.ObjectInfo{}, ctx.Err()
	}
}

// promoteCheck ends k's check on the wire and sends the pending one, if
// any: it returns it, marked sent, or with spawn starts a goroutine that
// sends it (and those after it) and returns nil. A pending check nobody
// waits for, or one found while the cachelet closes, is answered with an
// error and not sent.
func (e *ecPath) promoteCheck(k cache.Key, s *checkSlot, spawn bool) *check {
	cs := &e.checks
	cs.mu.Lock()
	defer cs.mu.Unlock()
	next := s.pending
	s.inflight, s.pending = next, nil
	if next == nil {
		delete(cs.slots, k)
		return nil
	}
	if next.waiters == 0 || cs.closed {
		next.err = context.Canceled
		close(next.done)
		s.inflight = nil
		delete(cs.slots, k)
		return nil
	}
	// Detached from its readers: one that gives up leaves, and the last
	// to leave before the answer cancels it.
	next.sent = true
	next.ctx, next.cancel = context.WithCancel(e.c.stopped)
	if !spawn {
		return next
	}
	e.c.wg.Add(1)
	go func() {
		defer e.c.wg.Done()
		for v := next; v != nil; v = e.promoteCheck(k, s, false) {
			e.sendCheck(k, v)
		}
	}()
	return nil
}

// sendCheck sends v, a check that reads share, and hands its answer to
// them.
func (e *ecPath) sendCheck(k cache.Key, v *check) {
	v.info, v.err = e.c.store.Stat(v.ctx, k.Bucket, k.Object)
	e.checks.mu.Lock()
	v.answered = true
	e.checks.mu.Unlock()
	v.cancel()
	close(v.done)
}

// closeChecks makes later reads check alone, so that Close's wait for the
// cachelet's goroutines sees every check goroutine.
func (e *ecPath) closeChecks() {
	e.checks.mu.Lock()
	defer e.checks.mu.Unlock()
	e.checks.closed = true
}
