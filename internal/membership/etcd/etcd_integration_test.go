//go:build integration

package etcd

import (
	"net/url"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/etcdembed"
	"github.com/hoard-io/hoard/internal/membership"
)

// TestServerLost stops etcd under a member and a watcher: the member's Done
// fires within about a TTL, the watch stays open, and once etcd is back (on
// the same address) the watch resumes: the lost member's lease expires and a
// new member shows up.
func TestServerLost(t *testing.T) {
	dir := t.TempDir()
	s, err := etcdembed.Start(t.Context(), etcdembed.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	u, err := url.Parse(s.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}
	r := newRegistry(t, s.Endpoints())
	m1, err := r.Join(t.Context(), membership.Member{App: "a", ID: "m1"})
	if err != nil {
		t.Fatal(err)
	}
	snaps, err := r.Watch(t.Context(), "a")
	if err != nil {
		t.Fatal(err)
	}
	waitIDs(t, snaps, "m1")

	start := time.Now()
	s.Close()
	select {
	case <-m1.Done():
		t.Logf("Done %v after etcd stopped", time.Since(start).Round(time.Millisecond))
	case <-time.After(testTTL + 10*time.Second): // generous: the suite shares two CPUs with other packages
		t.Fatal("Done not closed after etcd stopped")
	}
	select {
	case snap, ok := <-snaps:
		if ok {
			t.Fatalf("snapshot %v while etcd is down", snap.IDs())
		}
		t.Fatal("watch closed while etcd is down")
	default:
	}

	s, err = etcdembed.Start(t.Context(), etcdembed.Config{Dir: dir, ClientAddr: u.Host})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("etcd back %v after it stopped", time.Since(start).Round(time.Millisecond))
	// m1's lease did not survive: etcd expires it a TTL after restart at the
	// latest, as nobody renews it.
	waitIDs(t, snaps)
	t.Logf("m1 expired %v after etcd stopped", time.Since(start).Round(time.Millisecond))
	if _, err := r.Join(t.Context(), membership.Member{App: "a", ID: "m2"}); err != nil {
		t.Fatal(err)
	}
	waitIDs(t, snaps, "m2")
	if err := m1.Close(t.Context()); err != nil {
		t.Errorf("Close of a lost session: %v", err)
	}
}
