package cachelet

import (
	"bytes"
	"testing"

	"github.com/hoard-io/hoard/internal/store"
)

// A function whose inputs are not worth caching misses every time and
// keeps nothing; admitted again, reads are cached as before.
func TestNotAdmitted(t *testing.T) {
	e := newEnv(t, nil)
	small := object("small", 1, 3000)
	e.storePut("small", small)
	e.c.SetAdmit(false)
	if e.c.Admitting() {
		t.Fatal("admitting after SetAdmit(false)")
	}
	e.mustRead("small", small, PassThrough)
	e.mustRead("small", small, PassThrough)
	c := e.c.Counters()
	if c.NotAdmitted != 2 || c.CacheObjects != 0 || c.Reads.PassThrough.Count != 2 {
		t.Fatalf("not admitted %d, cached %d, pass-through %d: want 2, 0, 2", c.NotAdmitted, c.CacheObjects, c.Reads.PassThrough.Count)
	}
	if c.StoreFit.N != 2 {
		t.Fatalf("the store's fit holds %d reads, want 2", c.StoreFit.N)
	}
	e.c.SetAdmit(true)
	e.mustRead("small", small, LocalMiss)
	e.mustRead("small", small, LocalHit)
	if n := e.c.Counters().NotAdmitted; n != 2 {
		t.Fatalf("not admitted %d after admitting again, want 2", n)
	}
	// A copy held already still serves a function not admitting: it is
	// no miss.
	e.c.SetAdmit(false)
	e.mustRead("small", small, LocalHit)
}

// Under the store write target a miss not admitted goes to the store
// alone: neither the reader nor the key's owner keeps a copy, and the
// owner's copy, if any, is not what serves it.
func TestNotAdmittedSkipsOwner(t *testing.T) {
	g := newGroup(t, 2)
	a := object("a", 1, 5000)
	g.put(t, "a", a)
	g.members[1].SetAdmit(false)
	g.mustRead(t, 1, "a", a, PassThrough)
	for i, m := range g.members {
		if n := m.Counters().CacheObjects; n != 0 {
			t.Fatalf("cachelet %d keeps %d objects, want none", i, n)
		}
	}
	// The owner serving peers is unaffected by its own setting.
	g.members[0].SetAdmit(false)
	g.members[1].SetAdmit(true)
	g.mustRead(t, 1, "a", a, RemoteMiss)
	g.mustRead(t, 1, "a", a, LocalHit)
	if n := g.members[0].Counters().CacheObjects; n != 1 {
		t.Fatalf("the owner keeps %d objects after a peer's miss, want 1", n)
	}
}

// Under the owner write target the owner may hold the only copy of the
// newest write: a reader not admitting still asks it, and gets that
// write, without keeping it.
func TestNotAdmittedOwnerWrites(t *testing.T) {
	g := newGroup(t, 3, func(c *Config) { c.WriteTarget, c.ReadMode = WriteOwner, ReadOwner })
	v1, v2 := object("k", 1, 4000), object("k", 2, 4000)
	g.put(t, "k", v1)
	if _, err := g.members[1].Put(t.Context(), testBucket, "k", bytes.NewReader(v2), int64(len(v2)), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	g.members[2].SetAdmit(false)
	for range 2 {
		got, _, err := g.read(t, 2, "k")
		if err != nil || !bytes.Equal(got, v2) {
			t.Fatalf("read not admitted: %v, newest write: %v", err, bytes.Equal(got, v2))
		}
	}
	if c := g.members[2].Counters(); c.CacheObjects != 0 || c.NotAdmitted == 0 {
		t.Fatalf("the reader keeps %d objects and counted %d reads not admitted; want 0 and some", c.CacheObjects, c.NotAdmitted)
	}
	// The writer's own copy, not yet persisted maybe, serves it.
	g.members[1].SetAdmit(false)
	got, _, err := g.read(t, 1, "k")
	if err != nil || !bytes.Equal(got, v2) {
		t.Fatalf("the writer's read not admitted: %v, newest write: %v", err, bytes.Equal(got, v2))
	}
}

// A ranged read not admitted asks the store for its range alone and
// keeps no page; pages held already still serve.
func TestNotAdmittedRange(t *testing.T) {
	e, big := pagesEnv(t, nil)
	e.c.SetAdmit(false)
	e.readRange("big", big, 10, 2*testPage, PassThrough)
	e.readRange("big", big, 10, 2*testPage, PassThrough)
	e.settle()
	if c := e.c.Counters(); c.CacheObjects != 0 || c.NotAdmitted != 2 {
		t.Fatalf("cached %d, not admitted %d; want 0, 2", c.CacheObjects, c.NotAdmitted)
	}
	e.c.SetAdmit(true)
	e.readRange("big", big, 0, 3*testPage-1, LocalMiss)
	e.settle()
	e.c.SetAdmit(false)
	e.readRange("big", big, testPage, 2*testPage, LocalHit)
}

// The store's cost fit takes the store's answers only: an owner's answer
// streamed through is not one.
func TestStoreFitLeavesPeersOut(t *testing.T) {
	g := newGroup(t, 2, func(c *Config) { c.WriteTarget, c.ReadMode = WriteOwner, ReadOwner })
	a := object("a", 1, 5000)
	g.put(t, "a", a)
	g.members[1].SetAdmit(false)
	g.mustRead(t, 1, "a", a, PassThrough)
	if c := g.members[1].Counters(); c.NotAdmitted != 1 || c.StoreFit.N != 0 {
		t.Fatalf("not admitted %d, store fit %d reads; want 1 and 0 (the owner answered)", c.NotAdmitted, c.StoreFit.N)
	}
}
