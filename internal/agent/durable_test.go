package agent

import (
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/appspec"
	"github.com/hoard-io/hoard/internal/cacheconfig"
	"github.com/hoard-io/hoard/internal/control"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func toFloat(c prometheus.Collector) float64 { return testutil.ToFloat64(c) }

// An application's durable_writes reaches its cachelets' document, with
// the node's disk tier its log lives in; a node without one refuses to
// load the application rather than run it without the log.
func TestDocumentDurableWrites(t *testing.T) {
	for _, mode := range []string{"on", "replicated"} {
		spec, err := appspec.Parse([]byte("name: app\ncache: {consistency: owner, durable_writes: " + mode + "}\nfunctions: {f: {handler: m.h}}\n"))
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		a := &Agent{cfg: Config{ID: "node-a", DiskBudget: 1 << 30, DiskDir: dir}}
		in := &Instance{agent: a, spec: spec, req: api.StartRequest{App: "app", ID: "app-1-abcdef",
			Credentials: api.Credentials{AccessKey: "ak", SecretKey: "sk", PeerSecret: "0123456789abcdef"}}}
		disk, gid, err := in.appDisk("app")
		if err != nil || disk == nil || gid != 0 || disk.Dir != filepath.Join(dir, "app") {
			t.Fatalf("%s: disk %+v, group %d, %v; want the application's directory", mode, disk, gid, err)
		}
		in.disk = disk
		d := in.document(control.Endpoint{}, nil)
		want, _ := cacheconfig.ParseDurableMode(mode)
		if d.Cache.DurableWrites != want || d.Disk == nil || d.Disk.Dir != disk.Dir || d.ID != "app-1-abcdef" {
			t.Errorf("%s: document's durable_writes %q, disk %+v, id %q", mode, d.Cache.DurableWrites, d.Disk, d.ID)
		}
		if err := d.Cache.Validate(); err != nil {
			t.Errorf("%s: %v", mode, err)
		}

		// No disk tier on the node: refused, saying why.
		in.agent = &Agent{cfg: Config{ID: "node-b", DiskDir: t.TempDir()}}
		if disk, _, err := in.appDisk("app"); err == nil || disk != nil || !strings.Contains(err.Error(), "durable_writes") ||
			!strings.Contains(err.Error(), "node-b has none") {
			t.Errorf("%s without a disk tier: %+v, %v; want an error", mode, disk, err)
		}
	}
	// Off: no disk tier is no matter.
	spec, err := appspec.Parse([]byte("name: app\ncache: {consistency: owner}\nfunctions: {f: {handler: m.h}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	in := &Instance{agent: &Agent{cfg: Config{ID: "node-b"}}, spec: spec}
	if disk, _, err := in.appDisk("app"); err != nil || disk != nil {
		t.Errorf("off without a disk tier: %+v, %v", disk, err)
	}
}

// A dead instance's log is adopted by the next instance of its
// application on the node; a live one's, or one whose lock is held, is
// not. A cleanly exited cachelet's log is removed, a crashed one's kept.
func TestAdoptLog(t *testing.T) {
	spec, err := appspec.Parse([]byte("name: app\ncache: {consistency: owner, durable_writes: on}\nfunctions: {f: {handler: m.h}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	disk := t.TempDir()
	wl := filepath.Join(disk, "writelog")
	for _, id := range []string{"app-1-live", "app-1-locked", "app-1-dead"} {
		if err := os.MkdirAll(filepath.Join(wl, id), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(wl, id, "LOCK"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(wl, id, "0000000000000001.log"), []byte(id), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	lock, err := os.Open(filepath.Join(wl, "app-1-locked", "LOCK"))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	a := &Agent{cfg: Config{ID: "node-a", DiskBudget: 1 << 30, DiskDir: disk}, log: slog.New(slog.DiscardHandler),
		instances:  map[string]*Instance{"app-1-live": {state: api.StateIdle}, "app-1-dead": {state: api.StateDead}},
		drainRetry: drainRetry{attempts: 2, first: time.Millisecond, most: time.Millisecond, within: time.Minute}}
	start := func(id string) *Instance {
		in := &Instance{agent: a, spec: spec, req: api.StartRequest{App: "app", ID: id}}
		a.instances[id] = in
		if err := in.adoptLog(disk, 0); err != nil {
			t.Fatal(err)
		}
		return in
	}
	in := start("app-2-new")
	if b, err := os.ReadFile(filepath.Join(wl, "app-2-new", "0000000000000001.log")); err != nil || string(b) != "app-1-dead" {
		t.Errorf("new instance's log: %q, %v; want the dead one's", b, err)
	}
	for id, want := range map[string]bool{"app-1-live": true, "app-1-locked": true, "app-1-dead": false} {
		if _, err := os.Stat(filepath.Join(wl, id)); (err == nil) != want {
			t.Errorf("%s's log there: %v, want %v", id, err == nil, want)
		}
	}
	// Nothing left to adopt.
	start("app-2-other")
	if _, err := os.Stat(filepath.Join(wl, "app-2-other")); err == nil {
		t.Error("a second instance adopted a log")
	}

	// Exit 0 after SIGTERM: everything delivered, the log goes; a crash
	// has it drained (here a drain that fails: the log stays for the
	// next instance, and one that succeeds: it goes).
	in.disk, in.dir = &control.Disk{Dir: disk}, t.TempDir()
	a.cfg.HoardBin = "false"
	in.cachelet = exec.Command("false")
	_ = in.cachelet.Run()
	in.settleLog()
	if _, err := os.Stat(filepath.Join(wl, "app-2-new")); err != nil {
		t.Errorf("a crashed cachelet's log removed though its drain failed: %v", err)
	}
	a.cfg.HoardBin = "true"
	in.settleLog()
	if _, err := os.Stat(filepath.Join(wl, "app-2-new")); err == nil {
		t.Error("a crashed cachelet's log kept after its drain")
	}
	if ents, _ := os.ReadDir(in.dir); len(ents) != 0 {
		t.Errorf("the drain's document left behind: %v", ents)
	}
	if err := os.MkdirAll(filepath.Join(wl, "app-2-new"), 0o700); err != nil {
		t.Fatal(err)
	}
	in.cachelet = exec.Command("true")
	if err := in.cachelet.Run(); err != nil {
		t.Fatal(err)
	}
	a.cfg.HoardBin = "false"
	in.settleLog()
	if _, err := os.Stat(filepath.Join(wl, "app-2-new")); err == nil {
		t.Error("a cleanly exited cachelet's log kept")
	}
}

// drainEnv is a dead instance of a durable_writes: on application with a
// log to drain, its drain a script that appends a line to runs each time
// and fails while fail exists.
type drainEnv struct {
	a          *Agent
	in         *Instance
	wl, log    string
	runs, fail string
}

func newDrainEnv(t *testing.T, retry drainRetry) *drainEnv {
	t.Helper()
	spec, err := appspec.Parse([]byte("name: app\ncache: {consistency: owner, durable_writes: on}\nfunctions: {f: {handler: m.h}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	disk, tmp := t.TempDir(), t.TempDir()
	e := &drainEnv{wl: filepath.Join(disk, "writelog"), runs: filepath.Join(tmp, "runs"), fail: filepath.Join(tmp, "fail")}
	e.log = filepath.Join(e.wl, "app-1-dead")
	if err := os.MkdirAll(e.log, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.log, "0000000000000001.log"), []byte("records"), 0o600); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(tmp, "drain")
	body := "#!/bin/sh\necho run >> " + e.runs + "\nif [ -e " + e.fail + " ]; then exit 1; fi\nexit 0\n"
	if err := os.WriteFile(script, []byte(body), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.fail, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	e.a = &Agent{cfg: Config{ID: "node-a", DiskBudget: 1 << 30, DiskDir: disk, HoardBin: script}, log: slog.New(slog.DiscardHandler),
		m: newMetrics(nil), instances: map[string]*Instance{}, drainRetry: retry}
	e.in = &Instance{agent: e.a, spec: spec, req: api.StartRequest{App: "app", ID: "app-1-dead"}, state: api.StateDead,
		disk: &control.Disk{Dir: disk}, dir: t.TempDir()}
	e.a.instances[e.in.req.ID] = e.in
	e.in.cachelet = exec.Command("false") // crashed
	_ = e.in.cachelet.Run()
	return e
}

func (e *drainEnv) attempts() int {
	b, _ := os.ReadFile(e.runs)
	return strings.Count(string(b), "run")
}

// A drain that fails is run again after its backoff; once one succeeds
// the log goes. One that keeps failing stops at its bound of attempts,
// leaving the log, each attempt counted.
func TestDrainRetried(t *testing.T) {
	retry := drainRetry{attempts: 4, first: 5 * time.Millisecond, most: 20 * time.Millisecond, within: time.Minute}
	e := newDrainEnv(t, retry)
	// The script fails its first run only.
	script, _ := os.ReadFile(e.a.cfg.HoardBin)
	fixed := strings.Replace(string(script), "exit 1", "rm "+e.fail+"; exit 1", 1)
	if err := os.WriteFile(e.a.cfg.HoardBin, []byte(fixed), 0o700); err != nil {
		t.Fatal(err)
	}
	e.in.settleLog()
	if _, err := os.Stat(e.log); err == nil {
		t.Error("the log stayed though the retried drain succeeded")
	}
	if n := e.attempts(); n != 2 {
		t.Errorf("%d drain attempts, want 2 (one failed, one retried)", n)
	}
	if f, ok := toFloat(e.a.m.drains.WithLabelValues("failed")), toFloat(e.a.m.drains.WithLabelValues("ok")); f != 1 || ok != 1 {
		t.Errorf("drains counted: %v failed, %v ok; want 1 and 1", f, ok)
	}

	// Always failing: 4 attempts, then the log is left for the next
	// instance.
	e = newDrainEnv(t, retry)
	e.in.settleLog()
	if n := e.attempts(); n != retry.attempts {
		t.Errorf("%d drain attempts of a failing drain, want %d", n, retry.attempts)
	}
	if _, err := os.Stat(e.log); err != nil {
		t.Errorf("the log of a failed drain is gone: %v", err)
	}
	if f := toFloat(e.a.m.drains.WithLabelValues("failed")); f != float64(retry.attempts) {
		t.Errorf("failed drains counted %v, want %d", f, retry.attempts)
	}
	// The retries are bounded in time too: with within below the first
	// wait, one attempt only.
	e = newDrainEnv(t, drainRetry{attempts: 4, first: time.Hour, most: time.Hour, within: time.Minute})
	e.in.settleLog()
	if n := e.attempts(); n != 1 {
		t.Errorf("%d attempts, want 1: the next would start past the bound", n)
	}
}

// A new instance of the application that adopts the log between two
// attempts stops the retries (the new one delivers the writes), and its
// log is left alone; while an attempt runs, no instance adopts the log.
func TestDrainRetryStopsWhenAdopted(t *testing.T) {
	e := newDrainEnv(t, drainRetry{attempts: 50, first: 20 * time.Millisecond, most: 20 * time.Millisecond, within: time.Hour})
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.in.settleLog()
	}()
	next := &Instance{agent: e.a, spec: e.in.spec, req: api.StartRequest{App: "app", ID: "app-2-new"}}
	adopted := filepath.Join(e.wl, "app-2-new")
	deadline := time.Now().Add(20 * time.Second)
	for e.attempts() == 0 { // the first attempt ran (and failed)
		if time.Now().After(deadline) {
			t.Fatal("no drain attempt")
		}
		time.Sleep(time.Millisecond)
	}
	for {
		if e.in.drainingLog.Load() {
			// An attempt runs: adoptLog must not take the log.
			if err := next.adoptLog(e.a.cfg.DiskDir, 0); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(adopted); err == nil && e.in.drainingLog.Load() {
				t.Fatal("the log was adopted while its drain ran")
			}
		}
		if err := next.adoptLog(e.a.cfg.DiskDir, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(adopted); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the new instance never adopted the log between drain attempts")
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the retries did not stop once the log was adopted")
	}
	if n := e.attempts(); n >= 50 {
		t.Errorf("%d attempts: the retries ran to their bound", n)
	}
	if got := toFloat(e.a.m.drains.WithLabelValues("adopted")); got != 1 {
		t.Errorf("adopted counted %v, want 1", got)
	}
	if b, err := os.ReadFile(filepath.Join(adopted, "0000000000000001.log")); err != nil || string(b) != "records" {
		t.Errorf("the adopted log: %q, %v", b, err)
	}
}

// Close ends the wait between two attempts.
func TestDrainRetryStopsOnClose(t *testing.T) {
	e := newDrainEnv(t, drainRetry{attempts: 5, first: time.Hour, most: time.Hour, within: 10 * time.Hour})
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.in.settleLog()
	}()
	e.a.mu.Lock()
	e.a.instances = map[string]*Instance{} // Close tears nothing down here
	e.a.mu.Unlock()
	e.a.Close()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the retry's wait outlived Close")
	}
	if n := e.attempts(); n > 1 {
		t.Errorf("%d attempts after Close", n)
	}
	if _, err := os.Stat(e.log); err != nil {
		t.Errorf("the log is gone: %v", err)
	}
}

// A second teardown (an explicit stop while the first still retries a
// drain) ends the wait between two attempts: the stop does not wait out
// the backoff, and the log stays for the next instance.
func TestDrainRetryStopsOnStop(t *testing.T) {
	e := newDrainEnv(t, drainRetry{attempts: 5, first: time.Hour, most: time.Hour, within: 10 * time.Hour})
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.in.settleLog()
	}()
	deadline := time.Now().Add(20 * time.Second)
	for e.attempts() == 0 { // the first attempt ran (and failed)
		if time.Now().After(deadline) {
			t.Fatal("no drain attempt")
		}
		time.Sleep(time.Millisecond)
	}
	e.in.mu.Lock()
	e.in.tornDown, e.in.done = true, done // the first teardown, retrying
	e.in.mu.Unlock()
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		e.in.teardown("stopped")
	}()
	select {
	case <-stopped:
	case <-time.After(20 * time.Second):
		t.Fatal("the stop waited out the drain's backoff")
	}
	if n := e.attempts(); n != 1 {
		t.Errorf("%d attempts, want 1", n)
	}
	if _, err := os.Stat(e.log); err != nil {
		t.Errorf("the log is gone: %v", err)
	}
}
