package cachelet

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/onewrite"
	"github.com/hoard-io/hoard/internal/peer"
	"github.com/hoard-io/hoard/internal/store"
	"github.com/hoard-io/hoard/internal/store/memstore"
)

// staticRouter routes every key to one owner, which tests can move.
type staticRouter struct {
	mu    sync.Mutex
	self  string
	owner string
	all   []string
	rev   int64
}

func (r *staticRouter) Revision() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rev
}

func (r *staticRouter) Owner(_, _ string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.owner, r.owner == r.self
}

func (r *staticRouter) PeerAddrs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, a := range r.all {
		if a != r.self {
			out = append(out, a)
		}
	}
	return out
}

func (r *staticRouter) PeerAddr() string { return r.self }

func (r *staticRouter) set(owner string) {
	r.mu.Lock()
	r.owner = owner
	r.rev++
	r.mu.Unlock()
}

// group is n cachelets of one application over one store, each with a peer
// server, all routing every key to the same owner.
type group struct {
	st      *memstore.Store
	members []*Cachelet
	addrs   []string
	routers []*staticRouter
	servers []*httptest.Server
}

func newGroup(t testing.TB, n int, opts ...func(*Config)) *group {
	t.Helper()
	st := memstore.New()
	if err := st.CreateBucket(t.Context(), testBucket, ""); err != nil {
		t.Fatal(err)
	}
	auth, err := peer.NewAuth("app", []byte("a-secret-of-at-least-16-bytes"), nil)
	if err != nil {
		t.Fatal(err)
	}
	g := &group{st: st}
	// Listen first: routers need every address.
	for range n {
		srv := httptest.NewUnstartedServer(nil)
		srv.Listener = onewrite.Listen(srv.Listener)
		srv.Config.ConnContext = onewrite.ConnContext
		g.servers = append(g.servers, srv)
		g.addrs = append(g.addrs, srv.Listener.Addr().String())
	}
	client := peer.NewClient(auth, peer.ClientConfig{})
	t.Cleanup(client.Close)
	for i := range n {
		r := &staticRouter{self: g.addrs[i], owner: g.addrs[0], all: g.addrs}
		cfg := Config{Cache: cache.Config{Budget: testBudget, MaxObjectSize: testMaxSize}, Router: r, Peers: client}
		for _, o := range opts {
			o(&cfg)
		}
		c, err := New(cfg, st, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		g.servers[i].Config.Handler = peer.NewServer(auth, c, nil)
		g.servers[i].Start()
		t.Cleanup(func() { g.servers[i].Close(); c.Close() })
		g.members = append(g.members, c)
		g.routers = append(g.routers, r)
	}
	// Under the owner settings each new cachelet hands off first.
	for _, c := range g.members {
		if err := c.waitHandoff(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	return g
}

func (g *group) read(t *testing.T, i int, key string) ([]byte, Outcome, error) {
	t.Helper()
	obj, err := g.members[i].Get(t.Context(), testBucket, key, nil)
	if err != nil {
		return nil, "", err
	}
	defer obj.Body.Close()
	data, err := io.ReadAll(obj.Body)
	return data, obj.Outcome, err
}

func (g *group) mustRead(t *testing.T, i int, key string, want []byte, outcome Outcome) {
	t.Helper()
	got, o, err := g.read(t, i, key)
	if err != nil {
		t.Fatalf("cachelet %d read %s: %v", i, key, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("cachelet %d read %s: wrong bytes", i, key)
	}
	if o != outcome {
		t.Fatalf("cachelet %d read %s: outcome %s, want %s", i, key, o, outcome)
	}
}

func (g *group) put(t *testing.T, key string, data []byte) {
	t.Helper()
	if _, err := g.st.Put(t.Context(), testBucket, key, bytes.NewReader(data), int64(len(data)), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestFourWaysToRead: LM at the owner, RH and RM at a non-owner, LH after.
func TestFourWaysToRead(t *testing.T) {
	g := newGroup(t, 3)
	a, b := object("a", 1, 5000), object("b", 1, 5000)
	g.put(t, "a", a)
	g.put(t, "b", b)

	g.mustRead(t, 0, "a", a, LocalMiss)  // the owner reads the store
	g.mustRead(t, 1, "a", a, RemoteHit)  // the owner has it
	g.mustRead(t, 1, "a", a, LocalHit)   // and now so does cachelet 1
	g.mustRead(t, 2, "b", b, RemoteMiss) // neither has it: the owner reads the store
	g.mustRead(t, 0, "b", b, LocalHit)   // ... and kept it
	g.mustRead(t, 2, "b", b, LocalHit)
}

// TestRemoteReadsAreConfirmed: under the default read mode an object
// changed in the store behind every cachelet's back is never served stale,
// by the owner or by a non-owner.
func TestRemoteReadsAreConfirmed(t *testing.T) {
	g := newGroup(t, 2)
	v1, v2 := object("k", 1, 3000), object("k", 2, 3000)
	g.put(t, "k", v1)
	g.mustRead(t, 1, "k", v1, RemoteMiss)
	g.put(t, "k", v2)
	got, _, err := g.read(t, 1, "k")
	if err != nil || !bytes.Equal(got, v2) {
		t.Fatalf("non-owner after an overwrite in the store: %v, stale=%v", err, bytes.Equal(got, v1))
	}
	got, _, err = g.read(t, 0, "k")
	if err != nil || !bytes.Equal(got, v2) {
		t.Fatalf("owner after an overwrite in the store: %v", err)
	}
	if err := g.st.Delete(t.Context(), testBucket, "k"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := g.read(t, 1, "k"); !errors.Is(err, store.ErrNoSuchKey) {
		t.Fatalf("after a delete in the store: %v", err)
	}
}

// TestMetadataChangeDropsEveryCopy: a change passed through that may
// keep the object's ETag (a copy onto itself, tagging) drops the copies
// every member keeps, not only the owner's: validation by ETag would pass
// them with their old metadata.
func TestMetadataChangeDropsEveryCopy(t *testing.T) {
	g := newGroup(t, 3, func(c *Config) { c.Members = c.Router.(*staticRouter) })
	v := object("k", 1, 3000)
	g.put(t, "k", v)
	g.mustRead(t, 1, "k", v, RemoteMiss)
	g.mustRead(t, 1, "k", v, LocalHit)
	for _, kind := range []ChangeKind{ChangeOther, ChangeCopy} {
		if err := g.members[2].Change(t.Context(), testBucket, []string{"k"}, kind, func() error { return nil }); err != nil {
			t.Fatal(err)
		}
		if _, o, err := g.read(t, 1, "k"); err != nil || o == LocalHit {
			t.Fatalf("after a %s change elsewhere, cachelet 1 read its own copy (%s, %v)", kind, o, err)
		}
		g.mustRead(t, 1, "k", v, LocalHit)
	}
}

// TestOwnerDownFallsBackToTheStore: a miss whose owner cannot be reached
// is served from the store, and counted.
func TestOwnerDownFallsBackToTheStore(t *testing.T) {
	g := newGroup(t, 2)
	data := object("k", 1, 2000)
	g.put(t, "k", data)
	g.servers[0].Close()
	g.mustRead(t, 1, "k", data, LocalMiss)
	if n := toFloat64(g.members[1].m.peerFallbacks); n != 1 {
		t.Fatalf("fallbacks counted: %v", n)
	}
}

// TestMissingObjectThroughTheOwner: the owner's "no such key" (from the
// store) is the answer, not a reason to fall back.
func TestMissingObjectThroughTheOwner(t *testing.T) {
	g := newGroup(t, 2)
	if _, _, err := g.read(t, 1, "nope"); !errors.Is(err, store.ErrNoSuchKey) {
		t.Fatalf("missing key: %v", err)
	}
	if n := toFloat64(g.members[1].m.peerFallbacks); n != 0 {
		t.Fatalf("a missing key fell back to the store %v times", n)
	}
}

// TestOwnershipMoves: when the ring moves a key, the new owner fetches on
// demand and nobody serves stale bytes.
func TestOwnershipMoves(t *testing.T) {
	g := newGroup(t, 3)
	v1, v2 := object("k", 1, 4000), object("k", 2, 4000)
	g.put(t, "k", v1)
	g.mustRead(t, 2, "k", v1, RemoteMiss) // owner 0 and cachelet 2 hold v1
	g.put(t, "k", v2)                     // changed behind every back
	for _, r := range g.routers {
		r.set(g.addrs[1])
	}
	for i := range g.members {
		g.members[i].OwnershipChanged()
	}
	for i := range g.members {
		got, _, err := g.read(t, i, "k")
		if err != nil || !bytes.Equal(got, v2) {
			t.Fatalf("cachelet %d after the move: err %v, stale %v", i, err, bytes.Equal(got, v1))
		}
	}
}

// TestPeerGetConditional: a peer that holds the current version gets 304.
func TestPeerGetConditional(t *testing.T) {
	g := newGroup(t, 2)
	data := object("k", 1, 100)
	res, err := g.st.Put(t.Context(), testBucket, "k", bytes.NewReader(data), int64(len(data)), store.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.members[0].PeerGet(context.Background(), testBucket, "k", res.ETag); !errors.Is(err, store.ErrNotModified) {
		t.Fatalf("conditional PeerGet: %v", err)
	}
	obj, err := g.members[0].PeerGet(context.Background(), testBucket, "k", "other")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(obj.Body)
	obj.Body.Close()
	if !bytes.Equal(got, data) || obj.Outcome != peer.RemoteHit {
		t.Fatalf("PeerGet: %d bytes, outcome %s", len(got), obj.Outcome)
	}
	if _, err := g.members[0].PeerPut(context.Background(), testBucket, "k", strings.NewReader("x"), 1, store.PutOptions{}, "later"); !errors.Is(err, peer.ErrBadRequest) {
		t.Fatalf("unknown persistence: %v", err)
	}
}

// TestCounterTable6 is Faa$T's Table 6: five cachelets increment one
// counter object round-robin to 1,000 under each consistency setting. The
// strong settings lose no increment; the weak ones do, which shows they
// really skip what makes the strong ones strong.
func TestCounterTable6(t *testing.T) {
	const increments = 1000
	for _, s := range Consistencies() {
		t.Run(s.Name, func(t *testing.T) {
			g := newGroup(t, 5, s.Apply)
			ctx := t.Context()
			put := func(i, v int) {
				data := []byte(strconv.Itoa(v))
				if _, err := g.members[i].Put(ctx, testBucket, "counter", bytes.NewReader(data), int64(len(data)), store.PutOptions{}); err != nil {
					t.Fatalf("put via %d: %v", i, err)
				}
			}
			put(0, 0)
			for n := range increments {
				i := n % len(g.members)
				data, _, err := g.read(t, i, "counter")
				if err != nil {
					t.Fatalf("read via %d: %v", i, err)
				}
				v, err := strconv.Atoi(string(data))
				if err != nil {
					t.Fatalf("read via %d: %q", i, data)
				}
				put(i, v+1)
			}
			for _, c := range g.members {
				if err := c.Drain(ctx); err != nil {
					t.Fatal(err)
				}
			}
			body, _, _, err := g.st.Get(ctx, testBucket, "counter", store.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			data, _ := io.ReadAll(body)
			body.Close()
			final, _ := strconv.Atoi(string(data))
			lost := increments - final
			t.Logf("%-16s target=%-5s mode=%-5s read=%-13s lost increments: %d", s.Name, s.Target, s.Mode, s.Read, lost)
			switch s.Name {
			case "strong", "owner":
				if lost != 0 {
					t.Fatalf("a strong setting lost %d increments", lost)
				}
			case "owner-local-read", "local", "local-async":
				if lost == 0 {
					t.Fatalf("a setting that reads local copies lost nothing: it is not doing what it says")
				}
			}
		})
	}
}

// TestDeleteUnderOwnerSettings: a delete is a synchronization point. Writes
// queued anywhere for the key reach the store first, the owner drops its
// copy, and no cachelet serves the object afterwards, nor does a queued
// write bring it back.
func TestDeleteUnderOwnerSettings(t *testing.T) {
	for _, name := range []string{"owner", "owner-async"} {
		t.Run(name, func(t *testing.T) {
			s, _ := ParseConsistency(name)
			g := newGroup(t, 3, s.Apply)
			ctx := t.Context()
			data := object("k", 1, 1000)
			if _, err := g.members[1].Put(ctx, testBucket, "k", bytes.NewReader(data), int64(len(data)), store.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			if got, _, err := g.read(t, 2, "k"); err != nil || !bytes.Equal(got, data) {
				if name == "owner" {
					t.Fatalf("read after an owner-synchronous write: %v", err)
				}
			}
			if err := g.members[2].Delete(ctx, testBucket, "k"); err != nil {
				t.Fatal(err)
			}
			for _, c := range g.members {
				if err := c.Drain(ctx); err != nil {
					t.Fatal(err)
				}
			}
			for i := range g.members {
				if _, _, err := g.read(t, i, "k"); !errors.Is(err, store.ErrNoSuchKey) {
					t.Fatalf("cachelet %d after the delete: %v", i, err)
				}
			}
			if _, err := g.st.Stat(ctx, testBucket, "k"); !errors.Is(err, store.ErrNoSuchKey) {
				t.Fatalf("the store after the delete: %v", err)
			}
		})
	}
}

// TestNoOwnerKnownIsStrong: under the owner settings, a cachelet that
// knows no owner for a key (no ring yet, or its membership session was
// lost) neither holds writes back nor trusts its memory: the store is
// written synchronously and confirms reads.
func TestNoOwnerKnownIsStrong(t *testing.T) {
	s, _ := ParseConsistency("owner-async")
	g := newGroup(t, 2, s.Apply)
	for _, r := range g.routers {
		r.set("") // nobody owns anything
	}
	ctx := t.Context()
	v1 := object("k", 1, 500)
	if _, err := g.members[1].Put(ctx, testBucket, "k", bytes.NewReader(v1), int64(len(v1)), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.st.Stat(ctx, testBucket, "k"); err != nil {
		t.Fatalf("an owner-less write was not in the store when Put returned: %v", err)
	}
	v2 := object("k", 2, 500)
	g.put(t, "k", v2) // behind the cachelets' backs
	if got, _, err := g.read(t, 1, "k"); err != nil || !bytes.Equal(got, v2) {
		t.Fatalf("an owner-less read trusted memory: err %v, stale %v", err, bytes.Equal(got, v1))
	}
	// A write offered to a cachelet that does not own the key is refused,
	// so the writer falls back to the store instead of hiding it there.
	if _, err := g.members[0].PeerPut(ctx, testBucket, "k", bytes.NewReader(v1), int64(len(v1)), store.PutOptions{}, peer.PersistAsync); !errors.Is(err, peer.ErrNotOwner) {
		t.Fatalf("PeerPut to a non-owner: %v", err)
	}
}

// TestHandoffUnderOwner: the owner holds a write it could not persist yet
// (the store is down) when the ring moves the key to another cachelet. The
// new owner must not serve the store's older version: its handoff waits
// until the old owner's queue reached the store.
func TestHandoffUnderOwner(t *testing.T) {
	s, _ := ParseConsistency("owner")
	g := newGroup(t, 3, s.Apply)
	ctx := t.Context()
	v1, v2 := object("k", 1, 800), object("k", 2, 800)
	put := func(i int, v []byte) {
		t.Helper()
		if _, err := g.members[i].Put(ctx, testBucket, "k", bytes.NewReader(v), int64(len(v)), store.PutOptions{}); err != nil {
			t.Fatalf("put via %d: %v", i, err)
		}
	}
	put(2, v1)
	for _, c := range g.members {
		if err := c.Drain(ctx); err != nil {
			t.Fatal(err)
		}
	}
	g.st.SetDown(true)
	put(2, v2) // held by owner 0, queued for the store
	if got, _, err := g.read(t, 1, "k"); err != nil || !bytes.Equal(got, v2) {
		t.Fatalf("before the move: %v", err)
	}
	// Move the key to cachelet 1; the store comes back while the members
	// hand off.
	for _, r := range g.routers {
		r.set(g.addrs[1])
	}
	for _, c := range g.members {
		c.OwnershipChanged()
	}
	g.st.SetDown(false)
	for i := range g.members {
		got, _, err := g.read(t, i, "k")
		if err != nil || !bytes.Equal(got, v2) {
			t.Fatalf("cachelet %d after the move: err %v, stale %v", i, err, bytes.Equal(got, v1))
		}
	}
	// And a write during the new ownership lands with the new owner.
	v3 := object("k", 3, 800)
	put(0, v3)
	for i := range g.members {
		if got, _, err := g.read(t, i, "k"); err != nil || !bytes.Equal(got, v3) {
			t.Fatalf("cachelet %d after a write to the new owner: %v", i, err)
		}
	}
}

// TestHandoffDoomsAFillInFlight: under the owner settings a fill that
// began before a ring change (its bytes fetched before the old owners
// delivered their queued writes) is not kept when it ends after the
// handoff's clears: the next read fetches again instead of trusting it.
func TestHandoffDoomsAFillInFlight(t *testing.T) {
	s, _ := ParseConsistency("owner")
	g := newGroup(t, 3, s.Apply)
	for _, r := range g.routers {
		r.set(g.addrs[1])
	}
	v1 := object("k", 1, 100<<10)
	g.put(t, "k", v1)
	owner := g.members[1]
	hold := g.st.HoldBody(testBucket, "k", 30<<10)
	slow, err := owner.Get(t.Context(), testBucket, "k", nil)
	if err != nil {
		t.Fatal(err)
	}
	<-hold.Reached()
	for _, c := range g.members {
		c.OwnershipChanged() // the same owner; a handoff all the same
	}
	hold.Release()
	got, err := io.ReadAll(slow.Body)
	slow.Body.Close()
	if err != nil || !bytes.Equal(got, v1) {
		t.Fatalf("the reader of the doomed fill got %d bytes, %v; want v1 whole", len(got), err)
	}
	if err := owner.Drain(t.Context()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for owner.Stats().Reserved != 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if st := owner.Stats(); st.Objects != 0 || st.Reserved != 0 {
		t.Fatalf("stats %+v: the fill begun before the handoff was kept", st)
	}
	if n := toFloat64(owner.m.fills.WithLabelValues("doomed")); n != 1 {
		t.Errorf("fills{doomed} = %v, want 1", n)
	}
}
