package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/cacheconfig"
	"github.com/hoard-io/hoard/internal/cachelet"
	"github.com/hoard-io/hoard/internal/control"
	"github.com/hoard-io/hoard/internal/etcdembed"
	"github.com/hoard-io/hoard/internal/instance"
	"github.com/hoard-io/hoard/internal/notify"
	"github.com/hoard-io/hoard/internal/s3api"
	"github.com/hoard-io/hoard/internal/s3auth"
	"github.com/hoard-io/hoard/internal/store"
	"github.com/hoard-io/hoard/internal/store/memstore"
	s3store "github.com/hoard-io/hoard/internal/store/s3"
)

type oneCred struct{ ak, sk string }

func (c oneCred) Secret(ak string) (string, bool) { return c.sk, ak == c.ak }

// memStore serves an in-memory store holding one bucket over S3, for a
// cachelet to front without a store process.
func memStore(t *testing.T, bucket string) string {
	t.Helper()
	st := memstore.New()
	if err := st.CreateBucket(t.Context(), bucket, ""); err != nil {
		t.Fatal(err)
	}
	cl, err := cachelet.New(cachelet.Config{Cache: cache.Config{Budget: 1 << 20}}, st, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ver, err := s3auth.New(s3auth.Config{Region: "us-east-1"}, oneCred{"sak", "ssk"})
	if err != nil {
		t.Fatal(err)
	}
	api, err := s3api.New(s3api.Config{Region: "us-east-1"}, cl, ver, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(func() { srv.Close(); cl.Close() })
	return srv.URL
}

// serving runs `hoard serve args...` until the test ends, and returns what
// its ready file says once it appears.
func serving(t *testing.T, args ...string) (control.Ready, string) {
	t.Helper()
	keepMemoryLimit(t)
	ready := filepath.Join(t.TempDir(), "ready.json")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var stderr bytes.Buffer
	go func() {
		done <- runServe(ctx, append(args, "--ready-file", ready, "--log-level", "warn"), io.Discard, &stderr)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("hoard serve: %v", err)
		}
		if _, err := os.Stat(ready); !os.IsNotExist(err) {
			t.Errorf("the ready file outlived the cachelet: %v", err)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-done:
			t.Fatalf("hoard serve ended before it was ready: %v\n%s", err, stderr.String())
		default:
		}
		if data, err := os.ReadFile(ready); err == nil {
			var info control.Ready
			if err := json.Unmarshal(data, &info); err != nil {
				t.Fatalf("ready file %q: %v", data, err)
			}
			return info, ready
		}
		if time.Now().After(deadline) {
			t.Fatal("no ready file after 30 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func baseServeArgs(t *testing.T, bucket string) []string {
	return []string{"--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--peer-listen", "127.0.0.1:0",
		"--access-key", "ak", "--secret-key", "sk", "--budget", "16MiB",
		"--store-endpoint", memStore(t, bucket), "--store-access-key", "sak", "--store-secret-key", "ssk"}
}

// On its own, a cachelet's ready file says where it serves (no peer
// address), its /stats answers, and a PUT through it is notified.
func TestServeReadyFileAndTriggers(t *testing.T) {
	var mu sync.Mutex
	var msgs []notify.Message
	var auth []string
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m notify.Message
		_ = json.NewDecoder(r.Body).Decode(&m)
		mu.Lock()
		msgs, auth = append(msgs, m), append(auth, r.Header.Get("Authorization"))
		mu.Unlock()
	}))
	defer sink.Close()
	t.Setenv("HOARD_NOTIFY_TOKEN", "from-env")

	info, ready := serving(t, append(baseServeArgs(t, "bkt"), "--app", "thumbs", "--id", "thumbs-1", "--notify-url", sink.URL)...)
	if info.ID != "thumbs-1" || info.App != "thumbs" || info.PeerAddr != "" || info.PID != os.Getpid() ||
		!strings.HasPrefix(info.Endpoint, "http://127.0.0.1:") || !strings.HasPrefix(info.MetricsURL, "http://127.0.0.1:") ||
		!strings.HasSuffix(info.MetricsURL, "/metrics") {
		t.Fatalf("ready file: %+v", info)
	}
	if fi, err := os.Stat(ready); err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("ready file mode: %v, %v", fi.Mode(), err)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(ready), ".ready.json.*")); len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}

	client, err := s3store.New(s3store.Config{Endpoint: info.Endpoint, AccessKey: "ak", SecretKey: "sk", Region: "us-east-1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	res, err := client.Put(t.Context(), "bkt", "in/x.txt", strings.NewReader("hello"), 5, store.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}

	resp, err := http.Get(strings.TrimSuffix(info.MetricsURL, "/metrics") + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	var stats cachelet.Counters
	err = json.NewDecoder(resp.Body).Decode(&stats)
	resp.Body.Close()
	if err != nil || stats.Writes != 1 || stats.CacheObjects != 1 || stats.BudgetBytes != 16<<20 {
		t.Fatalf("/stats: %+v, %v", stats, err)
	}

	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(msgs)
		mu.Unlock()
		if n > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(msgs) != 1 || len(msgs[0].Records) != 1 {
		t.Fatalf("%d events, want 1", len(msgs))
	}
	o := msgs[0].Records[0].S3.Object
	if o.Key != "in/x.txt" || o.Size != 5 || o.ETag != res.ETag || msgs[0].Hoard.Cachelet != "thumbs-1" || auth[0] != "Bearer from-env" {
		t.Fatalf("event %+v from %+v, authorization %q; the client got ETag %s", o, msgs[0].Hoard, auth[0], res.ETag)
	}
}

// In an application (etcd), the ready file appears once the ring is
// joined, with the peer address.
func TestServeReadyFileInAnApplication(t *testing.T) {
	etcd, err := etcdembed.Start(t.Context(), etcdembed.Config{Dir: t.TempDir(), ClientAddr: "127.0.0.1:0", PeerAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(etcd.Close) // after the cachelet left: cleanups run last first
	const secret = "the-application-secret"
	info, _ := serving(t, append(baseServeArgs(t, "bkt"), "--app", "pipes", "--id", "pipes-1",
		"--etcd-endpoints", strings.Join(etcd.Endpoints(), ","), "--peer-secret", secret)...)
	if info.ID != "pipes-1" || info.App != "pipes" || !strings.HasPrefix(info.PeerAddr, "127.0.0.1:") {
		t.Fatalf("ready file: %+v", info)
	}

	client, err := s3store.New(s3store.Config{Endpoint: info.Endpoint, AccessKey: "ak", SecretKey: "sk", Region: "us-east-1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	for _, k := range []string{"tmp/run-1/a", "tmp/run-1/b", "out/c"} {
		if _, err := client.Put(t.Context(), "bkt", k, strings.NewReader("data"), 4, store.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// Started as the node agent starts it — one configuration document, no
// other flag, no environment — a cachelet joins its application and
// serves the control API on the document's socket, to the document's
// token only; a flag beside the document overrides it.
func TestServeConfigDocument(t *testing.T) {
	etcd, err := etcdembed.Start(t.Context(), etcdembed.Config{Dir: t.TempDir(), ClientAddr: "127.0.0.1:0", PeerAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(etcd.Close)
	t.Setenv("HOARD_SECRET_KEY", "not-this-one") // not read with --document
	keepMemoryLimit(t)
	debug.SetMemoryLimit(math.MaxInt64)
	dir, err := os.MkdirTemp("", "serve")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ep := control.Endpoint{Socket: filepath.Join(dir, "control.sock"), Token: control.NewToken()}
	doc := &control.Document{
		Version: control.DocumentVersion, App: "pipes", ID: "pipes-1",
		Listen: "127.0.0.1:0", MetricsListen: "127.0.0.1:0", PeerListen: "127.0.0.1:0",
		EtcdEndpoints: etcd.Endpoints(), AccessKey: "ak", SecretKey: "sk", PeerSecret: "the-application-secret",
		Store: control.Store{Endpoint: memStore(t, "bkt"), AccessKey: "sak", SecretKey: "ssk"},
		Cache: cacheconfig.Settings{Consistency: "owner", Eviction: cacheconfig.PolicySizeAware, Budget: 16 << 20,
			Migrate: cacheconfig.Migrate{MaxObjects: 8, Timeout: cacheconfig.Duration(5 * time.Second)}},
		Control: ep, LogLevel: "warn",
	}
	docPath := filepath.Join(dir, "cachelet.json")
	if err := control.WriteDocument(docPath, doc); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var stderr bytes.Buffer
	go func() {
		done <- runServe(ctx, []string{"--document", docPath, "--budget", "8MiB", "--migrate-max-bytes", "4MiB"}, io.Discard, &stderr)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("hoard serve: %v", err)
		}
	})
	c := control.NewClient(ep)
	defer c.Close()
	var ready control.Ready
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if ready, err = c.Ready(t.Context()); err == nil {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("hoard serve ended before it was ready: %v\n%s", err, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready after 30 s: %v", err)
		}
	}
	if ready.ID != "pipes-1" || ready.App != "pipes" || !strings.HasPrefix(ready.PeerAddr, "127.0.0.1:") {
		t.Fatalf("ready: %+v", ready)
	}
	client, err := s3store.New(s3store.Config{Endpoint: ready.Endpoint, AccessKey: "ak", SecretKey: "sk", Region: "us-east-1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	for _, k := range []string{"tmp/run-1/a", "tmp/run-1/b", "out/c"} {
		if _, err := client.Put(t.Context(), "bkt", k, strings.NewReader("data"), 4, store.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if cs, err := c.Config(t.Context()); err != nil || cs.Consistency != "owner" || cs.Eviction != cacheconfig.PolicySizeAware || cs.Budget != 8<<20 ||
		cs.MemoryLimitOverhead != cacheconfig.DefaultMemoryOverhead {
		t.Fatalf("config %+v, %v; want the document's, the flag's budget, the default memory overhead", cs, err)
	}
	// Migration: the document's bounds, the flag's bytes, the defaults
	// (reported as zero) for the rest.
	if cs, _ := c.Config(t.Context()); cs.Migrate != (cacheconfig.Migrate{MaxObjects: 8, MaxBytes: 4 << 20, Timeout: cacheconfig.Duration(5 * time.Second)}) {
		t.Fatalf("migrate %+v: want the document's 8 objects and 5s, the flag's 4 MiB, the default hot thresholds", cs.Migrate)
	}
	// The Go runtime's limit follows the budget by default.
	if got := debug.SetMemoryLimit(-1); got <= 8<<20 || got > 8<<20+cacheconfig.DefaultMemoryOverhead {
		t.Fatalf("memory limit %d, want the 8 MiB budget plus at most %d", got, cacheconfig.DefaultMemoryOverhead)
	}
	s, err := c.Stats(t.Context())
	if err != nil || s.BudgetBytes != 8<<20 || s.Writes != 3 {
		t.Fatalf("stats %+v, %v; want the flag's budget, 3 writes", s, err)
	}
	// Under "owner" a write is the key's truth here until the store has
	// it, and a drop keeps it: the two objects drop once persisted.
	dropped := 0
	for deadline := time.Now().Add(10 * time.Second); dropped < 2 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		n, err := c.Drop(t.Context(), "bkt", "tmp/run-1/")
		if err != nil {
			t.Fatal(err)
		}
		dropped += n
	}
	if dropped != 2 {
		t.Fatalf("dropped %d objects, want 2", dropped)
	}
	if _, err := control.NewClient(control.Endpoint{Socket: ep.Socket, Token: control.NewToken()}).Drop(t.Context(), "bkt", ""); !errors.Is(err, control.ErrUnauthorized) {
		t.Fatalf("another token: %v", err)
	}
	// A document others may read is refused before anything starts.
	if err := os.Chmod(docPath, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := runServe(t.Context(), []string{"--document", docPath}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "0600") {
		t.Fatalf("a 0644 document: %v", err)
	}
}

func TestDocumentFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--document", "a.json"}, "a.json"},
		{[]string{"-document=b.json", "--budget", "1MiB"}, "b.json"},
		{[]string{"--budget", "1MiB"}, ""},
		{[]string{"--", "--document", "c"}, ""},
	} {
		if got := documentFlag(tc.args); got != tc.want {
			t.Errorf("documentFlag(%q) = %q, want %q", tc.args, got, tc.want)
		}
	}
}

// keepMemoryLimit restores the Go runtime's memory limit, which an
// in-process `hoard serve` sets, when the test ends.
func keepMemoryLimit(t *testing.T) {
	old := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })
}

func TestMemoryOverheadFlag(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"48MiB", 48 << 20, true}, {"off", 0, true}, {"1000", 1000, true}, {"0", 0, false}, {"-1", 0, false}, {"lots", 0, false},
	} {
		m := memoryOverhead(7)
		err := m.Set(tc.in)
		if (err == nil) != tc.ok || (tc.ok && int64(m) != tc.want) {
			t.Errorf("Set(%q) = %d, %v; want %d, ok %v", tc.in, m, err, tc.want, tc.ok)
		}
	}
	if m := memoryOverhead(0); m.String() != "off" {
		t.Errorf("0 shows as %q", m.String())
	}
}

func TestPoolFlag(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"8MiB", 8 << 20, true}, {"off", -1, true}, {"0", 0, false}, {"-5", 0, false}, {"x", 0, false},
	} {
		var p poolFlag
		err := p.Set(tc.in)
		if (err == nil) != tc.ok || (tc.ok && int64(p) != tc.want) {
			t.Errorf("Set(%q) = %d, %v; want %d, ok %v", tc.in, p, err, tc.want, tc.ok)
		}
	}
}

// --erasure-memory above half of --budget starts: the memory tier takes
// its defaults from what the shards leave it. A split that does not fit
// is a usage error naming both parts.
func TestServeErasureMemoryAboveHalfTheBudget(t *testing.T) {
	etcd, err := etcdembed.Start(t.Context(), etcdembed.Config{Dir: t.TempDir(), ClientAddr: "127.0.0.1:0", PeerAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(etcd.Close)
	app := func(id string, extra ...string) []string {
		return append(append(baseServeArgs(t, "bkt"), "--app", "big", "--id", id,
			"--etcd-endpoints", strings.Join(etcd.Endpoints(), ","), "--peer-secret", "the-application-secret", "--erasure", "3+2"), extra...)
	}
	info, _ := serving(t, app("big-1", "--erasure-memory", "12MiB")...) // of --budget 16MiB
	resp, err := http.Get(strings.TrimSuffix(info.MetricsURL, "/metrics") + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	var stats cachelet.Counters
	err = json.NewDecoder(resp.Body).Decode(&stats)
	resp.Body.Close()
	if err != nil || stats.BudgetBytes != 16<<20 || stats.Erasure == nil || stats.Erasure.BudgetBytes != 12<<20 { // backups (3 MiB) apart
		t.Fatalf("/stats: %+v (erasure %+v), %v", stats, stats.Erasure, err)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--erasure-memory", "16MiB"}, "erasure memory 16777216 and backup memory 4194304 must together be below the budget 16777216"},
		{[]string{"--erasure-memory", "12MiB", "--erasure-backup-memory", "4MiB"}, "erasure memory 12582912 and backup memory 4194304 must together be below the budget 16777216"},
		{[]string{"--erasure-memory", "12MiB", "--max-object-size", "8MiB"}, "the memory tier's budget 1048576 (the budget 16777216 less the erasure memory 12582912 and backup memory 3145728)"},
	} {
		err := runServe(t.Context(), append(app("big-2", tc.args...), "--log-level", "error"), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
}

// --durable-writes takes true (alone, too), replicated or false; a bad
// value, or replicated where it cannot work, is a usage error that says
// why, and nothing starts.
func TestDurableWritesFlag(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want durableMode
		ok   bool
	}{
		{"true", durableLog, true}, {"replicated", durableReplicated, true}, {"Replicated", durableReplicated, true},
		{"false", durableOff, true}, {"log", durableLog, true}, {"twice", durableOff, false}, {"2", durableOff, false},
	} {
		var d durableMode
		err := d.Set(tc.in)
		if (err == nil) != tc.ok || d != tc.want {
			t.Errorf("Set(%q) = %q, %v; want %q, ok %v", tc.in, d, err, tc.want, tc.ok)
		}
	}
	disk := []string{"--disk-dir", t.TempDir(), "--disk-budget", "16MiB"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--durable-writes=sometimes", "--consistency", "owner"}, `"sometimes": want true`},
		{append([]string{"--durable-writes=replicated", "--consistency", "local"}, disk...), "--durable-writes=replicated needs an owner consistency"},
		{[]string{"--durable-writes=replicated", "--consistency", "owner"}, "--durable-writes needs --disk-dir"},
		{append([]string{"--durable-writes=replicated", "--consistency", "strong"}, disk...), "--durable-writes needs a consistency whose writes are held"},
		{append([]string{"--durable-shadow", "--consistency", "owner"}, disk...), "--durable-shadow needs --durable-writes"},
	} {
		err := runServe(t.Context(), append(append(baseServeArgs(t, "bkt"), tc.args...), "--log-level", "error"), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
}

// A document's cache.durable_writes (an application's spec, through the
// node agent) turns durable writes on, with its disk tier; a flag beside
// it overrides it.
func TestDurableWritesFromDocument(t *testing.T) {
	disk := &control.Disk{Dir: t.TempDir(), Budget: 16 << 20}
	for _, tc := range []struct {
		mode       cacheconfig.DurableMode
		disk       *control.Disk
		args       []string
		log, copy2 bool
		shadow     bool
		err        string
	}{
		{mode: cacheconfig.DurableLog, disk: disk, shadow: true, log: true},
		{mode: cacheconfig.DurableReplicated, disk: disk, args: []string{"--durable-shadow"}, log: true, copy2: true},
		{mode: cacheconfig.DurableOff, disk: disk, shadow: true, err: "--durable-shadow needs --durable-writes"},
		{mode: cacheconfig.DurableLog, disk: disk, log: true},
		{mode: cacheconfig.DurableReplicated, disk: disk, log: true, copy2: true},
		{mode: cacheconfig.DurableReplicated, disk: disk, args: []string{"--durable-writes=false"}},
		{mode: cacheconfig.DurableOff, disk: disk},
		{mode: cacheconfig.DurableReplicated, err: "--durable-writes needs --disk-dir"},
	} {
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		var df diskFlags
		df.register(fs, tc.disk, cacheconfig.Settings{DurableWrites: tc.mode, DurableShadow: tc.shadow})
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		var cfg instance.Config
		cfg.Cachelet.WriteTarget = cachelet.WriteOwner
		err := df.apply(&cfg)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q %v: %v, want %q", tc.mode, tc.args, err, tc.err)
			}
			continue
		}
		wantShadow := tc.shadow || slices.Contains(tc.args, "--durable-shadow")
		if err != nil || cfg.DurableWrites != tc.log || (cfg.DurableBackup != nil) != tc.copy2 || cfg.DurableShadow != wantShadow {
			t.Errorf("%q %v: durable %v, backup %v, %v; want %v, %v", tc.mode, tc.args, cfg.DurableWrites, cfg.DurableBackup != nil, err, tc.log, tc.copy2)
		}
	}
}

// metricValue is the value of the unlabelled metric name in a /metrics
// page, and whether it is there.
func metricValue(page, name string) (string, bool) {
	for line := range strings.Lines(page) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+" "); ok {
			return v, true
		}
	}
	return "", false
}

// `hoard serve` keeps the memory limit and, with little live, paces the
// collector past the runtime's default (ADR 0039), both on /metrics;
// `--memory-overhead off` leaves both alone.
func TestServePacesTheCollector(t *testing.T) {
	t.Setenv("GOGC", "")
	found := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(found) })
	scrape := func(t *testing.T, args ...string) (gogc, limit float64) {
		t.Helper()
		info, _ := serving(t, args...)
		resp, err := http.Get(info.MetricsURL)
		if err != nil {
			t.Fatal(err)
		}
		page, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range []struct {
			name string
			v    *float64
		}{{"go_gc_gogc_percent", &gogc}, {"go_gc_gomemlimit_bytes", &limit}} {
			s, ok := metricValue(string(page), m.name)
			if !ok {
				t.Fatalf("/metrics has no %s", m.name)
			}
			if _, err := fmt.Sscan(s, m.v); err != nil {
				t.Fatalf("%s %q: %v", m.name, s, err)
			}
		}
		return gogc, limit
	}
	t.Run("default", func(t *testing.T) {
		gogc, limit := scrape(t, baseServeArgs(t, "bkt")...)
		if gogc <= 100 || limit >= math.MaxInt64/2 {
			t.Fatalf("GOGC %v, memory limit %v: want the collector paced past 100 and a limit", gogc, limit)
		}
	})
	if g := debug.SetGCPercent(100); g != 100 {
		t.Fatalf("GOGC %d once the cachelet stopped, want 100 (what it found)", g)
	}
	t.Run("off", func(t *testing.T) {
		gogc, _ := scrape(t, append(baseServeArgs(t, "bkt"), "--memory-overhead", "off")...)
		if gogc != 100 {
			t.Fatalf("GOGC %v with --memory-overhead off, want the runtime's 100", gogc)
		}
	})
}
