package cache

import (
	"fmt"
	"strings"
	"testing"
	"time"

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

// checkAccounting verifies the budget invariant, that Bytes is the sum of
// the entries held, and that the eviction order holds exactly those
// entries, in a consistent state. The invariant: entries and reservations
// fit in the budget, or, when SetBudget cut it below the reservations of
// fills in flight, no entry is held.
func checkAccounting(t *testing.T, c *Cache) {
	t.Helper()
	s := c.Stats()
	if s.Bytes < 0 || s.Reserved < 0 || s.Bytes+s.Reserved > max(s.Budget, s.Reserved) {
		t.Fatalf("stats %+v break the budget", s)
	}
	if s.Evictions != s.EvictedOwned+s.EvictedNotOwned {
		t.Fatalf("stats %+v: evictions by ownership do not add up", s)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var sum int64
	n := 0
	for _, e := range orderEntries(t, c.order) {
		sum += e.Size()
		n++
		if c.items[e.key] != e || !e.inCache {
			t.Fatalf("the eviction order holds %v, which the index does not", e.key)
		}
	}
	if sum != s.Bytes || n != s.Objects || n != len(c.items) {
		t.Fatalf("the eviction order holds %d bytes in %d objects; stats say %+v", sum, n, s)
	}
}

// orderEntries lists the entries an order holds, checking its structure:
// lists in recency order and of the right class, a valid heap.
func orderEntries(t *testing.T, o evictionOrder) []*Entry {
	t.Helper()
	var all []*Entry
	switch o := o.(type) {
	case *lruClasses:
		for i := range o.heads[:o.n] {
			h := &o.heads[i]
			for e := h.next; e != h; e = e.next {
				if e.next.prev != e || e.prev.next != e {
					t.Fatalf("class %d: broken links at %v", i, e.key)
				}
				if int(e.class) != i || o.classOf(e) != e.class {
					t.Fatalf("%v is in class %d's list; its class is %d, classOf says %d", e.key, i, e.class, o.classOf(e))
				}
				if e.next != h && e.next.tick >= e.tick {
					t.Fatalf("class %d: %v (tick %d) before %v (tick %d) breaks recency order", i, e.key, e.tick, e.next.key, e.next.tick)
				}
				all = append(all, e)
			}
		}
	case *ttlOrder:
		all = heapEntries(t, &o.heap)
	case *gdsfOrder:
		all = heapEntries(t, &o.heap)
		for _, e := range all {
			if e.freq < 1 || e.prio < 0 {
				t.Fatalf("%v: uses %d, priority %v", e.key, e.freq, e.prio)
			}
		}
	case *s3fifoOrder:
		all = append(listEntries(t, &o.small, classSmall), listEntries(t, &o.main, classMain)...)
		for _, e := range all {
			if e.freq > 3 {
				t.Fatalf("%v: use count %d over 3", e.key, e.freq)
			}
		}
		if live := len(o.ghost) - o.ghostHead; live > max(o.main.n, ghostMin) || len(o.ghosts) > live {
			t.Fatalf("ghost queue: %d slots, %d keys, main holds %d", live, len(o.ghosts), o.main.n)
		}
	case *tinyLFUOrder:
		all = append(listEntries(t, &o.window, classWindow), listEntries(t, &o.arrivals, classArrival)...)
		all = append(all, listEntries(t, &o.probation, classProbation)...)
		all = append(all, listEntries(t, &o.protected, classProtected)...)
		if len(all) != o.entries {
			t.Fatalf("the lists hold %d entries; the order counts %d", len(all), o.entries)
		}
	default:
		t.Fatalf("orderEntries: unknown order %T", o)
	}
	return all
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg       Config
		wantMax   int64
		wantErr   string // a part of the error; "" for none
		wantPol   Policy
		wantLarge int64
	}{
		{cfg: Config{Budget: 100}, wantMax: 50, wantPol: PolicyOwnerLRU},
		{cfg: Config{Budget: 100, MaxObjectSize: 100}, wantMax: 100, wantPol: PolicyOwnerLRU},
		{cfg: Config{Budget: 100, MaxObjectSize: 1}, wantMax: 1, wantPol: PolicyOwnerLRU},
		{cfg: Config{}, wantErr: "budget"},
		{cfg: Config{Budget: -1}, wantErr: "budget"},
		{cfg: Config{Budget: 100, MaxObjectSize: 101}, wantErr: "max object size"},
		{cfg: Config{Budget: 100, MaxObjectSize: -1}, wantErr: "max object size"},
		{cfg: Config{Budget: 100, Policy: PolicySizeAware}, wantMax: 50, wantPol: PolicySizeAware, wantLarge: 12 << 10},
		{cfg: Config{Budget: 100, Policy: PolicySizeAware, LargeObjectSize: 7}, wantMax: 50, wantPol: PolicySizeAware, wantLarge: 7},
		{cfg: Config{Budget: 100, Policy: PolicySizeAware, LargeObjectSize: -1}, wantErr: "large object size"},
		{cfg: Config{Budget: 100, LargeObjectSize: 7}, wantErr: "large object size is for the size-aware policy, not owner-lru"},
		{cfg: Config{Budget: 100, Policy: PolicyTTL, TTL: time.Minute}, wantMax: 50, wantPol: PolicyTTL},
		{cfg: Config{Budget: 100, Policy: PolicyTTL}, wantErr: "needs a positive TTL"},
		{cfg: Config{Budget: 100, Policy: PolicyTTL, TTL: -time.Second}, wantErr: "needs a positive TTL"},
		{cfg: Config{Budget: 100, TTL: time.Minute}, wantErr: "TTL is for the ttl policy"},
		{cfg: Config{Budget: 100, Policy: "lfu"}, wantErr: `unknown eviction policy "lfu" (valid: owner-lru, size-aware, ttl, gdsf, s3-fifo, w-tinylfu)`},
		{cfg: Config{Budget: 100, Policy: "LRU"}, wantErr: "unknown eviction policy"},
	} {
		cfg := tc.cfg
		err := cfg.Validate()
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Validate(%+v) = %v, want an error with %q", tc.cfg, err, tc.wantErr)
			}
			continue
		case err != nil:
			t.Errorf("Validate(%+v) = %v", tc.cfg, err)
			continue
		}
		if cfg.MaxObjectSize != tc.wantMax || cfg.Policy != tc.wantPol || cfg.LargeObjectSize != tc.wantLarge || cfg.Clock == nil {
			t.Errorf("Validate(%+v) gave max %d, policy %q, large %d, clock set %v; want %d, %q, %d, true",
				tc.cfg, cfg.MaxObjectSize, cfg.Policy, cfg.LargeObjectSize, cfg.Clock != nil, tc.wantMax, tc.wantPol, tc.wantLarge)
		}
		// Validating again changes nothing: the cachelet validates, then New does.
		again := cfg
		if err := again.Validate(); err != nil || again.MaxObjectSize != cfg.MaxObjectSize || again.LargeObjectSize != cfg.LargeObjectSize {
			t.Errorf("Validate(Validate(%+v)) = %v, %+v", tc.cfg, err, again)
		}
	}
	if _, err := New(Config{Budget: 100, Policy: "fifo"}); err == nil || !strings.Contains(err.Error(), "valid: owner-lru, size-aware, ttl") {
		t.Errorf("New with an unknown policy: %v", err)
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

func TestKeys(t *testing.T) {
	c := newCache(t, Config{Budget: 1 << 20})
	for _, k := range []Key{{"b", "tmp/1"}, {"b", "tmp/2"}, {"b", "out/1"}, {"c", "tmp/1"}} {
		admit(t, c, complete(k.Bucket, k.Object, 10))
	}
	got := c.Keys(func(k Key) bool { return k.Bucket == "b" && strings.HasPrefix(k.Object, "tmp/") })
	if len(got) != 2 || got[0].Bucket != "b" || got[1].Bucket != "b" {
		t.Errorf("Keys = %v; want b/tmp/1 and b/tmp/2", got)
	}
}

// heapEntries checks a heap's indexes and order and lists its entries.
func heapEntries(t *testing.T, h *entryHeap) []*Entry {
	t.Helper()
	for i, e := range h.h {
		if e.idx != i {
			t.Fatalf("heap[%d] = %v says it is at %d", i, e.key, e.idx)
		}
		if i > 0 && h.lessAt(i, (i-1)/2) {
			t.Fatalf("heap[%d] = %v ranks before its parent", i, e.key)
		}
	}
	return append([]*Entry(nil), h.h...)
}

// listEntries checks a list's links, classes and byte count and lists its
// entries.
func listEntries(t *testing.T, l *entryList, class uint8) []*Entry {
	t.Helper()
	var all []*Entry
	var bytes int64
	for e := l.head.next; e != &l.head; e = e.next {
		if e.next.prev != e || e.prev.next != e {
			t.Fatalf("class %d: broken links at %v", class, e.key)
		}
		if e.class != class {
			t.Fatalf("%v is in class %d's list; its class is %d", e.key, class, e.class)
		}
		bytes += e.Size()
		all = append(all, e)
	}
	if len(all) != l.n || bytes != l.bytes {
		t.Fatalf("class %d: %d entries of %d bytes; the list counts %d of %d", class, len(all), bytes, l.n, l.bytes)
	}
	return all
}
