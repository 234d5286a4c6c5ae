package cachelet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/peer"
	"github.com/hoard-io/hoard/internal/store"
)

// Object is an open read: the object's metadata and a body holding exactly
// the requested bytes.
type Object struct {
	Info store.ObjectInfo
	// Range is the resolved range served (both ends inclusive), or nil when
	// the body is the whole object.
	Range *store.ByteRange
	// Body must be closed by the caller; closing it records the read in
	// the metrics.
	Body    io.ReadCloser
	Outcome Outcome
	// Unfollowed: the store's changes to the bucket are followed
	// (Config.External) but the subscription was not up, so the cached
	// copy was checked with the store instead of trusted (external.go).
	Unfollowed bool
}

// Length is the number of bytes in Body.
func (o *Object) Length() int64 {
	if o.Range == nil {
		return o.Info.Size
	}
	return o.Range.End - o.Range.Start + 1
}

// ResolveRange turns a requested range into absolute inclusive bounds for
// an object of the given size, as RFC 9110 does: a suffix longer than the
// object is the whole object, an end past the object is clamped, and a
// start at or past the end (or any range of an empty object) is
// store.ErrInvalidRange.
func ResolveRange(r store.ByteRange, size int64) (store.ByteRange, error) {
	if r.Start < 0 { // suffix: last -Start bytes
		n := -r.Start
		if size == 0 || n == 0 {
			return store.ByteRange{}, store.ErrInvalidRange
		}
		if n > size {
			n = size
		}
		return store.ByteRange{Start: size - n, End: size - 1}, nil
	}
	if r.Start >= size || r.End < -1 || (r.End >= 0 && r.End < r.Start) {
		return store.ByteRange{}, store.ErrInvalidRange
	}
	end := r.End
	if end < 0 || end >= size {
		end = size - 1
	}
	return store.ByteRange{Start: r.Start, End: end}, nil
}

// Get opens bucket/key for reading, the whole object or rng of it.
//
// Errors: store.ErrNoSuchKey, store.ErrNoSuchBucket, store.ErrInvalidRange,
// store.ErrUnavailable (nothing could be confirmed, so nothing is served
// from memory either), *store.APIError.
func (c *Cachelet) Get(ctx context.Context, bucket, key string, rng *store.ByteRange) (*Object, error) {
	start := c.clock.Now()
	k := cache.Key{Bucket: bucket, Object: key}
	if c.cfg.ownerMode() {
		if err := c.waitHandoff(ctx); err != nil {
			return nil, err
		}
	}
	if err := c.replays.wait(ctx, k); err != nil {
		return nil, err
	}
	if c.ec != nil {
		if obj, ok, err := c.ecGet(ctx, k, rng, start); ok {
			return obj, err
		}
	}
	if rng != nil && c.rangeUsesPages(k) {
		return c.getRange(ctx, k, *rng, start)
	}
	sv, err := c.acquire(ctx, k, true)
	if err != nil {
		if !errors.Is(err, store.ErrNoSuchKey) && !errors.Is(err, store.ErrNoSuchBucket) {
			c.m.readErrors.Inc()
		}
		return nil, err
	}
	e, body, info, outcome := sv.entry, sv.body, sv.objectInfo(), sv.outcome
	if c.ec != nil {
		c.ec.saw(k, info) // the next read of a large object goes to its shards
	}
	c.access.read(k, info.ETag, info.Size, outcome, start)
	if outcome == LocalHit {
		c.notePrewarmHit(k)
	}
	obj := &Object{Info: info, Outcome: outcome, Unfollowed: sv.unfollowed}
	off, n := int64(0), info.Size
	if rng != nil {
		r, err := ResolveRange(*rng, info.Size)
		if err != nil {
			sv.close()
			return nil, err
		}
		obj.Range = &r
		off, n = r.Start, r.End-r.Start+1
	}
	whole := int64(-1) // a whole object's reads fit the store's cost (counters.go)
	if rng == nil && !sv.fromPeer {
		whole = info.Size
	}
	if e != nil {
		obj.Body = c.m.trackWhole(e.ReadCloser(off, n), outcome, start, whole) // closing it releases sv's reference
		return obj, nil
	}
	// Pass-through: body holds the whole object. A ranged request asks the
	// store again for just its range, pinned to the version just seen.
	if rng != nil {
		body.Close()
		fctx, cancel := c.fillContext(ctx)
		b, _, _, err := c.store.Get(fctx, bucket, key, store.GetOptions{Range: obj.Range, IfMatch: info.ETag})
		if err != nil {
			cancel()
			if errors.Is(err, store.ErrPreconditionFailed) {
				err = ErrObjectChanged
			}
			return nil, err
		}
		body = cancelOnClose{ReadCloser: b, cancel: cancel}
	}
	obj.Body = c.m.trackWhole(body, outcome, start, whole)
	return obj, nil
}

// errNULKey answers a read of a key holding a NUL.
var errNULKey = fmt.Errorf("%w: keys never hold NUL", store.ErrNoSuchKey)

// ErrObjectChanged: the object changed in the store between the two
// requests of one streamed ranged read.
// It surfaces as a retryable 503, which is what it is.
var ErrObjectChanged = errors.New("object changed in the store while being read; retry")

// served says how a read is served: from a cache entry (complete or still
// filling), of which it holds a reference (cache.Entry.Acquire), or from a
// store body of the whole object streamed through (pass-through). Its
// receiver must read the entry through ReadCloser (which takes the
// reference over) or call close.
type served struct {
	entry *cache.Entry
	body  io.ReadCloser
	// info is the object's metadata when body serves it; with an entry,
	// the entry's (objectInfo).
	info    store.ObjectInfo
	outcome Outcome
	// unfollowed: checked with the store because the bucket's change
	// subscription was not up (Object.Unfollowed).
	unfollowed bool
	// fromPeer: body is the key's owner's answer streamed through, not
	// the store's (so not a point of the store's cost fit).
	fromPeer bool
}

// objectInfo is the metadata of the object served.
func (s served) objectInfo() store.ObjectInfo {
	if s.entry != nil {
		return s.entry.Info()
	}
	return s.info
}

// fromEntry serves a read from e, with the caller's reference to e.
func fromEntry(e *cache.Entry, o Outcome) served { return served{entry: e, outcome: o} }

// close gives up what s holds: its reference to the entry, or the body.
func (s served) close() {
	switch {
	case s.entry != nil:
		s.entry.Release()
	case s.body != nil:
		s.body.Close()
	}
}

// acquire finds or starts what serves a read of k: a cache entry (complete
// or filling), or a store body to stream through. route says whether a
// miss may go to the key's owner among the peers (a read on behalf of a
// peer never does: the owner answers from memory or the store). Any
// goroutine may call it.
func (c *Cachelet) acquire(ctx context.Context, k cache.Key, route bool) (served, error) {
	if strings.IndexByte(k.Object, 0) >= 0 {
		// No key holds a NUL (the S3 front refuses them): such a name
		// is a page's (pages.go), never an object's, whoever asks.
		return served{}, errNULKey
	}
	// A write replayed from the durable log is served once the store
	// confirmed it is still the newest (durable_base.go).
	if err := c.replays.wait(ctx, k); err != nil {
		return served{}, err
	}
	r := c.keys.beginRead(k)

	switch {
	case r.Entry != nil:
		// Cached, filling, or a write the store does not have yet
		// (newer than anything the store could answer).
		return c.confirm(ctx, k, r.Entry, route)
	case r.Lead:
		return c.lead(ctx, k, r.Flight, route)
	}
	// Follower of a cold read already asking the store.
	fl := r.Flight
	select {
	case <-fl.done:
	case <-ctx.Done():
		return served{}, ctx.Err()
	}
	if fl.entry != nil && fl.entry.Acquire() {
		return c.confirm(ctx, k, fl.entry, route)
	}
	// The leader's entry is gone already (evicted, and read by none):
	// fetched again below.
	if c.cfg.ReadMode == ReadLocal && fl.err != nil {
		return served{}, fl.err
	}
	// The leader streamed its answer through, or its answer predates this
	// read: ask ourselves.
	return c.fetch(ctx, k, nil, route)
}

// lead runs a cold read's store request on behalf of every reader that
// joins it.
func (c *Cachelet) lead(ctx context.Context, k cache.Key, fl *flight, route bool) (served, error) {
	sv, err := c.fetch(ctx, k, fl, route)
	c.keys.endFlight(k, fl, err)
	close(fl.done)
	return sv, err
}

// fetch reads the whole object, from its owner when routed there and
// another cachelet owns it, else from the store, and installs it. fl is the
// registered flight the GET answers; nil registers one of its own.
func (c *Cachelet) fetch(ctx context.Context, k cache.Key, fl *flight, route bool) (served, error) {
	if fl == nil {
		fl = c.keys.ask(k)
		defer c.keys.endAsk(k, fl)
	}
	// A miss the running function does not admit (admit.go) keeps no
	// copy: under the store write target it is the store's alone.
	keep := c.admits(route)
	if route && c.cfg.Router != nil && c.cfg.Peers != nil && (keep || c.cfg.WriteTarget != WriteStore) {
		addr, self := c.cfg.Router.Owner(k.Bucket, k.Object)
		if !self && addr != "" && c.distrusted(addr) {
			c.m.peerFallbacks.Inc() // its answers failed verification lately
			addr = ""
		}
		if !self && addr != "" {
			sv, err := c.fetchRemote(ctx, k, fl, addr, keep)
			if err == nil || errors.Is(err, store.ErrNoSuchKey) || errors.Is(err, store.ErrNoSuchBucket) {
				return sv, err // the owner asked the store
			}
			// The owner cannot answer (down, cut off, or its ring
			// differs): the store can, and serving goes on; under
			// replicated durable writes once the key's backups said
			// it has the owner's last acknowledged write
			// (durable_read.go).
			c.m.peerFallbacks.Inc()
			if sv, handled, err := c.readFromBackups(ctx, k, addr, nil); handled {
				return sv, err
			}
			c.log.Debug("owner unavailable, reading from the store", "bucket", k.Bucket, "key", k.Object, "owner", addr, "err", err)
		}
	}
	if keep {
		if sv, handled, err := c.fromDisk(ctx, k, fl); handled {
			return sv, err
		}
	}
	fctx, cancel := c.fillContext(ctx)
	body, info, _, err := c.store.Get(fctx, k.Bucket, k.Object, store.GetOptions{ChecksumMode: true})
	if err != nil {
		cancel()
		return served{}, err
	}
	if !keep {
		return c.notAdmitted(cancelOnClose{ReadCloser: body, cancel: cancel}, info), nil
	}
	if c.ec != nil {
		c.ecFill(k, info) // a large object is sharded in the background
	}
	body = splittable{cancelOnClose{ReadCloser: body, cancel: cancel}}
	return c.installed(k, body, info, fl)
}

// notAdmitted serves a miss the running function does not admit: the
// body streams through as a pass-through, counted (admit.go).
func (c *Cachelet) notAdmitted(body io.ReadCloser, info store.ObjectInfo) served {
	c.m.counts.notAdmitted.Add(1)
	return served{body: body, info: info, outcome: PassThrough}
}

// installed installs a store answer and says how the read is served.
func (c *Cachelet) installed(k cache.Key, body io.ReadCloser, info store.ObjectInfo, fl *flight) (served, error) {
	if c.ec != nil && c.ecSharded(k, info) {
		// Its shards hold it: not kept whole as well.
		if sb, ok := body.(splittable); ok {
			body = sb.ReadCloser
		}
		return served{body: body, info: info, outcome: PassThrough}, nil
	}
	e, pass, err := c.install(k, body, info, fl)
	switch {
	case err != nil:
		return served{}, err
	case e != nil:
		return served{entry: e, info: info, outcome: LocalMiss}, nil
	}
	return served{body: pass, info: info, outcome: PassThrough}, nil
}

// confirm serves a read from entry e, first checking it against the store
// unless reads are local. The caller's reference to e goes with the
// answer when e serves the read, and is released otherwise.
func (c *Cachelet) confirm(ctx context.Context, k cache.Key, e *cache.Entry, route bool) (served, error) {
	if e.Aborted() {
		// A fill that failed is a miss, never partial bytes.
		e.Release()
		return c.fetch(ctx, k, nil, route)
	}
	if c.ext != nil && c.cfg.ReadMode == ReadOwner {
		c.ext.trusted(k.Bucket) // subscribes: copies kept here are dropped when told
	}
	unfollowed := false
	switch c.cfg.ReadMode {
	case ReadLocal:
		if c.untrusted(k) { // changes outside hoard not followed now
			sv, _, err := c.validateAlone(ctx, k, e)
			sv.unfollowed = true
			return sv, err
		}
		return fromEntry(e, LocalHit), nil
	case ReadOwner:
		addr, self := c.cfg.owner(k)
		switch {
		case self && c.untrusted(k):
			// Changes outside hoard not followed now: the store's
			// word, below.
			unfollowed = true
		case self:
			// The owner holds the newest version written through
			// the application: its memory is the answer.
			return fromEntry(e, LocalHit), nil
		case route && addr != "" && !c.distrusted(addr):
			if sv, handled, err := c.confirmWithOwner(ctx, k, e, addr); handled {
				return sv, err
			}
			// The owner cannot answer: under replicated durable
			// writes its backups may hold a newer write than the
			// store (durable_read.go).
			if sv, handled, err := c.readFromBackups(ctx, k, addr, e); handled {
				return sv, err
			}
		}
		// No owner known (no ring, membership lost), or a peer asked
		// this cachelet as the owner while its own ring disagrees: the
		// store's word.
	}
	if c.cfg.ReadMode == ReadOwner {
		// The owner setting's fallback asks alone, as it always did:
		// shared checks are strong's (ADR 0019).
		sv, _, err := c.validateAlone(ctx, k, e)
		sv.unfollowed = unfollowed
		return sv, err
	}
	// The store's word, shared with the reads of e arriving meanwhile
	// (validate.go).
	return c.validateShared(ctx, k, e, route)
}

// Stat returns an object's metadata. Under ReadLocal a cached copy answers;
// otherwise the store does, and a cached copy it contradicts is dropped.
func (c *Cachelet) Stat(ctx context.Context, bucket, key string) (store.ObjectInfo, error) {
	k := cache.Key{Bucket: bucket, Object: key}
	if strings.IndexByte(key, 0) >= 0 {
		return store.ObjectInfo{}, errNULKey
	}
	if err := c.replays.wait(ctx, k); err != nil {
		return store.ObjectInfo{}, err
	}
	e := c.cache.Peek(k)
	if e != nil && c.cfg.ReadMode == ReadLocal && !c.untrusted(k) {
		return e.Info(), nil
	}
	if c.cfg.ReadMode == ReadOwner || c.cfg.WriteTarget != WriteStore {
		// The newest version may not be in the store yet (persisted in
		// the background): ask the way a read does.
		if c.cfg.ownerMode() {
			if err := c.waitHandoff(ctx); err != nil {
				return store.ObjectInfo{}, err
			}
		}
		sv, err := c.acquire(ctx, k, true)
		if err != nil {
			return store.ObjectInfo{}, err
		}
		info := sv.objectInfo()
		sv.close()
		return info, nil
	}
	info, err := c.store.Stat(ctx, bucket, key)
	if e != nil {
		if errors.Is(err, store.ErrNoSuchKey) || (err == nil && info.ETag != e.Info().ETag) {
			c.cache.RemoveIf(k, e)
		}
	}
	return info, err
}

// fetchRemote fetches a whole object from its owner at addr and keeps a
// copy: a remote hit when the owner had it, a remote miss when the owner
// read it from the store (and kept it). The answer's headers were verified
// by the peer client; its body is verified as it is read (the answer's
// signature, and the store's checksum when the answer carries one:
// verify.go), before its last bytes, so a body that fails is never cached.
//
// keep false (a miss the running function does not admit) streams the
// verified body through without keeping it.
func (c *Cachelet) fetchRemote(ctx context.Context, k cache.Key, fl *flight, addr string, keep bool) (served, error) {
	fctx, cancel := c.fillContext(ctx)
	obj, err := c.cfg.Peers.Get(fctx, addr, k.Bucket, k.Object, "")
	if err != nil {
		cancel()
		c.notePeerAnswer(err, k, addr)
		return served{}, err
	}
	body := cancelOnClose{ReadCloser: c.watchPeerBody(checkedAgainstStore(obj.Body, obj.Info), k, addr), cancel: cancel}
	if !keep {
		sv := c.notAdmitted(body, obj.Info)
		sv.fromPeer = true
		return sv, nil
	}
	sv, err := c.installed(k, body, obj.Info, fl)
	if err != nil || sv.outcome == PassThrough {
		sv.fromPeer = err == nil
		return sv, err
	}
	sv.outcome = remoteOutcome(obj.Outcome)
	return sv, nil
}

// remoteOutcome is how a read the owner served counts here.
func remoteOutcome(o peer.Outcome) Outcome {
	if o == peer.RemoteHit {
		return RemoteHit
	}
	return RemoteMiss
}
