package cachelet

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"runtime/debug"
	"testing"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/store"
)

// SetBudget evicts by the policy down to the new budget, reports the bytes
// freed, and its metrics and counters follow; raising it lets the cache
// grow back; a budget of 0 keeps nothing (reads stream through).
func TestSetBudget(t *testing.T) {
	e := newEnv(t, readLocal)
	const size = 192 << 10 // a size class of its own: it charges its size
	var objs [4][]byte
	for i := range objs {
		objs[i] = object(fmt.Sprint("k", i), 1, size)
		e.storePut(fmt.Sprint("k", i), objs[i])
		e.mustRead(fmt.Sprint("k", i), objs[i], LocalMiss)
		e.settle()
	}
	if s := e.c.Stats(); s.Objects != 4 || s.Bytes != 4*size {
		t.Fatalf("stats %+v, want the 4 objects cached", s)
	}

	// Two objects' worth and a bit: the two least recently used go.
	if freed := e.c.SetBudget(2*size + 1000); freed != 2*size {
		t.Fatalf("SetBudget freed %d, want %d", freed, 2*size)
	}
	e.checkBudget()
	e.mustRead("k2", objs[2], LocalHit)
	e.mustRead("k3", objs[3], LocalHit)
	if c := e.c.Counters(); c.BudgetBytes != 2*size+1000 || c.CacheBytes != 2*size {
		t.Errorf("counters %+v after the shrink", c)
	}
	for name, want := range map[string]float64{
		"hoard_cache_budget_bytes":                  2*size + 1000,
		"hoard_cachelet_budget_evicted_bytes_total": 2 * size,
		"hoard_cache_evicted_bytes_total":           2 * size,
		"hoard_cache_evictions_total":               2,
	} {
		if m := e.gathered(name); len(m) != 1 || value(m[0].GetGauge().GetValue(), m[0].GetCounter().GetValue()) != want {
			t.Errorf("%s = %v, want %v", name, m, want)
		}
	}
	if got := toFloat64(e.c.m.budgetChanges.WithLabelValues("shrink")); got != 1 {
		t.Errorf("budget changes{shrink} = %v, want 1", got)
	}

	// Back up: nothing is evicted, and the evicted objects come back.
	if freed := e.c.SetBudget(testBudget); freed != 0 {
		t.Fatalf("raising the budget freed %d", freed)
	}
	e.mustRead("k0", objs[0], LocalMiss)
	e.settle()
	e.mustRead("k0", objs[0], LocalHit)
	if got := toFloat64(e.c.m.budgetChanges.WithLabelValues("raise")); got != 1 {
		t.Errorf("budget changes{raise} = %v, want 1", got)
	}

	// Nothing at all: everything goes, reads stream through.
	if freed := e.c.SetBudget(0); freed != 3*size {
		t.Fatalf("SetBudget(0) freed %d, want %d", freed, 3*size)
	}
	e.mustRead("k1", objs[1], PassThrough)
	e.settle()
	if s := e.c.Stats(); s.Objects != 0 || s.Bytes != 0 || s.Reserved != 0 || s.Budget != 0 {
		t.Errorf("stats %+v at budget 0", s)
	}
	// The same budget again changes nothing and counts nothing.
	e.c.SetBudget(0)
	if got := toFloat64(e.c.m.budgetChanges.WithLabelValues("shrink")); got != 2 {
		t.Errorf("budget changes{shrink} = %v, want 2", got)
	}
}

func value(gauge, counter float64) float64 { return gauge + counter }

// The eviction order is the application's policy: under owner-lru the
// objects another cachelet owns go first, whatever their recency.
func TestSetBudgetFollowsThePolicy(t *testing.T) {
	owned := map[string]bool{"mine1": true, "mine2": true}
	e := newEnv(t, func(c *Config) {
		c.ReadMode = ReadLocal
		c.Cache.Owns = func(k cache.Key) bool { return owned[k.Object] }
	})
	const size = 96 << 10 // a size class of its own: it charges its size
	for _, k := range []string{"mine1", "theirs1", "mine2", "theirs2"} {
		e.storePut(k, object(k, 1, size))
		e.mustRead(k, object(k, 1, size), LocalMiss)
		e.settle()
	}
	var evicted []string
	if freed := e.c.SetBudget(2 * size); freed != 2*size {
		t.Fatalf("freed %d, want %d", freed, 2*size)
	}
	for _, k := range []string{"mine1", "theirs1", "mine2", "theirs2"} {
		if e.c.cache.Peek(cache.Key{Bucket: testBucket, Object: k}) == nil {
			evicted = append(evicted, k)
		}
	}
	if fmt.Sprint(evicted) != "[theirs1 theirs2]" {
		t.Errorf("evicted %v; want the objects not owned", evicted)
	}
	if s := e.c.Stats(); s.EvictedNotOwned != 2 || s.EvictedOwned != 0 {
		t.Errorf("stats %+v", s)
	}
}

// A fill in flight when the budget drops below it ends for its reader,
// whole, but is not kept.
func TestSetBudgetBelowAFillInFlight(t *testing.T) {
	e := newEnv(t, readLocal)
	v1 := object("k", 1, 100<<10)
	e.storePut("k", v1)
	hold := e.st.HoldBody(testBucket, "k", 30<<10)
	slow, err := e.c.Get(t.Context(), testBucket, "k", nil)
	if err != nil {
		t.Fatal(err)
	}
	<-hold.Reached()
	if freed := e.c.SetBudget(10 << 10); freed != 0 {
		t.Errorf("SetBudget freed %d with nothing complete cached", freed)
	}
	hold.Release()
	got, err := io.ReadAll(slow.Body)
	slow.Body.Close()
	if err != nil || !bytes.Equal(got, v1) {
		t.Fatalf("the reader got %d bytes, %v; want v1 whole", len(got), err)
	}
	e.settle()
	if s := e.c.Stats(); s.Objects != 0 || s.Reserved != 0 {
		t.Fatalf("stats %+v: the fill landed over the lowered budget", s)
	}
	if e.fills("over_budget") != 1 {
		t.Errorf("fills{over_budget} = %v, want 1", e.fills("over_budget"))
	}
	e.checkBudget()
}

// Writes the store does not have yet stay readable when the budget evicts
// their cached copy.
func TestSetBudgetKeepsUnpersistedWrites(t *testing.T) {
	s, _ := ParseConsistency("local-async")
	e := newEnv(t, s.Apply)
	e.st.SetDown(true)
	queued := object("q", 1, 1000)
	e.cput("q", queued)
	if freed := e.c.SetBudget(0); freed != 1000 {
		t.Fatalf("SetBudget(0) freed %d, want the write's 1000 bytes", freed)
	}
	e.mustRead("q", queued, LocalHit)
	e.st.SetDown(false)
	if err := e.c.Drain(t.Context()); err != nil {
		t.Fatal(err)
	}
	body, _, _, err := e.st.Get(t.Context(), testBucket, "q", store.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(body)
	body.Close()
	if !bytes.Equal(got, queued) {
		t.Fatal("the queued write did not reach the store")
	}
}

// With MemoryLimitOverhead the Go runtime's soft limit follows the budget.
func TestSetBudgetMovesTheMemoryLimit(t *testing.T) {
	old := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })
	// 40 MiB less the binary's 10 MiB and a quarter for the soft limit.
	e := newEnv(t, func(c *Config) { c.MemoryLimitOverhead, c.ResidentBase = 40<<20, 10<<20 })
	if got := debug.SetMemoryLimit(-1); got != testBudget+20<<20 {
		t.Fatalf("memory limit %d after New, want the budget + 20 MiB", got)
	}
	e.c.SetBudget(1000)
	if got := debug.SetMemoryLimit(-1); got != 1000+20<<20 {
		t.Fatalf("memory limit %d after SetBudget(1000), want 1000 + 20 MiB", got)
	}
	debug.SetMemoryLimit(math.MaxInt64)
	// Without the overhead the limit is left alone.
	e2 := newEnv(t, nil)
	e2.c.SetBudget(1000)
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Fatalf("memory limit %d set without MemoryLimitOverhead", got)
	}
	if _, err := New(Config{Cache: cache.Config{Budget: 1}, MemoryLimitOverhead: -1}, e.st, nil, nil); err == nil {
		t.Error("a negative overhead was accepted")
	}
}

// The Go runtime keeps at least a quarter of the overhead, however large
// the resident base.
func TestMemoryLimit(t *testing.T) {
	for _, tc := range []struct{ overhead, base, budget, want int64 }{
		{0, 0, 100, 0},
		{64 << 20, 0, 64 << 20, 64<<20 + 48<<20},
		{64 << 20, 24 << 20, 64 << 20, 64<<20 + 24<<20},
		{64 << 20, 40 << 20, 64 << 20, 64<<20 + 16<<20},
		{64 << 20, 60 << 20, 64 << 20, 64<<20 + 16<<20},
	} {
		c := Config{MemoryLimitOverhead: tc.overhead, ResidentBase: tc.base}
		if got := c.MemoryLimit(tc.budget); got != tc.want {
			t.Errorf("overhead %d, base %d: MemoryLimit(%d) = %d, want %d", tc.overhead, tc.base, tc.budget, got, tc.want)
		}
	}
}

// SetBudget says what it freed, and the cache holds what is left.
func TestSetBudgetFrees(t *testing.T) {
	e := newEnv(t, readLocal)
	for i := range 3 {
		k := fmt.Sprint("k", i)
		e.storePut(k, object(k, 1, 1000))
		e.mustRead(k, object(k, 1, 1000), LocalMiss)
	}
	e.settle()
	freed := e.c.SetBudget(1500)
	if s := e.c.Stats(); freed != 2000 || s.Budget != 1500 || s.Bytes != 1000 || s.Reserved != 0 {
		t.Fatalf("SetBudget(1500) freed %d, left %+v", freed, s)
	}
}
