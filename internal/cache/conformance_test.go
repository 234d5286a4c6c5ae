package cache

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/clock"
	"github.com/hoard-io/hoard/internal/store"
)

// The conformance suite: what every eviction policy must do. Each test
// takes the policy and builds its caches with withPolicy.

// everyPolicy lists the policies the suite runs against.
func everyPolicy() []Policy {
	return []Policy{PolicyOwnerLRU, PolicySizeAware, PolicyTTL, PolicyGDSF, PolicyS3FIFO, PolicyWTinyLFU}
}

// ranked reports whether testModel knows the policy's order well enough to
// name each victim: the classes of LRU lists and the TTL heap. The others
// have tests of their own orders (orders_test.go); the model checks all
// the rest for them.
func ranked(p Policy) bool { return p == PolicyOwnerLRU || p == PolicySizeAware || p == PolicyTTL }

// newFakeClock is a clock that tests move by hand.
func newFakeClock() *clock.Fake { return clock.NewFake(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)) }

// withPolicy returns cfg set to use p with a fake clock (a TTL of an hour
// unless cfg has one).
func withPolicy(p Policy, cfg Config) (Config, *clock.Fake) {
	clock := newFakeClock()
	cfg.Policy, cfg.Clock = p, clock
	if p == PolicyTTL && cfg.TTL == 0 {
		cfg.TTL = time.Hour
	}
	return cfg, clock
}

// newPolicyCache builds a cache with p and a fake clock.
func newPolicyCache(t testing.TB, p Policy, cfg Config) (*Cache, *clock.Fake) {
	t.Helper()
	cfg, clock := withPolicy(p, cfg)
	return newCache(t, cfg), clock
}

// isLRU reports whether a Get hit makes an entry its class's most recent.
func isLRU(p Policy) bool { return p != PolicyTTL }

func TestConformance(t *testing.T) {
	for _, p := range everyPolicy() {
		t.Run(string(p), func(t *testing.T) {
			for _, tc := range []struct {
				name string
				test func(*testing.T, Policy)
			}{
				{"Reserve", testReserve},
				{"GetRecency", testGetRecency},
				{"AddReplacesOlderEntry", testAddReplacesOlderEntry},
				{"AddRefusals", testAddRefusals},
				{"DoomDoesNotTouchACachedEntry", testDoomDoesNotTouchACachedEntry},
				{"Remove", testRemove},
				{"RemoveIf", testRemoveIf},
				{"RemoveBucket", testRemoveBucket},
				{"ReleaseReturnsTheReservation", testReleaseReturnsTheReservation},
				{"EveryEntryIsEvictable", testEveryEntryIsEvictable},
				{"Model", testModel},
				{"ConcurrentUse", testConcurrentUse},
			} {
				t.Run(tc.name, func(t *testing.T) { tc.test(t, p) })
			}
		})
	}
}

func testReserve(t *testing.T, p Policy) {
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
			c, _ := newPolicyCache(t, p, Config{Budget: 100, OnEvict: func(*Entry) { evictions++ }})
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
			if evictions != tc.evicting || after.Evictions != uint64(tc.evicting) {
				t.Errorf("%d evictions (stats: %d), want %d", evictions, after.Evictions, tc.evicting)
			}
			checkAccounting(t, c)
		})
	}
}

// testGetRecency: under the LRU-based policies a Get hit (not a Peek)
// makes the entry the most recently used; under TTL reads change nothing;
// S3-FIFO and W-TinyLFU rank by uses in their queues (worked out by hand
// below); GDSF evicts these equal entries as LRU does.
func testGetRecency(t *testing.T, p Policy) {
	var evicted []string
	c, _ := newPolicyCache(t, p, Config{Budget: 100, MaxObjectSize: 100, OnEvict: func(e *Entry) {
		evicted = append(evicted, e.Key().Object)
	}})
	for _, name := range []string{"a", "b", "c"} {
		admit(t, c, complete("bk", name, 30))
	}
	if c.Get(Key{"bk", "a"}) == nil {
		t.Fatal("Get(a) = nil")
	}
	if c.Peek(Key{"bk", "b"}) == nil {
		t.Fatal("Peek(b) = nil")
	}
	want1, want2, kept := []string{"b"}, []string{"b", "c", "a"}, "de" // a is the most recent, b the least
	switch p {
	case PolicyTTL:
		want1, want2 = []string{"a"}, []string{"a", "b", "c"} // in order of expiry
	case PolicyS3FIFO:
		// a, used in the small queue, moves to the main one; the small
		// queue's unused entries go in FIFO order.
		want1, want2, kept = []string{"b"}, []string{"b", "c", "d"}, "ae"
	case PolicyWTinyLFU:
		// The newest entry, used no more than the main space's victim,
		// loses the contest: c, then d; then the main space gives up its
		// least recent entry, b (a, read in probation, is protected).
		want1, want2, kept = []string{"c"}, []string{"c", "d", "b"}, "ae"
	}
	admit(t, c, complete("bk", "d", 30)) // 120 > 100: one must go
	if !slices.Equal(evicted, want1) {
		t.Fatalf("evicted %q, want %q", evicted, want1)
	}
	admit(t, c, complete("bk", "e", 50)) // 140 > 100: two more
	if !slices.Equal(evicted, want2) {
		t.Fatalf("evicted %q, want %q", evicted, want2)
	}
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		if got, want := c.Peek(Key{"bk", name}) != nil, strings.Contains(kept, name); got != want {
			t.Errorf("%s cached = %v, want %v", name, got, want)
		}
	}
	if s := c.Stats(); s.Evictions != 3 || s.EvictedOwned != 3 || s.Bytes != 80 || s.Objects != 2 || s.Reserved != 0 {
		t.Errorf("stats = %+v, want 3 evictions (of owned entries), 80 bytes in 2 objects", s)
	}
	checkAccounting(t, c)
}

func testAddReplacesOlderEntry(t *testing.T, p Policy) {
	c, _ := newPolicyCache(t, p, Config{Budget: 100})
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

func testAddRefusals(t *testing.T, p Policy) {
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
			c, _ := newPolicyCache(t, p, Config{Budget: 100})
			cached := complete("bk", "k", 10) // a refused Add leaves it be
			admit(t, c, cached)
			e := tc.entry(c)
			if !c.Reserve(e.Size()) {
				t.Fatal("Reserve refused")
			}
			if c.Add(e) {
				t.Fatal("Add admitted the entry")
			}
			if c.Peek(e.Key()) != cached {
				t.Error("a refused Add touched the cached entry")
			}
			if s := c.Stats(); s.Reserved != 0 || s.Bytes != 10 {
				t.Errorf("stats = %+v: the reservation must be returned", s)
			}
			checkAccounting(t, c)
		})
	}
}

func testDoomDoesNotTouchACachedEntry(t *testing.T, p Policy) {
	c, _ := newPolicyCache(t, p, Config{Budget: 100})
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

func testRemove(t *testing.T, p Policy) {
	evictions := 0
	c, _ := newPolicyCache(t, p, Config{Budget: 100, OnEvict: func(*Entry) { evictions++ }})
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

func testRemoveIf(t *testing.T, p Policy) {
	c, _ := newPolicyCache(t, p, Config{Budget: 100})
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

func testRemoveBucket(t *testing.T, p Policy) {
	c, _ := newPolicyCache(t, p, Config{Budget: 1000})
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
	if s := c.Stats(); s.Objects != 3 || s.Bytes != 30 || s.Evictions != 0 {
		t.Errorf("stats = %+v", s)
	}
	checkAccounting(t, c)
}

func testReleaseReturnsTheReservation(t *testing.T, p Policy) {
	c, _ := newPolicyCache(t, p, Config{Budget: 100})
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

// testEveryEntryIsEvictable: whatever was added, owned or not, large or
// small, a reservation of the whole budget evicts every entry, each once.
func testEveryEntryIsEvictable(t *testing.T, p Policy) {
	const budget = 1 << 20
	notOwned := func(k Key) bool { return hashKey(k)%2 == 0 }
	seen := map[*Entry]int{}
	c, _ := newPolicyCache(t, p, Config{Budget: budget, MaxObjectSize: budget,
		Owns:    func(k Key) bool { return !notOwned(k) },
		OnEvict: func(e *Entry) { seen[e]++ }})
	rng := rand.New(rand.NewPCG(3, 4))
	var added []*Entry
	var ownedBytes, owned int
	for i := range 60 {
		e := complete("bk", fmt.Sprint("k", i), 1+rng.IntN(2*DefaultLargeObjectSize))
		admit(t, c, e)
		added = append(added, e)
		if !notOwned(e.Key()) {
			owned++
			ownedBytes += int(e.Size())
		}
	}
	if len(seen) != 0 {
		t.Fatalf("%d evictions while there was room", len(seen))
	}
	if !c.Reserve(budget) {
		t.Fatalf("Reserve(budget) refused; stats %+v", c.Stats())
	}
	for _, e := range added {
		if seen[e] != 1 {
			t.Errorf("%v evicted %d times, want once", e.Key(), seen[e])
		}
	}
	s := c.Stats()
	if s.Objects != 0 || s.Bytes != 0 || s.Evictions != uint64(len(added)) || s.EvictedOwned != uint64(owned) {
		t.Errorf("stats = %+v, want all %d evicted, %d of them owned", s, len(added), owned)
	}
	checkAccounting(t, c)
}

func hashKey(k Key) uint64 {
	h := fnv.New64a()
	h.Write([]byte(k.String()))
	return h.Sum64()
}

// testModel drives the cache with thousands of random operations beside a
// model of what it must hold, and checks after each one the accounting,
// that the cache holds exactly the model's entries, that no evicted entry
// is present, the counters, and that every victim was the first entry in
// the policy's order as the model ranks it.
func testModel(t *testing.T, p Policy) {
	type modelEntry struct {
		e       *Entry
		owned   bool
		last    uint64 // LRU: the model's use count at its last use; TTL: at its admission
		expires time.Time
	}
	const ttl = time.Second
	ring := uint64(0) // moving it changes which keys are owned
	owns := func(k Key) bool { return (hashKey(k)+ring)%3 != 0 }
	model := map[Key]*modelEntry{}
	evicted := map[*Entry]bool{}
	var uses uint64
	var want Stats
	// rank orders entries the way p must evict them: smallest first.
	rank := func(m *modelEntry) (class int, expires int64, last uint64) {
		switch p {
		case PolicyOwnerLRU:
			if m.owned {
				class = 1
			}
		case PolicySizeAware:
			if m.owned {
				class = 2
			}
			if m.e.Size() <= DefaultLargeObjectSize {
				class++
			}
		case PolicyTTL:
			expires = m.expires.UnixNano()
		}
		return class, expires, m.last
	}
	failed := false
	const budget = 200_000
	var evictedBytes int64
	cfg := Config{Budget: budget, MaxObjectSize: 40_000, Owns: owns, OnEvict: func(e *Entry) {
		var first *modelEntry
		for _, m := range model {
			if first == nil {
				first = m
				continue
			}
			c1, x1, l1 := rank(m)
			c2, x2, l2 := rank(first)
			if c1 < c2 || c1 == c2 && (x1 < x2 || x1 == x2 && l1 < l2) {
				first = m
			}
		}
		switch {
		case first == nil:
			t.Errorf("evicted %v, which the model does not hold", e.Key())
			failed = true
			return
		case first.e != e && ranked(p):
			t.Errorf("evicted %v (size %d); the policy's first is %v (size %d, owned %v)", e.Key(), e.Size(), first.e.Key(), first.e.Size(), first.owned)
			failed = true
		}
		m := model[e.Key()]
		if m == nil || m.e != e {
			t.Errorf("evicted %v, which the model does not hold", e.Key())
			failed = true
			return
		}
		delete(model, e.Key())
		evicted[e] = true
		evictedBytes += e.Size()
		want.Evictions++
		if m.owned {
			want.EvictedOwned++
		} else {
			want.EvictedNotOwned++
		}
	}}
	if p == PolicyTTL {
		cfg.TTL = ttl
	}
	c, clock := newPolicyCache(t, p, cfg)
	rng := rand.New(rand.NewPCG(1, 2))
	size := func() int64 {
		if rng.IntN(3) == 0 {
			return rng.Int64N(2000)
		}
		return rng.Int64N(45_000) // around the 12 KiB threshold, and some too large
	}
	var fills []*Entry
	var ops [13]int
	for i := range 5000 {
		k := Key{Bucket: fmt.Sprint("b", rng.IntN(3)), Object: fmt.Sprint("k", rng.IntN(40))}
		op := rng.IntN(100)
		switch {
		case op < 30: // start a fill
			ops[0]++
			if n := size(); c.Reserve(n) {
				fills = append(fills, NewEntry(k, store.ObjectInfo{Size: n}))
			}
		case op < 55 && len(fills) > 0: // finish, abort or doom one
			j := rng.IntN(len(fills))
			f := fills[j]
			fills = slices.Delete(fills, j, j+1)
			switch rng.IntN(4) {
			case 0, 1:
				ops[1]++
				f.finish()
				// It fits unless SetBudget cut the budget below the
				// reservations (its own included).
				if s := c.Stats(); s.Reserved > s.Budget {
					if c.Add(f) {
						t.Fatalf("op %d: Add took an entry that no longer fits: stats %+v", i, s)
					}
					break
				}
				delete(model, f.Key()) // replaced, not evicted
				if !c.Add(f) {
					t.Fatalf("op %d: Add refused a complete entry", i)
				}
				uses++
				model[f.Key()] = &modelEntry{e: f, owned: owns(f.Key()), last: uses, expires: clock.Now().Add(ttl)}
			case 2:
				ops[2]++
				f.finish()
				c.Doom(f)
				if c.Add(f) {
					t.Fatalf("op %d: a doomed entry was added", i)
				}
			default:
				ops[3]++
				f.Abort(fmt.Errorf("broken"))
				c.Release(f.Size())
			}
		case op < 65: // Get or Peek
			get := op < 61
			if get {
				ops[4]++
			} else {
				ops[5]++
			}
			var wantE *Entry
			if m := model[k]; m != nil {
				if p == PolicyTTL && !clock.Now().Before(m.expires) {
					delete(model, k)
					want.Expired++
				} else {
					wantE = m.e
					if get && isLRU(p) {
						uses++
						m.last = uses
					}
				}
			}
			var got *Entry
			if get {
				got = c.Get(k)
			} else {
				got = c.Peek(k)
			}
			if got != wantE {
				t.Fatalf("op %d: Get/Peek(%v) = %p, want %p", i, k, got, wantE)
			}
		case op < 72:
			ops[6]++
			_, had := model[k]
			delete(model, k)
			if got := c.Remove(k); got != had {
				t.Fatalf("op %d: Remove(%v) = %v, want %v", i, k, got, had)
			}
		case op < 77:
			ops[7]++
			var e *Entry
			if m := model[k]; m != nil && rng.IntN(2) == 0 {
				e = m.e
			} else if len(fills) > 0 {
				e = fills[rng.IntN(len(fills))]
			}
			wantOK := e != nil && model[k] != nil && model[k].e == e
			if wantOK {
				delete(model, k)
			}
			if got := c.RemoveIf(k, e); got != wantOK {
				t.Fatalf("op %d: RemoveIf = %v, want %v", i, got, wantOK)
			}
		case op < 79:
			ops[8]++
			n := 0
			for mk := range model {
				if mk.Bucket == k.Bucket {
					delete(model, mk)
					n++
				}
			}
			if got := c.RemoveBucket(k.Bucket); got != n {
				t.Fatalf("op %d: RemoveBucket = %d, want %d", i, got, n)
			}
		case op < 92:
			ops[9]++
			clock.Advance(time.Duration(rng.Int64N(int64(ttl))))
		case op < 95:
			ops[10]++
			ring++
			c.OwnershipChanged()
			for mk, m := range model {
				m.owned = owns(mk)
			}
		case op < 97: // the memory daemon moves the budget
			ops[12]++
			n := int64(budget)
			if rng.IntN(2) == 0 {
				n = rng.Int64N(budget)
			}
			before := evictedBytes
			freed := c.SetBudget(n)
			if freed != evictedBytes-before {
				t.Fatalf("op %d: SetBudget(%d) freed %d; it evicted %d", i, n, freed, evictedBytes-before)
			}
			if s := c.Stats(); s.Budget != n || s.Bytes+s.Reserved > n && s.Bytes != 0 {
				t.Fatalf("op %d: after SetBudget(%d) stats %+v", i, n, s)
			}
		default:
			ops[11]++
			c.Get(Key{"absent", "x"})
		}
		if failed {
			t.Fatalf("op %d: wrong victim", i)
		}
		checkAccounting(t, c)
		s := c.Stats()
		if s.Evictions != want.Evictions || s.EvictedOwned != want.EvictedOwned || s.EvictedNotOwned != want.EvictedNotOwned || s.Expired != want.Expired {
			t.Fatalf("op %d: stats %+v; the model counts %+v", i, s, want)
		}
		c.mu.Lock()
		for k, e := range c.items {
			if m := model[k]; m == nil || m.e != e {
				c.mu.Unlock()
				t.Fatalf("op %d: the cache holds %v, the model does not", i, k)
			}
			if evicted[e] {
				c.mu.Unlock()
				t.Fatalf("op %d: %v is both evicted and present", i, k)
			}
		}
		n := len(c.items)
		c.mu.Unlock()
		if n != len(model) {
			t.Fatalf("op %d: the cache holds %d entries, the model %d", i, n, len(model))
		}
	}
	if want.Evictions < 100 || (p == PolicyTTL) != (want.Expired > 0) {
		t.Errorf("the run was too tame: %+v after ops %v", want, ops)
	}
}

// testConcurrentUse runs every call at once from several goroutines, ring
// changes included, for the race detector; the accounting must hold after.
func testConcurrentUse(t *testing.T, p Policy) {
	var ring atomic.Uint64
	c, _ := newPolicyCache(t, p, Config{Budget: 50_000, MaxObjectSize: 20_000,
		Owns: func(k Key) bool { return (hashKey(k)+ring.Load())%2 == 0 }})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			for range 2000 {
				k := Key{Bucket: "bk", Object: fmt.Sprint("k", rng.IntN(50))}
				switch rng.IntN(6) {
				case 0, 1:
					e := complete(k.Bucket, k.Object, rng.IntN(20_000))
					if c.Reserve(e.Size()) {
						c.Add(e)
					}
				case 2:
					c.Get(k)
				case 3:
					c.Peek(k)
				case 4:
					c.Remove(k)
				default:
					if rng.IntN(20) == 0 {
						ring.Add(1)
						c.OwnershipChanged()
					}
					c.Stats()
				}
			}
		})
	}
	wg.Wait()
	checkAccounting(t, c)
}
