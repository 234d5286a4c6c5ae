package cachelet

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/peer"
	"github.com/hoard-io/hoard/internal/store"
)

// Router says which cachelet of the application owns a key. The cachelet
// consults it on every miss; implementations follow membership changes
// (a new ring per change) and must be safe for concurrent use and cheap
// (no I/O: a lookup in the current ring).
type Router interface {
	// Owner returns the peer address of bucket/key's owner, and self when
	// that owner is this cachelet. An empty addr with self false means no
	// owner is known (no ring yet): the caller goes to the store.
	Owner(bucket, key string) (addr string, self bool)
}

// Peers is the client side of the peer protocol (peer.Client satisfies it).
type Peers interface {
	Get(ctx context.Context, addr, bucket, key, ifNoneMatch string) (*peer.Object, error)
	Put(ctx context.Context, addr, bucket, key string, body io.Reader, size int64, opts store.PutOptions, persist peer.Persist) (store.PutResult, error)
	Invalidate(ctx context.Context, addr string, keys []peer.Key) error
	Flush(ctx context.Context, addr string, revision int64) error
}

// Outcomes of reads served through the key's owner.
const (
	// RemoteHit: the owner had the object in memory.
	RemoteHit Outcome = "remote_hit"
	// RemoteMiss: the owner fetched it from the store and kept it.
	RemoteMiss Outcome = "remote_miss"
)

// OwnershipChanged tells the cachelet that the ring changed, so eviction
// re-classifies owned and non-owned objects. Called by the membership
// watcher after each new ring. The hot objects this cachelet owned are
// offered to their new owners (migrate.go).
//
// Under the owner settings it runs an ownership handoff (handoff.go).
func (c *Cachelet) OwnershipChanged() {
	// What this cachelet knew of the store versions of keys it no
	// longer owns goes stale as their new owners write them
	// (durable_base.go).
	c.known.forgetMoved(c.ownsWrites)
	if c.ec != nil {
		c.ec.changed() // shards of departed members are rebuilt
	}
	// Backups of members that left go to the store queue before the
	// handoff drains it, and copies this cachelet's writes had at a
	// member that left go to another (durable_backup.go).
	c.takeOver()
	c.rebackup()
	if c.cfg.ownerMode() {
		c.startHandoff()
		return
	}
	// Reads validate every copy here: the hot objects this cachelet
	// owned are offered to their new owners, and stay here too (no
	// longer owned, they are evicted first).
	hot := c.hotOwned()
	c.cache.OwnershipChanged()
	if len(hot) > 0 {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			c.offer(migrateHandoff, hot)
		}()
	}
}

// ownsWrites reports whether this cachelet delivers k's durable writes
// as the key's owner: always, but under the owner write target with
// members, where the ring says.
func (c *Cachelet) ownsWrites(k cache.Key) bool {
	if c.cfg.WriteTarget != WriteOwner || !c.cfg.ownerMode() {
		return true
	}
	_, self := c.cfg.owner(k)
	return self
}

// owner says who owns k: the peer address, and self when this cachelet
// does. A cachelet on its own owns everything. In an application, an
// empty address with self false means no owner is known (no ring yet, or
// this cachelet lost its membership session and claims nothing): callers
// then take the strong path, the store.
func (c *Config) owner(k cache.Key) (addr string, self bool) {
	if c.Router == nil || c.Peers == nil {
		return "", true
	}
	return c.Router.Owner(k.Bucket, k.Object)
}

// confirmWithOwner asks k's owner whether e is current (ReadOwner). It
// reports handled=false when the owner cannot answer, so the caller falls
// back to the store's word.
func (c *Cachelet) confirmWithOwner(ctx context.Context, k cache.Key, e *cache.Entry, addr string) (_ served, handled bool, _ error) {
	fl := c.keys.ask(k)
	defer c.keys.endAsk(k, fl)
	fctx, cancel := c.fillContext(ctx)
	obj, err := c.cfg.Peers.Get(fctx, addr, k.Bucket, k.Object, e.Info().ETag)
	switch {
	case errors.Is(err, store.ErrNotModified):
		cancel()
		c.m.validations.WithLabelValues("fresh").Inc()
		return fromEntry(e, LocalHit), true, nil
	case err == nil:
		c.m.validations.WithLabelValues("changed").Inc()
		c.cache.RemoveIf(k, e)
		e.Release()
		body := cancelOnClose{ReadCloser: c.watchPeerBody(checkedAgainstStore(obj.Body, obj.Info), k, addr), cancel: cancel}
		sv, err := c.installed(k, body, obj.Info, fl)
		if err == nil && sv.outcome == LocalMiss {
			sv.outcome = remoteOutcome(obj.Outcome)
		}
		return sv, true, err
	case errors.Is(err, store.ErrNoSuchKey), errors.Is(err, store.ErrNoSuchBucket):
		cancel()
		c.m.validations.WithLabelValues("gone").Inc()
		e.Release()
		c.Invalidate(k.Bucket, k.Object)
		return served{}, true, err
	}
	cancel()
	c.notePeerAnswer(err, k, addr)
	c.m.peerFallbacks.Inc()
	c.log.Debug("owner unavailable for a version check, asking the store", "bucket", k.Bucket, "key", k.Object, "owner", addr, "err", err)
	return served{}, false, nil
}

// PeerGet serves a whole object to a peer, as its owner: from memory after
// confirming it (per the read mode), or from the store (kept afterwards).
// It implements peer.Owner; it never forwards to another cachelet.
func (c *Cachelet) PeerGet(ctx context.Context, bucket, key, ifNoneMatch string) (*peer.Object, error) {
	start := c.clock.Now()
	if c.cfg.ownerMode() {
		if err := c.waitHandoff(ctx); err != nil {
			return nil, err
		}
	}
	k := cache.Key{Bucket: bucket, Object: key}
	if c.ecPeerNotModified(k, ifNoneMatch) {
		// A sharded object's version this owner trusts: no store request
		// (erasure_check.go).
		return nil, store.ErrNotModified
	}
	sv, err := c.acquire(ctx, k, false)
	if err != nil {
		return nil, err
	}
	info, body, outcome := sv.objectInfo(), sv.body, sv.outcome
	if sv.entry != nil {
		body = sv.entry.ReadCloser(0, info.Size) // closing it releases sv's reference
	}
	if ifNoneMatch != "" && ifNoneMatch == info.ETag {
		body.Close()
		return nil, store.ErrNotModified
	}
	po := peer.RemoteMiss
	if outcome == LocalHit || outcome == DiskHit {
		po = peer.RemoteHit
	}
	c.m.peerServed.WithLabelValues(string(po)).Inc()
	c.servedPeer(k) // an access: it makes k hot (migrate.go)
	obj := &peer.Object{Info: info, Body: c.m.track(body, servedForPeer, start), Outcome: po}
	if e := sv.entry; e != nil {
		// The answer's MAC covers the body's CRC32C: computed once per
		// entry (its bytes are final once complete, and a fill that
		// fails never completes an answer), not once per peer.
		obj.KnownCRC32C, obj.HasCRC32C = e.CRC32C()
		obj.Digested = e.SetCRC32C
	}
	return obj, nil
}

// servedForPeer labels reads made on behalf of a peer in the read metrics.
const servedForPeer Outcome = "for_peer"

// PeerPut takes a write through from a peer, as the key's owner. With
// PersistSync the store is written before PeerPut returns; with
// PersistAsync the owner keeps the object in memory (it serves it from
// there) and persists it in the background. An object too large for the
// memory tier is written through to the store either way.
func (c *Cachelet) PeerPut(ctx context.Context, bucket, key string, body io.Reader, size int64, opts store.PutOptions, persist peer.Persist) (store.PutResult, error) {
	if persist == peer.PersistAsync && c.cfg.Log != nil && c.cfg.WriteTarget == WriteOwner {
		// Under durable writes a write offered during a handoff waits
		// for it (bounded by its 10 s and the writer's deadline) and is
		// then taken as any other: refused, the writer would write the
		// store itself while the key's old owner may still be
		// delivering an older write of it, and the old owner may not
		// have seen the new ring yet. The handoff depends on no write
		// offered here (durable writers hand writes over synchronously;
		// flushes drain the store queues only).
		if err := c.waitHandoff(ctx); err != nil {
			return store.PutResult{}, err
		}
	}
	if persist == peer.PersistAsync {
		if c.inHandoff() {
			// Refused, the writer writes the store itself. What this
			// cachelet took as the key's owner before the ring changed is
			// older than that write and must be in the store first, or it
			// would land over it (the handoff delivers it too, but the
			// writer does not wait for the handoff). Only the queue for
			// the store is awaited: it depends on no other member, whose
			// own handoff may be waiting on this one.
			if err := c.toStore.Drain(ctx); err != nil {
				return store.PutResult{}, fmt.Errorf("%w: queued writes not delivered before the refusal: %v", store.ErrUnavailable, err)
			}
			return store.PutResult{}, errHandoff
		}
		if c.leaving.Load() {
			// Refuse only once what this cachelet queued as the owner is
			// in the store: the writer then writes the store itself, and
			// its write must land after those, not before.
			select {
			case <-c.left:
			case <-ctx.Done():
				return store.PutResult{}, fmt.Errorf("%w: %v", store.ErrUnavailable, ctx.Err())
			}
			return store.PutResult{}, errLeaving
		}
		if _, self := c.cfg.owner(cache.Key{Bucket: bucket, Object: key}); !self {
			// Rings disagree (a membership change in progress) or this
			// cachelet lost its session: holding the write here could
			// hide it from the key's real owner. The writer falls back
			// to the store.
			return store.PutResult{}, peer.ErrNotOwner
		}
	}
	switch {
	case persist == peer.PersistAsync && c.cache.Admissible(size):
		return c.acceptOwned(ctx, bucket, key, body, size, opts)
	case persist == peer.PersistAsync, persist == peer.PersistSync:
		// The peer's CRC32C is checked as the body streams on.
		opts.StreamVerified = true
		return c.putThrough(ctx, bucket, key, body, size, opts)
	}
	return store.PutResult{}, fmt.Errorf("%w: unknown persistence %q", peer.ErrBadRequest, persist)
}

// PeerInvalidate drops cached copies of keys at a peer's request.
func (c *Cachelet) PeerInvalidate(_ context.Context, keys []peer.Key) {
	for _, k := range keys {
		if k.Key == "" {
			c.vers.forget(k.Bucket) // the bucket's settings changed
			continue
		}
		c.Invalidate(k.Bucket, k.Key)
		// The store changed by another route: the next durable write
		// of the key asks it for the version it replaces.
		c.known.changed(cache.Key{Bucket: k.Bucket, Object: k.Key}, "", false)
	}
}

// errLeaving refuses a peer's write once the cachelet is leaving.
var errLeaving = fmt.Errorf("%w: leaving the application", peer.ErrNotOwner)

// Leave prepares a clean departure from the application: from now on
// writes offered by peers are refused (their writers go to the store), and
// everything queued is delivered, so that when the cachelet leaves the
// ring no write it took as an owner is still missing from the store.
// Call it after the S3 listener stopped and before leaving membership.
func (c *Cachelet) Leave(ctx context.Context) error {
	if c.leaving.Swap(true) {
		return nil
	}
	c.fenceWrites()
	err := c.Drain(ctx)
	c.flushBackupDone(ctx) // the backups drop what the store has now
	close(c.left)
	return err
}
