package etcdembed

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// syncBuffer is a bytes.Buffer that a slog handler and the test may share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
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

func TestStartPutGetRestart(t *testing.T) {
	dir := t.TempDir()
	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx := t.Context()

	start := time.Now()
	s, err := Start(ctx, Config{Dir: dir, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("started in %v at %v", time.Since(start), s.Endpoints())
	if eps := s.Endpoints(); len(eps) != 1 || strings.HasSuffix(eps[0], ":0") {
		t.Fatalf("Endpoints() = %v, want one URL with a real port", eps)
	}

	put := func(s *Server, v string) {
		t.Helper()
		c := client(t, s)
		if _, err := c.Put(ctx, "k", v); err != nil {
			t.Fatal(err)
		}
	}
	get := func(s *Server) string {
		t.Helper()
		c := client(t, s)
		r, err := c.Get(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Kvs) != 1 {
			t.Fatalf("get k: %d keys", len(r.Kvs))
		}
		return string(r.Kvs[0].Value)
	}
	put(s, "v1")
	if got := get(s); got != "v1" {
		t.Fatalf("get k = %q, want v1", got)
	}
	s.Close()
	s.Close() // idempotent

	// The data survives a restart from the same Dir.
	s2, err := Start(ctx, Config{Dir: dir, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if got := get(s2); got != "v1" {
		t.Fatalf("after restart get k = %q, want v1", got)
	}
	if strings.Contains(logs.String(), "level=INFO") {
		t.Errorf("etcd info logs reached the logger at the default level:\n%s", logs.String())
	}
}

func TestStartCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := Start(ctx, Config{Dir: t.TempDir()}); err == nil {
		t.Fatal("Start with a canceled context succeeded")
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{
		{},
		{Dir: "d", ClientAddr: "no-port"},
		{Dir: "d", CompactionRetention: -time.Second},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want an error", c)
		}
	}
	if err := (Config{Dir: "d"}).Validate(); err != nil {
		t.Errorf("Validate of a minimal config: %v", err)
	}
}

func client(t *testing.T, s *Server) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: s.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestLeaseTTLCap: no client may grant a lease longer than MaxLeaseTTL;
// one of that length or shorter is granted.
func TestLeaseTTLCap(t *testing.T) {
	ctx := t.Context()
	s, err := Start(ctx, Config{Dir: t.TempDir(), ClientAddr: "127.0.0.1:0", PeerAddr: "127.0.0.1:0", MaxLeaseTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	c := client(t, s)
	if _, err := c.Grant(ctx, 60); err != nil {
		t.Errorf("a lease of the cap (60 s): %v", err)
	}
	for _, ttl := range []int64{61, 9_000_000_000} {
		if l, err := c.Grant(ctx, ttl); err == nil || !strings.Contains(err.Error(), "cap of 60 s") {
			t.Errorf("a lease of %d s: %+v, %v; want it refused", ttl, l, err)
		}
	}
}
