package cachelet

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/peer"
	"github.com/hoard-io/hoard/internal/scaling"
	"github.com/hoard-io/hoard/internal/store"
)

// fakePlatform answers hints and records votes; onVote runs for each.
type fakePlatform struct {
	mu     sync.Mutex
	hints  Hints
	votes  []scaling.Vote
	onVote func()
}

func (p *fakePlatform) Hints(context.Context) (Hints, error) { return p.hints, nil }

func (p *fakePlatform) Vote(_ context.Context, v scaling.Vote) error {
	p.mu.Lock()
	p.votes = append(p.votes, v)
	p.mu.Unlock()
	if p.onVote != nil {
		p.onVote()
	}
	return nil
}

// splitGroup is a group of n cachelets with the bandwidth policy on and
// measured bandwidths seeded (the store at 50 MB/s, peers at 500 MB/s:
// Faa$T's shape), so plans do not depend on this machine's speed. Real
// measurement over shaped links is the platform test's and the
// benchmark's.
func splitGroup(t *testing.T, n int, pf Platform) *group {
	t.Helper()
	g := newGroup(t, n, func(c *Config) {
		c.Cache.Budget, c.Cache.MaxObjectSize = 256<<20, 128<<20
		c.Bandwidth = &BandwidthConfig{Platform: pf, PrefixBytes: 4 << 20}
	})
	for _, c := range g.members {
		for range 15 {
			c.split.storeBW.Add(50<<20, time.Second)
			c.split.peerBW.Add(500<<20, time.Second)
		}
		c.split.lastProbe = time.Now()
	}
	return g
}

func putRandom(t *testing.T, g *group, key string, n int) []byte {
	t.Helper()
	data := make([]byte, n)
	_, _ = rand.Read(data)
	if _, err := g.st.Put(t.Context(), testBucket, key, bytes.NewReader(data), int64(n), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	return data
}

func splitCounts(c *Cachelet) (split, alone, failed, self, peer, fallback, served float64) {
	s := c.split
	return toFloat64(s.fetches.WithLabelValues("split")), toFloat64(s.fetches.WithLabelValues("alone")),
		toFloat64(s.fetches.WithLabelValues("failed")), toFloat64(s.parts.WithLabelValues("self")),
		toFloat64(s.parts.WithLabelValues("peer")), toFloat64(s.parts.WithLabelValues("fallback")),
		toFloat64(s.served)
}

// TestSplitDownload: a 40 MiB miss at the owner is downloaded as four
// ranges, one by the owner and one by each peer, assembled in order; the
// peers keep no copy; a small object is never split.
func TestSplitDownload(t *testing.T) {
	g := splitGroup(t, 4, nil)
	data := putRandom(t, g, "big", 40<<20+333)
	got, outcome, err := g.read(t, 0, "big")
	if err != nil || !bytes.Equal(got, data) || outcome != LocalMiss {
		t.Fatalf("read: %d bytes, equal %v, %s, %v", len(got), bytes.Equal(got, data), outcome, err)
	}
	split, _, failed, self, peer, fallback, _ := splitCounts(g.members[0])
	if split != 1 || failed != 0 || self != 1 || peer != 3 || fallback != 0 {
		t.Fatalf("owner: split %v failed %v parts self %v peer %v fallback %v; want 1 0 1 3 0", split, failed, self, peer, fallback)
	}
	for i, c := range g.members[1:] {
		if _, _, _, _, _, _, served := splitCounts(c); served != 1 {
			t.Errorf("peer %d served %v ranges, want 1", i+1, served)
		}
		if c.cache.Peek(cache.Key{Bucket: testBucket, Object: "big"}) != nil {
			t.Errorf("peer %d kept a copy of a range it served", i+1)
		}
	}
	// Cached whole at the owner: the next read is a hit.
	if got, outcome, err := g.read(t, 0, "big"); err != nil || !bytes.Equal(got, data) || outcome != LocalHit {
		t.Fatalf("second read: equal %v, %s, %v", bytes.Equal(got, data), outcome, err)
	}
	// A reader elsewhere gets it from the owner, which splits nothing more.
	if got, outcome, err := g.read(t, 2, "big"); err != nil || !bytes.Equal(got, data) || outcome != RemoteHit {
		t.Fatalf("remote read: equal %v, %s, %v", bytes.Equal(got, data), outcome, err)
	}
	small := putRandom(t, g, "small", 1<<20)
	if got, _, err := g.read(t, 0, "small"); err != nil || !bytes.Equal(got, small) {
		t.Fatal("small object")
	}
	if split, alone, _, _, _, _, _ := splitCounts(g.members[0]); split != 1 || alone != 0 {
		t.Fatalf("after a small read: split %v alone %v; want 1 0", split, alone)
	}
}

// TestSplitScaleOut: with two members running and four allowed, the plan
// votes for two more at once, waits for them, and splits four ways.
func TestSplitScaleOut(t *testing.T) {
	pf := &fakePlatform{hints: Hints{LoadTime: 50 * time.Millisecond, MaxInstances: 4}}
	g := splitGroup(t, 4, pf)
	// Only the first two are members yet; the vote "starts" the others.
	for _, r := range g.routers {
		r.mu.Lock()
		r.all = g.addrs[:2]
		r.mu.Unlock()
	}
	pf.onVote = func() {
		go func() {
			for _, r := range g.routers {
				r.mu.Lock()
				r.all = g.addrs
				r.mu.Unlock()
			}
		}()
	}
	data := putRandom(t, g, "big", 64<<20)
	got, _, err := g.read(t, 0, "big")
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read: equal %v, %v", bytes.Equal(got, data), err)
	}
	pf.mu.Lock()
	votes := pf.votes
	pf.mu.Unlock()
	if len(votes) != 1 || votes[0].Delta != 2 || !votes[0].Urgent || votes[0].Policy != scaling.PolicyBandwidth {
		t.Fatalf("votes %+v, want one urgent bandwidth vote for +2", votes)
	}
	if split, _, _, self, peer, _, _ := splitCounts(g.members[0]); split != 1 || self != 1 || peer != 3 {
		t.Fatalf("split %v, parts self %v peer %v; want 1, 1, 3", split, self, peer)
	}
}

// TestSplitPeerDown: a peer that cannot serve its range costs time, not
// the download: the owner reads that range from the store itself.
func TestSplitPeerDown(t *testing.T) {
	g := splitGroup(t, 3, nil)
	g.servers[2].Close()
	data := putRandom(t, g, "big", 32<<20)
	got, _, err := g.read(t, 0, "big")
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read: equal %v, %v", bytes.Equal(got, data), err)
	}
	if split, _, failed, self, peer, fallback, _ := splitCounts(g.members[0]); split != 1 || failed != 0 || self != 1 || peer != 1 || fallback != 1 {
		t.Fatalf("split %v failed %v parts self %v peer %v fallback %v; want 1 0 1 1 1", split, failed, self, peer, fallback)
	}
}

// TestSplitObjectChanged: an object overwritten while its ranges are
// planned is never assembled from two versions: the ranges are refused
// (If-Match), the read fails, and the next read gets the new version.
func TestSplitObjectChanged(t *testing.T) {
	pf := &fakePlatform{hints: Hints{LoadTime: 10 * time.Millisecond, MaxInstances: 3}}
	g := splitGroup(t, 3, pf)
	for _, r := range g.routers {
		r.mu.Lock()
		r.all = g.addrs[:1]
		r.mu.Unlock()
	}
	putRandom(t, g, "big", 32<<20)
	var newer []byte
	pf.onVote = func() {
		// The object changes in the store while the new members start.
		newer = putRandom(t, g, "big", 32<<20)
		for _, r := range g.routers {
			r.mu.Lock()
			r.all = g.addrs
			r.mu.Unlock()
		}
	}
	obj, err := g.members[0].Get(t.Context(), testBucket, "big", nil)
	if err == nil {
		_, err = io.ReadAll(obj.Body)
		obj.Body.Close()
	}
	if !errors.Is(err, cache.ErrFillAborted) {
		t.Fatalf("read across a change: %v, want a failed fill", err)
	}
	// Readers see the abort at once; the fill counts it once every part
	// has returned.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		_, _, failed, _, _, _, _ := splitCounts(g.members[0])
		if failed == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("failed splits %v, want 1", failed)
		}
	}
	pf.onVote = nil
	got, _, err := g.read(t, 0, "big")
	if err != nil || !bytes.Equal(got, newer) {
		t.Fatalf("read after the change: equal to the new version %v, %v", bytes.Equal(got, newer), err)
	}
}

// flipFirstByte changes the first byte a peer server writes of each body,
// as an attacker on the path would, leaving headers and trailers as the
// server signed them.
type flipFirstByte struct {
	http.ResponseWriter
	flipped bool
}

func (f *flipFirstByte) Write(p []byte) (int, error) {
	if !f.flipped && len(p) > 0 {
		f.flipped = true
		q := bytes.Clone(p)
		q[0] ^= 0xff
		return f.ResponseWriter.Write(q)
	}
	return f.ResponseWriter.Write(p)
}

// TestSplitPeerRangeTampered: a range whose bytes were changed on the way
// fails its answer's MAC at its end; its bytes were never shown to
// readers, and the owner reads that range from the store: the object
// assembled is the store's.
func TestSplitPeerRangeTampered(t *testing.T) {
	g := splitGroup(t, 3, nil)
	addr := g.addrs[2]
	g.servers[2].Close()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s again: %v", addr, err)
	}
	auth, _ := peer.NewAuth("app", []byte("a-secret-of-at-least-16-bytes"), nil)
	inner := peer.NewServer(auth, g.members[2], nil)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inner.ServeHTTP(&flipFirstByte{ResponseWriter: w}, r)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	data := putRandom(t, g, "big", 32<<20)
	got, _, err := g.read(t, 0, "big")
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read: equal %v, %v", bytes.Equal(got, data), err)
	}
	if split, _, failed, self, peer, fallback, _ := splitCounts(g.members[0]); split != 1 || failed != 0 || self != 1 || peer != 1 || fallback != 1 {
		t.Fatalf("split %v failed %v parts self %v peer %v fallback %v; want 1 0 1 1 1", split, failed, self, peer, fallback)
	}
	g.mustRead(t, 0, "big", data, LocalHit)
}
