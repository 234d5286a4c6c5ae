package cache

import (
	"slices"
	"testing"
)

// A shrink evicts the outputs the store has first (OFC §6.4), whatever
// the policy's order says, then follows the policy: here LRU, where the
// outputs are the most recently used entries. An output read since it
// was marked is an input like any other.
func TestSetBudgetEvictsOutputsFirst(t *testing.T) {
	c := newCache(t, Config{Budget: 1000, PoolBytes: -1})
	for _, name := range []string{"in1", "in2", "read-out", "out1", "out2"} {
		admit(t, c, complete("bk", name, 100))
	}
	for _, name := range []string{"read-out", "out1", "out2"} {
		if !c.MarkOutput(Key{"bk", name}, c.Peek(Key{"bk", name})) {
			t.Fatalf("MarkOutput(%s) refused", name)
		}
	}
	if c.MarkOutput(Key{"bk", "in1"}, complete("bk", "in1", 100)) {
		t.Fatal("MarkOutput marked an entry the cache does not hold")
	}
	if c.Get(Key{"bk", "read-out"}) == nil { // read: an input now, the most recent
		t.Fatal("Get(read-out) missed")
	}
	var evicted []string
	each := func(e *Entry) { evicted = append(evicted, e.Key().Object) }
	if freed := c.SetBudgetEach(300, each); freed != 200 {
		t.Fatalf("SetBudgetEach(300) freed %d, want 200", freed)
	}
	slices.Sort(evicted)
	if !slices.Equal(evicted, []string{"out1", "out2"}) {
		t.Fatalf("shrink to 300 evicted %v, want the two unread outputs", evicted)
	}
	evicted = nil
	if freed := c.SetBudgetEach(100, each); freed != 200 {
		t.Fatalf("SetBudgetEach(100) freed %d, want 200", freed)
	}
	if !slices.Equal(evicted, []string{"in1", "in2"}) {
		t.Fatalf("shrink to 100 evicted %v, want the inputs in LRU order", evicted)
	}
	if c.Peek(Key{"bk", "read-out"}) == nil {
		t.Fatal("the output read since it was marked went before older inputs")
	}
	checkAccounting(t, c)
}

// ReserveFillFree reserves only room the cache has: it never evicts.
func TestReserveFillFreeEvictsNothing(t *testing.T) {
	c := newCache(t, Config{Budget: 1000, MaxObjectSize: 1000, PoolBytes: -1})
	admit(t, c, complete("bk", "a", 600))
	if c.ReserveFillFree(500) {
		t.Fatal("ReserveFillFree(500) with 400 free succeeded")
	}
	if c.Peek(Key{"bk", "a"}) == nil || c.Stats().Evictions != 0 {
		t.Fatalf("ReserveFillFree evicted: %+v", c.Stats())
	}
	if !c.ReserveFillFree(400) {
		t.Fatal("ReserveFillFree(400) with 400 free refused")
	}
	s := c.Stats()
	if s.Reserved != 400 || s.Filling != 400 {
		t.Fatalf("after ReserveFillFree(400): %+v", s)
	}
	c.FillDone(400)
	c.Release(400)
	checkAccounting(t, c)
}
