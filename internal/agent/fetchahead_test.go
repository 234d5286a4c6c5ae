package agent

import (
	"bytes"
	"context"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/lazyfs"
)

// TestFetchAhead: a root agent with CodeFetchAhead holds its package
// whole without any instance reading it, and its child, mounted under
// it, receives it all pushed; the child's read then takes nothing from
// the store. Without it, a mount holds no more than its index.
func TestFetchAhead(t *testing.T) {
	if err := lazyfs.Available(); err != nil {
		t.Skipf("lazy code needs FUSE mounts (CI runs as root): %v", err)
	}
	ctx := context.Background()
	f := newRelayFixture(t, 10<<20)
	cfg := f.config(t, f.st)
	cfg.CodeFetchAhead = true
	root, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	srv := httptest.NewServer(root.Handler("agents-token", nil))
	defer srv.Close()
	child, err := New(f.config(t, f.st), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer child.Close()
	child.Handler("agents-token", nil)
	if _, err := root.code(ctx, f.ref, nil); err != nil {
		t.Fatal(err)
	}
	cdir, err := child.code(ctx, f.ref, []api.Registration{{ID: "root", URL: srv.URL}})
	if err != nil {
		t.Fatal(err)
	}
	var r, c CodeMount
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		r, c = root.CodeMounts()[0], child.CodeMounts()[0]
		if !r.Whole.IsZero() && !c.Whole.IsZero() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not whole without reads: root %+v, child %+v", r, c)
		}
	}
	if r.FromStore < int64(len(f.pkg.Data))-(64<<10) || c.Pushed < int64(len(f.model)) || c.FromStore != 0 {
		t.Fatalf("root took %d bytes from the store, the child %d pushed and %d from the store (package %d bytes)", r.FromStore, c.Pushed, c.FromStore, len(f.pkg.Data))
	}
	got, err := os.ReadFile(filepath.Join(cdir, "model.bin"))
	if err != nil || !bytes.Equal(got, f.model) {
		t.Fatalf("the child's read: %v (equal %v)", err, bytes.Equal(got, f.model))
	}
	if c = child.CodeMounts()[0]; c.FromStore != 0 {
		t.Fatalf("the child read %d bytes from the store", c.FromStore)
	}

	// Without fetching ahead, a mount holds its index only.
	lazy, err := New(f.config(t, f.st), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer lazy.Close()
	if _, err := lazy.code(ctx, f.ref, nil); err != nil {
		t.Fatal(err)
	}
	if m := lazy.CodeMounts()[0]; !m.Whole.IsZero() || m.FromStore > 128<<10 {
		t.Fatalf("a mount without fetching ahead: %+v", m)
	}
}
