package agent

import (
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/appspec"
	"github.com/hoard-io/hoard/internal/cacheconfig"
	"github.com/hoard-io/hoard/internal/control"
)

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
		instances: map[string]*Instance{"app-1-live": {state: api.StateIdle}, "app-1-dead": {state: api.StateDead}}}
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
