package cache

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/hoard-io/hoard/internal/store"
)

// complete returns a complete entry of size bytes for bucket/object.
func complete(bucket, object string, size int) *Entry {
	k := Key{Bucket: bucket, Object: object}
	return NewCompleteEntry(k, store.ObjectInfo{Bucket: bucket, Key: object, ETag: "e-" + object}, make([]byte, size))
}

// admit reserves room for e and adds it, as a finished fill does.
func admit(t testing.TB, c *Cache, e *Entry) {
	t.Helper()
	if !c.Reserve(e.Size()) {
		t.Fatalf("Reserve(%d) for %v refused; stats %+v", e.Size(), e.Key(), c.Stats())
	}
	if !c.Add(e) {
		t.Fatalf("Add(%v) refused", e.Key())
	}
}

func newCache(t testing.TB, cfg Config) *Cache {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	return c
}

// checkAccounting verifies the budget invariant and that Bytes is the sum
// of the entries held.
func checkAccounting(t *testing.T, c *Cache) {
	t.Helper()
	s := c.Stats()
	if s.Bytes < 0 || s.Reserved < 0 || s.Bytes+s.Reserved > s.Budget {
		t.Fatalf("stats %+v break the budget", s)
	}
	var sum int64
	n := 0
	c.mu.Lock()
	for e := c.head.next; e != &c.head; e = e.next {
		sum += e.Size()
		n++
		if c.items[e.key] != e || !e.inCache {
			c.mu.Unlock()
			t.Fatalf("LRU list holds %v, which the index does not", e.key)
		}
	}
	c.mu.Unlock()
	if sum != s.Bytes || n != s.Objects {
		t.Fatalf("entries hold %d bytes in %d objects; stats say %+v", sum, n, s)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg     Config
		wantMax int64
		wantErr bool
	}{
		{Config{Budget: 100}, 50, false},
		{Config{Budget: 100, MaxObjectSize: 100}, 100, false},
		{Config{Budget: 100, MaxObjectSize: 1}, 1, false},
		{Config{}, 0, true},
		{Config{Budget: -1}, 0, true},
		{Config{Budget: 100, MaxObjectSize: 101}, 0, true},
		{Config{Budget: 100, MaxObjectSize: -1}, 0, true},
	} {
		cfg := tc.cfg
		err := cfg.Validate()
		if (err != nil) != tc.wantErr || (err == nil && cfg.MaxObjectSize != tc.wantMax) {
			t.Errorf("Validate(%+v) = %v, max %d; want error %v, max %d", tc.cfg, err, cfg.MaxObjectSize, tc.wantErr, tc.wantMax)
		}
	}
}

func TestLRUEvictionOrder(t *testing.T) {
	var evicted []string
	c := newCache(t, Config{Budget: 100, MaxObjectSize: 100, OnEvict: func(e *Entry) {
		evicted = append(evicted, e.Key().Object)
	}})
	for _, name := range []string{"a", "b", "c"} {
		admit(t, c, complete("bk", name, 30))
	}
	// a is now the most recently used, b the least.
	if c.Get(Key{"bk", "a"}) == nil {
		t.Fatal("Get(a) = nil")
	}
	// Peek does not touch recency.
	if c.Peek(Key{"bk", "b"}) == nil {
		t.Fatal("Peek(b) = nil")
	}
	admit(t, c, complete("bk", "d", 30)) // 120 > 100: one must go
	if !slices.Equal(evicted, []string{"b"}) {
		t.Fatalf("evicted %q, want [b]", evicted)
	}
	admit(t, c, complete("bk", "e", 50)) // 140 > 100: c then a
	if !slices.Equal(evicted, []string{"b", "c", "a"}) {
		t.Fatalf("evicted %q, want [b c a]", evicted)
	}
	for name, want := range map[string]bool{"a": false, "b": false, "c": false, "d": true, "e": true} {
		if got := c.Peek(Key{"bk", name}) != nil; got != want {
			t.Errorf("%s cached = %v, want %v", name, got, want)
		}
	}
	if s := c.Stats(); s.Evictions != 3 || s.Bytes != 80 || s.Objects != 2 || s.Reserved != 0 {
		t.Errorf("stats = %+v, want 3 evictions, 80 bytes in 2 objects", s)
	}
	checkAccounting(t, c)
}

func TestReserve(t *testing.T) {
	for _, tc := range []struct {
		name     string
		held     []int64 // reservations already held
		cached   []int   // complete entries already cached
		size     int64
		want     bool
		evicting int // entries evicted to make room
	}{
		{"fits", nil, nil, 40, true, 0},
		{"whole max", nil, nil, 50, true, 0},
		{"over max object size", nil, nil, 51, false, 0},
		{"negative", nil, nil, -1, false, 0},
		{"zero", nil, nil, 0, true, 0},
		{"evicts complete entries", nil, []int{30, 30, 30}, 50, true, 2},
		{"evicts only what it needs", nil, []int{30, 30, 30}, 20, true, 1},
		{"reservations cannot be evicted", []int64{50, 40}, nil, 20, false, 0},
		{"room left beside reservations", []int64{50, 40}, nil, 10, true, 0},
		{"reservations and entries", []int64{50}, []int{45}, 50, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			evictions := 0
			c := newCache(t, Config{Budget: 100, OnEvict: func(*Entry) { evictions++ }})
			for i, n := range tc.cached {
				admit(t, c, complete("bk", fmt.Sprint(i), n))
			}
			for _, n := range tc.held {
				if !c.Reserve(n) {
					t.Fatalf("setup Reserve(%d) refused", n)
				}
			}
			before := c.Stats()
			if got := c.Reserve(tc.size); got != tc.want {
				t.Fatalf("Reserve(%d) = %v, want %v (stats %+v)", tc.size, got, tc.want, before)
			}
			after := c.Stats()
			if !tc.want && after != before {
				t.Errorf("a refused Reserve changed the stats: %+v -> %+v", before, after)
			}
			if tc.want && after.Reserved != before.Reserved+tc.size {
				t.Errorf("Reserved = %d, want %d", after.Reserved, before.Reserved+tc.size)
			}
			if evictions != tc.evicting {
				t.Errorf("%d evictions, want %d", evictions, tc.evicting)
			}
			checkAccounting(t, c)
		})
	}
}

func TestAdmissible(t *testing.T) {
	c := newCache(t, Config{Budget: 100, MaxObjectSize: 10})
	for size, want := range map[int64]bool{-1: false, 0: true, 10: true, 11: false} {
		if got := c.Admissible(size); got != want {
			t.Errorf("Admissible(%d) = %v, want %v", size, got, want)
		}
	}
}

func TestAddReplacesOlderEntry(t *testing.T) {
	c := newCache(t, Config{Budget: 100})
	old := complete("bk", "k", 30)
	admit(t, c, old)
	newer := complete("bk", "k", 20)
	admit(t, c, newer)
	if got := c.Get(Key{"bk", "k"}); got != newer {
		t.Fatalf("Get = %p, want the newer entry %p", got, newer)
	}
	if s := c.Stats(); s.Objects != 1 || s.Bytes != 20 || s.Reserved != 0 || s.Evictions != 0 {
		t.Errorf("stats = %+v, want one object of 20 bytes and no eviction", s)
	}
	// The replaced entry is no longer the key's: RemoveIf with it is a no-op.
	if c.RemoveIf(Key{"bk", "k"}, old) {
		t.Error("RemoveIf(old) removed the newer entry")
	}
	checkAccounting(t, c)
}

func TestAddRefusals(t *testing.T) {
	for _, tc := range []struct {
		name  string
		entry func(c *Cache) *Entry
	}{
		{"doomed", func(c *Cache) *Entry {
			e := complete("bk", "k", 30)
			c.Doom(e)
			c.Doom(e) // idempotent
			return e
		}},
		{"incomplete", func(*Cache) *Entry {
			return NewEntry(Key{"bk", "k"}, store.ObjectInfo{Size: 30})
		}},
		{"aborted", func(*Cache) *Entry {
			e := NewEntry(Key{"bk", "k"}, store.ObjectInfo{Size: 30})
			e.Abort(fmt.Errorf("broken"))
			return e
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCache(t, Config{Budget: 100})
			e := tc.entry(c)
			if !c.Reserve(e.Size()) {
				t.Fatal("Reserve refused")
			}
			if c.Add(e) {
				t.Fatal("Add admitted the entry")
			}
			if c.Peek(e.Key()) != nil {
				t.Error("entry is cached")
			}
			if s := c.Stats(); s.Reserved != 0 || s.Bytes != 0 {
				t.Errorf("stats = %+v: the reservation must be returned", s)
			}
		})
	}
}

func TestDoomDoesNotTouchACachedEntry(t *testing.T) {
	c := newCache(t, Config{Budget: 100})
	e := complete("bk", "k", 10)
	admit(t, c, e)
	c.Doom(e)
	if !e.Doomed() {
		t.Error("Doomed() = false after Doom")
	}
	// Doom only stops admission; dropping a cached copy is Remove's job.
	if c.Peek(e.Key()) != e {
		t.Error("Doom removed a cached entry")
	}
}

func TestRemove(t *testing.T) {
	evictions := 0
	c := newCache(t, Config{Budget: 100, OnEvict: func(*Entry) { evictions++ }})
	a, b := complete("bk", "a", 10), complete("bk", "b", 10)
	admit(t, c, a)
	admit(t, c, b)
	if !c.Remove(a.Key()) || c.Remove(a.Key()) {
		t.Error("Remove(a) twice: want true then false")
	}
	if c.Get(a.Key()) != nil || c.Get(b.Key()) != b {
		t.Error("Remove(a) touched the wrong entries")
	}
	if evictions != 0 || c.Stats().Evictions != 0 {
		t.Error("Remove counted as an eviction")
	}
	checkAccounting(t, c)
}

func TestRemoveIf(t *testing.T) {
	c := newCache(t, Config{Budget: 100})
	e := complete("bk", "k", 10)
	other := complete("bk", "k", 10)
	admit(t, c, e)
	for _, tc := range []struct {
		name  string
		entry *Entry
		want  bool
	}{
		{"nil", nil, false},
		{"another entry of the key", other, false},
		{"the cached entry", e, true},
		{"again", e, false},
	} {
		if got := c.RemoveIf(e.Key(), tc.entry); got != tc.want {
			t.Errorf("RemoveIf(%s) = %v, want %v", tc.name, got, tc.want)
		}
	}
	if c.Peek(e.Key()) != nil {
		t.Error("entry still cached")
	}
	checkAccounting(t, c)
}

func TestRemoveBucket(t *testing.T) {
	c := newCache(t, Config{Budget: 1000})
	for _, k := range []Key{{"one", "a"}, {"one", "b/c"}, {"two", "a"}, {"one-more", "a"}, {"on", "e/a"}} {
		admit(t, c, complete(k.Bucket, k.Object, 10))
	}
	if n := c.RemoveBucket("one"); n != 2 {
		t.Errorf("RemoveBucket(one) = %d, want 2", n)
	}
	if n := c.RemoveBucket("one"); n != 0 {
		t.Errorf("RemoveBucket(one) again = %d, want 0", n)
	}
	for _, k := range []Key{{"two", "a"}, {"one-more", "a"}, {"on", "e/a"}} {
		if c.Peek(k) == nil {
			t.Errorf("%v was removed with bucket one", k)
		}
	}
	if s := c.Stats(); s.Objects != 3 || s.Bytes != 30 {
		t.Errorf("stats = %+v", s)
	}
	checkAccounting(t, c)
}

func TestReleaseReturnsTheReservation(t *testing.T) {
	c := newCache(t, Config{Budget: 100})
	for range 2 {
		if !c.Reserve(50) {
			t.Fatal("Reserve refused")
		}
	}
	if c.Reserve(1) {
		t.Fatal("Reserve over the budget accepted")
	}
	c.Release(50)
	if !c.Reserve(50) {
		t.Error("Reserve refused after Release")
	}
}

// TestBudgetUnderRandomOperations drives the cache with a random mix of
// operations and checks the invariants after each one.
func TestBudgetUnderRandomOperations(t *testing.T) {
	const budget = 1000
	c := newCache(t, Config{Budget: budget, MaxObjectSize: 400})
	rng := rand.New(rand.NewPCG(1, 2))
	type fill struct{ e *Entry }
	var fills []fill
	for i := range 5000 {
		k := Key{Bucket: fmt.Sprint("b", rng.IntN(3)), Object: fmt.Sprint("k", rng.IntN(20))}
		switch op := rng.IntN(10); {
		case op < 4: // start a fill
			size := rng.Int64N(450)
			if c.Reserve(size) {
				fills = append(fills, fill{NewEntry(k, store.ObjectInfo{Size: size})})
			}
		case op < 7 && len(fills) > 0: // finish, abort or doom one
			j := rng.IntN(len(fills))
			f := fills[j]
			fills = slices.Delete(fills, j, j+1)
			switch rng.IntN(3) {
			case 0:
				f.e.finish()
				c.Add(f.e)
			case 1:
				f.e.finish()
				c.Doom(f.e)
				if c.Add(f.e) {
					t.Fatalf("op %d: a doomed entry was added", i)
				}
			default:
				f.e.Abort(fmt.Errorf("broken"))
				c.Release(f.e.Size())
			}
		case op == 7:
			c.Remove(k)
		case op == 8:
			c.Get(k)
		default:
			c.RemoveBucket(k.Bucket)
		}
		checkAccounting(t, c)
	}
}

func BenchmarkGetWarm(b *testing.B) {
	c := newCache(b, Config{Budget: 1 << 30})
	keys := make([]Key, 1024)
	for i := range keys {
		e := complete("bench", fmt.Sprint("obj-", i), 1024)
		keys[i] = e.Key()
		admit(b, c, e)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if c.Get(keys[i%len(keys)]) == nil {
			b.Fatal("miss")
		}
		i++
	}
}
