package cachelet

import (
	"bytes"
	"fmt"
	"io"
	"testing"

	"github.com/hoard-io/hoard/internal/cache"
)

// reuseGroup is two cachelets whose caches pool chunks, with a pool of
// one chunk of its own: what fills reuse beyond it lies in the budget's
// room (cache.Buffers).
func reuseGroup(t *testing.T, budget, maxObject int64) *group {
	return newGroup(t, 2, func(cfg *Config) {
		cfg.Cache.Budget, cfg.Cache.MaxObjectSize, cfg.Cache.PoolBytes = budget, maxObject, cache.ChunkSize
	})
}

// A remote hit's copy, dropped and read again, lands in the chunks of the
// copy dropped; once the cache is full, each miss lands in the chunks of
// what it evicted. No new memory either way, and every read returns its
// own bytes.
func TestFillsLandInReusedChunks(t *testing.T) {
	const size = 2<<20 + 100
	g := reuseGroup(t, 16<<20, 4<<20)
	reader := g.members[1]
	data := object("k", 1, size)
	g.put(t, "k", data)
	g.mustRead(t, 0, "k", data, LocalMiss)
	g.mustRead(t, 1, "k", data, RemoteHit)
	reader.wg.Wait()
	chunks := uint64(reader.cache.Charge(size) / cache.ChunkSize)
	for i := range 3 {
		reader.Invalidate(testBucket, "k")
		before := reader.cache.BufferStats()
		g.mustRead(t, 1, "k", data, RemoteHit)
		reader.wg.Wait()
		after := reader.cache.BufferStats()
		if after.Allocated != before.Allocated || after.Reused-before.Reused != chunks {
			t.Fatalf("remote hit %d: pool %+v then %+v, want its %d chunks reused", i, before, after, chunks)
		}
	}

	// Fill the reader's cache, then keep missing: each fill evicts one.
	var allocated uint64
	for i := range 12 {
		key := fmt.Sprint("other-", i)
		other := object(key, 1, size)
		g.put(t, key, other)
		g.mustRead(t, 1, key, other, RemoteMiss)
		reader.wg.Wait()
		s, bs := reader.cache.Stats(), reader.cache.BufferStats()
		if s.Bytes+s.Reserved+bs.FreeBytes > s.Budget+cache.ChunkSize {
			t.Fatalf("miss %d: cache %+v, pool %+v: over the budget and the pool's chunk", i, s, bs)
		}
		if s.Evictions > 1 && bs.Allocated != allocated {
			t.Fatalf("miss %d: %d chunks allocated, %d before, in a full cache whose evicted entries nobody reads", i, bs.Allocated, allocated)
		}
		allocated = bs.Allocated
	}
	if s := reader.cache.Stats(); s.Evictions < 4 {
		t.Fatalf("cache %+v: want evictions", s)
	}
}

// An owner streams an entry to a peer while fills evict it from a full
// cache: the fills allocate instead of taking its chunks, the peer gets
// the object's bytes, and the chunks serve the next fill once the
// stream is done.
func TestStreamedEntryIsNotReusedUntilDone(t *testing.T) {
	const size = 16<<20 + 1000 // more than the connections' buffers hold
	g := reuseGroup(t, 3*(size+cache.ChunkSize), size+cache.ChunkSize)
	owner := g.members[0]
	data := object("big", 1, size)
	g.put(t, "big", data)
	g.mustRead(t, 0, "big", data, LocalMiss)
	owner.wg.Wait()

	obj, err := g.members[1].cfg.Peers.Get(t.Context(), g.addrs[0], testBucket, "big", "")
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Body.Close()
	first := make([]byte, 1<<20)
	if _, err := io.ReadFull(obj.Body, first); err != nil {
		t.Fatal(err)
	}
	// Fill the owner's cache until "big" is evicted under the stream.
	before := owner.cache.BufferStats()
	for i := 0; owner.cache.Peek(cache.Key{Bucket: testBucket, Object: "big"}) != nil; i++ {
		if i == 8 {
			t.Fatal("the streamed entry was never evicted")
		}
		key := fmt.Sprint("fill-", i)
		other := object(key, 1, size)
		g.put(t, key, other)
		g.mustRead(t, 0, key, other, LocalMiss)
		owner.wg.Wait()
	}
	after := owner.cache.BufferStats()
	if after.FreeBytes != 0 || after.Reused != before.Reused {
		t.Fatalf("pool %+v then %+v: the fills reused chunks while nothing evicted was free", before, after)
	}
	rest, err := io.ReadAll(obj.Body)
	if err != nil || !bytes.Equal(append(first, rest...), data) {
		t.Fatalf("the peer got other bytes than the object's (%v)", err)
	}
	obj.Body.Close()
	// The stream's reference is gone: "big"'s chunks wait in the pool
	// for the next fill (the cache keeps its own room; at least the
	// pool's own chunk is kept).
	if free := owner.cache.BufferStats().FreeBytes; free == 0 {
		t.Fatal("the streamed entry's chunks did not come back")
	}
}
