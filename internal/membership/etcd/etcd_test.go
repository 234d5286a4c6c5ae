package etcd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/etcdembed"
	"github.com/hoard-io/hoard/internal/membership"
	"github.com/hoard-io/hoard/internal/membership/membershiptest"
	"github.com/hoard-io/hoard/internal/testaddr"
)

// testTTL is the shortest lease etcd grants with its default election
// timeout, so that expiry tests stay short.
const testTTL = 2 * time.Second

// endpoints of the embedded etcd shared by the tests that do not stop it.
var endpoints []string

func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "hoard-membership-etcd-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		s, err := etcdembed.Start(context.Background(), etcdembed.Config{Dir: dir})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer s.Close()
		endpoints = s.Endpoints()
		return m.Run()
	}())
}

func newRegistry(t *testing.T, eps []string) *Registry {
	t.Helper()
	r, err := New(Config{Endpoints: eps, TTL: testTTL, Prefix: "/test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func TestConformance(t *testing.T) {
	membershiptest.Run(t, func(t *testing.T) membershiptest.Harness {
		r := newRegistry(t, endpoints)
		return membershiptest.Harness{
			Registry: r,
			TTL:      r.TTL(),
			// Leases are real: let real time pass.
			Advance: time.Sleep,
			Crash:   func(s membership.Session) { s.(*session).abandon() },
			Expire: func(s membership.Session) {
				if _, err := r.c.Revoke(t.Context(), s.(*session).lease); err != nil {
					t.Fatalf("revoke behind the session's back: %v", err)
				}
			},
			Close: func() { r.Close() },
		}
	})
}

// TestWatchRelistsAfterCompaction resumes a watcher from a revision etcd has
// compacted away: it must re-list and still reach the current state.
func TestWatchRelistsAfterCompaction(t *testing.T) {
	var logs syncBuffer
	r, err := New(Config{Endpoints: endpoints, TTL: testTTL, Prefix: "/test", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx := t.Context()
	m1, err := r.Join(ctx, membership.Member{App: "compact", ID: "m1"})
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan membership.Snapshot)
	w := &watcher{r: r, app: "compact", prefix: r.appPrefix("compact"), out: out}
	if err := w.list(ctx); err != nil {
		t.Fatal(err)
	}
	// Changes the watcher has not seen, then their history compacted away.
	if _, err := r.Join(ctx, membership.Member{App: "compact", ID: "m2"}); err != nil {
		t.Fatal(err)
	}
	if err := m1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	resp, err := r.c.Get(ctx, "any")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.c.Compact(ctx, resp.Header.Revision); err != nil {
		t.Fatal(err)
	}

	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); w.run(wctx) }()
	defer func() { cancel(); <-done }()
	waitIDs(t, out, "m2")
	if !strings.Contains(logs.String(), "compacted") {
		t.Errorf("the watcher reached the state without noticing the compaction; logs:\n%s", logs.String())
	}
}

// syncBuffer is a bytes.Buffer that a slog handler and the test may share.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func TestJoinUnreachable(t *testing.T) {
	addr := testaddr.Refused(t)
	r := newRegistry(t, []string{"http://" + addr})
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	if _, err := r.Join(ctx, membership.Member{App: "a", ID: "m1"}); err == nil {
		t.Fatal("Join with etcd unreachable succeeded")
	}
	if _, err := r.Watch(ctx, "a"); err == nil {
		t.Fatal("Watch with etcd unreachable succeeded")
	}
}

func TestMalformedValueIgnored(t *testing.T) {
	r := newRegistry(t, endpoints)
	ctx := t.Context()
	if _, err := r.c.Put(ctx, r.appPrefix("bad")+"junk", "{not json"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Join(ctx, membership.Member{App: "bad", ID: "m1"}); err != nil {
		t.Fatal(err)
	}
	snaps, err := r.Watch(ctx, "bad")
	if err != nil {
		t.Fatal(err)
	}
	waitIDs(t, snaps, "m1")
}

func TestConfig(t *testing.T) {
	for _, c := range []Config{
		{},
		{Endpoints: []string{"x"}, TTL: -time.Second},
		{Endpoints: []string{"x"}, Prefix: "hoard"},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want an error", c)
		}
	}
	r, err := New(Config{Endpoints: endpoints, TTL: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.TTL() != 2*time.Second {
		t.Errorf("TTL() = %v, want 1.5 s rounded up to 2 s", r.TTL())
	}
	if got, want := r.appPrefix("a"), "/hoard/apps/a/members/"; got != want {
		t.Errorf("appPrefix = %q, want %q", got, want)
	}
	if _, err := r.Join(t.Context(), membership.Member{App: "a", ID: "m/1"}); !errors.Is(err, membership.ErrInvalid) {
		t.Errorf("Join of a bad ID: %v", err)
	}
}

// waitIDs reads snapshots until one has exactly ids.
func waitIDs(t *testing.T, ch <-chan membership.Snapshot, ids ...string) {
	t.Helper()
	if ids == nil {
		ids = []string{}
	}
	deadline := time.After(15 * time.Second)
	var last []string
	for {
		select {
		case s, ok := <-ch:
			if !ok {
				t.Fatalf("watch closed while waiting for %v", ids)
			}
			if last = s.IDs(); slices.Equal(last, ids) {
				return
			}
		case <-deadline:
			t.Fatalf("members %v, want %v", last, ids)
		}
	}
}
