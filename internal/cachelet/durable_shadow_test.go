package cachelet

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/store"
	"github.com/hoard-io/hoard/internal/store/memstore"
	"github.com/hoard-io/hoard/internal/writelog"
)

// undelivered is a store that takes no write with a body while hold is
// set (a store link too slow for any delivery), but takes placeholders.
type undelivered struct {
	store.Store
	hold atomic.Bool
}

func (u *undelivered) Put(ctx context.Context, bucket, key string, body io.Reader, size int64, opts store.PutOptions) (store.PutResult, error) {
	if u.hold.Load() && size != 0 {
		return store.PutResult{}, store.ErrUnavailable
	}
	return u.Store.Put(ctx, bucket, key, body, size, opts)
}

func newUndelivered(t *testing.T) (*memstore.Store, *undelivered) {
	t.Helper()
	mem := memstore.New()
	if err := mem.CreateBucket(t.Context(), testBucket, ""); err != nil {
		t.Fatal(err)
	}
	return mem, &undelivered{Store: mem}
}

// testShadowKey is the placeholder key of the tests' applications.
var testShadowKey = []byte("test placeholder key, 32 bytes..")

// signedPlaceholder is the metadata of a placeholder of key naming etag
// and seq, signed with testShadowKey.
func signedPlaceholder(key, etag, seq string) map[string]string {
	return map[string]string{shadowPendingMeta: etag, shadowSeqMeta: seq,
		shadowMACMeta: shadowMAC(testShadowKey, testBucket, key, etag, seq)}
}

func shadowCachelet(t *testing.T, st store.Store, l *writelog.Log, replay []writelog.Pending) *Cachelet {
	t.Helper()
	c, err := New(Config{Cache: cache.Config{Budget: testBudget, MaxObjectSize: testMaxSize},
		WriteTarget: WriteLocal, ReadMode: ReadLocal, DrainTimeout: 50 * time.Millisecond,
		Log: l, Replay: replay, Shadow: true, ShadowKey: testShadowKey}, st, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func putRaw(t *testing.T, st store.Store, key string, data []byte, meta map[string]string) {
	t.Helper()
	if _, err := st.Put(t.Context(), testBucket, key, bytes.NewReader(data), int64(len(data)), store.PutOptions{UserMetadata: meta}); err != nil {
		t.Fatal(err)
	}
}

// TestShadowWrittenBeforeAck: a durable write is acknowledged with its
// placeholder in the store (empty, naming its version and sequence); the
// delivery replaces it with the write.
func TestShadowWrittenBeforeAck(t *testing.T) {
	mem, st := newUndelivered(t)
	st.hold.Store(true)
	l, _ := openLog(t, t.TempDir())
	defer l.Close()
	c := shadowCachelet(t, st, l, nil)
	defer c.Close()
	old, a1 := object("a", 0, 300), object("a", 1, 300)
	putRaw(t, mem, "a", old, nil)
	putBounded(t, c, "a", a1)
	info, err := mem.Stat(t.Context(), testBucket, "a")
	if err != nil {
		t.Fatal(err)
	}
	if info.Size != 0 || info.UserMetadata[shadowPendingMeta] != etagOf(a1) {
		t.Fatalf("store after the ack: %d bytes, metadata %v; want the placeholder of %s", info.Size, info.UserMetadata, etagOf(a1))
	}
	if seq, err := strconv.ParseUint(info.UserMetadata[shadowSeqMeta], 10, 64); err != nil || seq == 0 {
		t.Fatalf("placeholder's sequence %q", info.UserMetadata[shadowSeqMeta])
	}
	// Served from here meanwhile: the write, not the placeholder.
	if got, _, err := readWith(t.Context(), c, "a", nil); err != nil || !bytes.Equal(got, a1) {
		t.Fatalf("read while pending: %d bytes (%v)", len(got), err)
	}
	// A second write of the key, its first still queued: its placeholder
	// replaces the first's.
	a2 := object("a", 2, 300)
	putBounded(t, c, "a", a2)
	if info, _ := mem.Stat(t.Context(), testBucket, "a"); info.UserMetadata[shadowPendingMeta] != etagOf(a2) {
		t.Fatalf("placeholder after the second write names %q, want %s", info.UserMetadata[shadowPendingMeta], etagOf(a2))
	}
	st.hold.Store(false)
	if err := c.Drain(t.Context()); err != nil {
		t.Fatal(err)
	}
	info, err = mem.Stat(t.Context(), testBucket, "a")
	if err != nil || info.UserMetadata[shadowPendingMeta] != "" || !bytes.Equal(storeHas(t, mem, "a"), a2) {
		t.Fatalf("store after delivery: %+v (%v)", info, err)
	}
	if n := toFloat64(c.shadows.WithLabelValues("written")); n != 2 {
		t.Fatalf("%v placeholders counted written, want 2", n)
	}
}

// TestShadowNeverServed: a read through hoard that reaches the store and
// finds a placeholder answers 503 (a doubt), never its empty body.
func TestShadowNeverServed(t *testing.T) {
	mem, st := newUndelivered(t)
	l, _ := openLog(t, t.TempDir())
	defer l.Close()
	c := shadowCachelet(t, st, l, nil)
	defer c.Close()
	putRaw(t, mem, "p", nil, signedPlaceholder("p", etagOf([]byte("x")), "7"))
	got, _, err := readWith(t.Context(), c, "p", nil)
	if !errors.Is(err, store.ErrUnavailable) || got != nil {
		t.Fatalf("read of a placeholder: %q (%v), want ErrUnavailable", got, err)
	}
	if _, err := c.Stat(t.Context(), testBucket, "p"); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("stat of a placeholder: %v, want ErrUnavailable", err)
	}
	// An empty object that is no placeholder is served, and so is one
	// whose placeholder metadata is forged: no MAC, a wrong one, one
	// made for another key, version or sequence, or under another key.
	x := etagOf([]byte("x"))
	forged := map[string]map[string]string{
		"e":        nil,
		"no-mac":   {shadowPendingMeta: x, shadowSeqMeta: "7"},
		"bad-mac":  {shadowPendingMeta: x, shadowSeqMeta: "7", shadowMACMeta: strings.Repeat("ab", 32)},
		"moved":    signedPlaceholder("p", x, "7"),
		"version":  {shadowPendingMeta: etagOf([]byte("y")), shadowSeqMeta: "7", shadowMACMeta: signedPlaceholder("version", x, "7")[shadowMACMeta]},
		"seq":      {shadowPendingMeta: x, shadowSeqMeta: "8", shadowMACMeta: signedPlaceholder("seq", x, "7")[shadowMACMeta]},
		"other-ky": {shadowPendingMeta: x, shadowSeqMeta: "7", shadowMACMeta: shadowMAC([]byte("another application's key......"), testBucket, "other-ky", x, "7")},
	}
	for key, meta := range forged {
		putRaw(t, mem, key, nil, meta)
		if got, _, err := readWith(t.Context(), c, key, nil); err != nil || len(got) != 0 {
			t.Errorf("read of %s: %q (%v), want the empty object", key, got, err)
		}
		if info, err := c.Stat(t.Context(), testBucket, key); err != nil || info.Size != 0 {
			t.Errorf("stat of %s: %+v (%v), want the empty object", key, info, err)
		}
	}
	if n := toFloat64(c.shadows.WithLabelValues("read")); n < 1 {
		t.Fatalf("%v reads counted finding a placeholder", n)
	}
}

// TestShadowRefused: a placeholder the store refuses (another route
// wrote the key after the version this cachelet knows) is not put over
// that write, and the write is acknowledged only once the store has it:
// not at all while the store takes no delivery.
func TestShadowRefused(t *testing.T) {
	mem, st := newUndelivered(t)
	l, _ := openLog(t, t.TempDir())
	defer l.Close()
	c := shadowCachelet(t, st, l, nil)
	defer c.Close()
	putBounded(t, c, "r", object("r", 1, 200))
	if err := c.Drain(t.Context()); err != nil { // delivered: its version is known
		t.Fatal(err)
	}
	theirs := object("r", 9, 250)
	putRaw(t, mem, "r", theirs, nil)

	st.hold.Store(true)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	mine := object("r", 2, 200)
	if _, err := c.Put(ctx, testBucket, "r", bytes.NewReader(mine), int64(len(mine)), store.PutOptions{}); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("write whose placeholder was refused, store taking nothing: %v, want ErrUnavailable", err)
	}
	if !bytes.Equal(storeHas(t, mem, "r"), theirs) {
		t.Fatal("the placeholder replaced the other route's write")
	}
	if n := toFloat64(c.shadows.WithLabelValues("refused")); n != 1 {
		t.Fatalf("%v placeholders counted refused, want 1", n)
	}

	// The store taking writes: acknowledged once it has the write.
	st.hold.Store(false)
	putRaw(t, mem, "s", theirs, nil) // unknown here: asked, then written over
	putBounded(t, c, "r", object("r", 3, 200))
	putBounded(t, c, "s", object("s", 1, 200))
	for k, want := range map[string][]byte{"r": object("r", 3, 200), "s": object("s", 1, 200)} {
		if err := c.Drain(t.Context()); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(storeHas(t, mem, k), want) {
			t.Fatalf("acknowledged write of %s not in the store", k)
		}
	}
}

// TestShadowReplay: a cachelet that crashed with a write whose
// placeholder is in the store delivers it on start (the placeholder is
// its own), and one whose key another route wrote since yields.
func TestShadowReplay(t *testing.T) {
	mem, st := newUndelivered(t)
	dir := t.TempDir()
	old := object("a", 0, 300)
	putRaw(t, mem, "a", old, nil)
	a1, b1 := object("a", 1, 300), object("b", 1, 300)
	st.hold.Store(true)
	l, _ := openLog(t, dir)
	c := shadowCachelet(t, st, l, nil)
	putBounded(t, c, "a", a1)
	putBounded(t, c, "b", b1)
	c.Close()
	l.Close()
	if info, _ := mem.Stat(t.Context(), testBucket, "a"); info.UserMetadata[shadowPendingMeta] != etagOf(a1) {
		t.Fatalf("no placeholder of a after the crash: %+v", info)
	}
	theirs := object("b", 9, 100)
	putRaw(t, mem, "b", theirs, nil)

	st.hold.Store(false)
	l, pending := openLog(t, dir)
	defer l.Close()
	if len(pending) != 2 {
		t.Fatalf("%d records pending, want 2", len(pending))
	}
	c = shadowCachelet(t, st, l, pending)
	defer c.Close()
	if err := c.Drain(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(storeHas(t, mem, "a"), a1) {
		t.Fatal("the replay did not deliver over its own placeholder")
	}
	if !bytes.Equal(storeHas(t, mem, "b"), theirs) {
		t.Fatal("the replay went back over another route's write")
	}
	if n := toFloat64(c.m.replaySuperseded); n != 1 {
		t.Fatalf("%v replays superseded, want 1", n)
	}
	if n := toFloat64(c.m.replayUnverified); n != 0 {
		t.Fatalf("%v unverified replays, want 0", n)
	}
}

// TestShadowGuard: a replay's guard counts a placeholder by the version
// it names, not by its ETag (every placeholder's is the empty body's).
func TestShadowGuard(t *testing.T) {
	c := &Cachelet{cfg: Config{ShadowKey: testShadowKey}}
	k := cache.Key{Bucket: testBucket, Object: "k"}
	mine, base := "aaaa", "bbbb"
	for _, tc := range []struct {
		pending string
		want    bool
	}{{mine, true}, {base, true}, {"cccc", false}} {
		info := store.ObjectInfo{ETag: etagOf(nil), UserMetadata: signedPlaceholder("k", tc.pending, "1")}
		if got := c.baseHolds(k, []string{base}, mine, info); got != tc.want {
			t.Errorf("placeholder of %s: %v, want %v", tc.pending, got, tc.want)
		}
	}
	if c.baseHolds(k, []string{etagOf(nil)}, mine, store.ObjectInfo{ETag: etagOf(nil), UserMetadata: signedPlaceholder("k", "cccc", "1")}) {
		t.Error("another write's placeholder taken for an empty object of the base")
	}
	// A forged placeholder naming this write or its base is an empty
	// object another route wrote: not in the base.
	for _, meta := range []map[string]string{
		{shadowPendingMeta: mine, shadowSeqMeta: "1"},
		{shadowPendingMeta: base, shadowSeqMeta: "1", shadowMACMeta: signedPlaceholder("other", base, "1")[shadowMACMeta]},
	} {
		if c.baseHolds(k, []string{base}, mine, store.ObjectInfo{ETag: etagOf(nil), UserMetadata: meta}) {
			t.Errorf("forged placeholder %v taken for one", meta)
		}
	}
	// Without a key nothing is a placeholder.
	if (&Cachelet{}).pendingOf(k, store.ObjectInfo{UserMetadata: signedPlaceholder("k", mine, "1")}) != "" {
		t.Error("a placeholder recognised without a key")
	}
}

// TestShadowNeedsKey: shadows without a placeholder key, or with a
// short one, are refused.
func TestShadowNeedsKey(t *testing.T) {
	l, _ := openLog(t, t.TempDir())
	defer l.Close()
	for _, key := range [][]byte{nil, []byte("short")} {
		_, err := New(Config{Cache: cache.Config{Budget: testBudget, MaxObjectSize: testMaxSize},
			WriteTarget: WriteLocal, ReadMode: ReadLocal, Log: l, Shadow: true, ShadowKey: key}, memstore.New(), nil, nil)
		if err == nil || !strings.Contains(err.Error(), "ShadowKey") {
			t.Errorf("key %q: %v, want a refusal naming ShadowKey", key, err)
		}
	}
}

// TestShadowReplicated: under replicated writes the placeholder names the
// backup's sequence; a reader that cannot reach the owner is served the
// backup's record over its placeholder (never the empty placeholder),
// refuses a key whose placeholder no backup can explain, and the
// backup's takeover delivers over the placeholder.
func TestShadowReplicated(t *testing.T) {
	mem, ms := newDurableGroupShadow(t, 3, &BackupConfig{}, true)
	a, b, c := ms[0], ms[1], ms[2]
	settledWrite(t, a, "k", 1)
	a.st.placeholders.Store(true)
	a.st.down.Store(true) // the owner's deliveries never land
	v2 := object("k", 2, 1800)
	if err := putThrough(t, a.c, "k", v2); err != nil {
		t.Fatal(err)
	}
	info, err := mem.Stat(t.Context(), testBucket, "k")
	if err != nil || info.Size != 0 || info.UserMetadata[shadowPendingMeta] != etagOf(v2) {
		t.Fatalf("store after the ack: %+v (%v); want the placeholder of v2", info, err)
	}
	putRaw(t, mem, "orphan", nil, signedPlaceholder("orphan", etagOf([]byte("gone")), "1"))

	a.srv.Close() // the owner is down; membership still lists it
	if got, _, err := readWith(t.Context(), c.c, "k", nil); err != nil || !bytes.Equal(got, v2) {
		t.Fatalf("read of k with its owner down: %d bytes (%v), want v2", len(got), err)
	}
	if got, _, err := readWith(t.Context(), c.c, "orphan", nil); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("read of a placeholder no backup explains: %d bytes (%v), want ErrUnavailable", len(got), err)
	}

	// Membership drops the owner: its backup delivers over the
	// placeholder.
	for _, m := range []*bkMember{b, c} {
		m.router.gone("m0")
		m.c.OwnershipChanging()
		m.router.set(b.router.self)
		m.c.OwnershipChanged()
	}
	for _, m := range []*bkMember{b, c} {
		if err := m.c.Drain(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if got := storeHas(t, mem, "k"); !bytes.Equal(got, v2) {
		t.Fatalf("store has %d bytes of k after the takeover, want v2", len(got))
	}
}

// flaky412 answers the first n conditional placeholders with 412, as a
// store whose key changed between a HEAD and the put does (this
// cachelet's own delivery of an earlier write landing in between).
type flaky412 struct {
	store.Store
	n atomic.Int32
}

func (f *flaky412) Put(ctx context.Context, bucket, key string, body io.Reader, size int64, opts store.PutOptions) (store.PutResult, error) {
	if size == 0 && opts.UserMetadata[shadowPendingMeta] != "" && f.n.Add(-1) >= 0 {
		return store.PutResult{}, store.ErrPreconditionFailed
	}
	return f.Store.Put(ctx, bucket, key, body, size, opts)
}

// TestShadowAsksAgain: a placeholder answered 412 while the store holds
// a version of its base is asked for again (HEAD, then the put), and
// written: the write is acknowledged at once, not through the store.
func TestShadowAsksAgain(t *testing.T) {
	mem, st := newUndelivered(t)
	putRaw(t, mem, "a", object("a", 0, 100), nil)
	f := &flaky412{Store: st}
	f.n.Store(2)
	st.hold.Store(true)
	l, _ := openLog(t, t.TempDir())
	defer l.Close()
	c := shadowCachelet(t, f, l, nil)
	defer c.Close()
	a1 := object("a", 1, 100)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, testBucket, "a", bytes.NewReader(a1), int64(len(a1)), store.PutOptions{}); err != nil {
		t.Fatalf("write after two 412s, the store taking no delivery: %v", err)
	}
	if info, _ := mem.Stat(t.Context(), testBucket, "a"); info.UserMetadata[shadowPendingMeta] != etagOf(a1) {
		t.Fatalf("no placeholder of a1 after two 412s: %+v", info)
	}
	if n := toFloat64(c.shadows.WithLabelValues("written")); n != 1 {
		t.Fatalf("%v placeholders counted written, want 1", n)
	}
}

// putBounded is putVia within 5 s: a write that waits for a store that
// takes no delivery fails rather than hangs.
func putBounded(t *testing.T, c *Cachelet, key string, data []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, testBucket, key, bytes.NewReader(data), int64(len(data)), store.PutOptions{}); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}
