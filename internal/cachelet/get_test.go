package cachelet

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/cacheconfig"
	"github.com/hoard-io/hoard/internal/store"
	"github.com/hoard-io/hoard/internal/store/memstore"
)

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     Config
		wantErr bool
	}{
		{"defaults", Config{Cache: cache.Config{Budget: 10}}, false},
		{"local", Config{Cache: cache.Config{Budget: 10}, ReadMode: ReadLocal}, false},
		{"unknown mode", Config{Cache: cache.Config{Budget: 10}, ReadMode: "eventual"}, true},
		{"negative timeout", Config{Cache: cache.Config{Budget: 10}, FillTimeout: -1}, true},
		{"no budget", Config{}, true},
	} {
		cfg := tc.cfg
		err := cfg.Validate()
		if (err != nil) != tc.wantErr {
			t.Errorf("%s: Validate = %v, want error %v", tc.name, err, tc.wantErr)
		}
		if err == nil && (cfg.ReadMode == "" || cfg.FillTimeout <= 0) {
			t.Errorf("%s: defaults not filled in: %+v", tc.name, cfg)
		}
	}
}

func TestMissThenHit(t *testing.T) {
	e := newEnv(t, nil)
	data := object("k", 1, 96<<10) // a size class of its own: it charges its size
	etag := e.storePut("k", data).ETag

	obj := e.mustRead("k", data, LocalMiss)
	if obj.Info.ETag != etag || obj.Range != nil {
		t.Errorf("miss: info %+v range %v, want ETag %q and no range", obj.Info, obj.Range, etag)
	}
	e.settle()
	obj = e.mustRead("k", data, LocalHit)
	if obj.Info.ETag != etag {
		t.Errorf("hit: ETag %q, want %q", obj.Info.ETag, etag)
	}
	// One download, then one version check that moved no data.
	e.wantGets(memstore.GetCounts{Total: 2, Conditional: 1, NotModified: 1, Bodies: 1, FullBodies: 1})

	for o, want := range map[Outcome]float64{LocalMiss: 1, LocalHit: 1, PassThrough: 0} {
		if got := e.reads(o); got != want {
			t.Errorf("reads{%s} = %v, want %v", o, got, want)
		}
	}
	if got := toFloat64(e.c.m.readBytes.WithLabelValues(string(LocalHit))); got != float64(len(data)) {
		t.Errorf("read_bytes{local_hit} = %v, want %d", got, len(data))
	}
	if e.fills("ok") != 1 || e.validations("fresh") != 1 {
		t.Errorf("fills{ok} = %v, validations{fresh} = %v; want 1 and 1", e.fills("ok"), e.validations("fresh"))
	}
	if s := e.c.Stats(); s.Objects != 1 || s.Bytes != int64(len(data)) || s.Reserved != 0 {
		t.Errorf("stats = %+v, want the one object held", s)
	}
}

// TestMetricsRegistered reads the series through the registry, as a
// scraper would: their names are part of the product's interface.
func TestMetricsRegistered(t *testing.T) {
	e := newEnv(t, nil)
	data := object("k", 1, 1000)
	e.storePut("k", data)
	e.mustRead("k", data, LocalMiss)
	e.settle()
	e.mustRead("k", data, LocalHit)
	for name, want := range map[string]int{
		"hoard_cachelet_reads_total":       6, // one series per outcome
		"hoard_cachelet_read_bytes_total":  6,
		"hoard_cachelet_read_seconds":      2,
		"hoard_cachelet_validations_total": 1,
		"hoard_cachelet_fills_total":       1,
		"hoard_cachelet_fill_seconds":      1,
		"hoard_cache_bytes":                1,
		"hoard_cache_objects":              1,
		"hoard_cache_budget_bytes":         1,
		"hoard_cache_reserved_bytes":       1,
		"hoard_cache_evictions_total":      1,
	} {
		if n := len(e.gathered(name)); n != want {
			t.Errorf("%s: %d series, want %d", name, n, want)
		}
	}
	if g := e.gathered("hoard_cache_bytes"); len(g) != 1 || g[0].GetGauge().GetValue() != float64(len(data)) {
		t.Errorf("hoard_cache_bytes = %v, want %d", g, len(data))
	}
	if g := e.gathered("hoard_cachelet_reads_total"); len(g) == 3 {
		for _, m := range g {
			if m.GetLabel()[0].GetValue() == string(LocalHit) && m.GetCounter().GetValue() != 1 {
				t.Errorf("reads_total{local_hit} = %v through the registry, want 1", m.GetCounter().GetValue())
			}
		}
	}
}

func TestRangesServedFromMemory(t *testing.T) {
	// One page holds the whole object.
	e := newEnv(t, func(c *Config) { c.PageSize = 256 << 10 })
	const size = 200 << 10
	data := object("r", 1, size)
	e.storePut("r", data)

	// A ranged cold read fetches its page (here the whole object, which
	// is smaller than a page) once, as a range, and serves the range from
	// the page being filled.
	got, obj, err := e.read("r", &store.ByteRange{Start: 10, End: 19})
	if err != nil || !bytes.Equal(got, data[10:20]) || obj.Outcome != LocalMiss {
		t.Fatalf("cold ranged read = %d bytes, %v, %s", len(got), err, obj.Outcome)
	}
	e.settle()
	e.wantGets(memstore.GetCounts{Total: 1, Bodies: 1, Ranged: 1})

	for _, tc := range []struct {
		name       string
		req        store.ByteRange
		start, end int64
	}{
		{"closed", store.ByteRange{Start: 100, End: 199}, 100, 199},
		{"first byte", store.ByteRange{Start: 0, End: 0}, 0, 0},
		{"last byte", store.ByteRange{Start: size - 1, End: size - 1}, size - 1, size - 1},
		{"open", store.ByteRange{Start: size - 5, End: -1}, size - 5, size - 1},
		{"suffix", store.ByteRange{Start: -7, End: -1}, size - 7, size - 1},
		{"suffix longer than object", store.ByteRange{Start: -(size + 10), End: -1}, 0, size - 1},
		{"end past object", store.ByteRange{Start: 5, End: size * 2}, 5, size - 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.st.GetCounts()
			r := tc.req
			got, obj, err := e.read("r", &r)
			if err != nil {
				t.Fatal(err)
			}
			if obj.Outcome != LocalHit || obj.Range == nil || obj.Range.Start != tc.start || obj.Range.End != tc.end {
				t.Fatalf("outcome %s range %+v, want a hit of %d-%d", obj.Outcome, obj.Range, tc.start, tc.end)
			}
			if !bytes.Equal(got, data[tc.start:tc.end+1]) || obj.Length() != tc.end-tc.start+1 {
				t.Errorf("%d bytes (Length %d) differ from bytes %d-%d", len(got), obj.Length(), tc.start, tc.end)
			}
			// Only the version check reached the store.
			after := e.st.GetCounts()
			if after.Total != before.Total+1 || after.NotModified != before.NotModified+1 || after.Bodies != before.Bodies {
				t.Errorf("store Gets went from %+v to %+v, want one not-modified check", before, after)
			}
		})
	}
	for _, r := range []store.ByteRange{{Start: size, End: -1}, {Start: size + 5, End: size + 10}, {Start: 10, End: 5}} {
		if _, _, err := e.read("r", &r); !errors.Is(err, store.ErrInvalidRange) {
			t.Errorf("read range %+v = %v, want ErrInvalidRange", r, err)
		}
	}
}

func TestResolveRange(t *testing.T) {
	for _, tc := range []struct {
		r       store.ByteRange
		size    int64
		want    store.ByteRange
		wantErr bool
	}{
		{store.ByteRange{Start: 0, End: -1}, 10, store.ByteRange{Start: 0, End: 9}, false},
		{store.ByteRange{Start: -3, End: -1}, 10, store.ByteRange{Start: 7, End: 9}, false},
		{store.ByteRange{Start: -30, End: -1}, 10, store.ByteRange{Start: 0, End: 9}, false},
		{store.ByteRange{Start: 9, End: 100}, 10, store.ByteRange{Start: 9, End: 9}, false},
		{store.ByteRange{Start: 10, End: -1}, 10, store.ByteRange{}, true},
		{store.ByteRange{Start: 0, End: -1}, 0, store.ByteRange{}, true},
		{store.ByteRange{Start: -1, End: -1}, 0, store.ByteRange{}, true},
		{store.ByteRange{Start: 5, End: 4}, 10, store.ByteRange{}, true},
	} {
		got, err := ResolveRange(tc.r, tc.size)
		if (err != nil) != tc.wantErr || (err == nil && got != tc.want) {
			t.Errorf("ResolveRange(%+v, %d) = %+v, %v; want %+v (error %v)", tc.r, tc.size, got, err, tc.want, tc.wantErr)
		}
		if tc.wantErr && !errors.Is(err, store.ErrInvalidRange) {
			t.Errorf("ResolveRange(%+v, %d) error %v, want ErrInvalidRange", tc.r, tc.size, err)
		}
	}
}

// An object overwritten in the store behind the cachelet's back is never
// served stale under ReadVersionCheck.
func TestVersionCheckSeesOverwrite(t *testing.T) {
	e := newEnv(t, nil)
	v1, v2 := object("k", 1, 5000), object("k", 2, 7000)
	e.storePut("k", v1)
	e.mustRead("k", v1, LocalMiss)
	e.settle()
	etag2 := e.storePut("k", v2).ETag

	obj := e.mustRead("k", v2, LocalMiss)
	if obj.Info.ETag != etag2 {
		t.Errorf("ETag %q, want the new %q", obj.Info.ETag, etag2)
	}
	e.settle()
	e.mustRead("k", v2, LocalHit)
	if e.validations("changed") != 1 {
		t.Errorf("validations{changed} = %v, want 1", e.validations("changed"))
	}
	if s := e.c.Stats(); s.Objects != 1 || s.Bytes != int64(len(v2)) {
		t.Errorf("stats = %+v, want only the new version held", s)
	}
	// The changed answer already carried the new bytes: no second download.
	if g := e.st.GetCounts(); g.FullBodies != 2 {
		t.Errorf("store full-body Gets = %d, want 2 (v1, then v2 as the check's answer)", g.FullBodies)
	}
}

// An object deleted behind the cachelet's back reads as missing and is
// dropped from memory.
func TestVersionCheckSeesDelete(t *testing.T) {
	e := newEnv(t, nil)
	data := object("k", 1, 5000)
	e.storePut("k", data)
	e.mustRead("k", data, LocalMiss)
	e.settle()
	if err := e.st.Delete(t.Context(), testBucket, "k"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.read("k", nil); !errors.Is(err, store.ErrNoSuchKey) {
		t.Fatalf("read after delete = %v, want ErrNoSuchKey", err)
	}
	if s := e.c.Stats(); s.Objects != 0 || s.Bytes != 0 {
		t.Errorf("stats = %+v, want the deleted object dropped", s)
	}
	if e.validations("gone") != 1 {
		t.Errorf("validations{gone} = %v, want 1", e.validations("gone"))
	}
	// A missing object is not a read error.
	if got := toFloat64(e.c.m.readErrors); got != 0 {
		t.Errorf("read_errors = %v, want 0", got)
	}
	// Even under ReadLocal the copy is gone.
	e.c.cfg.ReadMode = ReadLocal
	if _, _, err := e.read("k", nil); !errors.Is(err, store.ErrNoSuchKey) {
		t.Errorf("local read after the drop = %v, want ErrNoSuchKey", err)
	}
}

func TestReadLocalTrustsMemory(t *testing.T) {
	e := newEnv(t, readLocal)
	v1 := object("k", 1, 5000)
	e.storePut("k", v1)
	e.mustRead("k", v1, LocalMiss)
	e.settle()
	e.storePut("k", object("k", 2, 5000)) // behind the cachelet's back
	before := e.st.GetCounts()
	for range 3 {
		e.mustRead("k", v1, LocalHit)
	}
	if after := e.st.GetCounts(); after != before {
		t.Errorf("local hits asked the store: Gets %+v -> %+v", before, after)
	}
}

// With the store down, a read under ReadVersionCheck cannot confirm its
// copy and fails (a doubt is a miss); under ReadLocal the copy is served.
func TestStoreDown(t *testing.T) {
	for _, tc := range []struct {
		mode        ReadMode
		cachedFails bool
	}{
		{ReadVersionCheck, true},
		{ReadLocal, false},
	} {
		t.Run(string(tc.mode), func(t *testing.T) {
			e := newEnv(t, func(c *Config) { c.ReadMode = tc.mode })
			data := object("k", 1, 5000)
			e.storePut("k", data)
			e.storePut("cold", object("cold", 1, 10))
			e.mustRead("k", data, LocalMiss)
			e.settle()
			e.st.SetDown(true)

			_, _, err := e.read("k", nil)
			if tc.cachedFails != (err != nil) || (err != nil && !errors.Is(err, store.ErrUnavailable)) {
				t.Errorf("read of a cached object = %v, want failure %v (ErrUnavailable)", err, tc.cachedFails)
			}
			if _, _, err := e.read("k", &store.ByteRange{Start: 0, End: 9}); tc.cachedFails != (err != nil) {
				t.Errorf("ranged read of a cached object = %v, want failure %v", err, tc.cachedFails)
			}
			if _, _, err := e.read("cold", nil); !errors.Is(err, store.ErrUnavailable) {
				t.Errorf("read of an uncached object = %v, want ErrUnavailable", err)
			}
			wantErrors := 1.0
			if tc.cachedFails {
				wantErrors = 3
				if e.validations("error") != 2 {
					t.Errorf("validations{error} = %v, want 2", e.validations("error"))
				}
			}
			if got := toFloat64(e.c.m.readErrors); got != wantErrors {
				t.Errorf("read_errors = %v, want %v", got, wantErrors)
			}
			// The copy survives the outage: back up, it is a hit again.
			e.st.SetDown(false)
			e.mustRead("k", data, LocalHit)
		})
	}
}

// N concurrent cold readers of one key share one download: the store sees
// one full-body GET, and the others only check the version (sharing those
// checks as validate.go allows: at least one, at most one per follower).
func TestSingleFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const readers = 16
		e := newEnv(t, nil)
		data := object("k", 1, 150<<10)
		e.storePut("k", data)
		hold := e.st.HoldGet(testBucket, "k")

		var wg sync.WaitGroup
		outcomes := make(chan Outcome, readers)
		for range readers {
			wg.Go(func() {
				got, obj, err := e.read("k", nil)
				if err != nil || !bytes.Equal(got, data) {
					t.Errorf("read = %d bytes, %v", len(got), err)
					return
				}
				outcomes <- obj.Outcome
			})
		}
		<-hold.Reached()
		synctest.Wait() // everyone is either the leader, held, or waiting on it
		if g := e.st.GetCounts(); g.Total != 1 {
			t.Errorf("%d store Gets before the first answered, want 1", g.Total)
		}
		hold.Release()
		wg.Wait()
		close(outcomes)
		n := map[Outcome]int{}
		for o := range outcomes {
			n[o]++
		}
		if n[LocalMiss] != 1 || n[LocalHit] != readers-1 {
			t.Errorf("outcomes %v, want one miss and %d hits", n, readers-1)
		}
		g := e.st.GetCounts()
		if g.Conditional < 1 || g.Conditional > readers-1 {
			t.Errorf("%d version checks for %d followers", g.Conditional, readers-1)
		}
		e.wantGets(memstore.GetCounts{Total: 1 + g.Conditional, Conditional: g.Conditional, NotModified: g.Conditional, Bodies: 1, FullBodies: 1})
	})
}

// Readers arriving at random times while a download is in flight, or
// after, all share it (no timing assumption: any interleaving must give
// exactly one download).
func TestSingleFlightAnyInterleaving(t *testing.T) {
	e := newEnv(t, nil)
	data := object("k", 1, 200<<10)
	e.storePut("k", data)
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			got, _, err := e.read("k", nil)
			if err != nil || !bytes.Equal(got, data) {
				t.Errorf("read = %d bytes, %v", len(got), err)
			}
		})
	}
	wg.Wait()
	if g := e.st.GetCounts(); g.FullBodies != 1 || g.Total != 1+g.NotModified || g.NotModified > 31 {
		t.Errorf("store Gets %+v, want one full body and at most 31 version checks", g)
	}
}

// Objects larger than MaxObjectSize stream through whole, and nothing of
// them is kept; a range of one is fetched as a range, once, and kept in
// pages (pages.go).
func TestLargeObjectsPassThrough(t *testing.T) {
	e := newEnv(t, nil)
	big := object("big", 1, testMaxSize+1)
	e.storePut("big", big)
	for range 2 {
		e.mustRead("big", big, PassThrough)
	}
	e.settle()
	if s := e.c.Stats(); s.Objects != 0 || s.Bytes != 0 || s.Reserved != 0 {
		t.Errorf("stats = %+v, want nothing kept", s)
	}
	r := store.ByteRange{Start: 1000, End: 1999}
	got, obj, err := e.read("big", &r)
	if err != nil || obj.Outcome != LocalMiss || !bytes.Equal(got, big[1000:2000]) {
		t.Fatalf("ranged read = %d bytes, %v, %v", len(got), err, obj)
	}
	if obj.Range == nil || *obj.Range != r {
		t.Errorf("range = %v, want %+v", obj.Range, r)
	}
	e.settle()
	if s := e.c.Stats(); s.Objects != 1 || s.Bytes != DefaultPageSize || s.Reserved != 0 {
		t.Errorf("stats = %+v, want the first page kept", s)
	}
	if g := e.st.GetCounts(); g.Total != 3 || g.FullBodies != 2 || g.Ranged != 1 {
		t.Errorf("store Gets %+v: want 2 full and 1 ranged (the ranged read asks once, for its page)", g)
	}
	if e.reads(PassThrough) != 2 {
		t.Errorf("reads{pass_through} = %v, want 2", e.reads(PassThrough))
	}
}

// Without pages, a streamed ranged read is pinned to the version its
// first request saw: if the object changes between the two requests, the
// read fails with ErrObjectChanged instead of mixing versions.
func TestPassThroughRangeAcrossAnOverwrite(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.PageSize = -1 })
	e.storePut("big", object("big", 1, testMaxSize+1))
	hold := e.st.HoldGet(testBucket, "big")
	errc := make(chan error, 1)
	go func() {
		_, _, err := e.read("big", &store.ByteRange{Start: 0, End: 9})
		errc <- err
	}()
	<-hold.Reached() // the first request saw version 1
	e.storePut("big", object("big", 2, testMaxSize+1))
	hold.Release()
	if err := <-errc; !errors.Is(err, ErrObjectChanged) {
		t.Errorf("read = %v, want ErrObjectChanged", err)
	}
}

// A fill whose store body breaks gives its readers an error, never short
// data, and the next read downloads again.
func TestBrokenFill(t *testing.T) {
	e := newEnv(t, nil)
	data := object("k", 1, 100<<10)
	e.storePut("k", data)
	broken := errors.New("connection reset by peer")
	e.st.BreakBody(testBucket, "k", 60<<10, broken)
	hold := e.st.HoldBody(testBucket, "k", 10<<10)

	// Two readers share the doomed download: the leader and one that
	// finds the entry filling.
	a, err := e.c.Get(t.Context(), testBucket, "k", nil)
	if err != nil {
		t.Fatal(err)
	}
	<-hold.Reached()
	b, err := e.c.Get(t.Context(), testBucket, "k", &store.ByteRange{Start: 0, End: 80 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if a.Outcome != LocalMiss || b.Outcome != LocalHit {
		t.Errorf("outcomes %s, %s; want miss then hit", a.Outcome, b.Outcome)
	}
	hold.Release()
	for _, obj := range []*Object{a, b} {
		var buf bytes.Buffer
		_, err := buf.ReadFrom(obj.Body)
		obj.Body.Close()
		if !errors.Is(err, cache.ErrFillAborted) || !errors.Is(err, broken) {
			t.Errorf("reading a broken fill: %v, want ErrFillAborted wrapping the cause", err)
		}
		if buf.Len() > 60<<10 || !bytes.Equal(buf.Bytes(), data[:buf.Len()]) {
			t.Errorf("got %d bytes before the error, not a prefix of what arrived", buf.Len())
		}
	}
	e.settle()
	if e.fills("aborted") != 1 {
		t.Errorf("fills{aborted} = %v, want 1", e.fills("aborted"))
	}
	if s := e.c.Stats(); s.Objects != 0 || s.Reserved != 0 {
		t.Errorf("stats = %+v, want nothing held", s)
	}
	e.mustRead("k", data, LocalMiss)
	if g := e.st.GetCounts(); g.FullBodies != 2 {
		t.Errorf("full-body Gets = %d, want 2 (the broken one and the refetch)", g.FullBodies)
	}
}

// Many objects, read repeatedly from many goroutines: every read is right
// and the memory tier never holds more than its budget.
// TestBudgetUnderManyObjects: concurrent readers of more objects than the
// budget holds get the right bytes under every eviction policy, and the
// cache stays within its budget.
func TestBudgetUnderManyObjects(t *testing.T) {
	for _, p := range cacheconfig.Policies() {
		t.Run(string(p), func(t *testing.T) { testBudgetUnderManyObjects(t, p) })
	}
}

func testBudgetUnderManyObjects(t *testing.T, p cache.Policy) {
	evicted := 0
	var mu sync.Mutex
	e := newEnv(t, func(c *Config) {
		c.Cache.OnEvict = func(*cache.Entry) { mu.Lock(); evicted++; mu.Unlock() }
		c.Cache.Policy = p
		if p == cache.PolicyTTL {
			c.Cache.TTL = time.Hour
		}
	})
	const objects = 40
	want := make(map[string][]byte)
	for i := range objects {
		key := fmt.Sprint("obj-", i)
		want[key] = object(key, 1, 60<<10+i*1000)
		e.storePut(key, want[key])
	}
	keys := make([]string, 0, objects)
	for k := range want {
		keys = append(keys, k)
	}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 9))
			for range 60 {
				key := keys[rng.IntN(len(keys))]
				got, _, err := e.read(key, nil)
				if err != nil || !bytes.Equal(got, want[key]) {
					t.Errorf("read %s = %d bytes, %v", key, len(got), err)
					return
				}
				e.checkBudget()
			}
		})
	}
	wg.Wait()
	e.settle()
	e.checkBudget()
	s := e.c.Stats()
	if s.Reserved != 0 || s.Evictions == 0 || s.Bytes > testBudget {
		t.Errorf("stats %+v: want evictions, nothing reserved, within budget", s)
	}
	mu.Lock()
	defer mu.Unlock()
	if uint64(evicted) != s.Evictions {
		t.Errorf("OnEvict called %d times, stats say %d evictions", evicted, s.Evictions)
	}
	if got := toFloat64(e.c.m.evictedBytes); got <= 0 {
		t.Errorf("evicted_bytes = %v", got)
	}
}

func TestMissingObjectsAndBuckets(t *testing.T) {
	e := newEnv(t, nil)
	if _, _, err := e.read("nope", nil); !errors.Is(err, store.ErrNoSuchKey) {
		t.Errorf("read missing key = %v", err)
	}
	if _, err := e.c.Get(t.Context(), "no-such-bucket", "k", nil); !errors.Is(err, store.ErrNoSuchBucket) {
		t.Errorf("read in missing bucket = %v", err)
	}
	if got := toFloat64(e.c.m.readErrors); got != 0 {
		t.Errorf("read_errors = %v, want 0: missing objects are not errors", got)
	}
}

func TestEmptyObject(t *testing.T) {
	e := newEnv(t, nil)
	e.storePut("empty", nil)
	e.mustRead("empty", nil, LocalMiss)
	e.settle()
	e.mustRead("empty", nil, LocalHit)
	if _, _, err := e.read("empty", &store.ByteRange{Start: 0, End: -1}); !errors.Is(err, store.ErrInvalidRange) {
		t.Errorf("range of an empty object = %v, want ErrInvalidRange", err)
	}
}

func TestStat(t *testing.T) {
	for _, mode := range []ReadMode{ReadVersionCheck, ReadLocal} {
		t.Run(string(mode), func(t *testing.T) {
			e := newEnv(t, func(c *Config) { c.ReadMode = mode })
			v1 := object("k", 1, 1000)
			etag1 := e.storePut("k", v1).ETag
			e.mustRead("k", v1, LocalMiss)
			e.settle()
			etag2 := e.storePut("k", object("k", 2, 1000)).ETag
			info, err := e.c.Stat(t.Context(), testBucket, "k")
			if err != nil {
				t.Fatal(err)
			}
			want := etag2
			if mode == ReadLocal {
				want = etag1
			}
			if info.ETag != want {
				t.Errorf("Stat ETag = %q, want %q", info.ETag, want)
			}
			// Under ReadVersionCheck the contradicted copy is dropped.
			if got, wantObjects := e.c.Stats().Objects, map[ReadMode]int{ReadVersionCheck: 0, ReadLocal: 1}[mode]; got != wantObjects {
				t.Errorf("%d objects held after Stat, want %d", got, wantObjects)
			}
		})
	}
}

// TestCloseCancelsOrphanedFills: a fill nobody waits for any more does not
// hold Close up until its timeout; Close cancels it, and it is not cached.
func TestCloseCancelsOrphanedFills(t *testing.T) {
	e := newEnv(t, nil)
	data := object("big", 1, 200<<10) // filled by a goroutine of its own
	e.storePut("big", data)
	hold := e.st.HoldBody(testBucket, "big", 1000)
	defer hold.Release()

	obj, err := e.c.Get(t.Context(), testBucket, "big", nil)
	if err != nil {
		t.Fatal(err)
	}
	<-hold.Reached()
	done := make(chan error, 1)
	go func() { done <- e.c.Close() }()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(obj.Body); err == nil {
		t.Fatal("a read of a fill cancelled by Close ended without an error")
	}
	obj.Body.Close()
	if s := e.c.Stats(); s.Objects != 0 || s.Reserved != 0 {
		t.Fatalf("after Close: %+v", s)
	}
}

// With ServeStaleIfError, a cached copy the store cannot confirm is served
// as a stale hit; an uncached object still fails, and nothing is cached
// from the failed read.
func TestServeStaleIfError(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.ServeStaleIfError = true })
	data := object("k", 1, 5000)
	e.storePut("k", data)
	e.storePut("cold", object("cold", 1, 10))
	e.mustRead("k", data, LocalMiss)
	e.settle()
	e.st.SetDown(true)

	got, obj, err := e.read("k", nil)
	if err != nil || !bytes.Equal(got, data) || obj.Outcome != StaleHit {
		t.Fatalf("read of a cached object with the store down = %v, outcome %v, want the copy as %s", err, obj, StaleHit)
	}
	if _, _, err := e.read("cold", nil); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("read of an uncached object = %v, want ErrUnavailable", err)
	}
	if e.c.cache.Peek(cache.Key{Bucket: testBucket, Object: "cold"}) != nil {
		t.Error("a failed read left an entry in the cache")
	}
	e.st.SetDown(false)
	e.mustRead("k", data, LocalHit)
}
