package cachelet

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/checksum"
	"github.com/hoard-io/hoard/internal/peer"
	"github.com/hoard-io/hoard/internal/store"
	"github.com/hoard-io/hoard/internal/writeback"
)

// putBuffered takes a write under the owner and local targets: the whole
// object is held in memory (it is what the owner serves until the store
// has it), its ETag is its MD5 as S3 gives single-part objects, and it is
// persisted in the background.
func (c *Cachelet) putBuffered(ctx context.Context, bucket, key string, body io.Reader, size int64, opts store.PutOptions) (store.PutResult, error) {
	if c.cfg.ownerMode() {
		if err := c.waitHandoff(ctx); err != nil {
			return store.PutResult{}, err
		}
	}
	// The bodies held at once, from their first byte until they are kept
	// or handed on, are bounded (Config.Cache.MaxUploadReserve).
	if err := c.buffering.acquire(ctx, size); err != nil {
		return store.PutResult{}, fmt.Errorf("%w: waiting for room to hold the body: %v", store.ErrUnavailable, err)
	}
	defer c.buffering.release(size)
	k := cache.Key{Bucket: bucket, Object: key}
	var probe *baseProbe
	if _, self := c.cfg.owner(k); c.cfg.WriteTarget != WriteOwner || self {
		// Under durable writes the version this write replaces is
		// learned while its body arrives (durable_base.go).
		probe = c.probeBase(ctx, k)
	}
	data, etag, err := readWhole(body, size)
	if err != nil {
		return store.PutResult{}, err
	}
	opts = withChecksum(data, etag, opts)
	w := writeback.Write{Bucket: bucket, Key: key, Data: data, Opts: opts}
	acked := store.PutResult{ETag: etag, Checksums: checksumsOf(opts)}

	if c.cfg.WriteTarget == WriteOwner {
		if addr, self := c.cfg.owner(k); !self {
			if addr == "" {
				// No owner known: nobody may hold the newest version
				// but the store.
				return c.putThrough(ctx, bucket, key, bytes.NewReader(data), size, opts)
			}
			if c.cfg.WriteMode == WriteAsync && c.cfg.Log == nil {
				// Under durable writes the owner logs it before
				// answering: the write goes to it synchronously.
				c.wmu.Lock()
				e := c.keep(k, data, etag, opts)
				done := c.toOwner.Enqueue(w)
				c.wmu.Unlock()
				if c.finalOutput(bucket, key) {
					// The owner persists it and drops its own copy.
					c.dropWhenPersisted(k, e, done)
				}
				c.m.writes.WithLabelValues("queued_to_owner", "ok").Inc()
				return acked, nil
			}
			res, err := c.cfg.Peers.Put(ctx, addr, bucket, key, bytes.NewReader(data), size, opts, peer.PersistAsync)
			if err == nil {
				if c.finalOutput(bucket, key) {
					// The owner holds it until persisted; no copy here.
					c.Invalidate(bucket, key)
					c.m.finalOutputs.WithLabelValues("written").Inc()
				} else {
					c.wmu.Lock()
					c.keep(k, data, etag, opts)
					c.wmu.Unlock()
				}
				c.m.writes.WithLabelValues("to_owner", "ok").Inc()
				res.Checksums = acked.Checksums
				return res, nil
			}
			if !errors.Is(err, store.ErrUnavailable) && !errors.Is(err, peer.ErrNotOwner) {
				return store.PutResult{}, err
			}
			// The owner cannot take it: the store can, synchronously,
			// and whoever owns the key by another ring drops its copy.
			c.m.peerFallbacks.Inc()
			res, err = c.putThrough(ctx, bucket, key, bytes.NewReader(data), size, opts)
			if err == nil {
				c.broadcastInvalidate(ctx, bucket, key)
			}
			return res, err
		}
	}
	held, err := c.logAndHold(ctx, k, w, etag, probe)
	if err != nil {
		return store.PutResult{}, err
	}
	if !held {
		// Overtaken by a handoff while being logged: refused, nothing
		// changed; the client retries once the handoff is over.
		return store.PutResult{}, fmt.Errorf("%w: ownership handoff in progress", store.ErrUnavailable)
	}
	c.m.writes.WithLabelValues("queued_to_store", "ok").Inc()
	return acked, nil
}

// withChecksum settles the checksum the store will record for a write
// held in memory, so that its acknowledgement and the copies served
// before the store has it report what the store will: the client's, its
// value computed here when it came in a trailer (already verified), which
// then goes to the store, and through an owner, as a header the store
// verifies. Without one the store records none. The body is whole and
// verified by now: nothing can cut it short on its way to the store.
//
// The body's MD5 (the ETag, etag in hex) goes with it as Content-MD5 when
// the client sent none: the store then commits the write only whole,
// whatever becomes of the connection on the way (versitygw commits a body
// that ends before its Content-Length), and records nothing more.
func withChecksum(data []byte, etag string, opts store.PutOptions) store.PutOptions {
	opts.StreamVerified = false
	if opts.ContentMD5 == "" {
		if sum, err := hex.DecodeString(etag); err == nil {
			opts.ContentMD5 = base64.StdEncoding.EncodeToString(sum)
		}
	}
	if opts.ChecksumValue != "" || opts.ChecksumAlgorithm == "" {
		return opts
	}
	algo, err := checksum.ParseAlgorithm(opts.ChecksumAlgorithm)
	if err != nil {
		return opts // the store refuses it, as it would refuse the client
	}
	opts.ChecksumAlgorithm, opts.ChecksumValue = string(algo), checksum.Sum(algo, data)
	return opts
}

// checksumsOf is the whole-object checksum a write carries, keyed as
// store.ObjectInfo.Checksums is; nil without one.
func checksumsOf(opts store.PutOptions) map[string]string {
	if opts.ChecksumAlgorithm == "" || opts.ChecksumValue == "" {
		return nil
	}
	return map[string]string{strings.ToUpper(opts.ChecksumAlgorithm): opts.ChecksumValue}
}

// readWhole reads exactly size bytes and the body's verified end, and
// returns them with their MD5, the ETag S3 gives single-part objects.
func readWhole(body io.Reader, size int64) ([]byte, string, error) {
	// Memory is taken as the bytes arrive, not on the client's word: a
	// client that declares a large body and sends little holds little.
	data := make([]byte, 0, min(size, firstBuffer))
	for int64(len(data)) < size {
		if len(data) == cap(data) {
			data = grow(data, size)
		}
		n, err := body.Read(data[len(data):cap(data)])
		data = data[:len(data)+n]
		if err == io.EOF && int64(len(data)) < size {
			err = io.ErrUnexpectedEOF
		}
		if err != nil && err != io.EOF {
			return nil, "", err
		}
	}
	var one [1]byte // the body must end here: its verification completes at EOF
	if n, err := body.Read(one[:]); n > 0 || (err != nil && err != io.EOF) {
		if err == nil {
			err = fmt.Errorf("%w: body longer than its declared length", peer.ErrBadRequest)
		}
		return nil, "", err
	}
	sum := md5.Sum(data)
	return data, hex.EncodeToString(sum[:]), nil
}

// keep caches a write's bytes under its ETag, replacing any older copy.
// Called with c.wmu held, so the cache, the record of unpersisted writes
// and the queues see writes in one order.
func (c *Cachelet) keep(k cache.Key, data []byte, etag string, opts store.PutOptions) *cache.Entry {
	e := c.writeEntry(k, data, etag, opts)
	c.replaceCopy(k, e)
	return e
}

// writeEntry is the cache entry of a write's bytes under its ETag.
func (c *Cachelet) writeEntry(k cache.Key, data []byte, etag string, opts store.PutOptions) *cache.Entry {
	size := int64(len(data))
	info := store.ObjectInfo{
		Bucket: k.Bucket, Key: k.Object, Size: size, ETag: etag, LastModified: c.clock.Now().UTC(),
		ContentType: opts.ContentType, ContentEncoding: opts.ContentEncoding,
		ContentDisposition: opts.ContentDisposition, ContentLanguage: opts.ContentLanguage,
		CacheControl: opts.CacheControl, Expires: opts.Expires, UserMetadata: opts.UserMetadata,
		Checksums: checksumsOf(opts),
	}
	if info.Checksums != nil {
		// A single PUT's checksum covers the whole object.
		info.ChecksumType = "FULL_OBJECT"
	}
	return cache.NewCompleteEntry(k, info, data)
}

// replaceCopy puts e, a write's entry, in place of k's cached copy.
func (c *Cachelet) replaceCopy(k cache.Key, e *cache.Entry) {
	c.Invalidate(k.Bucket, k.Object) // dooms reads that may predate this write
	if c.cache.Reserve(e.Info().Size) && c.cache.Add(e) {
		c.cache.MarkUnread(k, e) // written, not read: the sweep counts from its first read (sweep.go)
	}
}

// hold keeps a write that this cachelet persists in the background.
// Until the store has it, the write is the key's truth here: a read that
// misses the cache is served from it, never from the store's older
// version. id is its record in the durable log (durable.go); 0 without
// one. Under durable writes and the owner settings, unless replaying, it
// refuses (returns false, the record done) a write that a handoff or a
// leave overtook while it was being logged: their drains began after this
// write's checks and would not wait for it (fenceWrites). base is the
// store versions the logged write may replace (durable_base.go); a
// replayed write is put only over one of them, and its key's reads wait
// until it is settled.
//
// A logged write whose key moves to another owner before it is delivered
// (a ring change; bounded by the new owner's handoff, 10 s, only while
// the store keeps up) is put only over its base or its own version, as a
// replay is: the new owner may have delivered a later write of the key
// meanwhile, and this older one must not replace it. A 412 or another
// version means superseded: not delivered, counted, never served. The
// owner's own deliveries stay unconditional. The base is trustworthy
// across moves because a cachelet forgets what it knew of the versions
// of keys it stops owning (versionBook.forgetMoved): a later write of a
// key that came back asks the store (ADR 0030, "several members per
// node"). A write logged with its base unknown goes on asking the store
// for it, and is never delivered unconditionally once its key moved
// (durable_base.go, "Bases learned late").
func (c *Cachelet) hold(k cache.Key, w writeback.Write, etag string, id uint64, base []string, replaying bool) bool {
	if id != 0 && !replaying && w.Guard == nil && c.cfg.WriteTarget == WriteOwner && c.cfg.ownerMode() {
		w.Guard = &writeback.Guard{ETag: etag, Replaces: base, IfMoved: true}
	}
	held, _ := c.holdQueued(k, w, etag, id, base, replaying)
	return held
}

// holdQueued is hold that also returns a channel that receives the
// write's outcome in the store queue (nil when it is refused; at once
// writeback.ErrSuperseded when a later-logged write of the key is held
// already). w.Settled, when set, is called after hold's own step.
func (c *Cachelet) holdQueued(k cache.Key, w writeback.Write, etag string, id uint64, base []string, replaying bool) (bool, <-chan error) {
	after := w.Settled
	c.wmu.Lock()
	if id != 0 && !replaying && c.cfg.ownerMode() && (c.inHandoff() || c.leaving.Load()) {
		c.wmu.Unlock()
		c.logDone(id)
		return false, nil
	}
	if id != 0 && !c.order.admit(k, id) {
		// A write of the key logged after this one is held already:
		// this one is replaced at once (durable.go).
		c.wmu.Unlock()
		c.logDone(id)
		if after != nil {
			after(writeback.ErrSuperseded)
		}
		done := make(chan error, 1)
		done <- writeback.ErrSuperseded
		return true, done
	}
	// The write is the key's unpersisted truth before the older copy
	// leaves the cache: a read in between is served it, where a miss
	// would ask the owner or the store for an older version.
	e := c.writeEntry(k, w.Data, etag, w.Opts)
	c.keys.unpersisted(k, e)
	c.replaceCopy(k, e)
	var stored string // the store's ETag for it, once delivered
	outcome := make(chan error, 1)
	if id != 0 {
		w.Stored = func(res store.PutResult) { stored = res.ETag }
		if replaying {
			// What the store holds now is not known: the next
			// write of the key asks.
			c.known.held(k, etag, nil)
			c.replays.add(k)
			w.Guard = &writeback.Guard{ETag: etag, Replaces: base}
		} else {
			c.known.held(k, etag, base)
			c.replays.release(k) // this write is the key's truth now
			if base == nil && w.Guard != nil && w.Guard.IfMoved {
				c.known.waitBase(k, etag)
				c.wg.Add(1)
				go c.learnBase(k, etag)
			}
		}
	}
	// Persisted, superseded, failed or given up: the record goes before
	// a Drain (a synchronization point's) sees the write settled, so
	// that a delete made after the Drain is never answered by it.
	w.Settled = func(err error) {
		c.keys.persisted(k, e)
		if err == nil {
			c.cache.MarkOutput(k, e) // a shrink gives it up first (budget.go)
		}
		c.logSettled(k, id, err)
		if id != 0 {
			c.known.settled(k, etag, stored, err, c.ownsWrites)
		}
		if replaying {
			c.replayed(k, e, err)
		} else if errors.Is(err, errNewerInStore) {
			// Its key moved to another owner, which wrote it since
			// (the guard above): that write is newer.
			c.cache.Doom(e)
			c.cache.RemoveIf(k, e)
			c.m.movedSuperseded.Inc()
			c.log.Warn("durable writes: a write of a key that moved to another owner was not delivered: the new owner wrote the key meanwhile", "bucket", k.Bucket, "key", k.Object, "err", err)
		}
		if after != nil {
			after(err)
		}
		outcome <- err
	}
	done := c.toStore.Enqueue(w)
	c.wmu.Unlock()
	if c.finalOutput(k.Bucket, k.Object) {
		c.dropWhenPersisted(k, e, done)
	}
	return true, outcome
}

// storeSink persists queued writes to the store; a replayed write's
// Guard makes its put conditional (Cachelet.guard).
type storeSink struct {
	st store.Store
	c  *Cachelet
}

func (s storeSink) Persist(ctx context.Context, w writeback.Write) error {
	if w.Delete {
		return s.st.Delete(ctx, w.Bucket, w.Key)
	}
	opts := w.Opts
	if w.Guard != nil && w.Guard.IfMoved {
		k := cache.Key{Bucket: w.Bucket, Object: w.Key}
		switch {
		case s.c.ownsWrites(k) && !s.c.known.movedWrite(k, w.Guard.ETag):
			w.Guard = nil // the owner's own write: delivered as it is
		case w.Guard.Replaces == nil:
			// Moved, logged with its base unknown: delivered only
			// over the base it learned since (durable_base.go).
			vs, ok := s.c.known.learnedBase(k, w.Guard.ETag)
			if !ok {
				s.c.m.baseWaits.Inc()
				return errBaseUnknown
			}
			g := *w.Guard
			g.Replaces = vs
			w.Guard = &g
		}
	}
	if w.Guard != nil {
		var err error
		if opts, err = s.c.guard(ctx, w); err != nil {
			return err
		}
	}
	res, err := s.st.Put(ctx, w.Bucket, w.Key, bytes.NewReader(w.Data), int64(len(w.Data)), opts)
	if err != nil {
		if w.Guard != nil && errors.Is(err, store.ErrPreconditionFailed) {
			// Written by someone else between the check and the put.
			return fmt.Errorf("%w: %v", errNewerInStore, err)
		}
		return err
	}
	if w.Stored != nil {
		w.Stored(res)
	}
	return nil
}

// ownerSink hands queued writes to the key's owner at the time they are
// sent (it may have moved since they were queued); with no reachable
// owner, to the store.
type ownerSink struct{ c *Cachelet }

func (s ownerSink) Persist(ctx context.Context, w writeback.Write) error {
	k := cache.Key{Bucket: w.Bucket, Object: w.Key}
	if addr, self := s.c.cfg.owner(k); !self && addr != "" {
		_, err := s.c.cfg.Peers.Put(ctx, addr, w.Bucket, w.Key, bytes.NewReader(w.Data), int64(len(w.Data)), w.Opts, peer.PersistAsync)
		if err == nil || (!errors.Is(err, store.ErrUnavailable) && !errors.Is(err, peer.ErrNotOwner)) {
			return err
		}
	}
	return storeSink{st: s.c.store, c: s.c}.Persist(ctx, w)
}

// permanent says which persistence errors retrying cannot fix: the store
// refused the request itself (4xx), or the data is missing.
func permanent(err error) bool {
	var api *store.APIError
	if errors.As(err, &api) {
		return api.StatusCode >= 400 && api.StatusCode < 500 && api.StatusCode != http.StatusRequestTimeout
	}
	return errors.Is(err, store.ErrNoSuchBucket) || errors.Is(err, peer.ErrBadRequest) || errors.Is(err, errNewerInStore)
}

// acceptOwned takes a write through from a peer as the key's owner: kept
// in memory and persisted in the background. The bodies it holds at once
// are bounded apart from putBuffered's, which wait on owners' answers.
func (c *Cachelet) acceptOwned(ctx context.Context, bucket, key string, body io.Reader, size int64, opts store.PutOptions) (store.PutResult, error) {
	if err := c.accepting.acquire(ctx, size); err != nil {
		return store.PutResult{}, fmt.Errorf("%w: waiting for room to hold the body: %v", store.ErrUnavailable, err)
	}
	defer c.accepting.release(size)
	k := cache.Key{Bucket: bucket, Object: key}
	probe := c.probeBase(ctx, k)
	data, etag, err := readWhole(body, size)
	if err != nil {
		return store.PutResult{}, err
	}
	opts = withChecksum(data, etag, opts)
	w := writeback.Write{Bucket: bucket, Key: key, Data: data, Opts: opts}
	held, err := c.logAndHold(ctx, k, w, etag, probe)
	if err != nil {
		return store.PutResult{}, err
	}
	if !held {
		// Overtaken by a handoff or a leave while being logged: refused
		// as PeerPut refuses, once what this cachelet queued is in the
		// store, so the writer's own store write lands after it.
		if err := c.toStore.Drain(ctx); err != nil {
			return store.PutResult{}, fmt.Errorf("%w: queued writes not delivered before the refusal: %v", store.ErrUnavailable, err)
		}
		return store.PutResult{}, errHandoff
	}
	return store.PutResult{ETag: etag, Checksums: checksumsOf(opts)}, nil
}

// Drain waits until every write queued before the call is persisted (or
// failed for good), bounded by ctx.
func (c *Cachelet) Drain(ctx context.Context) error {
	return errors.Join(c.toOwner.Drain(ctx), c.toStore.Drain(ctx))
}

// syncPoint comes before an operation that changes the store directly
// (delete, copy, multipart completion) under the owner and local write
// targets: every write queued for the store or for an owner, here and at
// the other cachelets, is delivered first (the other members' queues, then
// the owners', whose queues the first step may have fed), so no older
// queued write lands after the operation. Under the store target nothing
// is queued and it returns at once.
func (c *Cachelet) syncPoint(ctx context.Context, bucket string, keys ...string) error {
	if c.cfg.WriteTarget == WriteStore {
		return nil
	}
	if err := c.Drain(ctx); err != nil {
		return fmt.Errorf("%w: queued writes did not reach the store: %v", store.ErrUnavailable, err)
	}
	if err := c.syncLog(ctx); err != nil {
		return fmt.Errorf("%w: the durable log could not record delivered writes: %v", store.ErrUnavailable, err)
	}
	owners := map[string]bool{}
	for _, key := range keys {
		if addr, self := c.cfg.owner(cache.Key{Bucket: bucket, Object: key}); !self && addr != "" {
			owners[addr] = true
		}
	}
	var others []string
	if c.cfg.Members != nil {
		for _, addr := range c.cfg.Members.PeerAddrs() {
			if !owners[addr] {
				others = append(others, addr)
			}
		}
	}
	for _, group := range [][]string{others, mapKeys(owners)} {
		for _, addr := range group {
			if err := c.cfg.Peers.Flush(ctx, addr, 0); err != nil && !errors.Is(err, store.ErrUnavailable) {
				return err
			}
			// A peer that cannot be reached has nothing it can still
			// deliver before its lease ends; the operation goes on.
		}
	}
	return nil
}

// PeerLister knows every other member's peer address (cluster.Member
// does; see Config.Members), so synchronization points can flush the
// writes queued at every member. Safe for concurrent use.
type PeerLister interface {
	PeerAddrs() []string
}

func mapKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// tellOwners drops the owners' copies of keys after the store changed
// directly, under the settings where reads trust owners (best effort: an
// unreachable owner loses its ownership with its lease).
func (c *Cachelet) tellOwners(ctx context.Context, bucket string, keys ...string) {
	if c.cfg.ReadMode == ReadVersionCheck || c.cfg.Peers == nil {
		return
	}
	byOwner := map[string][]peer.Key{}
	for _, key := range keys {
		if addr, self := c.cfg.owner(cache.Key{Bucket: bucket, Object: key}); !self && addr != "" {
			byOwner[addr] = append(byOwner[addr], peer.Key{Bucket: bucket, Key: key})
		}
	}
	for addr, ks := range byOwner {
		if err := c.cfg.Peers.Invalidate(ctx, addr, ks); err != nil {
			c.log.Warn("could not tell the owner to drop its copies", "owner", addr, "keys", len(ks), "err", err)
		}
	}
}
