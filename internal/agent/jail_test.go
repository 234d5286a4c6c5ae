package agent

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hoard-io/hoard/internal/sandbox"
	"github.com/hoard-io/hoard/internal/store/memstore"
)

func TestHostPaths(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real", "venv")
	if err := os.MkdirAll(filepath.Join(real, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	// dir/link -> real (absolute), dir/rel -> link (relative).
	if err := os.Symlink(filepath.Join(dir, "real"), filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("link", filepath.Join(dir, "rel")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{real, []string{real}},
		{filepath.Join(dir, "link", "venv"), []string{filepath.Join(dir, "link"), real}},
		{filepath.Join(dir, "rel", "venv", "bin"), []string{filepath.Join(dir, "rel"), filepath.Join(dir, "link"), filepath.Join(real, "bin")}},
		{filepath.Join(dir, "missing", "x"), []string{filepath.Join(dir, "missing", "x")}},
	} {
		if got := hostPaths(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("hostPaths(%s) = %q; want %q", tc.in, got, tc.want)
		}
	}
}

func TestTakeUID(t *testing.T) {
	a := &Agent{cfg: Config{SandboxUIDBase: 1000, SandboxUIDCount: 3}, uids: map[int]bool{}}
	var got []int
	for range 3 {
		uid, err := a.takeUID()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, uid)
	}
	if !slices.Equal(got, []int{1000, 1001, 1002}) {
		t.Fatalf("uids %v", got)
	}
	if _, err := a.takeUID(); err == nil {
		t.Fatal("a fourth uid out of three")
	}
	a.releaseUID(1001)
	if uid, err := a.takeUID(); err != nil || uid != 1001 {
		t.Fatalf("after a release: %d %v", uid, err)
	}
}

// TestNoIsolation: where sandbox-init fails (here: a "hoard" binary that
// is /bin/false), New refuses to start unless InsecureSandbox allows
// unisolated functions.
func TestNoIsolation(t *testing.T) {
	boxes, err := sandbox.NewManager("hoardtest-agent", nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Dir: t.TempDir(), Store: memstore.New(), Sandboxes: boxes, EtcdEndpoints: []string{"http://127.0.0.1:1"},
		HoardBin: "/bin/false", Python: "/bin/true"}
	t.Setenv(InsecureSandboxEnv, "")
	_, err = New(cfg, slog.New(slog.DiscardHandler))
	if !errors.Is(err, sandbox.ErrNoIsolation) || !strings.Contains(err.Error(), "--insecure-sandbox") {
		t.Fatalf("New without isolation: %v; want ErrNoIsolation naming --insecure-sandbox", err)
	}
	cfg.InsecureSandbox = true
	a, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if a.jailed {
		t.Error("jailed with a failing sandbox-init")
	}
	if fi, err := os.Stat(cfg.Dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("state directory %v %v; want mode 0700", fi.Mode(), err)
	}
}
