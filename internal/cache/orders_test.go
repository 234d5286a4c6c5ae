package cache

import (
	"fmt"
	"testing"
)

// Tests of what sets each of the policies beyond LRU apart; the
// conformance suite checks what they share.

// TestScanResistance: a scan of keys read once, three times the cache's
// size, drives every hot entry out of LRU, but none out of GDSF, S3-FIFO
// or W-TinyLFU, which rank by uses. (GDSF's aging lets a longer scan
// through: TestGDSFSizeAndAge.)
func TestScanResistance(t *testing.T) {
	const size, budget, hot = 100, 100 * 100, 20
	for _, p := range []Policy{PolicyOwnerLRU, PolicyGDSF, PolicyS3FIFO, PolicyWTinyLFU} {
		t.Run(string(p), func(t *testing.T) {
			c, _ := newPolicyCache(t, p, Config{Budget: budget})
			for i := range hot {
				admit(t, c, complete("bk", fmt.Sprint("hot", i), size))
			}
			for range 5 {
				for i := range hot {
					if c.Get(Key{"bk", fmt.Sprint("hot", i)}) == nil {
						t.Fatalf("hot%d missing before the scan", i)
					}
				}
			}
			for i := range 3 * budget / size {
				admit(t, c, complete("bk", fmt.Sprint("scan", i), size))
				if i%97 == 0 {
					checkAccounting(t, c)
				}
			}
			kept := 0
			for i := range hot {
				if c.Peek(Key{"bk", fmt.Sprint("hot", i)}) != nil {
					kept++
				}
			}
			switch {
			case p == PolicyOwnerLRU && kept != 0:
				t.Errorf("%d of %d hot entries survived the scan under LRU, want 0", kept, hot)
			case p == PolicyWTinyLFU && kept < hot-1:
				// The sketch's estimates are upper bounds: a scanned key
				// whose four counters all collide with hot keys' (about
				// one run in a hundred) wins over one hot entry.
				t.Errorf("%d of %d hot entries survived the scan, want at least %d", kept, hot, hot-1)
			case p != PolicyOwnerLRU && p != PolicyWTinyLFU && kept != hot:
				t.Errorf("%d of %d hot entries survived the scan, want all", kept, hot)
			}
			checkAccounting(t, c)
		})
	}
}

// TestGDSFSizeAndAge: GDSF gives up a large entry before small ones read
// as often, and an entry read often long ago ages out once the inflation
// value has passed its priority.
func TestGDSFSizeAndAge(t *testing.T) {
	var evicted []string
	c, _ := newPolicyCache(t, PolicyGDSF, Config{Budget: 100, MaxObjectSize: 100,
		OnEvict: func(e *Entry) { evicted = append(evicted, e.Key().Object) }})
	admit(t, c, complete("bk", "small1", 10))
	admit(t, c, complete("bk", "large", 50))
	admit(t, c, complete("bk", "small2", 10))
	admit(t, c, complete("bk", "new", 40)) // 110: one must go
	if len(evicted) != 1 || evicted[0] != "large" {
		t.Fatalf("evicted %q, want [large]", evicted)
	}
	// old is read 3 times (priority 3/10); then entries of priority
	// 1/10 each come and go until the inflation value passes 3/10.
	admit(t, c, complete("bk", "old", 10))
	for range 3 {
		c.Get(Key{"bk", "old"})
	}
	for i := 0; c.Peek(Key{"bk", "old"}) != nil; i++ {
		if i > 100 {
			t.Fatal("an entry read long ago never aged out")
		}
		admit(t, c, complete("bk", fmt.Sprint("churn", i), 10))
	}
	checkAccounting(t, c)
}

// TestS3FIFOQueues: an entry read in the small queue moves to the main
// queue; a key evicted from the small queue and admitted again while its
// ghost is remembered goes straight to the main one; the ghost queue stays
// bounded.
func TestS3FIFOQueues(t *testing.T) {
	c, _ := newPolicyCache(t, PolicyS3FIFO, Config{Budget: 1000, MaxObjectSize: 1000})
	o := c.order.(*s3fifoOrder)
	admit(t, c, complete("bk", "read", 100))
	c.Get(Key{"bk", "read"})
	for i := range 10 {
		admit(t, c, complete("bk", fmt.Sprint("once", i), 100))
	}
	read := c.Peek(Key{"bk", "read"})
	if read == nil || read.class != classMain {
		t.Fatalf("the entry read in the small queue is %v, want in the main queue", read)
	}
	if c.Peek(Key{"bk", "once0"}) != nil || !o.remembers(o.keys.hash(Key{"bk", "once0"})) {
		t.Fatal("once0 should have been evicted from the small queue and remembered")
	}
	admit(t, c, complete("bk", "once0", 100))
	if e := c.Peek(Key{"bk", "once0"}); e == nil || e.class != classMain {
		t.Fatalf("once0 admitted again is %v, want in the main queue", e)
	}
	for i := range 10_000 {
		admit(t, c, complete("bk", fmt.Sprint("scan", i), 100))
	}
	if live := len(o.ghost) - o.ghostHead; live > max(o.main.n, ghostMin) || len(o.ghost) > 2*ghostMin+2 {
		t.Fatalf("ghost queue holds %d slots (%d allocated), main %d entries", live, len(o.ghost), o.main.n)
	}
	checkAccounting(t, c)
}

// TestWTinyLFUAdmission: once the main space is full, a newcomer read more
// often than the main space's next victim takes its place; one read less
// often is the one evicted.
func TestWTinyLFUAdmission(t *testing.T) {
	var evicted []string
	c, _ := newPolicyCache(t, PolicyWTinyLFU, Config{Budget: 1000, MaxObjectSize: 1000,
		OnEvict: func(e *Entry) { evicted = append(evicted, e.Key().Object) }})
	for i := range 10 {
		admit(t, c, complete("bk", fmt.Sprint("m", i), 99))
	}
	// popular was read (as misses that filled it) three times before.
	for range 3 {
		admit(t, c, complete("bk", "popular", 50))
		c.Remove(Key{"bk", "popular"})
	}
	evicted = nil
	admit(t, c, complete("bk", "popular", 50))
	admit(t, c, complete("bk", "rare", 50))
	admit(t, c, complete("bk", "rare2", 50))
	if c.Peek(Key{"bk", "popular"}) == nil {
		t.Errorf("the popular newcomer was refused; evicted %q", evicted)
	}
	if c.Peek(Key{"bk", "rare"}) != nil {
		t.Errorf("a newcomer read once displaced an entry read as often; evicted %q", evicted)
	}
	checkAccounting(t, c)
}

// TestCountMin: estimates never fall below the true count (before aging),
// aging halves them, and widening forgets.
func TestCountMin(t *testing.T) {
	var s countMin
	s.resize(1000)
	h := newKeyHasher()
	for i := range 1000 {
		for range i % 8 {
			s.add(h.hash(Key{"b", fmt.Sprint(i)}))
		}
	}
	over := 0
	for i := range 1000 {
		est := s.estimate(h.hash(Key{"b", fmt.Sprint(i)}))
		if int(est) < i%8 {
			t.Fatalf("key %d: estimate %d below its %d uses", i, est, i%8)
		}
		if int(est) > i%8 {
			over++
		}
	}
	if over > 100 {
		t.Errorf("%d of 1000 estimates above the truth", over)
	}
	k := h.hash(Key{"b", "x"})
	for range 15 {
		s.add(k)
	}
	s.age()
	if est := s.estimate(k); est < 7 || est > 8 {
		t.Errorf("after aging, estimate %d, want about half of 15", est)
	}
	before := s.estimate(k)
	s.grow(1 << 20)
	if est := s.estimate(k); est < before {
		t.Errorf("after widening, estimate %d, below %d before", est, before)
	}
	for i := range 1000 {
		if est := s.estimate(h.hash(Key{"b", fmt.Sprint(i)})); int(est) < (i%8)/2 {
			t.Fatalf("key %d after aging and widening: estimate %d below %d", i, est, (i%8)/2)
		}
	}
}
