package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/appspec"
)

// `hoard deploy` streams the package it packs: the controller sees a
// Content-Length and "Expect: 100-continue", and the bytes are the
// package; --max-package bounds what it sends.
func TestDeployStreams(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, appspec.FileName), []byte("name: s\nfunctions: {f: {handler: m.h}}\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "m.py"), []byte("def h(e, c): return 1\n"), 0o644)
	noise := make([]byte, 1<<20)
	rand.New(rand.NewSource(1)).Read(noise)
	os.WriteFile(filepath.Join(dir, "model.bin"), noise, 0o644)
	want, err := appspec.PackBlocks(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		length int64
		expect string
		sum    string
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		io.Copy(h, r.Body)
		got.length, got.expect, got.sum = r.ContentLength, r.Header.Get("Expect"), hex.EncodeToString(h.Sum(nil))
		json.NewEncoder(w).Encode(api.AppInfo{Name: "s", Version: 1, Rev: got.sum, Functions: []string{"f"}})
	}))
	defer srv.Close()
	var out, errOut bytes.Buffer
	if err := runDeploy(context.Background(), []string{"--controller", srv.URL, "--token", "t", dir}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if got.length != int64(len(want.Data)) || got.expect != "100-continue" || got.sum != want.SHA256 {
		t.Fatalf("sent %d bytes (Expect %q, digest %s); packed %d bytes, %s", got.length, got.expect, got.sum, len(want.Data), want.SHA256)
	}
	if !strings.Contains(out.String(), "deployed s version 1") {
		t.Errorf("output: %q", out.String())
	}
	err = runDeploy(context.Background(), []string{"--controller", srv.URL, "--token", "t", "--max-package", "512KiB", dir}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "more than 512KiB compressed (the limit)") {
		t.Fatalf("a package past --max-package: %v", err)
	}
}
