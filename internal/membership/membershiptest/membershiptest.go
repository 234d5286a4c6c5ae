// Package membershiptest is the conformance suite every membership.Registry
// implementation must pass. A backend's test calls Run with a Harness that
// knows how to make leases run out in that backend.
package membershiptest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/membership"
)

// Harness is one backend under test, made fresh for every subtest.
type Harness struct {
	// Registry is the implementation under test.
	Registry membership.Registry
	// TTL is the lease time to live Registry gives its members.
	TTL time.Duration
	// Advance lets d of lease time pass: a fake clock moves, or the real
	// one is slept on.
	Advance func(d time.Duration)
	// Crash stops renewing s's lease without revoking it, as when the
	// member's process dies.
	Crash func(s membership.Session)
	// Expire makes s's lease end behind its back, as when the store revokes
	// it or loses contact for longer than the TTL.
	Expire func(s membership.Session)
	// Close, if set, closes Registry; the suite then checks that watches
	// end and Join and Watch fail with membership.ErrClosed.
	Close func()
	// Wait bounds how long the suite waits for an expected snapshot or
	// signal; past it the subtest fails. Default 10 s.
	Wait time.Duration
}

// Run runs the suite. newHarness is called once per subtest; it should
// register its own cleanup with t.Cleanup. Every subtest uses app names of
// its own, so harnesses may share one store.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	tests := []struct {
		name string
		f    func(t *testing.T, h *Harness, app func(string) string)
	}{
		{"EmptyApp", testEmptyApp},
		{"JoinLeaveInOrder", testJoinLeaveInOrder},
		{"JoinVisibleOnReturn", testJoinVisibleOnReturn},
		{"TwoWatchersAgree", testTwoWatchersAgree},
		{"AppsAreSeparate", testAppsAreSeparate},
		{"DuplicateID", testDuplicateID},
		{"CrashExpiresAfterTTL", testCrashExpiresAfterTTL},
		{"LeaseLostClosesDone", testLeaseLostClosesDone},
		{"CloseIdempotent", testCloseIdempotent},
		{"ConcurrentJoinsAndLeaves", testConcurrent},
		{"WatchCanceled", testWatchCanceled},
		{"InvalidNames", testInvalidNames},
		{"RegistryClosed", testRegistryClosed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			if h.Wait == 0 {
				h.Wait = 10 * time.Second
			}
			// App names unique to this subtest and run, so that subtests may
			// share a store and run in parallel with -count.
			prefix := fmt.Sprintf("%s-%d", strings.ToLower(tt.name), time.Now().UnixNano())
			tt.f(t, &h, func(s string) string { return prefix + "-" + s })
		})
	}
}

func member(app, id string) membership.Member {
	return membership.Member{
		ID:       id,
		App:      app,
		PeerAddr: "10.0.0.1:7000",
		S3Addr:   "10.0.0.1:9000",
		Meta:     map[string]string{"id": id},
	}
}

func join(t *testing.T, h *Harness, app, id string) membership.Session {
	t.Helper()
	s, err := h.Registry.Join(t.Context(), member(app, id))
	if err != nil {
		t.Fatalf("Join(%s/%s): %v", app, id, err)
	}
	return s
}

func leave(t *testing.T, s membership.Session) {
	t.Helper()
	if err := s.Close(t.Context()); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// watcher reads one Watch channel and checks what every snapshot must be.
type watcher struct {
	t    *testing.T
	h    *Harness
	app  string
	ch   <-chan membership.Snapshot
	last membership.Snapshot
	seen int
}

func watch(t *testing.T, h *Harness, ctx context.Context, app string) *watcher {
	t.Helper()
	ch, err := h.Registry.Watch(ctx, app)
	if err != nil {
		t.Fatalf("Watch(%s): %v", app, err)
	}
	return &watcher{t: t, h: h, app: app, ch: ch}
}

// next returns the next snapshot, checking its order against the previous.
func (w *watcher) next() membership.Snapshot {
	w.t.Helper()
	select {
	case s, ok := <-w.ch:
		if !ok {
			w.t.Fatalf("watch of %s closed unexpectedly", w.app)
		}
		w.check(s)
		return s
	case <-time.After(w.h.Wait):
		w.t.Fatalf("watch of %s: no snapshot in %v (last %v)", w.app, w.h.Wait, w.last.IDs())
	}
	panic("unreachable")
}

func (w *watcher) check(s membership.Snapshot) {
	w.t.Helper()
	if s.App != w.app {
		w.t.Errorf("snapshot App = %q, want %q", s.App, w.app)
	}
	if w.seen > 0 && s.Revision <= w.last.Revision {
		w.t.Errorf("snapshot revision %d after %d: not increasing", s.Revision, w.last.Revision)
	}
	if !slices.IsSortedFunc(s.Members, func(a, b membership.Member) int { return strings.Compare(a.ID, b.ID) }) {
		w.t.Errorf("snapshot members not sorted by ID: %v", s.IDs())
	}
	for _, m := range s.Members {
		if want := member(w.app, m.ID); !equal(m, want) {
			w.t.Errorf("member %+v, want %+v", m, want)
		}
	}
	w.last = s
	w.seen++
}

// until reads snapshots until one has exactly the given IDs, and returns it.
// Intermediate snapshots are allowed (they may be coalesced or not).
func (w *watcher) until(ids ...string) membership.Snapshot {
	w.t.Helper()
	if ids == nil {
		ids = []string{}
	}
	deadline := time.After(w.h.Wait)
	for {
		if w.seen > 0 && slices.Equal(w.last.IDs(), ids) {
			return w.last
		}
		select {
		case s, ok := <-w.ch:
			if !ok {
				w.t.Fatalf("watch of %s closed while waiting for %v", w.app, ids)
			}
			w.check(s)
		case <-deadline:
			w.t.Fatalf("watch of %s: members %v after %v, want %v", w.app, w.last.IDs(), w.h.Wait, ids)
		}
	}
}

// current returns the app's state as a fresh watch first reports it.
func current(t *testing.T, h *Harness, app string) []string {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	return watch(t, h, ctx, app).next().IDs()
}

func equal(a, b membership.Member) bool {
	return a.ID == b.ID && a.App == b.App && a.PeerAddr == b.PeerAddr && a.S3Addr == b.S3Addr && maps.Equal(a.Meta, b.Meta)
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func waitDone(t *testing.T, h *Harness, s membership.Session, why string) {
	t.Helper()
	select {
	case <-s.Done():
	case <-time.After(h.Wait):
		t.Fatalf("Done not closed %v after %s", h.Wait, why)
	}
}

func testEmptyApp(t *testing.T, h *Harness, app func(string) string) {
	s := watch(t, h, t.Context(), app("a")).next()
	if len(s.Members) != 0 {
		t.Fatalf("empty app: members %v", s.IDs())
	}
}

func testJoinLeaveInOrder(t *testing.T, h *Harness, app func(string) string) {
	a := app("a")
	w := watch(t, h, t.Context(), a)
	if got := w.next().IDs(); len(got) != 0 {
		t.Fatalf("first snapshot %v, want empty", got)
	}
	m1 := join(t, h, a, "m1")
	w.until("m1")
	m2 := join(t, h, a, "m2")
	w.until("m1", "m2")
	m0 := join(t, h, a, "m0")
	w.until("m0", "m1", "m2")
	leave(t, m1)
	w.until("m0", "m2")
	leave(t, m2)
	leave(t, m0)
	w.until()
	if !closed(m1.Done()) {
		t.Error("Done not closed after Close")
	}
}

func testJoinVisibleOnReturn(t *testing.T, h *Harness, app func(string) string) {
	a := app("a")
	s := join(t, h, a, "m1")
	if got := current(t, h, a); !slices.Equal(got, []string{"m1"}) {
		t.Fatalf("after Join returned, a new watch sees %v", got)
	}
	leave(t, s)
	if got := current(t, h, a); len(got) != 0 {
		t.Fatalf("after Close returned, a new watch sees %v", got)
	}
}

func testTwoWatchersAgree(t *testing.T, h *Harness, app func(string) string) {
	a := app("a")
	w1 := watch(t, h, t.Context(), a)
	w2 := watch(t, h, t.Context(), a)
	w1.next()
	w2.next()
	var live []membership.Session
	for i := range 5 {
		live = append(live, join(t, h, a, fmt.Sprintf("m%d", i)))
	}
	leave(t, live[1])
	leave(t, live[3])
	want := []string{"m0", "m2", "m4"}
	s1, s2 := w1.until(want...), w2.until(want...)
	if s1.Revision != s2.Revision {
		t.Errorf("watchers agree on members but not revision: %d vs %d", s1.Revision, s2.Revision)
	}
	// A watcher that starts now sees the same members.
	if got := current(t, h, a); !slices.Equal(got, want) {
		t.Errorf("late watcher sees %v, want %v", got, want)
	}
}

func testAppsAreSeparate(t *testing.T, h *Harness, app func(string) string) {
	// "x" is a prefix of "x1": key layouts must not let one see the other.
	x, x1 := app("x"), app("x1")
	wx := watch(t, h, t.Context(), x)
	wx.next()
	join(t, h, x1, "m1")
	join(t, h, x, "m1") // same ID in another app is fine
	join(t, h, x, "m2")
	wx.until("m1", "m2")
	if got := current(t, h, x1); !slices.Equal(got, []string{"m1"}) {
		t.Errorf("app %s sees %v, want [m1]", x1, got)
	}
}

func testDuplicateID(t *testing.T, h *Harness, app func(string) string) {
	a := app("a")
	s := join(t, h, a, "m1")
	m := member(a, "m1")
	m.PeerAddr = "10.0.0.2:7000"
	if _, err := h.Registry.Join(t.Context(), m); !errors.Is(err, membership.ErrDuplicateID) {
		t.Fatalf("second Join of a live ID: err = %v, want ErrDuplicateID", err)
	}
	// The refused join left the first member untouched.
	w := watch(t, h, t.Context(), a)
	if got := w.next(); len(got.Members) != 1 || got.Members[0].PeerAddr != "10.0.0.1:7000" {
		t.Fatalf("after refused join: %+v", got.Members)
	}
	leave(t, s)
	w.until()
	s2 := join(t, h, a, "m1")
	w.until("m1")
	leave(t, s2)
}

func testCrashExpiresAfterTTL(t *testing.T, h *Harness, app func(string) string) {
	a := app("a")
	w := watch(t, h, t.Context(), a)
	w.next()
	crashed := join(t, h, a, "m1")
	survivor := join(t, h, a, "m2")
	defer leave(t, survivor)
	w.until("m1", "m2")

	h.Crash(crashed)
	h.Advance(h.TTL / 4)
	if got := current(t, h, a); !slices.Equal(got, []string{"m1", "m2"}) {
		t.Fatalf("a quarter TTL after the crash: %v, want the crashed member still there", got)
	}
	if _, err := h.Registry.Join(t.Context(), member(a, "m1")); !errors.Is(err, membership.ErrDuplicateID) {
		t.Fatalf("Join of a crashed, unexpired ID: err = %v, want ErrDuplicateID", err)
	}
	h.Advance(h.TTL)
	w.until("m2")
	// Its ID is free again: the process restarted under the same name.
	again := join(t, h, a, "m1")
	w.until("m1", "m2")
	leave(t, again)
}

func testLeaseLostClosesDone(t *testing.T, h *Harness, app func(string) string) {
	a := app("a")
	w := watch(t, h, t.Context(), a)
	w.next()
	s := join(t, h, a, "m1")
	w.until("m1")
	if closed(s.Done()) {
		t.Fatal("Done closed while the lease is live")
	}
	h.Expire(s)
	waitDone(t, h, s, "the lease was lost")
	w.until()
	if err := s.Close(t.Context()); err != nil {
		t.Errorf("Close after the lease was lost: %v, want nil", err)
	}
}

func testCloseIdempotent(t *testing.T, h *Harness, app func(string) string) {
	a := app("a")
	s := join(t, h, a, "m1")
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = s.Close(t.Context()) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Close #%d: %v", i, err)
		}
	}
	if err := s.Close(t.Context()); err != nil {
		t.Errorf("Close again: %v", err)
	}
	waitDone(t, h, s, "Close")
	if got := current(t, h, a); len(got) != 0 {
		t.Errorf("after Close: %v", got)
	}
}

func testConcurrent(t *testing.T, h *Harness, app func(string) string) {
	const n = 24
	a := app("a")
	w := watch(t, h, t.Context(), a)
	w.next()

	var want []string
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		id := fmt.Sprintf("m%02d", i)
		stay := i%3 != 0
		if stay {
			want = append(want, id)
		}
		wg.Go(func() {
			s, err := h.Registry.Join(t.Context(), member(a, id))
			if err != nil {
				errs <- err
				return
			}
			if !stay {
				if err := s.Close(t.Context()); err != nil {
					errs <- err
				}
			}
		})
		// Watchers come and go while the members do.
		wg.Go(func() {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			ch, err := h.Registry.Watch(ctx, a)
			if err != nil {
				errs <- err
				return
			}
			<-ch
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	w.until(want...)
	if got := current(t, h, a); !slices.Equal(got, want) {
		t.Errorf("a new watch sees %v, want %v", got, want)
	}
}

func testWatchCanceled(t *testing.T, h *Harness, app func(string) string) {
	ctx, cancel := context.WithCancel(t.Context())
	w := watch(t, h, ctx, app("a"))
	w.next()
	cancel()
	deadline := time.After(h.Wait)
	for {
		select {
		case _, ok := <-w.ch:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatalf("watch channel still open %v after its context was canceled", h.Wait)
		}
	}
}

func testInvalidNames(t *testing.T, h *Harness, app func(string) string) {
	for _, m := range []membership.Member{
		{App: app("a"), ID: ""},
		{App: "", ID: "m1"},
		{App: app("a"), ID: "m/1"},
		{App: app("a/b"), ID: "m1"},
		{App: app("a"), ID: "m 1"},
		{App: app("a"), ID: "m\n1"},
		{App: app("a"), ID: strings.Repeat("m", membership.MaxNameLen+1)},
	} {
		if _, err := h.Registry.Join(t.Context(), m); !errors.Is(err, membership.ErrInvalid) {
			t.Errorf("Join(%q, %q): err = %v, want ErrInvalid", m.App, m.ID, err)
		}
	}
	if _, err := h.Registry.Watch(t.Context(), app("a/b")); !errors.Is(err, membership.ErrInvalid) {
		t.Errorf("Watch of an app with '/': err = %v, want ErrInvalid", err)
	}
}

func testRegistryClosed(t *testing.T, h *Harness, app func(string) string) {
	if h.Close == nil {
		return
	}
	a := app("a")
	s := join(t, h, a, "m1")
	w := watch(t, h, t.Context(), a)
	w.next()
	h.Close()
	waitDone(t, h, s, "the registry was closed")
	select {
	case _, ok := <-w.ch:
		for ok {
			_, ok = <-w.ch
		}
	case <-time.After(h.Wait):
		t.Fatal("watch still open after the registry was closed")
	}
	if _, err := h.Registry.Join(t.Context(), member(a, "m2")); !errors.Is(err, membership.ErrClosed) {
		t.Errorf("Join after Close: err = %v, want ErrClosed", err)
	}
	if _, err := h.Registry.Watch(t.Context(), a); !errors.Is(err, membership.ErrClosed) {
		t.Errorf("Watch after Close: err = %v, want ErrClosed", err)
	}
}
