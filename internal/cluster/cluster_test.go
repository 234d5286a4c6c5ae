package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hoard-io/hoard/internal/clock"
	"github.com/hoard-io/hoard/internal/membership"
	"github.com/hoard-io/hoard/internal/membership/memory"
	"github.com/hoard-io/hoard/internal/ring"
)

// changes records a member's OnChange calls.
type changes struct {
	mu    sync.Mutex
	calls [][2]*ring.Ring
}

func (c *changes) record(old, new *ring.Ring) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, [2]*ring.Ring{old, new})
}

func (c *changes) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.calls)
}

func (c *changes) last() [2]*ring.Ring {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[len(c.calls)-1]
}

// fixture is one memory registry with members of app "app".
type fixture struct {
	t       *testing.T
	clock   *clock.Fake
	reg     *memory.Registry
	members map[string]*Member
	changes map[string]*changes
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	clock := clock.NewFake(time.Unix(0, 0))
	reg, err := memory.New(memory.Config{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	return &fixture{t: t, clock: clock, reg: reg, members: map[string]*Member{}, changes: map[string]*changes{}}
}

func (f *fixture) join(id string) *Member {
	f.t.Helper()
	ch := &changes{}
	m, err := Join(f.t.Context(), Config{
		App: "app", ID: id, PeerAddr: id + ":7000", S3Addr: id + ":9000",
		Registry: f.reg, OnChange: ch.record,
	})
	if err != nil {
		f.t.Fatalf("join %s: %v", id, err)
	}
	f.t.Cleanup(func() { _ = m.Close(context.Background()) })
	f.members[id], f.changes[id] = m, ch
	return m
}

// ringIDs returns each named member's current ring members.
func (f *fixture) wantRings(want []string, ids ...string) {
	f.t.Helper()
	for _, id := range ids {
		if got := f.members[id].Ring().Members(); !slices.Equal(got, want) {
			f.t.Errorf("%s's ring = %v, want %v", id, got, want)
		}
	}
}

func TestMembersConvergeOnOneRing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		a := f.join("a")
		if got := a.Ring().Members(); !slices.Equal(got, []string{"a"}) {
			t.Fatalf("right after Join, ring = %v, want [a]", got)
		}
		f.join("b")
		f.join("c")
		synctest.Wait()
		f.wantRings([]string{"a", "b", "c"}, "a", "b", "c")

		for _, id := range []string{"a", "b", "c"} {
			ms := f.members[id].Members()
			if len(ms) != 3 {
				t.Fatalf("%s: %d members, want 3", id, len(ms))
			}
			for _, mem := range ms {
				if mem.PeerAddr != mem.ID+":7000" || mem.S3Addr != mem.ID+":9000" || mem.App != "app" {
					t.Errorf("%s sees member %+v", id, mem)
				}
			}
		}
	})
}

func TestOwnerAgreesAcrossMembers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		ids := []string{"a", "b", "c"}
		for _, id := range ids {
			f.join(id)
		}
		synctest.Wait()
		owned := map[string]int{}
		for i := range 3000 {
			key := fmt.Sprintf("k%d", i)
			var addrs []string
			selves := 0
			for _, id := range ids {
				addr, self := f.members[id].Owner("bkt", key)
				addrs = append(addrs, addr)
				if self {
					selves++
					if addr != id+":7000" {
						t.Fatalf("%s owns %s at %q, want its own address", id, key, addr)
					}
				}
			}
			if addrs[0] != addrs[1] || addrs[1] != addrs[2] || addrs[0] == "" {
				t.Fatalf("key %s: owners %v disagree", key, addrs)
			}
			if selves != 1 {
				t.Fatalf("key %s: %d members claim it, want 1", key, selves)
			}
			owned[addrs[0]]++
		}
		for _, id := range ids {
			if owned[id+":7000"] < 500 {
				t.Errorf("%s owns %d of 3000 keys; the ring is badly unbalanced", id, owned[id+":7000"])
			}
		}
	})
}

func TestLeaveAndCrashRemoveMember(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		for _, id := range []string{"a", "b", "c", "d"} {
			f.join(id)
		}
		synctest.Wait()

		if err := f.members["d"].Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := f.members["d"].Close(t.Context()); err != nil { // idempotent
			t.Fatal(err)
		}
		synctest.Wait()
		f.wantRings([]string{"a", "b", "c"}, "a", "b", "c")

		f.reg.Crash(f.members["c"].session())
		synctest.Wait()
		f.wantRings([]string{"a", "b", "c"}, "a", "b") // the lease still runs
		f.clock.Advance(f.reg.TTL())
		synctest.Wait()
		f.wantRings([]string{"a", "b"}, "a", "b")
		for i := range 500 {
			key := fmt.Sprintf("k%d", i)
			if addr, _ := f.members["a"].Owner("bkt", key); addr == "c:7000" || addr == "d:7000" {
				t.Fatalf("key %s still routed to departed member %s", key, addr)
			}
		}
	})
}

// partitioned is a Registry whose watches can be cut off, as when a member
// loses its connection to etcd: its lease runs out and no snapshot arrives.
type partitioned struct {
	membership.Registry
	cut chan struct{} // closed: watches deliver nothing more
}

func (p *partitioned) Watch(ctx context.Context, app string) (<-chan membership.Snapshot, error) {
	in, err := p.Registry.Watch(ctx, app)
	if err != nil {
		return nil, err
	}
	out := make(chan membership.Snapshot)
	go func() {
		defer close(out)
		for s := range in {
			select {
			case <-p.cut:
				continue
			default:
			}
			select {
			case out <- s:
			case <-p.cut:
			}
		}
	}()
	return out, nil
}

func TestLostSessionClaimsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		b := f.join("b")
		part := &partitioned{Registry: f.reg, cut: make(chan struct{})}
		ch := &changes{}
		a, err := Join(t.Context(), Config{App: "app", ID: "a", PeerAddr: "a:7000", Registry: part, OnChange: ch.record})
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close(context.Background())
		synctest.Wait()
		var mine []string
		for i := range 200 {
			key := fmt.Sprintf("k%d", i)
			if _, self := a.Owner("bkt", key); self {
				mine = append(mine, key)
			}
		}
		if len(mine) == 0 {
			t.Fatal("a owns none of 200 keys")
		}
		before := ch.len()

		// a is cut off: its lease expires and it hears of no change.
		close(part.cut)
		f.reg.Expire(a.session())
		synctest.Wait()
		if !a.Lost() {
			t.Fatal("Lost() = false after the lease expired")
		}
		if got := a.Ring().Members(); !slices.Equal(got, []string{"a", "b"}) {
			t.Fatalf("a's ring = %v; the cut-off member should keep its last ring", got)
		}
		for _, key := range mine {
			if addr, self := a.Owner("bkt", key); self || addr != "" {
				t.Fatalf("after losing its session, a answers (%q, %v) for its key %s, want (\"\", false)", addr, self, key)
			}
		}
		for i := range 200 {
			key := fmt.Sprintf("k%d", i)
			if addr, self := a.Owner("bkt", key); self || (addr != "" && addr != "b:7000") {
				t.Fatalf("a answers (%q, %v) for %s", addr, self, key)
			}
		}
		if got := ch.len(); got != before+1 {
			t.Errorf("OnChange calls went from %d to %d when the session was lost, want one more", before, got)
		}
		f.wantRings([]string{"b"}, "b")
		if _, self := b.Owner("bkt", mine[0]); !self {
			t.Errorf("b does not own %s after a's lease expired", mine[0])
		}
	})
}

func TestExpiredMemberRoutesToOthers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		a := f.join("a")
		f.join("b")
		synctest.Wait()
		f.reg.Expire(a.session()) // still connected: it sees itself removed
		synctest.Wait()
		f.wantRings([]string{"b"}, "a", "b")
		for i := range 200 {
			if addr, self := a.Owner("bkt", fmt.Sprintf("k%d", i)); self || addr != "b:7000" {
				t.Fatalf("a answers (%q, %v), want (b:7000, false)", addr, self)
			}
		}
	})
}

func TestOnChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		a := f.join("a")
		if n := f.changes["a"].len(); n != 1 {
			t.Fatalf("after Join: %d OnChange calls, want 1", n)
		}
		if c := f.changes["a"].last(); c[0] != nil || c[1] != a.Ring() {
			t.Errorf("first OnChange(%p, %p), want (nil, current ring %p)", c[0], c[1], a.Ring())
		}
		first := a.Ring()
		f.join("b")
		synctest.Wait()
		if n := f.changes["a"].len(); n != 2 {
			t.Fatalf("after b joined: %d OnChange calls, want 2", n)
		}
		if c := f.changes["a"].last(); c[0] != first || c[1] != a.Ring() || !slices.Equal(c[1].Members(), []string{"a", "b"}) {
			t.Errorf("OnChange after b joined got rings %v -> %v", c[0].Members(), c[1].Members())
		}
	})
}

func TestJoinErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		f.join("a")
		_, err := Join(t.Context(), Config{App: "app", ID: "a", PeerAddr: "x:1", Registry: f.reg})
		if !errors.Is(err, membership.ErrDuplicateID) {
			t.Errorf("duplicate join: %v, want ErrDuplicateID", err)
		}
		for _, cfg := range []Config{
			{ID: "a", PeerAddr: "x:1", Registry: f.reg},
			{App: "app", PeerAddr: "x:1", Registry: f.reg},
			{App: "app", ID: "z", Registry: f.reg},
			{App: "app", ID: "z", PeerAddr: "x:1"},
		} {
			if _, err := Join(t.Context(), cfg); err == nil {
				t.Errorf("Join(%+v) succeeded", cfg)
			}
		}
	})
}

// TestRejoinAfterLostSession: a member whose lease was lost (while it
// stayed connected) registers again after a backoff and owns keys again.
func TestRejoinAfterLostSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		a := f.join("a")
		f.join("b")
		synctest.Wait()
		f.reg.Expire(a.session())
		synctest.Wait()
		if !a.Lost() {
			t.Fatal("Lost() = false right after the lease expired")
		}
		time.Sleep(rejoinMinBackoff) // fake time: the first rejoin attempt
		synctest.Wait()
		if a.Lost() {
			t.Fatal("still lost after the rejoin backoff")
		}
		f.wantRings([]string{"a", "b"}, "a", "b")
		owned := 0
		for i := range 200 {
			if _, self := a.Owner("bkt", fmt.Sprintf("k%d", i)); self {
				owned++
			}
		}
		if owned == 0 {
			t.Fatal("a owns no key after rejoining")
		}
	})
}
