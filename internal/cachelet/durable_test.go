package cachelet

import (
	"bytes"
	"context"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/store"
	"github.com/hoard-io/hoard/internal/store/memstore"
	"github.com/hoard-io/hoard/internal/writeback"
	"github.com/hoard-io/hoard/internal/writelog"
)

// outage is a store whose writes fail while down is set, as a store that
// cannot be reached does; with placeholders set, down lets empty writes
// (shadows' placeholders) through, as a link too slow for any body.
type outage struct {
	store.Store
	down         atomic.Bool
	placeholders atomic.Bool
	// headHangs: a HEAD hangs until its context ends, as one sent into a
	// link that lost it.
	headHangs atomic.Bool
}

func (o *outage) Stat(ctx context.Context, bucket, key string) (store.ObjectInfo, error) {
	if o.headHangs.Load() {
		<-ctx.Done()
		return store.ObjectInfo{}, ctx.Err()
	}
	return o.Store.Stat(ctx, bucket, key)
}

func (o *outage) Put(ctx context.Context, bucket, key string, body io.Reader, size int64, opts store.PutOptions) (store.PutResult, error) {
	if o.down.Load() && (size != 0 || !o.placeholders.Load()) {
		return store.PutResult{}, store.ErrUnavailable
	}
	return o.Store.Put(ctx, bucket, key, body, size, opts)
}

func openLog(t *testing.T, dir string) (*writelog.Log, []writelog.Pending) {
	t.Helper()
	l, p, err := writelog.Open(writelog.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return l, p
}

func durableCachelet(t *testing.T, st store.Store, l *writelog.Log, replay []writelog.Pending) *Cachelet {
	t.Helper()
	c, err := New(Config{Cache: cache.Config{Budget: testBudget, MaxObjectSize: testMaxSize},
		WriteTarget: WriteLocal, ReadMode: ReadLocal, DrainTimeout: 50 * time.Millisecond,
		Log: l, Replay: replay}, st, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestDurableWritesOutliveTheCachelet: writes acknowledged while the
// store is down, and given up on when the cachelet closes, are held by
// the next cachelet on the log and delivered, newest of each key (served
// once the store has it).
func TestDurableWritesOutliveTheCachelet(t *testing.T) {
	ctx := t.Context()
	mem := memstore.New()
	if err := mem.CreateBucket(ctx, testBucket, ""); err != nil {
		t.Fatal(err)
	}
	st := &outage{Store: mem}
	dir := t.TempDir()
	st.down.Store(true)

	l, _ := openLog(t, dir)
	c := durableCachelet(t, st, l, nil)
	put := func(c *Cachelet, key string, v int) {
		t.Helper()
		data := object(key, v, 3000)
		if _, err := c.Put(ctx, testBucket, key, bytes.NewReader(data), int64(len(data)), store.PutOptions{}); err != nil {
			t.Fatalf("put %s v%d: %v", key, v, err)
		}
	}
	put(c, "a", 1)
	put(c, "a", 2)
	put(c, "b", 1)
	if err := c.Close(); err == nil {
		t.Fatal("close with the store down reported every write persisted")
	}
	l.Close()

	l, pending := openLog(t, dir)
	// a's first write is pending too unless the second replaced it
	// in the queue before it started (then it was marked done).
	newest := map[string][]byte{}
	for _, p := range pending {
		newest[p.Key] = p.Data // in log order
	}
	if len(pending) < 2 || len(pending) > 3 || !bytes.Equal(newest["a"], object("a", 2, 3000)) || !bytes.Equal(newest["b"], object("b", 1, 3000)) {
		t.Fatalf("%d records pending after the close (keys %v), want a's second write and b's, and at most a's first", len(pending), keysOf(pending))
	}
	c = durableCachelet(t, st, l, pending)
	// Not served until the store confirms it is still the newest
	// (durable_base.go): the store is down, the read waits.
	rctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	if got, _, err := readWith(rctx, c, "a", nil); err == nil {
		t.Fatalf("a replayed write was served (%d bytes) before the store had it", len(got))
	}
	cancel()
	st.down.Store(false)
	got, _, err := readWith(ctx, c, "a", nil)
	if err != nil || !bytes.Equal(got, object("a", 2, 3000)) {
		t.Fatalf("read of a held write after the restart: %d bytes, %v; want v2", len(got), err)
	}
	if err := c.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	for key, v := range map[string]int{"a": 2, "b": 1} {
		body, _, _, err := mem.Get(ctx, testBucket, key, store.GetOptions{})
		if err != nil {
			t.Fatalf("store lacks %s: %v", key, err)
		}
		b, _ := io.ReadAll(body)
		body.Close()
		if !bytes.Equal(b, object(key, v, 3000)) {
			t.Fatalf("store has the wrong version of %s", key)
		}
	}
	// A delete after them: its synchronization point makes their done
	// marks durable, so no later start brings them back.
	if err := c.Delete(ctx, testBucket, "a"); err != nil {
		t.Fatal(err)
	}
	c.Close()
	l.Close()
	l, pending = openLog(t, dir)
	defer l.Close()
	if len(pending) != 0 {
		t.Fatalf("%d records pending after they reached the store", len(pending))
	}
}

// TestDurableWritesLogOrder: of two writes of a key, the one logged first
// is not held when the later one already is (it is replaced at once), so
// the log's newest record of a key is always what the cache serves.
func TestDurableWritesLogOrder(t *testing.T) {
	ctx := t.Context()
	mem := memstore.New()
	if err := mem.CreateBucket(ctx, testBucket, ""); err != nil {
		t.Fatal(err)
	}
	st := &outage{Store: mem}
	st.down.Store(true)
	dir := t.TempDir()
	l, _ := openLog(t, dir)
	c := durableCachelet(t, st, l, nil)
	k := cache.Key{Bucket: testBucket, Object: "k"}
	w := func(v int) (uint64, []byte) {
		data := object("k", v, 2000)
		id, err := l.Append(ctx, writelog.Record{Bucket: testBucket, Key: "k", Data: data})
		if err != nil {
			t.Fatal(err)
		}
		return id, data
	}
	id1, d1 := w(1)
	id2, d2 := w(2)
	// Held in the other order: 2, then 1.
	if !c.hold(k, writeWith("k", d2), etagOf(d2), id2, nil, false) || !c.hold(k, writeWith("k", d1), etagOf(d1), id1, nil, false) {
		t.Fatal("refused outside a handoff")
	}
	got, _, err := readWith(ctx, c, "k", nil)
	if err != nil || !bytes.Equal(got, d2) {
		t.Fatalf("served %d bytes (%v); want the later-logged v2", len(got), err)
	}
	c.Close()
	l.Close()
	l, pending := openLog(t, dir)
	defer l.Close()
	if len(pending) != 1 || pending[0].ID != id2 {
		t.Fatalf("pending %+v; want only the record of v2", pending)
	}
}

func writeWith(key string, data []byte) writeback.Write {
	return writeback.Write{Bucket: testBucket, Key: key, Data: data}
}

func etagOf(data []byte) string {
	_, etag, _ := readWhole(bytes.NewReader(data), int64(len(data)))
	return etag
}

// keysOf lists the keys of pending records, in log order.
func keysOf(pending []writelog.Pending) []string {
	var keys []string
	for _, p := range pending {
		keys = append(keys, p.Key)
	}
	return keys
}
