package cache

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// SetBudget evicts in each policy's order: lowering the budget by the size
// of the next victim evicts exactly that victim, the one a reservation of
// the whole budget would have evicted next.
func TestSetBudgetEvictsInPolicyOrder(t *testing.T) {
	const large = DefaultLargeObjectSize
	for _, tc := range []struct {
		name   string
		policy Policy
		cfg    Config
		items  []item
		gets   []string
	}{
		{"owner-lru", PolicyOwnerLRU, Config{},
			[]item{{name: "a", size: 100}, {name: "b", size: 200, notOwned: true}, {name: "c", size: 300},
				{name: "d", size: 400, notOwned: true}, {name: "e", size: 500}},
			[]string{"b", "a"}},
		{"size-aware", PolicySizeAware, Config{},
			[]item{{name: "owned-small", size: 100}, {name: "owned-large", size: 2 * large},
				{name: "small", size: 300, notOwned: true}, {name: "large", size: 3 * large, notOwned: true},
				{name: "small2", size: 500, notOwned: true}},
			[]string{"small"}},
		{"ttl", PolicyTTL, Config{TTL: time.Minute},
			[]item{{name: "a", size: 100}, {name: "b", size: 200, after: time.Second},
				{name: "c", size: 300, notOwned: true, after: time.Second}, {name: "d", size: 400}},
			[]string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			build := func() (*Cache, *[]string) {
				c, _, evicted, _ := orderCache(t, tc.policy, tc.cfg, tc.items)
				for _, name := range tc.gets {
					if c.Get(Key{"bk", name}) == nil {
						t.Fatalf("Get(%s) missed", name)
					}
				}
				return c, evicted
			}
			ref, refEvicted := build()
			want := drain(t, ref, refEvicted)
			size := map[string]int64{}
			var total int64
			for _, it := range tc.items {
				size[it.name] = int64(it.size)
				total += int64(it.size)
			}

			c, evicted := build()
			*evicted = nil
			budget := total
			if freed := c.SetBudget(budget); freed != 0 || len(*evicted) != 0 {
				t.Fatalf("SetBudget(all it holds) freed %d, evicted %v", freed, *evicted)
			}
			for i, name := range want {
				budget -= size[name]
				freed := c.SetBudget(budget)
				if !slices.Equal(*evicted, want[:i+1]) {
					t.Fatalf("after SetBudget(%d): evicted %q, want %q", budget, *evicted, want[:i+1])
				}
				if freed != size[name] {
					t.Fatalf("SetBudget(%d) freed %d, want %d (%s)", budget, freed, size[name], name)
				}
				checkAccounting(t, c)
			}
			if s := c.Stats(); s.Objects != 0 || s.Bytes != 0 || s.Budget != 0 || s.Evictions != uint64(len(want)) {
				t.Errorf("stats %+v after lowering the budget to 0", s)
			}
		})
	}
}

// A budget cut below the reservations of fills in flight evicts every
// entry, keeps the reservations, refuses new fills and the completed
// fills that no longer fit; raising it again admits fills.
func TestSetBudgetRespectsReservations(t *testing.T) {
	for _, p := range everyPolicy() {
		t.Run(string(p), func(t *testing.T) {
			var evicted []string
			c, _ := newPolicyCache(t, p, Config{Budget: 100, MaxObjectSize: 50,
				OnEvict: func(e *Entry) { evicted = append(evicted, e.Key().Object) }})
			admit(t, c, complete("bk", "a", 30))
			admit(t, c, complete("bk", "b", 30))
			fill1, fill2 := complete("bk", "f1", 30), complete("bk", "f2", 10)
			if !c.Reserve(fill1.Size()) {
				t.Fatal("Reserve(30) refused")
			}

			// 60 cached + 30 reserved down to 40: both entries go.
			if freed := c.SetBudget(40); freed != 60 || len(evicted) != 2 {
				t.Fatalf("SetBudget(40) freed %d, evicted %v; want 60, both", freed, evicted)
			}
			checkAccounting(t, c)
			if c.Reserve(20) {
				t.Fatal("Reserve(20) accepted beside 30 reserved in a budget of 40")
			}
			if !c.Reserve(fill2.Size()) {
				t.Fatal("Reserve(10) refused though it fits")
			}

			// Below the reservations themselves: nothing to evict, no
			// entry held, reservations kept.
			if freed := c.SetBudget(20); freed != 0 {
				t.Fatalf("SetBudget(20) freed %d with nothing cached", freed)
			}
			if s := c.Stats(); s.Reserved != 40 || s.Bytes != 0 || s.Budget != 20 {
				t.Fatalf("stats %+v; want 40 reserved, nothing cached, budget 20", s)
			}
			checkAccounting(t, c)
			if c.Reserve(1) {
				t.Fatal("Reserve(1) accepted over the budget")
			}
			// fill1 (30) no longer fits beside fill2's 10 in 20: refused,
			// its reservation returned. fill2 then fits.
			if c.Add(fill1) {
				t.Fatal("Add took a fill that no longer fits")
			}
			if s := c.Stats(); s.Reserved != 10 || s.Objects != 0 {
				t.Fatalf("stats %+v after the refused Add; want 10 reserved", s)
			}
			if !c.Add(fill2) || c.Peek(fill2.Key()) != fill2 {
				t.Fatal("Add refused a fill that fits the lowered budget")
			}
			checkAccounting(t, c)

			// Negative is 0: everything complete goes.
			if freed := c.SetBudget(-5); freed != 10 || c.Stats().Budget != 0 || c.Stats().Objects != 0 {
				t.Fatalf("SetBudget(-5) freed %d, stats %+v", freed, c.Stats())
			}
			// Raised: fills are admitted again, up to the new budget.
			if freed := c.SetBudget(100); freed != 0 {
				t.Fatalf("raising the budget freed %d", freed)
			}
			for i := range 3 {
				admit(t, c, complete("bk", fmt.Sprint("n", i), 30))
			}
			if s := c.Stats(); s.Bytes != 90 || s.Evictions != 3 {
				t.Fatalf("stats %+v after the raise; want 90 cached, no new eviction", s)
			}
			checkAccounting(t, c)
		})
	}
}

// SetBudget is safe beside every other call (for the race detector), and
// the accounting holds after.
func TestSetBudgetConcurrent(t *testing.T) {
	c := newCache(t, Config{Budget: 50_000, MaxObjectSize: 20_000})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 500 {
			c.SetBudget(int64(i%5) * 12_500)
		}
	}()
	for i := range 3000 {
		e := complete("bk", fmt.Sprint("k", i%40), i%20_000)
		if c.Reserve(e.Size()) {
			c.Add(e)
		}
		c.Get(e.Key())
	}
	<-done
	c.SetBudget(50_000)
	checkAccounting(t, c)
}
