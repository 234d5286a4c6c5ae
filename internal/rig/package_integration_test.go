//go:build integration

package rig

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/agent"
	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/appspec"
	"github.com/hoard-io/hoard/internal/netshape"
)

// TestLargePackage deploys a package larger than the 64 MiB of earlier
// versions end to end: packed to a file, streamed over HTTP to the
// controller (spooled, checked, stored in MinIO), downloaded whole by the
// agent to a file and unpacked; the function reads its model back. No
// spooled or downloaded file is left behind.
func TestLargePackage(t *testing.T) {
	e := startShaped(t, netshape.Link{}, func(c *Config) { c.CodeFetch = agent.CodeFetchWhole })
	const modelBytes = 96 << 20
	dir := t.TempDir()
	model := RandomBytes(modelBytes, 18, 7)
	for name, body := range map[string][]byte{appspec.FileName: fmt.Appendf(nil, lazySpec, "large"), "fns.py": []byte(lazyFns), "model.bin": model} {
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(t.TempDir(), "pkg.blk")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pkg, err := appspec.PackBlocksTo(dir, f, appspec.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	if pkg.Size <= 64<<20 {
		t.Fatalf("the package is %d bytes; the test wants more than 64 MiB", pkg.Size)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := api.NewControllerClient(e.p.ControllerURL, e.cfg.ControllerToken, nil)
	t0 := time.Now()
	if _, err := f.Seek(0, 0); err != nil {
		t.Fatal(err)
	}
	info, err := client.DeployFrom(ctx, f, pkg.Size)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("deployed %d MiB over HTTP in %v", pkg.Size>>20, time.Since(t0).Round(time.Millisecond))
	if info.Rev != pkg.SHA256 {
		t.Fatalf("deployed revision %s, packed %s", info.Rev, pkg.SHA256)
	}
	st, err := e.st.Stat(ctx, appspec.PlatformBucket, "apps/large/"+pkg.SHA256+".blk")
	if err != nil || st.Size != pkg.Size {
		t.Fatalf("the stored package: %+v, %v", st, err)
	}

	off, n := 90<<20+17, 1<<20
	t0 = time.Now()
	rec := invoke(t, e.p.Controller, "large", "head", map[string]int{"off": off, "n": n})
	if !rec.OK || !rec.Cold {
		t.Fatalf("head: ok %v cold %v error %+v log %s", rec.OK, rec.Cold, rec.Error, rec.Log)
	}
	t.Logf("cold start with the package downloaded whole and unpacked: %v", time.Since(t0).Round(time.Millisecond))
	var out struct {
		SHA256 string `json:"sha256"`
		N      int    `json:"n"`
	}
	json.Unmarshal(rec.Result, &out)
	want := sha256.Sum256(model[off : off+n])
	if out.N != n || out.SHA256 != hex.EncodeToString(want[:]) {
		t.Fatalf("the function read %d bytes with digest %s, want %d with %s", out.N, out.SHA256, n, hex.EncodeToString(want[:]))
	}
	for _, d := range []string{filepath.Join(e.cfg.Dir, "uploads"), filepath.Join(e.cfg.Dir, "agent", "code")} {
		entries, err := os.ReadDir(d)
		if err != nil {
			t.Fatal(err)
		}
		for _, en := range entries {
			if strings.HasPrefix(en.Name(), ".") {
				t.Errorf("%s left in %s", en.Name(), d)
			}
		}
	}
}
