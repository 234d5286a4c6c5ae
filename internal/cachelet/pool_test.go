package cachelet

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/store"
)

// Many readers, writers through the cachelet and behind its back, and a
// budget a few objects large: fills and uploads keep evicting and reusing
// the pool's chunks while readers stream them. Every read returns, whole,
// a version some write wrote (under -race, a chunk reused under a reader
// is also a data race), and the pool was reused.
func TestPoolUnderConcurrentReadsAndWrites(t *testing.T) {
	const (
		keys    = 6
		size    = cache.MinPooled + 5*cache.ChunkSize/2
		readers = 6
		writes  = 24
	)
	e := newEnv(t, func(c *Config) {
		c.Cache.Budget, c.Cache.MaxObjectSize = 3*size, 2*size
	})
	var (
		mu      sync.Mutex
		written = make(map[[32]byte]bool)
	)
	version := func(key string, v int) []byte {
		data := object(key, v, size+v) // sizes differ too
		mu.Lock()
		written[sha256.Sum256(data)] = true
		mu.Unlock()
		return data
	}
	for i := range keys {
		e.storePut(fmt.Sprint("k", i), version(fmt.Sprint("k", i), 0))
	}
	var (
		stop  atomic.Bool
		reads atomic.Int64
		wg    sync.WaitGroup
	)
	for r := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := r; !stop.Load(); i++ {
				key := fmt.Sprint("k", i%keys)
				obj, err := e.c.Get(t.Context(), testBucket, key, nil)
				if err != nil {
					t.Errorf("get %s: %v", key, err)
					return
				}
				var got bytes.Buffer
				_, err = io.CopyBuffer(struct{ io.Writer }{&got}, obj.Body, make([]byte, 7<<10))
				obj.Body.Close()
				if err != nil {
					t.Errorf("read %s: %v", key, err)
					return
				}
				mu.Lock()
				ok := written[sha256.Sum256(got.Bytes())]
				mu.Unlock()
				if !ok {
					t.Errorf("read %s: %d bytes that no write wrote", key, got.Len())
					stop.Store(true)
				}
				reads.Add(1)
			}
		}()
	}
	for w := 1; w <= writes; w++ {
		key := fmt.Sprint("k", w%keys)
		data := version(key, w)
		if w%2 == 0 {
			e.storePut(key, data) // behind the cachelet's back: reads fill it
			continue
		}
		if _, err := e.c.Put(t.Context(), testBucket, key, bytes.NewReader(data), int64(len(data)), store.PutOptions{}); err != nil {
			t.Fatalf("put %s: %v", key, err)
		}
	}
	stop.Store(true)
	wg.Wait()
	s, bs := e.c.cache.Stats(), e.c.cache.BufferStats()
	if reads.Load() == 0 || s.Evictions == 0 || bs.Reused == 0 {
		t.Fatalf("%d reads, cache %+v, pool %+v: want reads, evictions and chunks reused", reads.Load(), s, bs)
	}
}
