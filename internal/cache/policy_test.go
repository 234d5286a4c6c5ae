package cache

import (
	"slices"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/clock"
)

// item is an entry in a policy test: its name (the object key), size, and
// whether this cachelet owns it.
type item struct {
	name     string
	size     int // default 1
	notOwned bool
	after    time.Duration // the clock moves this much before it is added
}

// drain evicts everything in c (its budget is its max object size) and
// returns the names in eviction order.
func drain(t *testing.T, c *Cache, evicted *[]string) []string {
	t.Helper()
	*evicted = nil
	if !c.Reserve(c.cfg.Budget) {
		t.Fatalf("Reserve(budget) refused; stats %+v", c.Stats())
	}
	c.Release(c.cfg.Budget)
	return *evicted
}

// orderCache builds a cache with p over items, owning those not marked
// otherwise, and a record of evictions.
func orderCache(t *testing.T, p Policy, cfg Config, items []item) (*Cache, *clock.Fake, *[]string, map[string]bool) {
	t.Helper()
	notOwned := map[string]bool{}
	for _, it := range items {
		notOwned[it.name] = it.notOwned
	}
	var evicted []string
	cfg.Budget, cfg.MaxObjectSize = 1<<20, 1<<20
	cfg.Owns = func(k Key) bool { return !notOwned[k.Object] }
	cfg.OnEvict = func(e *Entry) { evicted = append(evicted, e.Key().Object) }
	c, clock := newPolicyCache(t, p, cfg)
	for _, it := range items {
		clock.Advance(it.after)
		admit(t, c, complete("bk", it.name, max(it.size, 1))) // an empty entry takes no room to evict
	}
	return c, clock, &evicted, notOwned
}

func TestEvictionOrder(t *testing.T) {
	const large = DefaultLargeObjectSize
	for _, tc := range []struct {
		name   string
		policy Policy
		cfg    Config
		items  []item
		gets   []string // Get hits, in order, after the items were added
		want   []string // eviction order
	}{
		{"owner-lru/all owned: plain LRU", PolicyOwnerLRU, Config{},
			[]item{{name: "a"}, {name: "b"}, {name: "c"}, {name: "d"}},
			[]string{"a"}, []string{"b", "c", "d", "a"}},
		{"owner-lru/not owned first, each in LRU order", PolicyOwnerLRU, Config{},
			[]item{{name: "a"}, {name: "b", notOwned: true}, {name: "c"}, {name: "d", notOwned: true}},
			[]string{"b", "a"}, []string{"d", "b", "c", "a"}},
		{"owner-lru/size does not matter", PolicyOwnerLRU, Config{},
			[]item{{name: "small", size: 1}, {name: "big", size: 100 << 10}},
			nil, []string{"small", "big"}},
		{"size-aware/classes in order", PolicySizeAware, Config{},
			[]item{{name: "owned-small", size: 100}, {name: "owned-large", size: 20000},
				{name: "small", size: 100, notOwned: true}, {name: "large", size: 20000, notOwned: true}},
			nil, []string{"large", "small", "owned-large", "owned-small"}},
		{"size-aware/12 KiB is small, one byte more is large", PolicySizeAware, Config{},
			[]item{{name: "n12k", size: large, notOwned: true}, {name: "n12k+1", size: large + 1, notOwned: true},
				{name: "o12k", size: large}, {name: "o12k+1", size: large + 1}},
			nil, []string{"n12k+1", "n12k", "o12k+1", "o12k"}},
		{"size-aware/LRU inside each class", PolicySizeAware, Config{},
			[]item{
				{name: "nl1", size: 2 * large, notOwned: true}, {name: "nl2", size: 2 * large, notOwned: true},
				{name: "ns1", size: 1, notOwned: true}, {name: "ns2", size: 1, notOwned: true},
				{name: "ol1", size: 2 * large}, {name: "ol2", size: 2 * large},
				{name: "os1", size: 1}, {name: "os2", size: 1}},
			[]string{"os1", "ol1", "ns1", "nl1"},
			[]string{"nl2", "nl1", "ns2", "ns1", "ol2", "ol1", "os2", "os1"}},
		{"size-aware/all owned: large first, then LRU", PolicySizeAware, Config{},
			[]item{{name: "a", size: 10}, {name: "b", size: 2 * large}, {name: "c", size: 10}},
			[]string{"b", "a"}, []string{"b", "c", "a"}},
		{"size-aware/configured threshold", PolicySizeAware, Config{LargeObjectSize: 100},
			[]item{{name: "100", size: 100, notOwned: true}, {name: "101", size: 101, notOwned: true}},
			nil, []string{"101", "100"}},
		{"ttl/closest to expiry first, reads change nothing", PolicyTTL, Config{TTL: time.Minute},
			[]item{{name: "a"}, {name: "b", after: time.Second}, {name: "c", after: time.Second}},
			[]string{"a", "b"}, []string{"a", "b", "c"}},
		{"ttl/ties in order of admission", PolicyTTL, Config{TTL: time.Minute},
			[]item{{name: "b"}, {name: "a"}, {name: "c"}},
			[]string{"b"}, []string{"b", "a", "c"}},
		{"ttl/ownership and size do not matter", PolicyTTL, Config{TTL: time.Minute},
			[]item{{name: "owned", size: 1}, {name: "large", size: 2 * large, notOwned: true}},
			nil, []string{"owned", "large"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _, evicted, _ := orderCache(t, tc.policy, tc.cfg, tc.items)
			for _, name := range tc.gets {
				if c.Get(Key{"bk", name}) == nil {
					t.Fatalf("Get(%s) missed", name)
				}
			}
			checkAccounting(t, c)
			if got := drain(t, c, evicted); !slices.Equal(got, tc.want) {
				t.Errorf("evicted %q, want %q", got, tc.want)
			}
			notOwned := 0
			for _, it := range tc.items {
				if it.notOwned {
					notOwned++
				}
			}
			if s := c.Stats(); s.EvictedNotOwned != uint64(notOwned) || s.Evictions != uint64(len(tc.items)) {
				t.Errorf("stats %+v, want %d evictions, %d of entries not owned", s, len(tc.items), notOwned)
			}
		})
	}
}

func TestOwnershipChanged(t *testing.T) {
	const large = DefaultLargeObjectSize
	for _, tc := range []struct {
		name     string
		policy   Policy
		items    []item   // all owned when added
		gets     []string // Get hits after the items were added
		disowned []string // keys no longer owned after the change
		tell     bool     // whether OwnershipChanged is called
		want     []string // eviction order
	}{
		{"owner-lru: recency kept across classes", PolicyOwnerLRU,
			[]item{{name: "a"}, {name: "b"}, {name: "c"}, {name: "d"}, {name: "e"}},
			[]string{"b", "a"}, // recency, least first: c d e b a
			[]string{"a", "d"}, true,
			[]string{"d", "a", "c", "e", "b"}},
		{"owner-lru: a key owned again", PolicyOwnerLRU,
			[]item{{name: "a", notOwned: true}, {name: "b"}, {name: "c", notOwned: true}},
			nil, []string{"b"}, true, // a and c become owned, b does not
			[]string{"b", "a", "c"}},
		{"owner-lru: untold, the cache keeps the old classes", PolicyOwnerLRU,
			[]item{{name: "a"}, {name: "b"}, {name: "c"}},
			nil, []string{"c"}, false,
			[]string{"a", "b", "c"}},
		{"size-aware: re-classified by ownership, size kept", PolicySizeAware,
			[]item{{name: "a", size: 10}, {name: "b", size: 2 * large}, {name: "c", size: 10}, {name: "d", size: 2 * large}},
			nil, []string{"b", "c"}, true,
			[]string{"b", "c", "d", "a"}},
		{"ttl: the order stays, the counts follow", PolicyTTL,
			[]item{{name: "a"}, {name: "b", after: time.Second}},
			nil, []string{"b"}, true,
			[]string{"a", "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{}
			if tc.policy == PolicyTTL {
				cfg.TTL = time.Minute
			}
			c, _, evicted, notOwned := orderCache(t, tc.policy, cfg, tc.items)
			for _, name := range tc.gets {
				if c.Get(Key{"bk", name}) == nil {
					t.Fatalf("Get(%s) missed", name)
				}
			}
			for name := range notOwned {
				notOwned[name] = slices.Contains(tc.disowned, name)
			}
			if tc.tell {
				c.OwnershipChanged()
			}
			checkAccounting(t, c)
			if got := drain(t, c, evicted); !slices.Equal(got, tc.want) {
				t.Errorf("evicted %q, want %q", got, tc.want)
			}
			wantNotOwned := uint64(len(tc.disowned))
			if !tc.tell {
				wantNotOwned = 0
				for _, it := range tc.items {
					if it.notOwned {
						wantNotOwned++
					}
				}
			}
			if s := c.Stats(); s.EvictedNotOwned != wantNotOwned {
				t.Errorf("stats %+v, want %d evictions of entries not owned", s, wantNotOwned)
			}
		})
	}
}

// TestOwnershipChangedWithoutOwns: with no Owns every key is owned, and
// OwnershipChanged has nothing to do.
func TestOwnershipChangedWithoutOwns(t *testing.T) {
	for _, p := range everyPolicy() {
		var evicted []string
		c, _ := newPolicyCache(t, p, Config{Budget: 100, MaxObjectSize: 100,
			OnEvict: func(e *Entry) { evicted = append(evicted, e.Key().Object) }})
		admit(t, c, complete("bk", "a", 10))
		admit(t, c, complete("bk", "b", 10))
		c.OwnershipChanged()
		want := []string{"a", "b"}
		if p == PolicyWTinyLFU {
			// b, in the window, loses the contest against a, in the main
			// space: used as often, the newcomer goes first.
			want = []string{"b", "a"}
		}
		if got := drain(t, c, &evicted); !slices.Equal(got, want) {
			t.Errorf("%s: evicted %q, want %q", p, got, want)
		}
		if s := c.Stats(); s.EvictedOwned != 2 {
			t.Errorf("%s: stats %+v, want 2 evictions of owned entries", p, s)
		}
	}
}

func TestTTLExpiry(t *testing.T) {
	const ttl = 10 * time.Second
	var evicted []string
	c, clock := newPolicyCache(t, PolicyTTL, Config{Budget: 100, MaxObjectSize: 100, TTL: ttl,
		OnEvict: func(e *Entry) { evicted = append(evicted, e.Key().Object) }})
	a, b := Key{"bk", "a"}, Key{"bk", "b"}
	admit(t, c, complete("bk", "a", 10)) // expires at 10s
	clock.Advance(ttl - 1)
	if c.Get(a) == nil || c.Peek(a) == nil {
		t.Fatal("a missed before its TTL ran out")
	}
	admit(t, c, complete("bk", "b", 10)) // expires at 20s - 1ns
	clock.Advance(1)
	if c.Get(a) != nil {
		t.Fatal("Get(a) hit at its expiry")
	}
	if s := c.Stats(); s.Expired != 1 || s.Evictions != 0 || s.Objects != 1 || s.Bytes != 10 {
		t.Fatalf("stats %+v, want a expired, b held", s)
	}
	if c.Peek(b) == nil {
		t.Fatal("b expired early")
	}
	clock.Advance(ttl)
	if c.Peek(b) != nil {
		t.Fatal("Peek(b) hit after its expiry")
	}
	if s := c.Stats(); s.Expired != 2 || s.Objects != 0 || s.Bytes != 0 {
		t.Fatalf("stats %+v, want both expired and dropped", s)
	}
	if len(evicted) != 0 {
		t.Errorf("expiry on lookup called OnEvict for %q", evicted)
	}
	checkAccounting(t, c)

	// A new version starts a new life.
	admit(t, c, complete("bk", "a", 10))
	clock.Advance(ttl / 2)
	newer := complete("bk", "a", 20)
	admit(t, c, newer)
	clock.Advance(ttl / 2)
	if c.Get(a) != newer {
		t.Fatal("the replacing entry expired with the one it replaced")
	}
	clock.Advance(ttl / 2)
	if c.Get(a) != nil {
		t.Fatal("the replacing entry outlived its TTL")
	}

	// Expired entries that nobody looked up go first when room is needed,
	// as evictions.
	admit(t, c, complete("bk", "old", 40))
	clock.Advance(2 * ttl)
	admit(t, c, complete("bk", "fresh", 40))
	admit(t, c, complete("bk", "more", 40))
	if !slices.Equal(evicted, []string{"old"}) {
		t.Errorf("evicted %q, want [old]", evicted)
	}
	if s := c.Stats(); s.Evictions != 1 || s.Expired != 3 {
		t.Errorf("stats %+v, want 1 eviction, 3 expired", s)
	}
	checkAccounting(t, c)
}

// TestNoExpiryOutsideTTL: the other policies never read the clock.
func TestNoExpiryOutsideTTL(t *testing.T) {
	for _, p := range everyPolicy() {
		if p == PolicyTTL {
			continue
		}
		c, clock := newPolicyCache(t, p, Config{Budget: 100})
		admit(t, c, complete("bk", "a", 10))
		clock.Advance(100 * 365 * 24 * time.Hour)
		if c.Get(Key{"bk", "a"}) == nil {
			t.Errorf("%s: an entry expired", p)
		}
	}
}
