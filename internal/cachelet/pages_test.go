package cachelet

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/store"
	"github.com/hoard-io/hoard/internal/store/memstore"
)

const testPage = 16 << 10

// pagesEnv is an env whose pages are testPage bytes, holding "big", an
// object four times larger than the largest object kept whole.
func pagesEnv(t *testing.T, opt func(*Config)) (*env, []byte) {
	e := newEnv(t, func(c *Config) {
		c.PageSize = testPage
		if opt != nil {
			opt(c)
		}
	})
	big := object("big", 1, 4*testMaxSize+1000)
	e.storePut("big", big)
	return e, big
}

// readRange reads bytes start..end (inclusive) and checks them.
func (e *env) readRange(key string, want []byte, start, end int64, outcome Outcome) {
	e.t.Helper()
	got, obj, err := e.read(key, &store.ByteRange{Start: start, End: end})
	if err != nil {
		e.t.Fatalf("read %s %d-%d: %v", key, start, end, err)
	}
	if !bytes.Equal(got, want[start:end+1]) {
		e.t.Fatalf("read %s %d-%d: %d bytes differ from the %d expected", key, start, end, len(got), end-start+1)
	}
	if obj.Outcome != outcome || obj.Range == nil || obj.Range.Start != start || obj.Range.End != end || obj.Info.Size != int64(len(want)) {
		e.t.Fatalf("read %s %d-%d: outcome %s, range %+v, size %d; want %s", key, start, end, obj.Outcome, obj.Range, obj.Info.Size, outcome)
	}
}

func (e *env) pageReads(result string) float64 {
	return toFloat64(e.c.pages.reads.WithLabelValues(result))
}

// A range of an object too large to keep whole costs one ranged store
// request of its pages, is kept in pages, and is served from them next,
// after one conditional request; nothing else of the object moves.
func TestRangeOfALargeObjectIsPaged(t *testing.T) {
	e, big := pagesEnv(t, nil)
	// 100 bytes short of page 3's end to 50 bytes into page 6.
	start, end := int64(4*testPage-100), int64(6*testPage+49)
	e.readRange("big", big, start, end, LocalMiss)
	e.settle()
	e.wantGets(memstore.GetCounts{Total: 1, Bodies: 1, Ranged: 1})
	if got, want := toFloat64(e.c.pages.storeBytes), float64(4*testPage); got != want {
		t.Errorf("store bytes = %v, want %v (pages 3 to 6)", got, want)
	}
	if s := e.c.Stats(); s.Objects != 4 || s.Bytes != 4*testPage || s.Reserved != 0 {
		t.Errorf("stats = %+v, want the 4 pages kept", s)
	}
	// The same range, and another within the same pages: hits, after a
	// version check each.
	e.readRange("big", big, start, end, LocalHit)
	e.readRange("big", big, 3*testPage, 7*testPage-1, LocalHit)
	e.wantGets(memstore.GetCounts{Total: 3, Conditional: 2, NotModified: 2, Bodies: 1, Ranged: 1})
	if e.pageReads("hit") != 2 || e.pageReads("filled") != 1 || e.validations("fresh") != 2 {
		t.Errorf("page reads hit %v filled %v, fresh validations %v; want 2, 1, 2", e.pageReads("hit"), e.pageReads("filled"), e.validations("fresh"))
	}
	// A range reaching one page further fetches its pages again, as one
	// range; the last page, shorter than the others, too.
	e.readRange("big", big, 5*testPage, 7*testPage+10, LocalMiss)
	n := int64(len(big))
	e.readRange("big", big, n-10, n-1, LocalMiss)
	e.readRange("big", big, n-5, n-1, LocalHit)
	// A suffix range, once the size is known, is served from pages.
	got, obj, err := e.read("big", &store.ByteRange{Start: -7, End: -1})
	if err != nil || !bytes.Equal(got, big[n-7:]) || obj.Outcome != LocalHit {
		t.Fatalf("suffix = %d bytes, %v, %v", len(got), err, obj)
	}
	e.settle()
	e.checkBudget()
	if e.c.keys.t.Len() != 0 {
		t.Errorf("%d keys left in the table", e.c.keys.t.Len())
	}
}

// Pages of two versions never serve one read: an object changed in the
// store is seen by the next read's version check, which fetches the new
// version's pages as one range.
func TestPagesOfAChangedObject(t *testing.T) {
	e, big := pagesEnv(t, nil)
	e.readRange("big", big, 0, 3*testPage-1, LocalMiss)
	e.settle()
	v2 := object("big", 2, len(big))
	e.storePut("big", v2)
	// Pages 0..2 of v1 are cached: their check finds v2, whose pages
	// come back as its answer.
	e.readRange("big", v2, testPage, 3*testPage-1, LocalMiss)
	e.settle()
	if e.validations("changed") != 1 {
		t.Errorf("validations{changed} = %v, want 1", e.validations("changed"))
	}
	e.readRange("big", v2, 2*testPage, 3*testPage-1, LocalHit)
	// Pages 0 (v1 only) to 4 (none): all v2.
	e.readRange("big", v2, 0, 5*testPage-1, LocalMiss)
	// Deleted: the read fails, and what was known is forgotten.
	if err := e.st.Delete(t.Context(), testBucket, "big"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.read("big", &store.ByteRange{Start: 0, End: 9}); !errors.Is(err, store.ErrNoSuchKey) {
		t.Fatalf("read of a deleted object = %v, want ErrNoSuchKey", err)
	}
	if _, ok, _ := e.c.pages.lookup(cache.Key{Bucket: testBucket, Object: "big"}); ok {
		t.Error("the page index still knows a deleted object")
	}
}

// Under ReadLocal cached pages are served without asking the store, and a
// write through the cachelet makes the next ranged read see it.
func TestPagesReadLocal(t *testing.T) {
	e, big := pagesEnv(t, readLocal)
	e.readRange("big", big, 10, 2*testPage, LocalMiss)
	e.settle()
	before := e.st.GetCounts()
	e.readRange("big", big, 100, 200, LocalHit)
	e.readRange("big", big, 0, 3*testPage-1, LocalHit)
	if after := e.st.GetCounts(); after != before {
		t.Errorf("store Gets went from %+v to %+v on local page hits", before, after)
	}
	v2 := object("big", 2, len(big))
	if _, err := e.c.Put(t.Context(), testBucket, "big", bytes.NewReader(v2), int64(len(v2)), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	e.readRange("big", v2, 100, 200, LocalMiss)
	e.settle()
	e.readRange("big", v2, 100, 200, LocalHit)
}

// Pages that do not fit the budget are not kept: the range streams
// through, one store request, and what is kept stays within the budget.
// Pages evicted to make room for others are fetched again when read.
func TestPagesWithinTheBudget(t *testing.T) {
	const maxKept = 4 * testPage
	e, big := pagesEnv(t, func(c *Config) { c.Cache.Budget, c.Cache.MaxObjectSize = 8*testPage, maxKept })
	e.readRange("big", big, 0, 4*testPage-1, LocalMiss)
	e.settle()
	e.readRange("big", big, 10*testPage, 14*testPage-1, LocalMiss) // evicts the first
	e.readRange("big", big, 20*testPage+5, 22*testPage, LocalMiss)
	e.settle()
	e.settle()
	e.checkBudget()
	e.readRange("big", big, 0, testPage-1, LocalMiss)
	e.settle()
	// Longer than the largest object kept: streamed, its range alone.
	before := e.st.GetCounts()
	bytesBefore := toFloat64(e.c.pages.storeBytes)
	e.readRange("big", big, 1, maxKept+testPage, PassThrough)
	if after := e.st.GetCounts(); after.Total != before.Total+1 || after.Ranged != before.Ranged+1 {
		t.Errorf("store Gets went from %+v to %+v, want one ranged", before, after)
	}
	if d := toFloat64(e.c.pages.storeBytes) - bytesBefore; d != maxKept+testPage {
		t.Errorf("store bytes for a streamed range = %v, want the range's %d", d, maxKept+testPage)
	}
	e.settle()
	e.checkBudget()
}

// A page fill whose store body breaks fails its readers (never short or
// wrong bytes) and keeps nothing; the next read fetches again.
func TestBrokenPageFill(t *testing.T) {
	e, big := pagesEnv(t, nil)
	broken := errors.New("connection reset by peer")
	e.st.BreakBody(testBucket, "big", testPage+100, broken)
	got, _, err := e.read("big", &store.ByteRange{Start: 10, End: 3*testPage - 1})
	if !errors.Is(err, cache.ErrFillAborted) || !errors.Is(err, broken) {
		t.Fatalf("read of a broken fill = %v, want ErrFillAborted wrapping the cause", err)
	}
	if !bytes.Equal(got, big[10:10+len(got)]) {
		t.Fatal("bytes before the break differ")
	}
	e.settle()
	if s := e.c.Stats(); s.Reserved != 0 || s.Objects != 1 {
		t.Errorf("stats = %+v, want only page 0 (complete before the break) kept", s)
	}
	e.readRange("big", big, 10, 3*testPage-1, LocalMiss)
}

// Readers of overlapping ranges at once, some of them after writes behind
// the cachelet's back, each get one version's bytes: the pages they read
// never mix versions, pages whose chunks come from the pool are never
// reused under a reader, and the budget holds.
func TestConcurrentPageReads(t *testing.T) {
	for _, ps := range []int64{testPage, cache.ChunkSize} {
		t.Run(fmt.Sprint(ps), func(t *testing.T) { concurrentPageReads(t, ps) })
	}
}

func concurrentPageReads(t *testing.T, ps int64) {
	e, _ := pagesEnv(t, func(c *Config) {
		c.PageSize, c.Cache.Budget, c.Cache.MaxObjectSize = ps, 12*ps, 4*ps
	})
	n := 4*testMaxSize + 1000
	versions := make([][]byte, 4)
	for v := range versions {
		versions[v] = object("big", v+1, n)
	}
	e.storePut("big", versions[0])
	var wg sync.WaitGroup
	errc := make(chan error, 64)
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(g), 1))
			for range 40 {
				start := rnd.Int64N(int64(n - 1))
				end := min(start+rnd.Int64N(3*ps), int64(n-1))
				got, _, err := e.read("big", &store.ByteRange{Start: start, End: end})
				if err != nil {
					errc <- err
					return
				}
				ok := false
				for _, v := range versions {
					ok = ok || bytes.Equal(got, v[start:end+1])
				}
				if !ok {
					errc <- fmt.Errorf("range %d-%d matches no single version", start, end)
					return
				}
			}
		}()
	}
	for v := 1; v < len(versions); v++ {
		e.storePut("big", versions[v])
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	e.settle()
	e.checkBudget()
	if ps%cache.ChunkSize == 0 && e.c.cache.BufferStats().Reused == 0 {
		t.Error("no page reused a pooled chunk")
	}
}

// Bad page sizes are refused.
func TestPageSizeValidated(t *testing.T) {
	for _, n := range []int64{1, 4<<10 - 1, 64<<20 + 1} {
		cfg := Config{Cache: cache.Config{Budget: testBudget}, PageSize: n}
		if err := cfg.Validate(); err == nil {
			t.Errorf("page size %d accepted", n)
		}
	}
}

// With the store down, cached pages are not served as confirmed under
// strong: the read fails, or is a marked stale hit where
// ServeStaleIfError is on; under ReadLocal they are served.
func TestPagesWithTheStoreDown(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  func(*Config)
		want Outcome // "" : the read fails with ErrUnavailable
	}{
		{"strong", nil, ""},
		{"strong, stale if error", func(c *Config) { c.ServeStaleIfError = true }, StaleHit},
		{"local", readLocal, LocalHit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, big := pagesEnv(t, tc.opt)
			e.readRange("big", big, 100, 2*testPage, LocalMiss)
			e.settle()
			e.st.SetDown(true)
			got, obj, err := e.read("big", &store.ByteRange{Start: 100, End: 2 * testPage})
			if tc.want == "" {
				if !errors.Is(err, store.ErrUnavailable) {
					t.Fatalf("read with the store down = %v, want ErrUnavailable", err)
				}
			} else if err != nil || obj.Outcome != tc.want || !bytes.Equal(got, big[100:2*testPage+1]) {
				t.Fatalf("read with the store down = %v, %v; want %s and the right bytes", err, obj, tc.want)
			}
			// Pages not cached: a miss the store cannot answer.
			if _, _, err := e.read("big", &store.ByteRange{Start: 10 * testPage, End: 11 * testPage}); !errors.Is(err, store.ErrUnavailable) {
				t.Fatalf("cold read with the store down = %v, want ErrUnavailable", err)
			}
			e.st.SetDown(false)
			e.readRange("big", big, 10*testPage, 11*testPage, LocalMiss)
		})
	}
}

// Close while a page fill is held mid-body: the fill is cancelled and
// waited for, its reader gets an error (never short bytes as whole), and
// nothing stays reserved; later page reads fill nothing.
func TestCloseDuringAPageFill(t *testing.T) {
	e, big := pagesEnv(t, nil)
	hold := e.st.HoldBody(testBucket, "big", testPage+10)
	obj, err := e.c.Get(t.Context(), testBucket, "big", &store.ByteRange{Start: 0, End: 3*testPage - 1})
	if err != nil {
		t.Fatal(err)
	}
	<-hold.Reached()
	done := make(chan error, 1)
	go func() { done <- e.c.Close() }()
	var buf bytes.Buffer
	_, rerr := buf.ReadFrom(obj.Body)
	obj.Body.Close()
	if err := <-done; err != nil {
		t.Fatalf("Close: %v", err)
	}
	hold.Release()
	if rerr == nil {
		t.Fatal("a read cut off by Close ended without an error")
	}
	if !bytes.Equal(buf.Bytes(), big[:buf.Len()]) {
		t.Fatal("bytes before the error differ")
	}
	if s := e.c.Stats(); s.Reserved != 0 {
		t.Errorf("stats after Close = %+v, want nothing reserved", s)
	}
	// After Close nothing more is filled: a read either streams (its
	// store request may also be cancelled) or fails.
	before := e.c.Stats()
	got, obj, err := e.read("big", &store.ByteRange{Start: 5 * testPage, End: 6 * testPage})
	if err == nil && (obj.Outcome != PassThrough || !bytes.Equal(got, big[5*testPage:6*testPage+1])) {
		t.Fatalf("read after Close = %s, %d bytes", obj.Outcome, len(got))
	}
	if s := e.c.Stats(); s.Objects != before.Objects || s.Reserved != 0 {
		t.Errorf("stats went from %+v to %+v after Close", before, s)
	}
}

// An object that changes size behind the cachelet: the span chosen for
// the size known before misses the new version's range, and the read
// asks again instead of failing or serving short.
func TestPagesOfAnObjectThatChangesSize(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.PageSize = testPage })
	all := &store.ByteRange{Start: 0, End: 1 << 30}
	for i, size := range []int{5, 4, 9, 3 * testPage, testPage + 7, 2} {
		data := object("k", i, size)
		e.storePut("k", data)
		for range 2 { // changed, then a hit
			got, obj, err := e.read("k", all)
			if err != nil || !bytes.Equal(got, data) || obj.Info.Size != int64(size) {
				t.Fatalf("version %d (%d bytes): read %d bytes, %v, %v", i, size, len(got), err, obj)
			}
		}
		e.settle()
	}
	if n := toFloat64(e.c.m.readErrors); n != 0 {
		t.Errorf("%v read errors", n)
	}
}

// A page's name is no object's: reads of it, whole or ranged, here or by
// a peer, find nothing, even while the page is cached.
func TestPageNamesAreNotKeys(t *testing.T) {
	e, big := pagesEnv(t, readLocal)
	e.readRange("big", big, 0, 10, LocalMiss)
	e.settle()
	info, ok, _ := e.c.pages.lookup(cache.Key{Bucket: testBucket, Object: "big"})
	if !ok {
		t.Fatal("no page index entry")
	}
	name := pageKey(cache.Key{Bucket: testBucket, Object: "big"}, info.ETag, 0).Object
	if e.c.cache.Peek(cache.Key{Bucket: testBucket, Object: name}) == nil {
		t.Fatal("the page is not cached under its name")
	}
	if _, _, err := e.read(name, nil); !errors.Is(err, store.ErrNoSuchKey) {
		t.Errorf("whole read of a page's name = %v, want ErrNoSuchKey", err)
	}
	if _, _, err := e.read(name, &store.ByteRange{Start: 0, End: 5}); !errors.Is(err, store.ErrNoSuchKey) {
		t.Errorf("ranged read of a page's name = %v, want ErrNoSuchKey", err)
	}
	if _, err := e.c.Stat(t.Context(), testBucket, name); !errors.Is(err, store.ErrNoSuchKey) {
		t.Errorf("stat of a page's name = %v, want ErrNoSuchKey", err)
	}
	if _, err := e.c.PeerGet(t.Context(), testBucket, name, ""); !errors.Is(err, store.ErrNoSuchKey) {
		t.Errorf("peer read of a page's name = %v, want ErrNoSuchKey", err)
	}
}
