package agent

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/admission"
	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/appspec"
	"github.com/hoard-io/hoard/internal/cacheconfig"
	"github.com/hoard-io/hoard/internal/control"
	"github.com/hoard-io/hoard/internal/prewarm"
)

// countingCachelet answers the control API with read counters the test
// moves, and counts how often its stats were asked for.
type countingCachelet struct {
	mu     sync.Mutex
	reads  control.ReadCount // local hits so far
	asked  int
	admits []bool
}

func (c *countingCachelet) SetAdmit(admit bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.admits = append(c.admits, admit)
}

func (c *countingCachelet) Ready() control.Ready { return control.Ready{ID: "t-1"} }

func (c *countingCachelet) Settings() cacheconfig.Settings { return cacheconfig.Settings{} }

func (c *countingCachelet) Stats() control.Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.asked++
	return control.Stats{Reads: map[string]control.ReadCount{"local_hit": c.reads}}
}

func (c *countingCachelet) read(n int64) {
	c.mu.Lock()
	c.reads.Count++
	c.reads.Bytes += n
	c.mu.Unlock()
}

func (c *countingCachelet) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.asked
}

func (c *countingCachelet) Drop(string, string) int              { return 0 }
func (c *countingCachelet) SetBudget(int64) control.BudgetResult { return control.BudgetResult{} }
func (c *countingCachelet) AccessMetadata() []prewarm.Object     { return nil }
func (c *countingCachelet) Prewarm(context.Context, []control.Key) (control.PrewarmResult, error) {
	return control.PrewarmResult{}, nil
}

// An invocation's reads cost one stats call: the counters read after the
// previous invocation are this one's starting point. After a failed read
// the next invocation reads before it too, and is counted right.
func TestReadsOncePerInvocation(t *testing.T) {
	dir, err := os.MkdirTemp("", "agent")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ep := control.Endpoint{Socket: filepath.Join(dir, "control.sock"), Token: control.NewToken()}
	fake := &countingCachelet{}
	h, err := control.NewHandler(ep.Token, fake, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := control.Listen(t.Context(), ep.Socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := control.NewServer(h, nil)
	go srv.Serve(ln)
	defer srv.Close()

	in := &Instance{agent: &Agent{log: slog.New(slog.DiscardHandler)}, req: api.StartRequest{ID: "t-1"},
		spec: &appspec.Spec{Name: "t"}, ctl: control.NewClient(ep)}
	defer in.ctl.Close()
	ctx := t.Context()
	// At load: the starting point.
	s, err := in.ctl.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	in.stats, in.statsOK = s, true

	invocation := func(reads ...int64) map[string]api.ReadCount {
		in.readBefore(ctx)
		for _, n := range reads {
			fake.read(n)
		}
		got, _, _ := in.invocationReads(ctx)
		return got
	}
	before := fake.count()
	for i, n := range []int64{100, 0, 7} {
		var got map[string]api.ReadCount
		if n > 0 {
			got = invocation(n)
		} else {
			got = invocation()
		}
		if asked := fake.count() - before; asked != i+1 {
			t.Fatalf("invocation %d: %d stats calls so far, want one per invocation", i, asked)
		}
		if want := (api.ReadCount{Count: 1, Bytes: n}); n > 0 && (len(got) != 1 || got["local_hit"] != want) {
			t.Fatalf("invocation %d: reads %v, want %v", i, got, want)
		}
		if n == 0 && len(got) != 0 {
			t.Fatalf("invocation %d read nothing, got %v", i, got)
		}
	}
	// The cachelet does not answer after an invocation: its reads are
	// unknown, and the next invocation reads before it starts.
	srv.Close()
	if got := invocation(5); got != nil {
		t.Fatalf("reads %v with the cachelet unreachable", got)
	}
	if in.statsOK {
		t.Fatal("a failed read left the starting point current")
	}
	ln, err = control.Listen(ctx, ep.Socket)
	if err != nil {
		t.Fatal(err)
	}
	srv = control.NewServer(h, nil)
	go srv.Serve(ln)
	defer srv.Close()
	in.ctl.Close()
	before = fake.count()
	if got := invocation(9); got["local_hit"] != (api.ReadCount{Count: 1, Bytes: 9}) {
		t.Fatalf("after a failed read: reads %v, want the 9-byte hit alone", got)
	}
	if asked := fake.count() - before; asked != 2 {
		t.Fatalf("after a failed read: %d stats calls, want 2 (before and after)", asked)
	}
}

// The cachelet's document carries the application's store identity and
// its grants, nothing of the agent's own store access.
func TestDocumentStoreIdentity(t *testing.T) {
	spec, err := appspec.Parse([]byte("name: app\nbuckets: {photos: read-write, models: read-only}\nfunctions: {f: {handler: m.h}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	a := &Agent{cfg: Config{StoreEndpoint: "http://store:9000", Region: "us-east-1"}}
	in := &Instance{agent: a, spec: spec, req: api.StartRequest{App: "app", ID: "app-1",
		Credentials: api.Credentials{AccessKey: "ak", SecretKey: "sk", PeerSecret: "0123456789abcdef"},
		Store:       api.StoreKeys{AccessKey: "app-store-key", SecretKey: "app-store-secret"}}}
	d := in.document(control.Endpoint{}, nil)
	if d.Store.Endpoint != "http://store:9000" || d.Store.AccessKey != "app-store-key" || d.Store.SecretKey != "app-store-secret" {
		t.Errorf("store: %+v, want the application's identity", d.Store)
	}
	if !d.Grants.Restricted() || !d.Grants.Allows("photos", true) || d.Grants.Allows("models", true) ||
		!d.Grants.Allows("models", false) || d.Grants.Allows("hoard-platform", false) {
		t.Errorf("grants: %+v", d.Grants)
	}
	if err := d.Validate(); err != nil {
		t.Error(err)
	}
}

// The agent tells the cachelet the admission only when it changes.
func TestSetAdmission(t *testing.T) {
	dir, err := os.MkdirTemp("", "agent")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ep := control.Endpoint{Socket: filepath.Join(dir, "control.sock"), Token: control.NewToken()}
	fake := &countingCachelet{}
	h, err := control.NewHandler(ep.Token, fake, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := control.Listen(t.Context(), ep.Socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := control.NewServer(h, nil)
	go srv.Serve(ln)
	defer srv.Close()
	in := &Instance{agent: &Agent{log: slog.New(slog.DiscardHandler)}, req: api.StartRequest{ID: "t-1"},
		spec: &appspec.Spec{Name: "t"}, ctl: control.NewClient(ep)}
	defer in.ctl.Close()
	for _, noCache := range []bool{false, true, true, false, false} {
		in.setAdmission(t.Context(), noCache)
	}
	if len(fake.admits) != 2 || fake.admits[0] || !fake.admits[1] {
		t.Fatalf("admissions sent %v, want [false true]", fake.admits)
	}
}

// An invocation's time with data: as served, and its reads at the
// store's fitted cost; before any store cost is known on the node,
// none; a cachelet with no fit of its own borrows the application's.
func TestIOTimes(t *testing.T) {
	a := &Agent{}
	before := control.Stats{Reads: map[string]control.ReadCount{}}
	after := control.Stats{
		Reads:      map[string]control.ReadCount{"local_hit": {Count: 2, Bytes: 2 << 20, Nanos: int64(time.Millisecond)}},
		WriteNanos: int64(3 * time.Millisecond),
	}
	if io := a.ioTimes("app", before, after); io != nil {
		t.Fatalf("no store cost known, got %+v", io)
	}
	// The store: 5 ms a read plus 10 ms a MiB.
	for _, n := range []int64{1 << 20, 4 << 20} {
		after.StoreFit.Add(n, 5*time.Millisecond+time.Duration(n>>20)*10*time.Millisecond)
	}
	io := a.ioTimes("app", before, after)
	if io == nil || io.ServedMS != 4 || io.StoreMS < 32.9 || io.StoreMS > 33.1 {
		t.Fatalf("io %+v, want served 4 ms (1 read + 3 write), store 2×5 + 2×10 + 3 = 33 ms", io)
	}
	after.StoreFit = admission.StoreFit{}
	if io := a.ioTimes("app", before, after); io == nil || io.StoreMS < 32.9 || io.StoreMS > 33.1 {
		t.Fatalf("a cachelet without a fit of its own: %+v, want the application's (33 ms)", io)
	}
	if io := a.ioTimes("other", before, after); io != nil {
		t.Fatalf("another application borrowed the fit: %+v", io)
	}
}
