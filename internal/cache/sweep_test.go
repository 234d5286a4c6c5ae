package cache

import (
	"slices"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/clock"
)

func TestSweep(t *testing.T) {
	fc := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c := newCache(t, Config{Budget: 1 << 20, Clock: fc, TrackReads: true})
	rule := SweepRule{MinReads: 3, Idle: 10 * time.Minute, MinAge: 5 * time.Minute}
	read := func(k string, n int) {
		for range n {
			if c.Get(Key{Bucket: "b", Object: k}) == nil {
				t.Fatalf("%s not cached", k)
			}
		}
	}
	admit(t, c, complete("b", "popular", 100))
	admit(t, c, complete("b", "rare", 100))
	admit(t, c, complete("b", "idle", 100))
	read("popular", 3)
	read("rare", 2)
	read("idle", 5)
	fc.Advance(6 * time.Minute)
	admit(t, c, complete("b", "young", 100)) // spared: younger than MinAge
	read("popular", 1)
	fc.Advance(270 * time.Second) // idle: last read 10.5 min ago; young: 4.5 min old
	var swept []string
	n, bytes := c.Sweep(rule, func(e *Entry) {
		if !e.Acquire() { // still the cache's: a reference can be taken
			t.Errorf("%v: no reference in the callback", e.Key())
		}
		e.Release()
		swept = append(swept, e.Key().Object)
	})
	slices.Sort(swept)
	if !slices.Equal(swept, []string{"idle", "rare"}) || n != 2 || bytes != 200 {
		t.Fatalf("swept %v (%d, %d bytes), want idle and rare", swept, n, bytes)
	}
	if s := c.Stats(); s.Swept != 2 || s.Evictions != 0 || s.Objects != 2 {
		t.Errorf("stats %+v", s)
	}
	checkAccounting(t, c)
	// A re-added entry starts over.
	admit(t, c, complete("b", "rare", 100))
	fc.Advance(6 * time.Minute)
	read("rare", 3)
	if n, _ := c.Sweep(rule, nil); n != 2 { // young (never read) and popular (10.5 min idle); rare, re-added and read 3 times, stays
		t.Errorf("second sweep dropped %d, want 2", n)
	}
}

func TestExpire(t *testing.T) {
	fc := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c := newCache(t, Config{Budget: 1 << 20, Clock: fc, Policy: PolicyTTL, TTL: time.Minute})
	admit(t, c, complete("b", "a", 10))
	fc.Advance(30 * time.Second)
	admit(t, c, complete("b", "b", 10))
	fc.Advance(40 * time.Second)
	if n := c.Expire(); n != 1 || c.Peek(Key{Bucket: "b", Object: "b"}) == nil {
		t.Fatalf("Expire dropped %d, want 1 (a), keeping b", n)
	}
	if s := c.Stats(); s.Expired != 1 || s.Objects != 1 {
		t.Errorf("stats %+v", s)
	}
	lru := newCache(t, Config{Budget: 1 << 20, Clock: fc})
	admit(t, lru, complete("b", "a", 10))
	fc.Advance(time.Hour)
	if n := lru.Expire(); n != 0 {
		t.Errorf("Expire under owner-lru dropped %d", n)
	}
	if n, _ := lru.Sweep(DefaultSweepRule, nil); n != 0 { // no read counts kept: nothing to judge by
		t.Errorf("Sweep without TrackReads dropped %d", n)
	}
	checkAccounting(t, c)
}
