package controller

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash"
	"io"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/appspec"
	"github.com/hoard-io/hoard/internal/store"
	"github.com/hoard-io/hoard/internal/store/memstore"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// bigApp writes an application directory whose package is about n
// bytes of incompressible data, written a MiB at a time, and packs it
// into a file: its path and package.
func bigApp(t testing.TB, name string, n int64) (string, *appspec.Package) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, appspec.FileName), []byte("name: "+name+"\nfunctions: {f: {handler: m.h}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "model.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(f, rand.New(rand.NewSource(n)), n); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "pkg.blk")
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	pkg, err := appspec.PackBlocksTo(dir, out, appspec.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	return path, pkg
}

// sendFile deploys the package at path over HTTP, streamed.
func sendFile(ctx context.Context, client *api.ControllerClient, path string) (*api.AppInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return client.DeployFrom(ctx, f, st.Size())
}

// nothingLeft fails unless a refused deploy left nothing: no spooled
// file, no package in the store, no application record.
func nothingLeft(t *testing.T, c *Controller, what string) {
	t.Helper()
	if left, _ := os.ReadDir(c.cfg.UploadDir); len(left) != 0 {
		t.Errorf("%s: %d files left in the upload directory (%s)", what, len(left), left[0].Name())
	}
	if res, err := c.cfg.Store.List(context.Background(), c.cfg.SystemBucket, store.ListOptions{Prefix: "apps/"}); err == nil && len(res.Objects) != 0 {
		t.Errorf("%s: %d objects stored (%s)", what, len(res.Objects), res.Objects[0].Key)
	}
	if apps := c.Apps(); len(apps) != 0 {
		t.Errorf("%s: %d applications recorded", what, len(apps))
	}
	if resp, err := c.cfg.Etcd.Get(context.Background(), EtcdApps, clientv3.WithPrefix()); err != nil || resp.Count != 0 {
		t.Errorf("%s: application records in etcd: %v, %v", what, resp, err)
	}
}

// An upload past --max-package is refused, by its announced length or by
// what arrives, with an error naming the limit; a truncated or corrupt
// one is refused as invalid; none leaves anything behind.
func TestUploadRefused(t *testing.T) {
	ctx := context.Background()
	c, _, _ := setupWith(t, Config{MaxPackage: 1 << 20, UploadDir: t.TempDir()})
	srv := httptest.NewServer(c.Handler("admin-token-0123456789", nil))
	defer srv.Close()
	client := api.NewControllerClient(srv.URL, "admin-token-0123456789", nil)
	path, pkg := bigApp(t, "big", 3<<20)

	_, err := sendFile(ctx, client, path)
	var apiErr *api.Error
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusRequestEntityTooLarge || !strings.Contains(err.Error(), "larger than 1MiB") || !strings.Contains(err.Error(), "--max-package") {
		t.Fatalf("an upload of %d bytes announced past the limit: %v", pkg.Size, err)
	}
	nothingLeft(t, c, "announced too large")

	// Without a length (chunked): refused once the limit is passed. (A
	// little past it, so that the server reads the rest before it
	// answers; further past, it answers and closes the connection.)
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/apps", io.MultiReader(strings.NewReader(strings.Repeat("x", 1<<20+64<<10))))
	req.Header.Set("Authorization", "Bearer admin-token-0123456789")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), "--max-package") {
		t.Fatalf("a chunked upload past the limit: %d %s", resp.StatusCode, body)
	}
	nothingLeft(t, c, "chunked too large")
	if _, err := c.DeployFrom(ctx, strings.NewReader(strings.Repeat("x", 1<<20+1))); !errors.Is(err, ErrPackageTooLarge) {
		t.Fatalf("DeployFrom past the limit: %v", err)
	}
	nothingLeft(t, c, "DeployFrom too large")

	// Truncated and corrupt packages within the limit.
	c.cfg.MaxPackage = 64 << 20
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	corrupt := append([]byte(nil), data...)
	corrupt[len(corrupt)/2] ^= 0x5a
	for name, b := range map[string][]byte{"truncated": data[:len(data)-4096], "corrupt": corrupt, "cut at a block": data[:1<<20],
		"an 8 MiB index": hostileIndex(8 << 20)} {
		_, err := client.Deploy(ctx, b)
		if !errors.As(err, &apiErr) || apiErr.Status != http.StatusBadRequest || !strings.Contains(err.Error(), "invalid") {
			t.Errorf("%s: %v", name, err)
		}
		if name == "an 8 MiB index" && !strings.Contains(err.Error(), "index is over what a package may have") {
			t.Errorf("%s: %v, want the index's bound named", name, err)
		}
		nothingLeft(t, c, name)
	}
	// The same package whole deploys.
	if info, err := sendFile(ctx, client, path); err != nil || info.Name != "big" {
		t.Fatalf("the whole package: %v", err)
	}
}

// hostileIndex is a package in the block format whose footer declares
// an archive of one 1-byte block and appspec.MaxPackageFiles entries in
// an index of indexLen bytes (zeros): well formed as far as its footer
// goes, its index over appspec.MaxIndexBytes.
func hostileIndex(indexLen int) []byte {
	obj := make([]byte, 16+indexLen+48)
	copy(obj, "hoardblk")
	le := binary.LittleEndian
	le.PutUint16(obj[8:], 1)
	le.PutUint32(obj[12:], 4096)
	foot := obj[16+indexLen:]
	le.PutUint64(foot[0:], 16)
	le.PutUint32(foot[8:], uint32(indexLen))
	le.PutUint64(foot[16:], 1)
	le.PutUint32(foot[24:], 4096)
	le.PutUint32(foot[28:], 1)
	le.PutUint32(foot[32:], appspec.MaxPackageFiles)
	le.PutUint16(foot[36:], 1)
	le.PutUint16(foot[38:], 1)
	copy(foot[40:], "hoardblk")
	return obj
}

// sinkStore keeps code packages' bytes nowhere, only their count and
// digest, so that what the test measures is the controller's memory.
type sinkStore struct {
	store.Store
	mu  sync.Mutex
	n   int64
	sum hash.Hash
}

func (s *sinkStore) Put(ctx context.Context, bucket, key string, r io.Reader, size int64, opts store.PutOptions) (store.PutResult, error) {
	if !strings.HasSuffix(key, "."+appspec.FormatBlocks) {
		return s.Store.Put(ctx, bucket, key, r, size, opts)
	}
	h := sha256.New()
	n, err := io.Copy(h, r)
	s.mu.Lock()
	s.n, s.sum = n, h
	s.mu.Unlock()
	return store.PutResult{}, err
}

// A deploy's memory does not grow with its package: a 200 MiB package
// of incompressible data goes over HTTP to the controller, is spooled,
// checked and stored while the heap in use (client and controller, one
// process) stays within a small fraction of it.
func TestUploadMemoryBounded(t *testing.T) {
	const size = 200 << 20
	sink := &sinkStore{Store: memstore.New()}
	c, _, _ := setupWith(t, Config{Store: sink, UploadDir: t.TempDir()})
	srv := httptest.NewServer(c.Handler("admin-token-0123456789", nil))
	defer srv.Close()
	client := api.NewControllerClient(srv.URL, "admin-token-0123456789", nil)
	path, pkg := bigApp(t, "model", size)

	var info *api.AppInfo
	var err error
	base, peak := peakHeap(func() { info, err = sendFile(context.Background(), client, path) })
	if err != nil {
		t.Fatal(err)
	}
	grew := int64(peak) - int64(base)
	t.Logf("a %d MiB package: heap in use %d MiB before, at most %d MiB during the deploy (+%d MiB)", pkg.Size>>20, base>>20, peak>>20, grew>>20)
	if grew > pkg.Size/4 {
		t.Errorf("the heap in use grew by %d MiB for a %d MiB package; want far less", grew>>20, pkg.Size>>20)
	}
	if sink.n != pkg.Size || hex.EncodeToString(sink.sum.Sum(nil)) != pkg.SHA256 || info.Name != "model" {
		t.Fatalf("stored %d bytes (digest match %v); packed %d", sink.n, sink.sum != nil && hex.EncodeToString(sink.sum.Sum(nil)) == pkg.SHA256, pkg.Size)
	}
	if left, _ := os.ReadDir(c.cfg.UploadDir); len(left) != 0 {
		t.Errorf("%d files left in the upload directory", len(left))
	}
}

// peakHeap runs f and returns the heap in use before it (after a
// collection) and the most seen while it ran, sampled every 5 ms.
func peakHeap(f func()) (base, peak uint64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base = ms.HeapInuse
	var top atomic.Uint64
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > top.Load() {
				top.Store(ms.HeapInuse)
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	f()
	close(done)
	<-sampled
	return base, max(top.Load(), base)
}

// An upload that fills the upload directory's disk is refused with an
// error saying so, and leaves nothing behind.
func TestUploadDiskFull(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=256k"); err != nil {
		t.Skipf("mounting a tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, 0) })
	c, _, _ := setupWith(t, Config{UploadDir: dir})
	path, pkg := bigApp(t, "full", 1<<20)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, err = c.DeployFrom(context.Background(), f)
	if err == nil || !strings.Contains(err.Error(), "the disk is full") || !strings.Contains(err.Error(), dir) {
		t.Fatalf("an upload of %d bytes to a 256 KiB disk: %v", pkg.Size, err)
	}
	nothingLeft(t, c, "disk full")
}
