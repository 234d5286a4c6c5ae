package cachelet

import (
	"context"
	"errors"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/store"
)

// Shared validations (ADR 0019). Under ReadVersionCheck every read of a
// cached copy asks the store whether the copy is current. Reads of one
// entry that arrive together share that conditional GET, on one condition:
// the shared request is sent after each of its reads began. The store
// judges it at some instant between its sending and its answer, so that
// instant lies inside every sharer's own interval, and each read still
// linearizes at the store's answer, as a read that asked alone would.
//
// So a read never joins a validation already on the wire: it joins the
// next one, which is sent as soon as the one on the wire is answered. Per
// entry there is at most one validation in flight and one pending (the
// batch forming behind it); the pending one is the only one a read joins.
//
// A read that finds no validation of its entry on the wire sends its own,
// inline: nobody joins a request already sent, so its answer is that
// read's alone (and a reader that gives up before the answer cancels it).
// A pending validation, which reads share, is sent by a goroutine of the
// cachelet under a context detached from its readers: a reader that gives
// up leaves at once, and the request is cancelled only when every reader
// of it has left before its answer. The answer goes to every reader:
//
//   - fresh (304): each serves the entry, a local hit;
//   - changed (200): the answer is installed once as the entry's newer
//     version, and every reader serves it as it fills (a local miss); an
//     answer too large to keep is closed and each reader asks again;
//   - gone (404): the copy is dropped and each reader gets the error;
//   - failed: each reader fails (or serves a stale hit where
//     ServeStaleIfError allows), never the copy as if confirmed.
//
// A pending validation whose predecessor found the entry changed or gone
// is not sent: its readers start over (acquire), since the entry they
// would check is no longer the key's, and they find the newer one.

// validation is one conditional GET of a cached entry, shared by the reads
// that joined it before it was sent.
type validation struct {
	// ctx carries the values of the read that started it, without its
	// cancellation.
	ctx  context.Context
	done chan struct{} // closed once the fields below the line are set

	// Under Cachelet.valMu.
	waiters  int  // reads waiting for it
	sent     bool // the request is (about to be) on the wire: nobody joins
	answered bool // the store answered: leaving no longer cancels it
	cancel   context.CancelFunc

	// ---- set before done is closed
	fresh bool         // 304: the entry is current
	entry *cache.Entry // changed: the newer version, filling
	retry bool         // start over: not sent, or its answer streams through
	stale bool         // the answer says e is no longer the key's version
	err   error        // gone or failed
}

// valSlot is an entry's validations: the one on the wire and the one its
// next readers join.
type valSlot struct {
	inflight, pending *validation
}

// validations is the cachelet's shared validations, per entry.
type validations struct {
	slots  map[*cache.Entry]*valSlot
	closed bool // Close began: no new goroutines; reads validate alone
}

// validateShared checks e against the store, sharing the request with the
// other reads of e that arrive before it is sent.
func (c *Cachelet) validateShared(ctx context.Context, k cache.Key, e *cache.Entry, route bool) (served, error) {
	c.valMu.Lock()
	if c.vals.closed {
		c.valMu.Unlock()
		sv, _, err := c.validateAlone(ctx, k, e)
		return sv, err
	}
	if c.vals.slots == nil {
		c.vals.slots = make(map[*cache.Entry]*valSlot)
	}
	s := c.vals.slots[e]
	if s == nil {
		s = &valSlot{}
		c.vals.slots[e] = s
	}
	if s.inflight == nil && s.pending == nil {
		// Nobody else is checking e: this read sends its own request, at
		// once and inline. Nobody joins a request already sent, so its
		// answer is this read's alone.
		s.inflight = &validation{sent: true}
		c.valMu.Unlock()
		stale := false
		// Deferred: the readers behind this one must go on whatever
		// happens to it.
		defer func() { c.promote(k, e, s, stale, true) }()
		var (
			sv  served
			err error
		)
		sv, stale, err = c.validateAlone(ctx, k, e)
		return sv, err
	}
	v := s.pending
	if v == nil {
		// A request is on the wire: this read waits for the next one.
		v = &validation{ctx: context.WithoutCancel(ctx), done: make(chan struct{})}
		s.pending = v
	}
	v.waiters++
	c.m.validationJoins.Inc()
	c.valMu.Unlock()

	// This read holds a reference to e (acquire's): it goes with the
	// answer when e serves the read, and is released otherwise.
	select {
	case <-v.done:
	case <-ctx.Done():
		c.leaveValidation(v)
		e.Release()
		return served{}, ctx.Err()
	}
	switch {
	case v.fresh:
		return fromEntry(e, LocalHit), nil
	case v.entry != nil:
		e.Release()
		// A reference of its own to the newer version; one gone already
		// (evicted and released by all) is looked up again.
		if v.entry.Acquire() {
			return fromEntry(v.entry, LocalMiss), nil
		}
		return c.acquire(ctx, k, route)
	case v.retry:
		e.Release()
		return c.acquire(ctx, k, route)
	}
	if c.cfg.ServeStaleIfError && errors.Is(v.err, store.ErrUnavailable) && ctx.Err() == nil {
		c.log.Debug("cachelet: store unavailable, serving a stale copy", "bucket", k.Bucket, "key", k.Object, "err", v.err)
		return fromEntry(e, StaleHit), nil
	}
	e.Release()
	return served{}, v.err
}

// prepareValidation gives v its request context. Called with valMu held.
func (c *Cachelet) prepareValidation(v *validation) context.CancelFunc {
	fctx, cancel := c.fillContext(v.ctx)
	v.ctx = fctx
	return cancel
}

// leaveValidation takes a reader that gave up off v; the last one to
// leave before the answer cancels the request.
func (c *Cachelet) leaveValidation(v *validation) {
	c.valMu.Lock()
	defer c.valMu.Unlock()
	v.waiters--
	if v.waiters == 0 && v.sent && !v.answered {
		v.cancel()
	}
}

// runValidations sends v, a validation of e that reads share, then each
// validation that becomes pending behind it in turn, until none is.
func (c *Cachelet) runValidations(k cache.Key, e *cache.Entry, s *valSlot, v *validation) {
	defer c.wg.Done()
	for v != nil {
		c.validateOnce(k, e, v)
		stale := v.stale
		close(v.done)
		if v.entry != nil {
			// The readers took references of their own (or look
			// the key up again): the validation's goes.
			v.entry.Release()
		}
		v = c.promote(k, e, s, stale, false)
	}
}

// promote ends the validation of e on the wire (stale: its answer says e
// is no longer the key's version) and sends the pending one, if any: it
// returns it, marked sent, for the caller to send, or with spawn starts a
// goroutine that sends it (and those after it) and returns nil. When e is
// stale, nobody waits, or the cachelet is closing, the pending readers
// start over instead.
func (c *Cachelet) promote(k cache.Key, e *cache.Entry, s *valSlot, stale, spawn bool) *validation {
	c.valMu.Lock()
	defer c.valMu.Unlock()
	next := s.pending
	s.inflight, s.pending = next, nil
	switch {
	case next == nil:
		delete(c.vals.slots, e)
		return nil
	case stale || next.waiters == 0 || (spawn && c.vals.closed):
		// e is no longer the key's version (its readers start over and
		// find the newer one), nobody waits, or no goroutine may start.
		s.inflight = nil
		delete(c.vals.slots, e)
		next.retry = true
		close(next.done)
		return nil
	}
	next.sent = true
	next.cancel = c.prepareValidation(next)
	if !spawn {
		return next
	}
	c.wg.Add(1) // under valMu, before Close can see closed
	go c.runValidations(k, e, s, next)
	return nil
}

// validateOnce sends v's conditional GET of e and records its answer.
func (c *Cachelet) validateOnce(k cache.Key, e *cache.Entry, v *validation) {
	// The check's answer may be a newer version, installed below.
	fl := c.keys.ask(k)
	defer c.keys.endAsk(k, fl)
	body, info, _, err := c.store.Get(v.ctx, k.Bucket, k.Object, store.GetOptions{IfNoneMatch: e.Info().ETag, ChecksumMode: true})
	c.valMu.Lock()
	v.answered = true
	c.valMu.Unlock()
	switch {
	case errors.Is(err, store.ErrNotModified):
		v.cancel()
		c.m.validations.WithLabelValues("fresh").Inc()
		v.fresh = true
	case err == nil:
		c.m.validations.WithLabelValues("changed").Inc()
		v.stale = true
		c.cache.RemoveIf(k, e)
		sv, ierr := c.installed(k, cancelOnClose{ReadCloser: body, cancel: v.cancel}, info, fl)
		switch {
		case ierr != nil:
			v.err = ierr
		case sv.entry != nil:
			v.entry = sv.entry
		default:
			// Streamed through (too large to keep now, or closing):
			// one body cannot serve many readers; each asks again.
			sv.body.Close()
			v.retry = true
		}
	case errors.Is(err, store.ErrNoSuchKey), errors.Is(err, store.ErrNoSuchBucket):
		v.cancel()
		c.m.validations.WithLabelValues("gone").Inc()
		c.Invalidate(k.Bucket, k.Object)
		v.stale, v.err = true, err
	default:
		v.cancel()
		c.m.validations.WithLabelValues("error").Inc()
		v.err = err
	}
}

// validateAlone checks e against the store with a request of this read's
// own, and reports whether the answer says e is no longer the key's
// version.
func (c *Cachelet) validateAlone(ctx context.Context, k cache.Key, e *cache.Entry) (sv served, stale bool, err error) {
	fl := c.keys.ask(k)
	defer c.keys.endAsk(k, fl)
	// The request is this read's until the store answers (a reader that
	// gives up cancels it); a changed object's body then outlives it, as
	// a fill other reads join.
	fctx, cancel := c.fillContext(ctx)
	stop := context.AfterFunc(ctx, cancel)
	body, info, _, err := c.store.Get(fctx, k.Bucket, k.Object, store.GetOptions{IfNoneMatch: e.Info().ETag, ChecksumMode: true})
	if !stop() {
		if err == nil {
			body.Close()
		}
		cancel()
		e.Release()
		return served{}, false, ctx.Err()
	}
	switch {
	case errors.Is(err, store.ErrNotModified):
		cancel()
		c.m.validations.WithLabelValues("fresh").Inc()
		return fromEntry(e, LocalHit), false, nil
	case err == nil:
		// A newer version: the answer already carries it.
		c.m.validations.WithLabelValues("changed").Inc()
		c.cache.RemoveIf(k, e)
		e.Release()
		body = cancelOnClose{ReadCloser: body, cancel: cancel}
		sv, err := c.installed(k, body, info, fl)
		return sv, true, err
	case errors.Is(err, store.ErrNoSuchKey), errors.Is(err, store.ErrNoSuchBucket):
		cancel()
		c.m.validations.WithLabelValues("gone").Inc()
		e.Release()
		c.Invalidate(k.Bucket, k.Object)
		return served{}, true, err
	default:
		cancel()
		c.m.validations.WithLabelValues("error").Inc()
		if c.cfg.ServeStaleIfError && errors.Is(err, store.ErrUnavailable) && ctx.Err() == nil {
			// Asked for: the copy is served, marked as unconfirmed.
			c.log.Debug("cachelet: store unavailable, serving a stale copy", "bucket", k.Bucket, "key", k.Object, "err", err)
			return fromEntry(e, StaleHit), false, nil
		}
		// A doubt is a miss: without the store's word nothing is served.
		e.Release()
		return served{}, false, err
	}
}

// closeValidations makes later reads validate alone, so that Close's wait
// for the cachelet's goroutines sees every validation goroutine.
func (c *Cachelet) closeValidations() {
	c.valMu.Lock()
	defer c.valMu.Unlock()
	c.vals.closed = true
}
