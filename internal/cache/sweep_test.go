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

// An entry admitted unread (MarkUnread: pre-warmed, written) is not
// swept for its read count before its first read, and faces the count a
// whole MinAge after that read; one nobody reads goes once Idle has
// passed since its admission. An entry admitted by a read faces the
// count MinAge after its admission.
func TestSweepUnread(t *testing.T) {
	fc := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c := newCache(t, Config{Budget: 1 << 20, Clock: fc, TrackReads: true})
	rule := DefaultSweepRule // 5 reads, 30 min idle, 300 s
	key := func(k string) Key { return Key{Bucket: "b", Object: k} }
	for _, k := range []string{"warm", "warm-late", "warm-never", "filled"} {
		admit(t, c, complete("b", k, 100))
	}
	for _, k := range []string{"warm", "warm-late", "warm-never"} {
		if !c.MarkUnread(key(k), c.Peek(key(k))) {
			t.Fatalf("MarkUnread(%s) refused", k)
		}
	}
	swept := func() []string {
		var out []string
		c.Sweep(rule, func(e *Entry) { out = append(out, e.Key().Object) })
		slices.Sort(out)
		return out
	}
	fc.Advance(10 * time.Minute)
	// filled: 0 reads after a whole period; the pre-warmed ones are spared.
	if got := swept(); !slices.Equal(got, []string{"filled"}) {
		t.Fatalf("after 10 min swept %v, want [filled]", got)
	}
	c.Get(key("warm")) // first read at 10 min: its count starts now
	fc.Advance(4 * time.Minute)
	c.Get(key("warm"))
	if got := swept(); len(got) != 0 {
		t.Fatalf("at 14 min swept %v, want nothing (warm counts from 10 min)", got)
	}
	if c.MarkUnread(key("warm"), c.Peek(key("warm"))) {
		t.Error("MarkUnread took an entry already read")
	}
	fc.Advance(2 * time.Minute) // 16 min: warm read twice in its first period
	if got := swept(); !slices.Equal(got, []string{"warm"}) {
		t.Fatalf("at 16 min swept %v, want [warm]", got)
	}
	fc.Advance(10 * time.Minute) // 26 min
	for range 5 {
		c.Get(key("warm-late"))
	}
	fc.Advance(4*time.Minute + time.Second) // 30 min 1 s: warm-never unread since its admission 30 min ago
	if got := swept(); !slices.Equal(got, []string{"warm-never"}) {
		t.Fatalf("at 30 min swept %v, want [warm-never]", got)
	}
	if c.Peek(key("warm-late")) == nil {
		t.Error("warm-late, read 5 times in its first period, was swept")
	}
	checkAccounting(t, c)
	// Without read counts MarkUnread does nothing.
	plain := newCache(t, Config{Budget: 1 << 20, Clock: fc})
	admit(t, plain, complete("b", "x", 10))
	if plain.MarkUnread(key("x"), plain.Peek(key("x"))) {
		t.Error("MarkUnread without TrackReads")
	}
}

// MarkUnread on an entry still filling is taken by its Add.
func TestMarkUnreadBeforeAdd(t *testing.T) {
	fc := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c := newCache(t, Config{Budget: 1 << 20, Clock: fc, TrackReads: true})
	e := complete("b", "early", 100)
	if !c.MarkUnread(e.Key(), e) {
		t.Fatal("MarkUnread before Add refused")
	}
	admit(t, c, e)
	fc.Advance(10 * time.Minute)
	if n, _ := c.Sweep(DefaultSweepRule, nil); n != 0 {
		t.Fatalf("an entry marked unread before its Add was swept for its read count")
	}
	c.Remove(e.Key())
	if c.MarkUnread(e.Key(), e) {
		t.Error("MarkUnread took an entry that left the cache")
	}
}
