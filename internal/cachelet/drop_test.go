package cachelet

import (
	"bytes"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/cacheconfig"
	"github.com/hoard-io/hoard/internal/store"
)

// DropPrefix drops what is cached under the prefix, in that bucket only,
// and nothing else; later reads fetch afresh.
func TestDropPrefix(t *testing.T) {
	e := newEnv(t, readLocal)
	if err := e.st.CreateBucket(t.Context(), "other", ""); err != nil {
		t.Fatal(err)
	}
	objs := map[string][]byte{}
	for _, k := range []string{"tmp/r1/a", "tmp/r1/b", "tmp/r1", "tmp/r2/a", "keep"} {
		objs[k] = object(k, 1, 2000)
		e.cput(k, objs[k])
	}
	other := object("other", 1, 100)
	if _, err := e.c.Put(t.Context(), "other", "tmp/r1/a", bytes.NewReader(other), int64(len(other)), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := e.c.Stats().Objects; n != 6 {
		t.Fatalf("%d objects cached, want 6", n)
	}

	if n := e.c.DropPrefix(testBucket, "tmp/r1/"); n != 2 {
		t.Fatalf("DropPrefix(tmp/r1/) = %d, want 2", n)
	}
	if n := e.c.DropPrefix(testBucket, "tmp/r1/"); n != 0 {
		t.Fatalf("DropPrefix(tmp/r1/) again = %d, want 0", n)
	}
	if n := e.c.Stats().Objects; n != 4 {
		t.Fatalf("%d objects cached after the drop, want 4", n)
	}
	e.mustRead("tmp/r1/a", objs["tmp/r1/a"], LocalMiss)
	e.mustRead("tmp/r1", objs["tmp/r1"], LocalHit)
	e.mustRead("tmp/r2/a", objs["tmp/r2/a"], LocalHit)

	// An empty prefix is the whole bucket; other buckets keep theirs.
	if n := e.c.DropPrefix(testBucket, ""); n != 4 {
		t.Fatalf("DropPrefix(\"\") = %d, want 4", n)
	}
	if s := e.c.Stats(); s.Objects != 1 || s.Bytes != int64(len(other)) {
		t.Fatalf("stats %+v after dropping the bucket, want only the other bucket's object", s)
	}
	e.mustRead("keep", objs["keep"], LocalMiss)
	if n := e.c.DropPrefix("nosuchbucket", ""); n != 0 {
		t.Fatalf("DropPrefix of an unknown bucket = %d", n)
	}
	e.checkBudget()
}

// DropPrefix finds the cached keys whatever the eviction policy.
func TestDropPrefixUnderEveryPolicy(t *testing.T) {
	for _, p := range cacheconfig.Policies() {
		t.Run(string(p), func(t *testing.T) {
			e := newEnv(t, func(c *Config) {
				c.Cache.Policy = p
				if p == cache.PolicyTTL {
					c.Cache.TTL = time.Hour
				}
			})
			for _, k := range []string{"tmp/a", "tmp/b", "keep"} {
				e.cput(k, object(k, 1, 20<<10))
			}
			if n := e.c.DropPrefix(testBucket, "tmp/"); n != 2 {
				t.Fatalf("DropPrefix = %d, want 2", n)
			}
			if s := e.c.Stats(); s.Objects != 1 {
				t.Fatalf("%d objects left, want 1", s.Objects)
			}
			e.mustRead("keep", object("keep", 1, 20<<10), LocalHit)
		})
	}
}

// A fill in flight when DropPrefix runs does not land afterwards: its
// reader gets the whole object, and the next read fetches again.
func TestDropPrefixDoomsAFillInFlight(t *testing.T) {
	e := newEnv(t, readLocal)
	v1 := object("tmp/k", 1, 100<<10)
	e.storePut("tmp/k", v1)
	hold := e.st.HoldBody(testBucket, "tmp/k", 30<<10)
	slow, err := e.c.Get(t.Context(), testBucket, "tmp/k", nil)
	if err != nil {
		t.Fatal(err)
	}
	<-hold.Reached()
	if n := e.c.DropPrefix(testBucket, "tmp/"); n != 0 {
		t.Errorf("DropPrefix counted %d objects; a fill is not cached yet", n)
	}
	hold.Release()
	got, err := io.ReadAll(slow.Body)
	slow.Body.Close()
	if err != nil || !bytes.Equal(got, v1) {
		t.Fatalf("the reader of the doomed fill got %d bytes, %v; want v1 whole", len(got), err)
	}
	e.settle()
	if s := e.c.Stats(); s.Objects != 0 || s.Reserved != 0 {
		t.Fatalf("stats %+v: the doomed fill landed", s)
	}
	if e.fills("doomed") != 1 {
		t.Errorf("fills{doomed} = %v, want 1", e.fills("doomed"))
	}
	e.mustRead("tmp/k", v1, LocalMiss)
}

// A store request sent before DropPrefix but answered after it is not
// cached either, and a read that starts after the drop does not join it.
func TestDropPrefixDoomsAStoreRequestInFlight(t *testing.T) {
	e := newEnv(t, readLocal)
	v1 := object("tmp/k", 1, 10<<10)
	e.storePut("tmp/k", v1)
	hold := e.st.HoldGet(testBucket, "tmp/k")
	first := make(chan error, 1)
	go func() {
		got, _, err := e.read("tmp/k", nil)
		if err == nil && !bytes.Equal(got, v1) {
			err = fmt.Errorf("read %d bytes, not v1", len(got))
		}
		first <- err
	}()
	<-hold.Reached()
	e.c.DropPrefix(testBucket, "")
	hold.Release()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	e.settle()
	if s := e.c.Stats(); s.Objects != 0 || s.Reserved != 0 {
		t.Fatalf("stats %+v: an answer to a request sent before the drop was cached", s)
	}
}

// Writes the store does not have yet stay, uncounted: until they are
// persisted they are the only copy. Once persisted, they drop like any.
func TestDropPrefixKeepsUnpersistedWrites(t *testing.T) {
	s, _ := ParseConsistency("local-async")
	e := newEnv(t, s.Apply)
	persisted, queued := object("tmp/p", 1, 1000), object("tmp/q", 1, 1000)
	e.cput("tmp/p", persisted)
	if err := e.c.Drain(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.settle()
	e.st.SetDown(true)
	e.cput("tmp/q", queued)

	if n := e.c.DropPrefix(testBucket, "tmp/"); n != 1 {
		t.Fatalf("DropPrefix = %d, want 1 (the persisted write only)", n)
	}
	e.mustRead("tmp/q", queued, LocalHit)
	if n := e.c.Stats().Objects; n != 1 {
		t.Fatalf("%d objects cached, want the unpersisted write", n)
	}

	e.st.SetDown(false)
	if err := e.c.Drain(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.settle()
	if n := e.c.DropPrefix(testBucket, "tmp/"); n != 1 {
		t.Fatalf("DropPrefix once persisted = %d, want 1", n)
	}
	e.mustRead("tmp/q", queued, LocalMiss)
}

// DropPrefix racing reads and writes of the same keys keeps the cache's
// books straight and never leaves a version older than the store's.
func TestDropPrefixUnderLoad(t *testing.T) {
	e := newEnv(t, nil)
	const keys = 8
	for i := range keys {
		e.storePut(fmt.Sprintf("tmp/%d", i), object("v", 0, 20<<10))
	}
	var wg sync.WaitGroup
	var ops atomic.Int64
	stop := make(chan struct{})
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ops.Add(1)
				k := fmt.Sprintf("tmp/%d", (i+w)%keys)
				if i%5 == 0 {
					data := object(k, i, 20<<10)
					if _, err := e.c.Put(t.Context(), testBucket, k, bytes.NewReader(data), int64(len(data)), store.PutOptions{}); err != nil {
						t.Error(err)
						return
					}
					continue
				}
				if _, _, err := e.read(k, nil); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	for drops := 0; drops < 200 || ops.Load() < 2000; drops++ {
		e.c.DropPrefix(testBucket, "tmp/")
	}
	close(stop)
	wg.Wait()
	e.settle()
	e.checkBudget()
	if s := e.c.Stats(); s.Reserved != 0 {
		t.Fatalf("stats %+v: reservations leaked", s)
	}
	// Whatever stayed cached is the store's current version.
	for i := range keys {
		k := fmt.Sprintf("tmp/%d", i)
		body, info, _, err := e.st.Get(t.Context(), testBucket, k, store.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want, _ := io.ReadAll(body)
		body.Close()
		if c := e.c.cache.Peek(cache.Key{Bucket: testBucket, Object: k}); c != nil && c.Info().ETag != info.ETag {
			t.Fatalf("%s: cached ETag %s, the store has %s", k, c.Info().ETag, info.ETag)
		}
		got, _, err := e.read(k, nil)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: read %d bytes, %v; not the store's version", k, len(got), err)
		}
	}
}
