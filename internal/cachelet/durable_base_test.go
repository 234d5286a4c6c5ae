package cachelet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/store"
	"github.com/hoard-io/hoard/internal/store/memstore"
	"github.com/hoard-io/hoard/internal/writeback"
	"github.com/hoard-io/hoard/internal/writelog"
)

// asleep is a store whose writes fail while down is set and whose HEADs
// fail while blind is set.
type asleep struct {
	outage
	blind atomic.Bool
}

func (a *asleep) Stat(ctx context.Context, bucket, key string) (store.ObjectInfo, error) {
	if a.blind.Load() {
		return store.ObjectInfo{}, store.ErrUnavailable
	}
	return a.outage.Stat(ctx, bucket, key)
}

func newAsleep(t *testing.T) (*memstore.Store, *asleep) {
	t.Helper()
	mem := memstore.New()
	if err := mem.CreateBucket(t.Context(), testBucket, ""); err != nil {
		t.Fatal(err)
	}
	return mem, &asleep{outage: outage{Store: mem}}
}

func putVia(t *testing.T, c *Cachelet, key string, data []byte) {
	t.Helper()
	if _, err := c.Put(t.Context(), testBucket, key, bytes.NewReader(data), int64(len(data)), store.PutOptions{}); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

func storeHas(t *testing.T, st store.Store, key string) []byte {
	t.Helper()
	body, _, _, err := st.Get(t.Context(), testBucket, key, store.GetOptions{})
	if err != nil {
		t.Fatalf("store lacks %s: %v", key, err)
	}
	defer body.Close()
	b, err := io.ReadAll(body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// crashWith logs writes through a cachelet whose store takes none, and
// closes it (the writes given up, their records left), returning the
// records the next open finds.
func crashWith(t *testing.T, st *asleep, dir string, writes func(c *Cachelet)) []writelog.Pending {
	t.Helper()
	st.down.Store(true)
	l, _ := openLog(t, dir)
	c := durableCachelet(t, st, l, nil)
	writes(c)
	c.Close()
	l.Close()
	l, pending := openLog(t, dir)
	l.Close()
	return pending
}

func byKey(pending []writelog.Pending) map[string][]writelog.Pending {
	out := map[string][]writelog.Pending{}
	for _, p := range pending {
		out[p.Key] = append(out[p.Key], p)
	}
	return out
}

// TestDurableRecordsBase: each logged write names the store versions it
// may replace: what the store said (a HEAD, "" for no object), the
// writes of the key still queued here, or what this cachelet's last
// delivery of the key got; and the version it makes.
func TestDurableRecordsBase(t *testing.T) {
	mem, st := newAsleep(t)
	old := object("b", 0, 100)
	if _, err := mem.Put(t.Context(), testBucket, "b", bytes.NewReader(old), int64(len(old)), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	a1, a2, b1 := object("a", 1, 100), object("a", 2, 100), object("b", 1, 100)
	pending := byKey(crashWith(t, st, dir, func(c *Cachelet) {
		putVia(t, c, "a", a1)
		putVia(t, c, "a", a2)
		putVia(t, c, "b", b1)
	}))
	// a's second write names both bases: the store's (no object) and
	// the first write, queued when it was logged. The first write's
	// record is pending too unless the second replaced it in the queue
	// before it started, which marks it done.
	if ps := pending["a"]; len(ps) < 1 || len(ps) > 2 ||
		!slices.Equal(sorted(ps[len(ps)-1].Replaces), sorted([]string{"", etagOf(a1)})) || ps[len(ps)-1].ETag != etagOf(a2) ||
		len(ps) == 2 && (fmt.Sprint(ps[0].Replaces) != "[]" || ps[0].ETag != etagOf(a1)) {
		t.Fatalf("records of a: %+v", brief(ps))
	}
	if ps := pending["b"]; len(ps) != 1 || !slices.Equal(ps[0].Replaces, []string{etagOf(old)}) {
		t.Fatalf("records of b: %+v", brief(ps))
	}

	// Delivered, the next write of a key replaces what the store gave
	// the last one, without asking; a store that cannot say leaves the
	// base unknown.
	dir = t.TempDir()
	st.down.Store(false)
	l, _ := openLog(t, dir)
	c := durableCachelet(t, st, l, nil)
	putVia(t, c, "c", object("c", 1, 100))
	if err := c.Drain(t.Context()); err != nil {
		t.Fatal(err)
	}
	st.down.Store(true)
	st.blind.Store(true)
	putVia(t, c, "c", object("c", 2, 100))
	putVia(t, c, "d", object("d", 1, 100))
	c.Close()
	l.Close()
	l, p := openLog(t, dir)
	l.Close()
	pending = byKey(p)
	if ps := pending["c"]; len(ps) != 1 || !slices.Equal(ps[0].Replaces, []string{etagOf(object("c", 1, 100))}) {
		t.Fatalf("records of c: %+v", brief(ps))
	}
	if ps := pending["d"]; len(ps) != 1 || ps[0].Replaces != nil {
		t.Fatalf("records of d: %+v; want an unknown base", brief(ps))
	}
}

func sorted(s []string) []string { s = slices.Clone(s); slices.Sort(s); return s }

func brief(ps []writelog.Pending) []string {
	var out []string
	for _, p := range ps {
		out = append(out, fmt.Sprintf("id %d etag %s replaces %q", p.ID, p.ETag, p.Replaces))
	}
	return out
}

// TestDurableReplayYields: a replayed write whose key another route wrote
// while the cachelet was down is not delivered (the store keeps the newer
// bytes), never served, counted, and its record done; one nobody touched
// is delivered; one that reached the store before its done mark did is
// delivered over itself.
func TestDurableReplayYields(t *testing.T) {
	mem, st := newAsleep(t)
	dir := t.TempDir()
	mine := map[string][]byte{"a": object("a", 1, 500), "b": object("b", 1, 500), "own": object("own", 1, 500)}
	pending := crashWith(t, st, dir, func(c *Cachelet) {
		for _, k := range []string{"a", "b", "own"} {
			putVia(t, c, k, mine[k])
		}
	})
	if len(pending) != 3 {
		t.Fatalf("%d records pending, want 3", len(pending))
	}
	// While it is down: a writer that could not reach it writes a to
	// the store; own's delivery had reached the store.
	theirs := object("a", 9, 700)
	for k, v := range map[string][]byte{"a": theirs, "own": mine["own"]} {
		if _, err := mem.Put(t.Context(), testBucket, k, bytes.NewReader(v), int64(len(v)), store.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	st.down.Store(false)
	l, _ := openLog(t, dir)
	c := durableCachelet(t, st, l, pending)
	for k, want := range map[string][]byte{"a": theirs, "b": mine["b"], "own": mine["own"]} {
		got, _, err := readWith(t.Context(), c, k, nil)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("read of %s after the restart: %d bytes (%v), want %d", k, len(got), err, len(want))
		}
	}
	if err := c.Drain(t.Context()); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string][]byte{"a": theirs, "b": mine["b"], "own": mine["own"]} {
		if !bytes.Equal(storeHas(t, mem, k), want) {
			t.Fatalf("the store has the wrong version of %s", k)
		}
	}
	if n := toFloat64(c.m.replaySuperseded); n != 1 {
		t.Fatalf("%v replayed writes counted superseded, want 1", n)
	}
	if n := toFloat64(c.m.replayUnverified); n != 0 {
		t.Fatalf("%v unverified replays, want 0", n)
	}
	if err := c.Delete(t.Context(), testBucket, "nothing"); err != nil { // a synchronization point: done marks on disk
		t.Fatal(err)
	}
	c.Close()
	l.Close()
	l, pending = openLog(t, dir)
	l.Close()
	if len(pending) != 0 {
		t.Fatalf("%v pending after the replay settled", brief(pending))
	}
}

// TestDurableReplayUnknownBase: a record whose base is unknown (as an
// older log wrote it) is put only where the key is absent, or over the
// version the check found (counted as unverified), as before bases were
// kept.
func TestDurableReplayUnknownBase(t *testing.T) {
	mem, st := newAsleep(t)
	dir := t.TempDir()
	l, _ := openLog(t, dir)
	for _, k := range []string{"new", "there"} {
		if _, err := l.Append(t.Context(), writelog.Record{Bucket: testBucket, Key: k, Data: object(k, 1, 300)}); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	other := object("there", 0, 300)
	if _, err := mem.Put(t.Context(), testBucket, "there", bytes.NewReader(other), int64(len(other)), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	l, pending := openLog(t, dir)
	defer l.Close()
	c := durableCachelet(t, st, l, pending)
	defer c.Close()
	if err := c.Drain(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"new", "there"} {
		if !bytes.Equal(storeHas(t, mem, k), object(k, 1, 300)) {
			t.Fatalf("%s not delivered", k)
		}
	}
	if n := toFloat64(c.m.replayUnverified); n != 1 {
		t.Fatalf("%v unverified replays, want 1", n)
	}
}

// TestDurableReplayHoldsReads: until a replayed write is settled with the
// store, reads of its key wait (a deadline ends them with an error, never
// with bytes the store may since have replaced); a new write of the key
// is served at once and delivered after it.
func TestDurableReplayHoldsReads(t *testing.T) {
	mem, st := newAsleep(t)
	dir := t.TempDir()
	pending := crashWith(t, st, dir, func(c *Cachelet) { putVia(t, c, "a", object("a", 1, 400)) })
	st.blind.Store(true) // the replay cannot check
	l, _ := openLog(t, dir)
	defer l.Close()
	c := durableCachelet(t, st, l, pending)
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	got, _, err := readWith(ctx, c, "a", nil)
	cancel()
	if err == nil {
		t.Fatalf("a read of an unsettled replayed write was served %d bytes", len(got))
	}
	v2 := object("a", 2, 400)
	putVia(t, c, "a", v2)
	if got, _, err := readWith(t.Context(), c, "a", nil); err != nil || !bytes.Equal(got, v2) {
		t.Fatalf("read after a new write: %d bytes (%v), want v2", len(got), err)
	}
	st.blind.Store(false)
	st.down.Store(false)
	if err := c.Drain(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(storeHas(t, mem, "a"), v2) {
		t.Fatal("the store lacks the write made after the restart")
	}
}

// TestDurableReplayGuard: the replay's decision, per store state and base.
func TestDurableReplayGuard(t *testing.T) {
	mem, st := newAsleep(t)
	l, _ := openLog(t, t.TempDir())
	defer l.Close()
	c := durableCachelet(t, st, l, nil)
	defer c.Close()
	put := func(key, v string) string {
		res, err := mem.Put(t.Context(), testBucket, key, bytes.NewReader([]byte(v)), int64(len(v)), store.PutOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return res.ETag
	}
	x, y, own := put("x", "x"), put("y", "y"), put("own", "own")
	for _, tc := range []struct {
		name, key string
		replaces  []string
		ifMatch   string // "*": If-None-Match: *
		newer     bool
		unverify  bool
	}{
		{"absent, was absent", "none", []string{""}, "*", false, false},
		{"the version it replaced", "x", []string{"", x}, x, false, false},
		{"its own (delivered, not marked)", "own", []string{x}, own, false, false},
		{"written meanwhile", "y", []string{x}, "", true, false},
		{"deleted meanwhile", "none", []string{x}, "", true, false},
		{"unknown base, absent", "none", nil, "*", false, false},
		{"unknown base, present", "y", nil, y, false, true},
	} {
		before := toFloat64(c.m.replayUnverified)
		opts, err := c.guard(t.Context(), writeback.Write{Bucket: testBucket, Key: tc.key,
			Guard: &writeback.Guard{ETag: own, Replaces: tc.replaces}})
		switch {
		case tc.newer:
			if !errors.Is(err, errNewerInStore) || !permanent(err) {
				t.Errorf("%s: %v, want a permanent errNewerInStore", tc.name, err)
			}
		case err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.ifMatch == "*" && (opts.IfNoneMatch != "*" || opts.IfMatch != ""):
			t.Errorf("%s: If-Match %q If-None-Match %q, want If-None-Match *", tc.name, opts.IfMatch, opts.IfNoneMatch)
		case tc.ifMatch != "*" && (opts.IfMatch != tc.ifMatch || opts.IfNoneMatch != ""):
			t.Errorf("%s: If-Match %q If-None-Match %q, want If-Match %q", tc.name, opts.IfMatch, opts.IfNoneMatch, tc.ifMatch)
		}
		if got := toFloat64(c.m.replayUnverified) - before; (got == 1) != tc.unverify {
			t.Errorf("%s: counted %v unverified", tc.name, got)
		}
	}
}

// TestVersionBook: what a key's store version may be, as writes are held
// and settled and changes are noticed.
func TestVersionBook(t *testing.T) {
	var b versionBook
	k := cache.Key{Bucket: "b", Object: "k"}
	check := func(what string, want []string, complete bool) {
		t.Helper()
		got, ok := b.lookup(k)
		if !slices.Equal(sorted(got), sorted(want)) || ok != complete {
			t.Fatalf("%s: %q complete %v; want %q complete %v", what, got, ok, want, complete)
		}
	}
	check("nothing known", nil, false)
	b.held(k, "e1", []string{""})
	b.held(k, "e2", []string{"", "e1"})
	check("two held", []string{"", "e1", "e2"}, true)
	b.settled(k, "e1", "s1", nil, ownsAll)
	check("the first delivered (the store's ETag)", []string{"s1", "e2"}, true)
	b.settled(k, "e2", "", writeback.ErrSuperseded, ownsAll)
	check("the second replaced", []string{"s1"}, true)
	b.changed(k, "ext", false)
	check("a change noticed", []string{"s1", "ext"}, true)
	b.changed(k, "", false)
	check("a change without its version", nil, false)
	b.held(k, "r", nil) // a replayed write: what the store has is unknown
	check("replayed", []string{"r"}, false)
	b.settled(k, "r", "", fmt.Errorf("%w", errNewerInStore), ownsAll)
	check("replay yielded", nil, false)
	for i := range maxBase + 1 {
		b.held(k, fmt.Sprint("w", i), []string{""})
	}
	// Past the bound the base is known to be unknown.
	check("too many held", nil, true)
	if got := addVersion(make([]string, maxBase), "more"); got != nil {
		t.Fatalf("past the bound a base is %q, want unknown", got)
	}
}

// ownsAll: this cachelet owns every key (versionBook tests).
func ownsAll(cache.Key) bool { return true }

// TestVersionBookForgetsMovedKeys: a ring change forgets the versions of
// the keys that moved to another owner, and marks their held writes
// moved; keys still owned keep theirs; a moved write settled while its
// key is another's leaves nothing known.
func TestVersionBookForgetsMovedKeys(t *testing.T) {
	var b versionBook
	stay, idle, busy := cache.Key{Bucket: "b", Object: "stay"}, cache.Key{Bucket: "b", Object: "idle"}, cache.Key{Bucket: "b", Object: "busy"}
	for _, k := range []cache.Key{stay, idle, busy} {
		b.held(k, "e1", []string{""})
		b.settled(k, "e1", "", nil, ownsAll)
	}
	b.held(busy, "e2", nil)
	b.held(stay, "e2", nil)
	owns := func(k cache.Key) bool { return k == stay }
	b.forgetMoved(owns)
	if vs, ok := b.lookup(stay); !ok || !slices.Equal(sorted(vs), []string{"e1", "e2"}) {
		t.Errorf("a key still owned: %q complete %v; want e1, e2 complete", vs, ok)
	}
	if vs, ok := b.lookup(idle); ok || vs != nil {
		t.Errorf("a moved key with nothing held: %q complete %v; want nothing known", vs, ok)
	}
	if vs, ok := b.lookup(busy); ok || !slices.Equal(vs, []string{"e2"}) {
		t.Errorf("a moved key with a write held: %q complete %v; want its write only, incomplete", vs, ok)
	}
	if !b.movedWrite(busy, "e2") || b.movedWrite(stay, "e2") {
		t.Errorf("moved writes: busy %v, stay %v; want true, false", b.movedWrite(busy, "e2"), b.movedWrite(stay, "e2"))
	}
	b.settled(busy, "e2", "", nil, owns)
	if vs, ok := b.lookup(busy); ok || vs != nil {
		t.Errorf("a moved write delivered while its key is another's: %q complete %v; want nothing known", vs, ok)
	}
	// Moved back before it settled: still marked, and once delivered the
	// store's version is known again.
	b.held(idle, "e3", []string{"x"})
	b.forgetMoved(owns)
	b.settled(idle, "e3", "s3", nil, ownsAll)
	if vs, ok := b.lookup(idle); !ok || !slices.Equal(vs, []string{"s3"}) || b.movedWrite(idle, "e3") {
		t.Errorf("after a moved write settled as owner: %q complete %v moved %v; want s3 complete, not moved", vs, ok, b.movedWrite(idle, "e3"))
	}
}
