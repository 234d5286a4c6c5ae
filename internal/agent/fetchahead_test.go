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
	"github.com/hoard-io/hoard/internal/store"
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

// TestFetchAheadBadBlock: a block the store serves flipped is found by
// its SHA-256 as it is fetched ahead; the package is never counted
// whole.
func TestFetchAheadBadBlock(t *testing.T) {
	if err := lazyfs.Available(); err != nil {
		t.Skipf("lazy code needs FUSE mounts (CI runs as root): %v", err)
	}
	ctx := context.Background()
	f := newRelayFixture(t, 3<<20)
	bad := append([]byte(nil), f.pkg.Data...)
	bad[len(bad)/2] ^= 0x5a // inside a block of the model
	if _, err := f.st.Put(ctx, f.ref.Bucket, f.ref.Key, bytes.NewReader(bad), int64(len(bad)), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := f.config(t, f.st)
	cfg.CodeFetchAhead = true
	root, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if _, err := root.code(ctx, f.ref, nil); err != nil {
		t.Fatal(err)
	}
	src := root.relaySourceOf(f.ref.SHA256)
	<-src.aheadDone
	if m := root.CodeMounts()[0]; !m.Whole.IsZero() || !src.aheadBad {
		t.Fatalf("a package with a flipped block: whole at %v, found bad %v", m.Whole, src.aheadBad)
	}
}
