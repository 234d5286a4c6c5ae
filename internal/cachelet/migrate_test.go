package cachelet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/peer"
	"github.com/hoard-io/hoard/internal/store"
	"github.com/hoard-io/hoard/internal/store/memstore"
)

// hotAfterTwo makes an object hot after two reads.
func hotAfterTwo(cfg *Config) { cfg.Migrate.HotReads = 2 }

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func migrated(c *Cachelet, why, result string) float64 {
	return toFloat64(c.m.migrated.WithLabelValues(why, result))
}

func installs(c *Cachelet, result string) float64 {
	return toFloat64(c.m.installs.WithLabelValues(result))
}

// moveAll gives every key to member to and tells every member.
func (g *group) moveAll(to int) {
	// As membership does it: every member hears that its ring is about to
	// change (its handoff begins) before any ring answers the new owner,
	// so no member takes an offer for a key it owns by the new ring
	// before its own handoff began (whose clear would drop it).
	for _, c := range g.members {
		c.OwnershipChanging()
	}
	for _, r := range g.routers {
		r.set(g.addrs[to])
	}
	for _, c := range g.members {
		c.OwnershipChanged()
	}
}

// TestHandoffMigratesHotObjects: under the owner settings a ring change
// no longer drops the old owner's hot objects: they are offered to the
// new owner, which checks each version with one metadata request and then
// serves them from memory without reading their bytes from the store.
// An object read once is not hot, and is not moved.
func TestHandoffMigratesHotObjects(t *testing.T) {
	for _, name := range []string{"owner", "owner-async", "owner-local-read"} {
		t.Run(name, func(t *testing.T) {
			s, _ := ParseConsistency(name)
			g := newGroup(t, 3, s.Apply, hotAfterTwo)
			data := map[string][]byte{}
			for i := range 4 {
				k := fmt.Sprintf("hot%d", i)
				data[k] = object(k, 1, 20<<10)
				g.put(t, k, data[k])
				g.mustRead(t, 0, k, data[k], LocalMiss)
				g.mustRead(t, 0, k, data[k], LocalHit)
			}
			cold := object("cold", 1, 20<<10)
			g.put(t, "cold", cold)
			g.mustRead(t, 0, "cold", cold, LocalMiss)
			g.st.ResetCounts()

			g.moveAll(1)
			waitFor(t, "the offers", func() bool { return migrated(g.members[0], migrateHandoff, "installed") == 4 })
			for k, v := range data {
				g.mustRead(t, 1, k, v, LocalHit)
			}
			if n := g.st.Calls(memstore.OpGet); n != 0 {
				t.Fatalf("the new owner read the store %d times for migrated objects", n)
			}
			if n := g.st.Calls(memstore.OpStat); n != 4 {
				t.Fatalf("the new owner asked the store for %d versions, want 4", n)
			}
			g.mustRead(t, 1, "cold", cold, LocalMiss)
			if n := installs(g.members[1], "installed"); n != 4 {
				t.Fatalf("installs at the new owner = %v, want 4", n)
			}
			if n := migrated(g.members[0], migrateHandoff, "refused") + migrated(g.members[0], migrateHandoff, "failed"); n != 0 {
				t.Fatalf("%v offers refused or failed", n)
			}
		})
	}
}

// TestRingChangeMigratesUnderStrong: under strong no handoff runs, and the
// old owner keeps its copies; its hot ones are offered to the new owner
// all the same, which takes them without asking the store (its reads
// validate every copy) and then hits instead of missing.
func TestRingChangeMigratesUnderStrong(t *testing.T) {
	g := newGroup(t, 2, hotAfterTwo)
	v := object("k", 1, 30<<10)
	g.put(t, "k", v)
	g.mustRead(t, 0, "k", v, LocalMiss)
	g.mustRead(t, 0, "k", v, LocalHit)
	g.st.ResetCounts()
	g.moveAll(1)
	waitFor(t, "the offer", func() bool { return migrated(g.members[0], migrateHandoff, "installed") == 1 })
	if n := g.st.Calls(memstore.OpStat); n != 0 {
		t.Fatalf("the new owner asked the store %d times at install under strong", n)
	}
	g.mustRead(t, 1, "k", v, LocalHit)
	if gc := g.st.GetCounts(); gc.Bodies != 0 {
		t.Fatalf("store Gets %+v: the migrated copy was read from the store", gc)
	}
}

// TestShrinkMigratesHotObjectsToTheirOwner: a shrink evicts a cachelet's
// copies; the hot ones are offered to their owner (which had lost its
// own), the others are dropped as before.
func TestShrinkMigratesHotObjectsToTheirOwner(t *testing.T) {
	g := newGroup(t, 2, hotAfterTwo)
	for _, r := range g.routers {
		r.set(g.addrs[1])
	}
	hot, cold := object("hot", 1, 30<<10), object("cold", 1, 30<<10)
	g.put(t, "hot", hot)
	g.put(t, "cold", cold)
	g.mustRead(t, 0, "hot", hot, RemoteMiss)
	g.mustRead(t, 0, "hot", hot, LocalHit)
	g.mustRead(t, 0, "cold", cold, RemoteMiss)
	g.members[1].cache.Clear() // the owner gave its memory back earlier
	g.st.ResetCounts()

	g.members[0].SetBudget(0)
	waitFor(t, "the offer", func() bool { return migrated(g.members[0], migrateShrink, "installed") == 1 })
	if n := migrated(g.members[0], migrateShrink, "refused") + migrated(g.members[0], migrateShrink, "failed"); n != 0 {
		t.Fatalf("%v offers refused or failed", n)
	}
	g.mustRead(t, 1, "hot", hot, LocalHit)
	if gc := g.st.GetCounts(); gc.Bodies != 0 {
		t.Fatalf("store Gets %+v: the migrated copy was read from the store", gc)
	}
	if g.members[1].cache.Peek(cache.Key{Bucket: testBucket, Object: "cold"}) != nil {
		t.Fatal("an object read once was offered")
	}
	// The owner's own hot copy has nowhere to go: its shrink drops it.
	g.mustRead(t, 1, "hot", hot, LocalHit)
	g.members[1].SetBudget(0)
	g.members[1].wg.Wait()
	for _, r := range migrateResults {
		if n := migrated(g.members[1], migrateShrink, r); n != 0 {
			t.Fatalf("the owner's shrink offered its own key: %s %v", r, n)
		}
	}
	if installs(g.members[0], "installed")+installs(g.members[0], "refused") != 0 {
		t.Fatal("the owner's shrink offered its own key to another member")
	}
}

// offerTo offers data as version etag of key to c directly.
func offerTo(c *Cachelet, key, etag string, data []byte) error {
	info := store.ObjectInfo{Bucket: testBucket, Key: key, ETag: etag, Size: int64(len(data))}
	return c.PeerInstall(context.Background(), info, bytes.NewReader(data))
}

// TestInstallVerifies: the receiver keeps an offered copy only when it
// owns the key, holds nothing of it, has room, the bytes are the
// version's, the version is the store's, and its last handoff was clean;
// otherwise it refuses and keeps nothing.
func TestInstallVerifies(t *testing.T) {
	s, _ := ParseConsistency("owner")
	g := newGroup(t, 2, s.Apply)
	g.moveAll(1)
	for _, c := range g.members {
		if err := c.waitHandoff(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	owner := g.members[1]
	v1, v2 := object("k", 1, 20<<10), object("k", 2, 20<<10)
	e1, e2 := g.st.Put(t.Context(), testBucket, "k", bytes.NewReader(v1), int64(len(v1)), store.PutOptions{})
	if e2 != nil {
		t.Fatal(e2)
	}
	etag1 := e1.ETag
	res2 := putStore(t, g.st, "k", v2)
	held := func() bool { return owner.cache.Peek(cache.Key{Bucket: testBucket, Object: "k"}) != nil }

	for _, tc := range []struct {
		name  string
		to    *Cachelet
		etag  string
		data  []byte
		setup func()
	}{
		{"not the owner", g.members[0], res2.ETag, v2, nil},
		{"stale version", owner, etag1, v1, nil},
		{"bytes not the version's", owner, res2.ETag, v1, nil},
		{"short bytes", owner, res2.ETag, v2[:100], nil},
		{"last handoff failed", owner, res2.ETag, v2, func() { owner.mig.handoffFailed.Store(true) }},
		{"no room", owner, res2.ETag, v2, func() { owner.mig.handoffFailed.Store(false); owner.SetBudget(10 << 10) }},
		{"off", owner, res2.ETag, v2, func() { owner.SetBudget(testBudget); owner.cfg.Migrate.Disabled = true }},
	} {
		if tc.setup != nil {
			tc.setup()
		}
		err := offerTo(tc.to, "k", tc.etag, tc.data)
		if !errors.Is(err, peer.ErrRefused) {
			t.Fatalf("%s: offer answered %v, want ErrRefused", tc.name, err)
		}
		if held() || g.members[0].cache.Peek(cache.Key{Bucket: testBucket, Object: "k"}) != nil {
			t.Fatalf("%s: the refused copy was kept", tc.name)
		}
	}
	owner.cfg.Migrate.Disabled = false
	if err := offerTo(owner, "k", res2.ETag, v2); err != nil {
		t.Fatalf("a current, whole offer: %v", err)
	}
	g.st.ResetCounts()
	g.mustRead(t, 1, "k", v2, LocalHit)
	if err := offerTo(owner, "k", res2.ETag, v2); !errors.Is(err, peer.ErrRefused) {
		t.Fatalf("an offer of a key held already: %v, want ErrRefused", err)
	}
	if n := installs(owner, "installed"); n != 1 {
		t.Fatalf("installs = %v, want 1", n)
	}
	// A write of the key after the install is the newest: a later offer
	// of the older version is refused.
	v3 := object("k", 3, 20<<10)
	if _, err := owner.Put(t.Context(), testBucket, "k", bytes.NewReader(v3), int64(len(v3)), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := owner.Drain(t.Context()); err != nil {
		t.Fatal(err)
	}
	owner.cache.Clear()
	if err := offerTo(owner, "k", res2.ETag, v2); !errors.Is(err, peer.ErrRefused) {
		t.Fatalf("an offer of a version a write replaced: %v, want ErrRefused", err)
	}
}

func putStore(t testing.TB, st *memstore.Store, key string, data []byte) store.PutResult {
	t.Helper()
	res, err := st.Put(t.Context(), testBucket, key, bytes.NewReader(data), int64(len(data)), store.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestInstallNeedsThePeerKey: a client without the application's key
// cannot offer a copy through the peer protocol; one with it can.
func TestInstallNeedsThePeerKey(t *testing.T) {
	g := newGroup(t, 2)
	g.moveAll(1)
	v := object("k", 1, 10<<10)
	res := putStore(t, g.st, "k", v)
	info := store.ObjectInfo{Bucket: testBucket, Key: "k", ETag: res.ETag, Size: int64(len(v))}
	crc := crc32.Checksum(v, castagnoli)
	auth, err := peer.NewAuth("app", []byte("not-the-application-secret"), nil)
	if err != nil {
		t.Fatal(err)
	}
	rogue := peer.NewClient(auth, peer.ClientConfig{})
	defer rogue.Close()
	if err := rogue.Install(t.Context(), g.addrs[1], info, bytes.NewReader(v), crc); err == nil {
		t.Fatal("an offer signed without the application's key was taken")
	}
	if g.members[1].cache.Peek(cache.Key{Bucket: testBucket, Object: "k"}) != nil || installs(g.members[1], "installed") != 0 {
		t.Fatal("an offer signed without the application's key was kept")
	}
	good, err := peer.NewAuth("app", []byte("a-secret-of-at-least-16-bytes"), nil)
	if err != nil {
		t.Fatal(err)
	}
	member := peer.NewClient(good, peer.ClientConfig{})
	defer member.Close()
	if err := member.Install(t.Context(), g.addrs[1], info, bytes.NewReader(v), crc); err != nil {
		t.Fatalf("an offer from a member: %v", err)
	}
	g.mustRead(t, 1, "k", v, LocalHit)
}

// TestShrinkGivesUpPersistedOutputsFirst: a shrink evicts the writes the
// store has (outputs no function read since) before any input, though
// the outputs are the most recently used; inputs then go in LRU order.
func TestShrinkGivesUpPersistedOutputsFirst(t *testing.T) {
	for _, name := range []string{"strong", "local"} {
		t.Run(name, func(t *testing.T) {
			s, _ := ParseConsistency(name)
			e := newEnv(t, s.Apply)
			const size = 20 << 10
			for _, k := range []string{"in1", "in2"} {
				v := object(k, 1, size)
				e.storePut(k, v)
				e.mustRead(k, v, LocalMiss)
			}
			for _, k := range []string{"out1", "out2"} {
				v := object(k, 1, size)
				if _, err := e.c.Put(t.Context(), testBucket, k, bytes.NewReader(v), size, store.PutOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			if err := e.c.Drain(t.Context()); err != nil {
				t.Fatal(err)
			}
			e.settle()
			held := func(k string) bool { return e.c.cache.Peek(cache.Key{Bucket: testBucket, Object: k}) != nil }
			for _, k := range []string{"in1", "in2", "out1", "out2"} {
				if !held(k) {
					t.Fatalf("%s not held before the shrink", k)
				}
			}
			_, used := e.c.Budget()
			if freed := e.c.SetBudget(used - 2*size); freed < 2*size {
				t.Fatalf("shrink freed %d", freed)
			}
			if held("out1") || held("out2") || !held("in1") || !held("in2") {
				t.Fatalf("after the shrink: in1 %v in2 %v out1 %v out2 %v; want the outputs gone, the inputs kept",
					held("in1"), held("in2"), held("out1"), held("out2"))
			}
			_, used = e.c.Budget()
			e.c.SetBudget(used - size)
			if held("in1") || !held("in2") {
				t.Fatal("the next shrink did not take the least recently used input")
			}
		})
	}
}
