package cachelet

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/store"
	"github.com/hoard-io/hoard/internal/store/memstore"
)

// frozenReads is a store whose reads answer what it held when it was
// frozen, whatever was written since: the older copy that a miss may find
// (a peer's copy under the local target, which no write reaches).
type frozenReads struct {
	store.Store
	old *memstore.Store
}

func (f frozenReads) Get(ctx context.Context, bucket, key string, opts store.GetOptions) (io.ReadCloser, store.ObjectInfo, *store.ByteRange, error) {
	return f.old.Get(ctx, bucket, key, opts)
}

// TestHeldWriteLeavesNoMissWindow: a write the cachelet holds replaces
// the key's cached copy with no moment in between where a read misses.
// A read that began after a write was acknowledged is served that write
// or a later one, never what a miss would find (here an older copy).
func TestHeldWriteLeavesNoMissWindow(t *testing.T) {
	ctx := t.Context()
	const key = "k"
	val := func(v int) []byte { return []byte(fmt.Sprintf("v=%08d %s", v, bytes.Repeat([]byte("x"), 2000))) }
	mem, old := memstore.New(), memstore.New()
	for _, s := range []*memstore.Store{mem, old} {
		if err := s.CreateBucket(ctx, testBucket, ""); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Put(ctx, testBucket, key, bytes.NewReader(val(0)), int64(len(val(0))), store.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, target := range []WriteTarget{WriteLocal, WriteOwner} {
		t.Run(string(target), func(t *testing.T) {
			c, err := New(Config{Cache: cache.Config{Budget: testBudget, MaxObjectSize: testMaxSize},
				WriteTarget: target, ReadMode: ReadLocal}, frozenReads{Store: mem, old: old}, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			e := &env{t: t, c: c}
			var acked atomic.Int64
			var bad atomic.Value
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						floor := acked.Load()
						got, _, err := e.read(key, nil)
						if err != nil {
							bad.Store(err.Error())
							return
						}
						var v int64
						if _, err := fmt.Sscanf(string(got[:10]), "v=%08d", &v); err != nil || v < floor {
							bad.Store(fmt.Sprintf("read %q, write %d acknowledged before it began", got[:10], floor))
							return
						}
					}
				}()
			}
			deadline := time.Now().Add(time.Second)
			for v := 1; time.Now().Before(deadline) && bad.Load() == nil; v++ {
				if _, err := e.c.Put(ctx, testBucket, key, bytes.NewReader(val(v)), int64(len(val(v))), store.PutOptions{}); err != nil {
					t.Fatal(err)
				}
				acked.Store(int64(v))
			}
			close(stop)
			wg.Wait()
			if b := bad.Load(); b != nil {
				t.Fatal(b)
			}
		})
	}
}
