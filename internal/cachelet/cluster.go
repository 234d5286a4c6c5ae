package cachelet

import (
	"context"
	"fmt"
	"io"
	"time"

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
// watcher after each new ring.
func (c *Cachelet) OwnershipChanged() { c.cache.OwnershipChanged() }

// PeerGet serves a whole object to a peer, as its owner: from memory after
// confirming it (per the read mode), or from the store (kept afterwards).
// It implements peer.Owner; it never forwards to another cachelet.
func (c *Cachelet) PeerGet(ctx context.Context, bucket, key, ifNoneMatch string) (*peer.Object, error) {
	start := time.Now()
	k := cache.Key{Bucket: bucket, Object: key}
	e, body, info, outcome, err := c.acquire(ctx, k, false)
	if err != nil {
		return nil, err
	}
	if e != nil {
		info = e.Info()
		body = io.NopCloser(e.Reader(0, info.Size))
	}
	if ifNoneMatch != "" && ifNoneMatch == info.ETag {
		body.Close()
		return nil, store.ErrNotModified
	}
	po := peer.RemoteMiss
	if outcome == LocalHit {
		po = peer.RemoteHit
	}
	c.m.peerServed.WithLabelValues(string(po)).Inc()
	return &peer.Object{Info: info, Body: c.m.track(body, servedForPeer, start), Outcome: po}, nil
}

// servedForPeer labels reads made on behalf of a peer in the read metrics.
const servedForPeer Outcome = "for_peer"

// PeerPut takes a write through from a peer. Only synchronous persistence
// exists so far: the store is written before PeerPut returns.
func (c *Cachelet) PeerPut(ctx context.Context, bucket, key string, body io.Reader, size int64, opts store.PutOptions, persist peer.Persist) (store.PutResult, error) {
	if persist != peer.PersistSync {
		return store.PutResult{}, fmt.Errorf("%w: persistence %q is not supported yet", peer.ErrBadRequest, persist)
	}
	return c.Put(ctx, bucket, key, body, size, opts)
}

// PeerInvalidate drops cached copies of keys at a peer's request.
func (c *Cachelet) PeerInvalidate(_ context.Context, keys []peer.Key) {
	for _, k := range keys {
		c.Invalidate(k.Bucket, k.Key)
	}
}
