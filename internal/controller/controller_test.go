package controller

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/appspec"
	"github.com/hoard-io/hoard/internal/etcdembed"
	"github.com/hoard-io/hoard/internal/keepalive"
	"github.com/hoard-io/hoard/internal/scaling"
	"github.com/hoard-io/hoard/internal/store"
	"github.com/hoard-io/hoard/internal/store/memstore"
)

// fakeAgent speaks the agent's API without running anything: an
// invocation sleeps for the event's "ms" and answers its "x".
type fakeAgent struct {
	srv       *httptest.Server
	mu        sync.Mutex
	instances map[string]string // id -> state
	revs      map[string]string // id -> rev
	starts    atomic.Int32
	stops     atomic.Int32
	failNext  atomic.Bool // the next invocation's instance has died
	// What every instance's cachelet reports (cumulative).
	evictedAgain, reads atomic.Int64
	lastStore           api.StoreKeys // the store identity of the last start
	// etcd is the etcd user of the last instance started.
	etcd atomic.Pointer[api.EtcdCredentials]
	// lastLimit is the memory_limit of the last invocation.
	lastLimit atomic.Int64
	// lastNoCache is the no_cache of the last invocation.
	lastNoCache atomic.Bool
}

func newFakeAgent(t testing.TB) *fakeAgent {
	a := &fakeAgent{instances: map[string]string{}, revs: map[string]string{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/instances", func(w http.ResponseWriter, r *http.Request) {
		var req api.StartRequest
		json.NewDecoder(r.Body).Decode(&req)
		a.starts.Add(1)
		a.etcd.Store(req.Etcd)
		a.mu.Lock()
		a.lastStore = req.Store
		a.instances[req.ID] = api.StateIdle
		a.revs[req.ID] = req.Package.SHA256
		a.mu.Unlock()
		api.WriteJSON(w, http.StatusCreated, api.InstanceInfo{ID: req.ID, App: req.App, Rev: req.Package.SHA256, State: api.StateIdle})
	})
	mux.HandleFunc("GET /v1/instances/{id}", func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		defer a.mu.Unlock()
		st, ok := a.instances[r.PathValue("id")]
		if !ok {
			api.WriteError(w, http.StatusNotFound, errors.New("no such instance"))
			return
		}
		api.WriteJSON(w, http.StatusOK, api.InstanceInfo{ID: r.PathValue("id"), State: st, Rev: a.revs[r.PathValue("id")],
			Cache: api.CacheCounters{EvictedAgain: a.evictedAgain.Load(), Reads: a.reads.Load()}})
	})
	mux.HandleFunc("GET /v1/instances", func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		defer a.mu.Unlock()
		var out []api.InstanceInfo
		for id, st := range a.instances {
			out = append(out, api.InstanceInfo{ID: id, App: strings.SplitN(id, "-", 2)[0], State: st, Rev: a.revs[id]})
		}
		api.WriteJSON(w, http.StatusOK, out)
	})
	mux.HandleFunc("DELETE /v1/instances/{id}", func(w http.ResponseWriter, r *http.Request) {
		a.stops.Add(1)
		a.mu.Lock()
		delete(a.instances, r.PathValue("id"))
		a.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /v1/instances/{id}/invoke", func(w http.ResponseWriter, r *http.Request) {
		var req api.InvokeRequest
		json.NewDecoder(r.Body).Decode(&req)
		if a.failNext.CompareAndSwap(true, false) {
			api.WriteError(w, http.StatusConflict, errors.New("instance dead"))
			return
		}
		a.mu.Lock()
		if a.instances[r.PathValue("id")] == api.StateBusy {
			a.mu.Unlock()
			t.Errorf("instance %s given two invocations at once", r.PathValue("id"))
			api.WriteError(w, http.StatusConflict, errors.New("busy"))
			return
		}
		a.instances[r.PathValue("id")] = api.StateBusy
		a.mu.Unlock()
		var ev struct {
			MS   int             `json:"ms"`
			X    json.RawMessage `json:"x"`
			Peak int64           `json:"peak"` // the memory the invocation "uses"
			// What the invocation reports as its run and data times.
			RunMS float64      `json:"run_ms"`
			IO    *api.IOTimes `json:"io"`
		}
		json.Unmarshal(req.Event, &ev)
		a.lastLimit.Store(req.MemoryLimit)
		a.lastNoCache.Store(req.NoCache)
		time.Sleep(time.Duration(ev.MS) * time.Millisecond)
		a.mu.Lock()
		a.instances[r.PathValue("id")] = api.StateIdle
		a.mu.Unlock()
		api.WriteJSON(w, http.StatusOK, api.InvokeResult{RequestID: req.RequestID, Instance: r.PathValue("id"), OK: true, Result: ev.X,
			DurationMS: ev.RunMS, IO: ev.IO,
			Reads:  map[string]api.ReadCount{"local_hit": {Count: 1, Bytes: 10}},
			Memory: &api.InvocationMemory{Booked: 512 << 20, Limit: max(req.MemoryLimit, 512<<20), Sized: req.MemoryLimit > 0, Peak: ev.Peak}})
	})
	a.srv = httptest.NewServer(api.RequireToken("tok", mux))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *fakeAgent) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.instances)
}

func pkg(t *testing.T, spec string) []byte {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	tw.WriteHeader(&tar.Header{Name: "hoard.yaml", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(spec))})
	tw.Write([]byte(spec))
	tw.Close()
	gz.Close()
	return buf.Bytes()
}

func setup(t *testing.T) (*Controller, *fakeAgent, *clientv3.Client) {
	return setupWith(t, Config{})
}

func setupWith(t testing.TB, cfg Config) (*Controller, *fakeAgent, *clientv3.Client) {
	t.Helper()
	ctx := context.Background()
	etcd, err := etcdembed.Start(ctx, etcdembed.Config{Dir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(etcd.Close)
	cli, err := clientv3.New(clientv3.Config{Endpoints: etcd.Endpoints(), Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	fa := newFakeAgent(t)
	reg, _ := json.Marshal(api.Registration{ID: "fake", URL: fa.srv.URL})
	if _, err := cli.Put(ctx, api.EtcdPrefix+"fake", string(reg)); err != nil {
		t.Fatal(err)
	}
	cfg.Etcd, cfg.AgentToken, cfg.ScanInterval = cli, "tok", 20*time.Millisecond
	if cfg.Store == nil {
		cfg.Store = memstore.New()
	}
	if cfg.Identities == nil {
		cfg.Identities = newFakeIdentities()
	}
	if cfg.VoteInterval == 0 {
		cfg.VoteInterval = time.Hour // rounds only when a test asks
	}
	c, err := New(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, fa, cli
}

const spec = "name: app\nmax_instances: 2\nkeep_alive: 1s\nfunctions: {f: {handler: m.h}}\n"

func TestRouting(t *testing.T) {
	c, fa, _ := setup(t)
	ctx := context.Background()
	if _, err := c.Deploy(ctx, pkg(t, spec)); err != nil {
		t.Fatal(err)
	}

	// Warm first: sequential invocations reuse one instance.
	first, err := c.Invoke(ctx, "app", "f", json.RawMessage(`{"x": 1}`), "test")
	if err != nil || !first.OK || !first.Cold || string(first.Result) != "1" {
		t.Fatalf("first: %+v %v", first, err)
	}
	second, _ := c.Invoke(ctx, "app", "f", json.RawMessage(`{"x": 2}`), "test")
	if second.Cold || second.Instance != first.Instance || fa.starts.Load() != 1 {
		t.Errorf("second: cold %v on %s (first %s), %d starts", second.Cold, second.Instance, first.Instance, fa.starts.Load())
	}

	// Busy: a second instance starts; beyond max_instances, invocations
	// queue and run on the first instance released.
	var wg sync.WaitGroup
	results := make(chan *api.Invocation, 5)
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rec, err := c.Invoke(ctx, "app", "f", json.RawMessage(`{"ms": 150}`), "test")
			if err != nil || !rec.OK {
				t.Errorf("concurrent: %+v %v", rec, err)
				return
			}
			results <- rec
		}()
	}
	waitFor(t, "3 of 5 invocations queued behind 2 instances", 5*time.Second, func() bool { return c.Apps()[0].Queue == 3 })
	wg.Wait()
	close(results)
	used := map[string]int{}
	queued := 0
	for r := range results {
		used[r.Instance]++
		// Queued behind a busy instance (a cold start's wait counts in
		// QueueMS too, and on a loaded machine can pass 100 ms).
		if r.QueueMS > 100 && !r.Cold {
			queued++
		}
	}
	if len(used) != 2 || fa.starts.Load() != 2 || queued != 3 {
		t.Errorf("instances used %v, %d starts, %d queued; want 2, 2, 3", used, fa.starts.Load(), queued)
	}

	// A caller that gives up while queued leaves the queue.
	hold := make(chan struct{})
	for range 2 {
		go func() { c.Invoke(ctx, "app", "f", json.RawMessage(`{"ms": 300}`), "test"); hold <- struct{}{} }()
	}
	waitFor(t, "both instances busy", 5*time.Second, func() bool {
		busy := 0
		for _, in := range c.Apps()[0].Instances {
			if in.State == api.StateBusy {
				busy++
			}
		}
		return busy == 2
	})
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = c.Invoke(short, "app", "f", nil, "test")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("queued past its deadline: %v", err)
	}
	if q := c.Apps()[0].Queue; q != 0 {
		t.Errorf("queue %d after the caller gave up", q)
	}
	<-hold
	<-hold

	// An instance that died is dropped, and the invocation retried.
	fa.failNext.Store(true)
	rec, err := c.Invoke(ctx, "app", "f", json.RawMessage(`{"x": 3}`), "test")
	if err != nil || !rec.OK || string(rec.Result) != "3" {
		t.Errorf("after an instance died: %+v %v", rec, err)
	}

	// Statistics and logs.
	st, _ := c.Stats("app")
	if st["f"].Invocations != 10 || st["f"].Reads["local_hit"].Count != 10 || st["f"].ColdStarts < 2 {
		t.Errorf("stats %+v", st["f"])
	}
	logs, _ := c.Logs("app", "f", 3, false)
	if len(logs) != 3 || string(logs[2].Result) != "3" {
		t.Errorf("logs: %d, last %s", len(logs), logs[len(logs)-1].Result)
	}

	// Keep-alive: idle instances are unloaded after 1 s.
	deadline := time.Now().Add(5 * time.Second)
	for fa.count() > 0 || len(c.Apps()[0].Instances) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("instances still loaded after keep-alive: agent %d, controller %d", fa.count(), len(c.Apps()[0].Instances))
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Errors.
	if _, err := c.Invoke(ctx, "nope", "f", nil, "test"); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown app: %v", err)
	}
	if _, err := c.Invoke(ctx, "app", "g", nil, "test"); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown function: %v", err)
	}
	if _, err := c.Deploy(ctx, []byte("not a package")); err == nil {
		t.Error("a bad package deployed")
	}
}

func TestRedeployAndRestart(t *testing.T) {
	c, fa, cli := setup(t)
	ctx := context.Background()
	long := strings.Replace(spec, "keep_alive: 1s", "keep_alive: 1h", 1)
	v1, err := c.Deploy(ctx, pkg(t, long))
	if err != nil {
		t.Fatal(err)
	}
	first, _ := c.Invoke(ctx, "app", "f", nil, "test")

	// A restarted controller finds the application and adopts its
	// instance: the next invocation is warm.
	c.Close()
	c2, err := New(ctx, Config{Etcd: cli, Store: memstore.New(), Identities: c.cfg.Identities, AgentToken: "tok", ScanInterval: 20 * time.Millisecond},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	rec, err := c2.Invoke(ctx, "app", "f", nil, "test")
	if err != nil || rec.Cold || rec.Instance != first.Instance {
		t.Fatalf("after restart: %+v %v (first on %s)", rec, err, first.Instance)
	}

	// A redeploy keeps the credentials, and the older version's idle
	// instance is unloaded.
	v2, err := c2.Deploy(ctx, pkg(t, long+"# v2\n"))
	if err != nil {
		t.Fatal(err)
	}
	creds1, creds2 := v1.Credentials, v2.Credentials
	if v2.Version != 2 || creds1 != nil || creds2 != nil {
		t.Errorf("version %d", v2.Version)
	}
	k1, _ := c2.Credentials("app")
	if k1.AccessKey == "" || len(k1.PeerSecret) < 16 {
		t.Errorf("credentials %+v", k1)
	}
	deadline := time.Now().Add(5 * time.Second)
	for fa.stops.Load() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the older version's instance was not unloaded")
		}
		time.Sleep(20 * time.Millisecond)
	}
	rec, _ = c2.Invoke(ctx, "app", "f", nil, "test")
	if !rec.Cold || rec.Instance == first.Instance {
		t.Errorf("after redeploy: cold %v on %s", rec.Cold, rec.Instance)
	}
	if err := c2.Remove(ctx, "app"); err != nil {
		t.Fatal(err)
	}
	if fa.count() != 0 {
		t.Errorf("%d instances left after Remove", fa.count())
	}
}

func TestDedup(t *testing.T) {
	c, _, _ := setup(t)
	if !c.firstSighting("b", "k", "e1") || c.firstSighting("b", "k", "e1") || !c.firstSighting("b", "k", "e2") {
		t.Error("dedup of object versions")
	}
}

// TestHybridKeepAlive: once the idle-time histogram is representative,
// an instance unloads as soon as its invocation ends, and the application
// is pre-loaded just before the next invocation is expected, then
// unloaded again after the keep-alive window if none came.
func TestHybridKeepAlive(t *testing.T) {
	c, fa, _ := setup(t)
	c.cfg.KeepAlive = keepalive.Config{BinWidth: 100 * time.Millisecond, Range: 20 * time.Second}
	ctx := context.Background()
	if _, err := c.Deploy(ctx, pkg(t, strings.Replace(spec, "keep_alive: 1s", "keep_alive: 1h", 1))); err != nil {
		t.Fatal(err)
	}
	a, _ := c.app("app")
	for range 30 {
		a.policy.Observe(2 * time.Second)
	}
	if _, err := c.Invoke(ctx, "app", "f", nil, "test"); err != nil {
		t.Fatal(err)
	}
	ended := time.Now()
	// Unloaded at once (not after the fixed hour).
	waitFor(t, "unload right after the invocation", 2*time.Second, func() bool { return fa.count() == 0 })
	c.mu.Lock()
	d := a.decision
	c.mu.Unlock()
	if d.Mode != keepalive.ModeHistogram || d.PreWarm < time.Second || d.PreWarm > 2*time.Second {
		t.Fatalf("decision %+v", d)
	}
	// Pre-loaded ahead of the next expected invocation.
	waitFor(t, "pre-load", 5*time.Second, func() bool { return fa.count() == 1 })
	if at := time.Since(ended); at < d.PreWarm-50*time.Millisecond {
		t.Errorf("pre-loaded %s after the invocation ended; the window is %s", at, d.PreWarm)
	}
	if fa.starts.Load() != 2 {
		t.Errorf("%d starts; want the cold start and the pre-load", fa.starts.Load())
	}
	// Nobody came: unloaded after the keep-alive window.
	waitFor(t, "unload after the keep-alive window", 5*time.Second, func() bool { return fa.count() == 0 })
}

func waitFor(t *testing.T, what string, timeout time.Duration, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s", what, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestScaleVotes: an urgent external vote scales out at once; the cache
// policy scales out when objects are evicted again; with no traffic every
// policy agrees to scale in, one instance a round, never below one.
func TestScaleVotes(t *testing.T) {
	c, fa, _ := setupWith(t, Config{VoteInterval: time.Hour})
	ctx := context.Background()
	if _, err := c.Deploy(ctx, pkg(t, strings.Replace(strings.Replace(spec, "keep_alive: 1s", "keep_alive: 1h", 1), "max_instances: 2", "max_instances: 4", 1))); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Invoke(ctx, "app", "f", nil, "test"); err != nil {
		t.Fatal(err)
	}
	if err := c.Vote("app", scaling.Vote{Policy: "bandwidth", Delta: 2, Urgent: true, Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "urgent scale-out to 3", 5*time.Second, func() bool { return fa.count() == 3 })

	c.scaleApp(ctx, "app") // first reading of the counters: the cache policy holds
	if fa.count() != 3 {
		t.Fatalf("%d instances after the first round; want 3 held", fa.count())
	}
	fa.evictedAgain.Add(2)
	fa.reads.Add(1000)
	c.scaleApp(ctx, "app")
	waitFor(t, "cache-size scale-out to 4", 5*time.Second, func() bool { return fa.count() == 4 })

	// Idle, no accesses: each round takes one instance away, down to one
	// (a round that meets an instance for the first time holds).
	for want := 3; want >= 1; want-- {
		for round := 0; round < 3 && fa.count() > want; round++ {
			c.mu.Lock()
			c.apps["app"].lastVote = time.Now().Add(-time.Minute) // a minute with no traffic
			c.mu.Unlock()
			c.scaleApp(ctx, "app")
			waitFor(t, "the unload", 5*time.Second, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return len(c.apps["app"].instances) == fa.count() })
		}
		if fa.count() != want {
			t.Fatalf("%d instances; want %d", fa.count(), want)
		}
	}
	c.scaleApp(ctx, "app")
	time.Sleep(100 * time.Millisecond)
	if fa.count() != 1 {
		t.Errorf("%d instances; the scaler never drops the last one", fa.count())
	}
	info := c.Apps()[0]
	kinds := map[string]int{}
	for _, e := range info.Events {
		kinds[e.Kind]++
	}
	if kinds["scale"] < 5 {
		t.Errorf("events %+v", info.Events)
	}
}

// TestScaleLatencyTarget: the spec's scaling.latency_target reaches the
// compute policy. With the median latency of the round above the target
// and the one instance busy, a round scales out; without a target, or
// with one the median stays under, the same round holds.
func TestScaleLatencyTarget(t *testing.T) {
	for _, tc := range []struct {
		name, scaling string
		want          int
	}{
		{"above target", "scaling: {latency_target: 20ms}\n", 2},
		{"under target", "scaling: {latency_target: 10s}\n", 1},
		{"no target", "", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, fa, _ := setupWith(t, Config{VoteInterval: time.Hour})
			ctx := context.Background()
			s := strings.Replace(strings.Replace(spec, "keep_alive: 1s", "keep_alive: 1h", 1), "max_instances: 2", "max_instances: 4", 1) + tc.scaling
			if _, err := c.Deploy(ctx, pkg(t, s)); err != nil {
				t.Fatal(err)
			}
			// One invocation of 100 ms sets the round's median; a second
			// one keeps the only instance busy while the round runs.
			if _, err := c.Invoke(ctx, "app", "f", json.RawMessage(`{"ms": 100}`), "test"); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				_, err := c.Invoke(ctx, "app", "f", json.RawMessage(`{"ms": 1000}`), "test")
				done <- err
			}()
			waitFor(t, "the instance busy", 5*time.Second, func() bool {
				fa.mu.Lock()
				defer fa.mu.Unlock()
				for _, st := range fa.instances {
					if st == api.StateBusy {
						return true
					}
				}
				return false
			})
			c.scaleApp(ctx, "app")
			if tc.want > 1 {
				waitFor(t, "a scale-out", 5*time.Second, func() bool { return fa.count() == tc.want })
				var found bool
				for _, e := range c.Apps()[0].Events {
					found = found || (e.Kind == "scale" && strings.Contains(e.Detail, "above target 20ms, all 1 busy"))
				}
				if !found {
					t.Errorf("no scale event naming the latency target: %+v", c.Apps()[0].Events)
				}
			} else {
				// scaleApp records a decision before it acts on it.
				for _, e := range c.Apps()[0].Events {
					if e.Kind == "scale" {
						t.Errorf("the round decided %q; want it to hold", e.Detail)
					}
				}
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestDeployBlockPackage: a package in the block format is accepted and
// stored as it is, under a key that names its format; the agent unpacks
// either format (appspec.Unpack).
func TestDeployBlockPackage(t *testing.T) {
	ctx := context.Background()
	c, _, _ := setup(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, appspec.FileName), []byte("name: blocks\nfunctions: {f: {handler: m.h}}\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "m.py"), []byte("def h(e, c):\n    return e\n"), 0o644)
	p, err := appspec.PackBlocks(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Deploy(ctx, p.Data); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	ref := c.apps["blocks"].rec.Package
	c.mu.Unlock()
	if ref.Key != "apps/blocks/"+p.SHA256+".blk" || ref.SHA256 != p.SHA256 {
		t.Fatalf("stored as %+v", ref)
	}
	body, _, _, err := c.cfg.Store.Get(ctx, ref.Bucket, ref.Key, store.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer body.Close()
	got, _ := io.ReadAll(body)
	if !bytes.Equal(got, p.Data) {
		t.Fatalf("stored %d bytes, deployed %d", len(got), len(p.Data))
	}
}

// TestMinInstances: scaling.min_instances holds that many loaded
// instances against the scale controller's rounds with no traffic and
// against keep-alive (1 s here); without it both take them away.
func TestMinInstances(t *testing.T) {
	for _, tc := range []struct {
		name, scaling string
		want          int
	}{
		{"min 2", "scaling: {min_instances: 2}\n", 2},
		{"none", "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, fa, _ := setupWith(t, Config{VoteInterval: time.Hour})
			ctx := context.Background()
			if _, err := c.Deploy(ctx, pkg(t, strings.Replace(spec, "max_instances: 2", "max_instances: 3", 1)+tc.scaling)); err != nil {
				t.Fatal(err)
			}
			// Three at once: three instances.
			var wg sync.WaitGroup
			for range 3 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if _, err := c.Invoke(ctx, "app", "f", json.RawMessage(`{"ms": 300}`), "test"); err != nil {
						t.Error(err)
					}
				}()
			}
			wg.Wait()
			if fa.count() != 3 {
				t.Fatalf("%d instances after three at once; want 3", fa.count())
			}
			// Rounds with no traffic, and keep-alive's 1 s passing.
			for range 4 {
				c.mu.Lock()
				c.apps["app"].lastVote = time.Now().Add(-time.Minute)
				c.mu.Unlock()
				c.scaleApp(ctx, "app")
			}
			time.Sleep(1500 * time.Millisecond) // past keep_alive: 1s, for the scan to act
			waitFor(t, "the unloads", 5*time.Second, func() bool { return fa.count() == tc.want })
			time.Sleep(200 * time.Millisecond) // ten more scans
			if fa.count() != tc.want || len(c.Apps()[0].Instances) != tc.want {
				t.Fatalf("%d instances loaded (controller %d); want %d", fa.count(), len(c.Apps()[0].Instances), tc.want)
			}
		})
	}
}
