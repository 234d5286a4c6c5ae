package cachelet

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/cache"
)

// TestFillingOwnerStreamsToAPeer: a peer's read of an object its owner is
// still filling from the store gets the bytes the owner has while the
// store's body is stopped part-way (the owner's fill not ended), and the
// whole object, verified and cached, once it goes on.
func TestFillingOwnerStreamsToAPeer(t *testing.T) {
	g := newGroup(t, 2)
	data := object("k", 1, 200<<10)
	g.put(t, "k", data)
	hold := g.st.HoldBody(testBucket, "k", 150<<10)
	defer hold.Release()

	obj, err := g.members[1].Get(t.Context(), testBucket, "k", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Body.Close()
	<-hold.Reached()
	first := make([]byte, 64<<10)
	if _, err := io.ReadFull(obj.Body, first); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first, data[:len(first)]) {
		t.Fatal("wrong first bytes")
	}
	// (The store's body is still stopped: a peer server that waited for
	// the owner's fill to end would never have sent these.)
	hold.Release()
	rest, err := io.ReadAll(obj.Body)
	if err != nil || !bytes.Equal(append(first, rest...), data) {
		t.Fatalf("rest of the object: %d bytes, %v", len(rest), err)
	}
	if obj.Outcome != RemoteMiss {
		t.Fatalf("outcome %s, want %s", obj.Outcome, RemoteMiss)
	}
	g.mustRead(t, 1, "k", data, LocalHit)
}

// TestOwnerStreamOutlivesEviction: an owner streaming a large object's
// chunks to a peer straight from its cache entry keeps them while it
// does: the object evicted mid-answer, and its chunks wanted by other
// objects filling from the pool, the peer still gets every byte right.
func TestOwnerStreamOutlivesEviction(t *testing.T) {
	const size = 16<<20 + 1000 // more than the connections' buffers hold
	g := newGroup(t, 2, func(cfg *Config) {
		cfg.Cache.Budget, cfg.Cache.MaxObjectSize = 40<<20, 17<<20
	})
	data := object("big", 1, size)
	g.put(t, "big", data)
	g.mustRead(t, 0, "big", data, LocalMiss) // the owner holds it, in chunks
	if e := g.members[0].cache.Get(cache.Key{Bucket: testBucket, Object: "big"}); e == nil || e.Charge() == e.Size() {
		t.Fatal("the object is not held in pooled chunks")
	}

	addr := g.addrs[0]
	obj, err := g.members[1].cfg.Peers.Get(t.Context(), addr, testBucket, "big", "")
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Body.Close()
	first := make([]byte, 1<<20)
	if _, err := io.ReadFull(obj.Body, first); err != nil {
		t.Fatal(err)
	}
	// Evicted, and the pool asked for more than the object's chunks.
	g.members[0].Invalidate(testBucket, "big")
	for i := range 2 {
		key := fmt.Sprintf("other-%d", i)
		other := object(key, 1, size)
		g.put(t, key, other)
		g.mustRead(t, 0, key, other, LocalMiss)
	}
	rest, err := io.ReadAll(obj.Body)
	if err != nil {
		t.Fatalf("after %d bytes: %v", len(first)+len(rest), err)
	}
	if !bytes.Equal(append(first, rest...), data) {
		t.Fatal("the peer got other bytes than the object's")
	}
}

// TestOwnerRemembersTheCRC: an owner computes an entry's CRC32C for the
// first answer that sends it whole and signs later answers with it; the
// peers get the right bytes both times.
func TestOwnerRemembersTheCRC(t *testing.T) {
	g := newGroup(t, 3)
	data := object("k", 1, 100<<10)
	g.put(t, "k", data)
	g.mustRead(t, 0, "k", data, LocalMiss)
	e := cachedEntry(t, g.members[0], cache.Key{Bucket: testBucket, Object: "k"})
	if _, ok := e.CRC32C(); ok {
		t.Fatal("a CRC before any peer asked")
	}
	g.mustRead(t, 1, "k", data, RemoteHit)
	if got, ok := e.CRC32C(); !ok || got != crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli)) {
		t.Fatalf("the owner's entry remembers %x, %v", got, ok)
	}
	g.mustRead(t, 2, "k", data, RemoteHit)
}

// cachedEntry is c's cache entry of k once its fill has admitted it: a
// reader may have every byte before the filling goroutine adds the entry.
func cachedEntry(t *testing.T, c *Cachelet, k cache.Key) *cache.Entry {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if e := c.cache.Peek(k); e != nil {
			return e
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v never admitted to the cache", k)
		}
		runtime.Gosched()
	}
}
