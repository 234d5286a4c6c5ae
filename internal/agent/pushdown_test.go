package agent

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/lazyfs"
)

// TestPushDown: a child agent mounted under a parent that has read
// nothing yet receives the package's blocks as the parent reads them,
// before its own instance reads a byte; what it then reads through its
// mount is the package's, with nothing from the store. A parent pushing
// a block whose bytes do not match its SHA-256 (an attacker holding the
// agents' token) gets nothing kept: the child reads from the store.
func TestPushDown(t *testing.T) {
	if err := lazyfs.Available(); err != nil {
		t.Skipf("lazy code needs FUSE mounts (CI runs as root): %v", err)
	}
	ctx := context.Background()
	f := newRelayFixture(t, 6<<20)
	parent, err := New(f.config(t, f.st), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer parent.Close()
	srv := httptest.NewServer(parent.Handler("agents-token", nil))
	defer srv.Close()
	pdir, err := parent.code(ctx, f.ref, nil)
	if err != nil {
		t.Fatal(err)
	}

	child, err := New(f.config(t, f.st), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer child.Close()
	child.Handler("agents-token", nil)
	cdir, err := child.code(ctx, f.ref, []api.Registration{{ID: "parent", URL: srv.URL}})
	if err != nil {
		t.Fatal(err)
	}
	// Neither holds the package yet: the mounts read its index only.
	if p, c := parent.CodeMounts()[0], child.CodeMounts()[0]; !p.Whole.IsZero() || !c.Whole.IsZero() {
		t.Fatalf("whole before any read: parent %v, child %v", p.Whole, c.Whole)
	}
	// The parent reads its copy; the child's fills as it does.
	got, err := os.ReadFile(filepath.Join(pdir, "model.bin"))
	if err != nil || !bytes.Equal(got, f.model) {
		t.Fatalf("the parent's read: %v (equal %v)", err, bytes.Equal(got, f.model))
	}
	var m CodeMount
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		m = child.CodeMounts()[0]
		if !m.Whole.IsZero() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the child received %d bytes pushed of the %d-byte model and does not hold it whole: %+v", m.Pushed, len(f.model), m)
		}
	}
	// Whole came from the pushes, after the parent held it whole.
	if p := parent.CodeMounts()[0]; m.Pushed < int64(len(f.model)) || p.Whole.IsZero() || m.Whole.Before(p.Whole) {
		t.Fatalf("the child whole at %v with %d bytes pushed; the parent whole at %v", m.Whole, m.Pushed, p.Whole)
	}
	got, err = os.ReadFile(filepath.Join(cdir, "model.bin"))
	if err != nil || !bytes.Equal(got, f.model) {
		t.Fatalf("the child's read: %v (equal %v)", err, bytes.Equal(got, f.model))
	}
	if m = child.CodeMounts()[0]; m.FromStore != 0 || m.Rejected != 0 {
		t.Fatalf("the child read %d bytes from the store, rejected %d: %+v", m.FromStore, m.Rejected, m)
	}

	sums, err := parent.relaySourceOf(f.ref.SHA256).blockSums(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The stream skips the blocks the child says it holds; bad requests
	// are refused.
	all := strings.Repeat("ff", (len(sums)+7)/8)
	for q, want := range map[string]int{"?have=" + all: http.StatusOK, "?have=zz": http.StatusBadRequest, "?have=" + all + "ff": http.StatusBadRequest} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/packages/"+f.ref.SHA256+"/blocks"+q, nil)
		req.Header.Set("Authorization", "Bearer agents-token")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want || want == http.StatusOK && len(body) != 0 {
			t.Errorf("blocks%s: %d with %d bytes, want %d", q, resp.StatusCode, len(body), want)
		}
	}
	resp, err := http.Get(srv.URL + "/v1/packages/" + f.ref.SHA256 + "/blocks")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("blocks without the token: %d", resp.StatusCode)
	}

	// The lying parent: every frame names a real block, its bytes flipped;
	// reads are refused, so all the child keeps must come from the store.
	rogue := httptest.NewServer(api.RequireToken("agents-token", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/packages/"+f.ref.SHA256+"/blocks" {
			http.Error(w, "no", http.StatusInternalServerError)
			return
		}
		for _, b := range sums {
			frame := make([]byte, pushFrameLen, pushFrameLen+b.end-b.off)
			binary.BigEndian.PutUint64(frame, uint64(b.off))
			binary.BigEndian.PutUint32(frame[8:], uint32(b.end-b.off))
			for _, c := range f.pkg.Data[b.off:b.end] {
				frame = append(frame, c^0x5a)
			}
			w.Write(frame)
		}
	})))
	defer rogue.Close()
	victim, err := New(f.config(t, f.st), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer victim.Close()
	victim.Handler("agents-token", nil)
	vdir, err := victim.code(ctx, f.ref, []api.Registration{{ID: "rogue", URL: rogue.URL}})
	if err != nil {
		t.Fatal(err)
	}
	got, err = os.ReadFile(filepath.Join(vdir, "model.bin"))
	if err != nil || !bytes.Equal(got, f.model) {
		t.Fatalf("the read after a lying push: %v (equal %v)", err, bytes.Equal(got, f.model))
	}
	if m := victim.CodeMounts()[0]; m.Pushed != 0 || m.Rejected == 0 || m.FromStore < int64(len(f.model)) {
		t.Fatalf("after a lying push: %+v", m)
	}
}
