package cachelet

import (
	"bytes"
	"context"
	"errors"
	"io"
	"runtime"
	"runtime/debug"
	"sync"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/erasure"
	"github.com/hoard-io/hoard/internal/peer"
	"github.com/hoard-io/hoard/internal/store"
	"github.com/hoard-io/hoard/internal/store/memstore"
)

// fakeHolders places shards on holders h0, h1, ... that count the bytes
// they are sent; stall names one that never reads its shard.
type fakeHolders struct {
	n     int
	stall string

	mu       sync.Mutex
	received map[string]int64
	stalled  chan struct{} // closed when the stalled holder's write ends
}

func (f *fakeHolders) Place(_, _ string, n int) []string {
	if n > f.n {
		return nil
	}
	var out []string
	for i := range n {
		out = append(out, "h"+string(rune('0'+i)))
	}
	return out
}

func (f *fakeHolders) PeerAddr() string { return "self" }

func (f *fakeHolders) ShardPut(ctx context.Context, addr, _, _, _ string, _ int, _ string, body io.Reader, size int64) error {
	if addr == f.stall {
		<-ctx.Done()
		close(f.stalled)
		return ctx.Err()
	}
	n, err := io.Copy(io.Discard, body)
	f.mu.Lock()
	f.received[addr] += n
	f.mu.Unlock()
	if err == nil && n != size {
		err = errors.New("short shard")
	}
	return err
}

func (f *fakeHolders) ShardGet(context.Context, string, string, string, string, int, int) (*peer.Shard, error) {
	return nil, store.ErrNoSuchKey
}

func (f *fakeHolders) ShardDelete(context.Context, string, string, string, string) error { return nil }

// newFillCachelet is one cachelet coding RS(3+2) in 64 KiB chunks for
// holders, over a store holding size random bytes under "big".
func newFillCachelet(t *testing.T, holders *fakeHolders, size int, timeout time.Duration) (*Cachelet, *memstore.Store, store.ObjectInfo) {
	t.Helper()
	st := memstore.New()
	if err := st.CreateBucket(t.Context(), testBucket, ""); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i * 7)
	}
	if _, err := st.Put(t.Context(), testBucket, "big", bytes.NewReader(data), int64(size), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	info, _ := st.Stat(t.Context(), testBucket, "big")
	c, err := New(Config{Cache: cache.Config{Budget: 8 << 20}, Erasure: &ErasureConfig{
		Config:  erasure.Config{DataShards: 3, ParityShards: 2, Threshold: 1 << 20, ChunkSize: 64 << 10},
		Memory:  4 << 20,
		Timeout: timeout,
		Placer:  holders, Peers: holders,
	}}, st, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, st, info
}

// A fill streams: coding an object whose shards come to 80 MiB holds a
// stripe and a window of pieces per holder, never the coded object
// (before, it held all of it). The object is read twice from the store:
// once for the manifest's checksums, once to send the pieces.
func TestErasureFillStreams(t *testing.T) {
	holders := &fakeHolders{n: 5, received: map[string]int64{}}
	c, st, info := newFillCachelet(t, holders, 48<<20, 30*time.Second)
	k := cache.Key{Bucket: testBucket, Object: "big"}
	m := erasure.NewManifest(c.ec.cfg.Config, info.ETag, info.Size)

	// Garbage counts in the heap until collected: collect often, so that
	// what the heap holds is near what the fill keeps.
	defer debug.SetGCPercent(debug.SetGCPercent(5))
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	stop, peak := make(chan struct{}), make(chan uint64)
	go func() {
		var top uint64
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			top = max(top, ms.HeapAlloc)
			select {
			case <-stop:
				peak <- top
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	st.ResetCounts()
	written, err := c.ec.fill(t.Context(), k, info, holders.Place("", "", 5))
	close(stop)
	grew := int64(<-peak) - int64(before.HeapAlloc)
	if err != nil || written != 5 {
		t.Fatalf("fill: %d written, %v", written, err)
	}
	for _, h := range holders.Place("", "", 5) {
		if holders.received[h] != m.ShardSize() {
			t.Fatalf("holder %s received %d bytes, want %d", h, holders.received[h], m.ShardSize())
		}
	}
	if gets := st.GetCounts(); gets.FullBodies != 2 {
		t.Fatalf("store GETs %+v, want two whole bodies", gets)
	}
	coded := 5 * m.ShardSize()
	t.Logf("coded %d MiB; the heap grew by at most %.1f MiB during the fill", coded>>20, float64(grew)/(1<<20))
	if grew > coded/4 {
		t.Fatalf("the heap grew by %d MiB during a fill of %d MiB coded", grew>>20, coded>>20)
	}
}

// A holder that takes no piece for Timeout is dropped; the fill goes on
// with the others and ends, degraded.
func TestErasureFillDropsAStalledHolder(t *testing.T) {
	holders := &fakeHolders{n: 5, stall: "h1", received: map[string]int64{}, stalled: make(chan struct{})}
	c, _, info := newFillCachelet(t, holders, 4<<20, 50*time.Millisecond)
	k := cache.Key{Bucket: testBucket, Object: "big"}
	written, err := c.ec.fill(t.Context(), k, info, holders.Place("", "", 5))
	if err != nil || written != 4 {
		t.Fatalf("fill: %d written, %v; want 4", written, err)
	}
	select {
	case <-holders.stalled:
	default:
		t.Fatal("the stalled holder's write was not ended")
	}
	if holders.received["h1"] != 0 || holders.received["h0"] == 0 {
		t.Fatalf("received %v", holders.received)
	}
}
