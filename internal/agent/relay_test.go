package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/appspec"
	"github.com/hoard-io/hoard/internal/lazyfs"
	"github.com/hoard-io/hoard/internal/sandbox"
	"github.com/hoard-io/hoard/internal/store"
	"github.com/hoard-io/hoard/internal/store/memstore"
)

// TestRelayFromLyingParent: a parent agent that serves a package's index
// as it is but flips bytes of its blocks (an attacker holding the
// agents' token) is caught by the blocks' SHA-256 sums recorded at
// deploy, before anything it sent is kept; the agent reads the package
// from the store, so the files read through the mount are the package's. The relay endpoint refuses
// callers without the token and bad ranges.
func TestRelayFromLyingParent(t *testing.T) {
	if err := lazyfs.Available(); err != nil {
		t.Skipf("lazy code needs FUSE mounts (CI runs as root): %v", err)
	}
	ctx := context.Background()
	f := newRelayFixture(t, 2<<20)
	pkg, model, st, ref := f.pkg, f.model, f.st, f.ref

	// The lying parent: the tail (footer and index) as it is, every other
	// byte flipped.
	var asked atomic.Int64
	tail := int64(len(pkg.Data)) - 64<<10
	rogue := httptest.NewServer(api.RequireToken("agents-token", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		off, _ := strconv.ParseInt(r.URL.Query().Get("off"), 10, 64)
		n, _ := strconv.ParseInt(r.URL.Query().Get("len"), 10, 64)
		asked.Add(1)
		out := bytes.Clone(pkg.Data[off : off+n])
		for i := range out {
			if off+int64(i) < tail {
				out[i] ^= 0x5a
			}
		}
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		w.Write(out)
	})))
	defer rogue.Close()

	cfg := f.config(t, st)
	a, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	h := a.Handler("agents-token", nil)

	dir, err := a.code(ctx, ref, []api.Registration{{ID: "rogue", URL: rogue.URL}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "model.bin"))
	if err != nil {
		t.Fatalf("reading through the mount after the parent lied: %v", err)
	}
	if !bytes.Equal(got, model) {
		t.Fatal("the mount returned other bytes than the package's")
	}
	mounts := a.CodeMounts()
	// From the parent only the tail was taken (its index checked against the
	// deploy's digest; the partial block before it not kept); every block
	// came from the store after the parent's did not match.
	if asked.Load() == 0 || len(mounts) != 1 || mounts[0].FromParent > 64<<10 || mounts[0].FromStore < int64(len(model)) ||
		mounts[0].Rejected == 0 {
		t.Fatalf("the parent was asked %d times; mounts %+v", asked.Load(), mounts)
	}

	// What this agent relays to its own children is the package's bytes.
	get := func(path, token string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}
	base := "/v1/packages/" + pkg.SHA256 + "/raw"
	if w := get(base+"?off=100&len=4096", "agents-token"); w.Code != http.StatusOK || !bytes.Equal(w.Body.Bytes(), pkg.Data[100:4196]) {
		t.Fatalf("relay: %d, %d bytes (equal %v)", w.Code, w.Body.Len(), bytes.Equal(w.Body.Bytes(), pkg.Data[100:4196]))
	}
	for _, c := range []struct {
		path, token string
		want        int
	}{
		{base + "?off=0&len=10", "", http.StatusUnauthorized},
		{base + "?off=0&len=10", "wrong", http.StatusUnauthorized},
		{base + "?off=-1&len=10", "agents-token", http.StatusBadRequest},
		{base + "?off=0&len=0", "agents-token", http.StatusBadRequest},
		{base + "?off=0&len=" + strconv.Itoa(len(pkg.Data)+1), "agents-token", http.StatusBadRequest},
		{base + "?off=0&len=99999999", "agents-token", http.StatusBadRequest},
		{"/v1/packages/" + string(bytes.Repeat([]byte("0"), 64)) + "/raw?off=0&len=10", "agents-token", http.StatusNotFound},
	} {
		if w := get(c.path, c.token); w.Code != c.want {
			t.Errorf("GET %s (token %q): %d, want %d", c.path, c.token, w.Code, c.want)
		}
	}

	// An agent started on the same directory while this one's mount is
	// still there (as after a kill) detaches it.
	if _, err := New(cfg, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	if left, err := lazyfs.MountsUnder(filepath.Join(cfg.Dir, "code")); err != nil || len(left) != 0 {
		t.Fatalf("mounts left: %v %v", left, err)
	}
}

// relayFixture is a block-format package of an application "rl" whose
// model.bin holds random bytes, put in a memstore as the controller
// puts it (with its block sums).
type relayFixture struct {
	pkg   *appspec.Package
	model []byte
	st    *memstore.Store
	ref   api.PackageRef
}

func newRelayFixture(t *testing.T, modelBytes int) relayFixture {
	t.Helper()
	ctx := context.Background()
	src := t.TempDir()
	rng := rand.New(rand.NewPCG(5, 6))
	model := make([]byte, modelBytes)
	for i := range model {
		model[i] = byte(rng.Uint32())
	}
	spec := "name: rl\nfunctions: {f: {handler: fns.f}}\n"
	for f, body := range map[string][]byte{appspec.FileName: []byte(spec), "fns.py": []byte("def f(e, c): return 1\n"), "model.bin": model} {
		if err := os.WriteFile(filepath.Join(src, f), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	packed, err := appspec.PackBlocks(src)
	if err != nil {
		t.Fatal(err)
	}
	pkg, err := appspec.ReadPackage(packed.Data)
	if err != nil {
		t.Fatal(err)
	}
	st := memstore.New()
	if err := st.CreateBucket(ctx, appspec.PlatformBucket, ""); err != nil {
		t.Fatal(err)
	}
	sums := sha256.Sum256(pkg.BlockSums)
	ref := api.PackageRef{Bucket: appspec.PlatformBucket, Key: "apps/rl/" + pkg.SHA256 + ".blk", SHA256: pkg.SHA256,
		IndexSHA256: pkg.IndexSHA256, SumsSHA256: hex.EncodeToString(sums[:])}
	for key, body := range map[string][]byte{ref.Key: pkg.Data, ref.Key + ".sums": pkg.BlockSums} {
		if _, err := st.Put(ctx, ref.Bucket, key, bytes.NewReader(body), int64(len(body)), store.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return relayFixture{pkg: pkg, model: model, st: st, ref: ref}
}

// config is an agent's that mounts code lazily from st.
func (relayFixture) config(t *testing.T, st store.Store) Config {
	t.Helper()
	boxes, err := sandbox.NewManager("hoardtest-relay", nil)
	if err != nil {
		t.Fatal(err)
	}
	return Config{Dir: t.TempDir(), Store: st, Sandboxes: boxes, EtcdEndpoints: []string{"http://127.0.0.1:1"},
		HoardBin: "/bin/false", Python: "/bin/true", InsecureSandbox: true, CodeFetch: CodeFetchLazy}
}
