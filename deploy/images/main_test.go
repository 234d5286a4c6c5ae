package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// tree makes a small file tree under dir, with the modes an image needs.
func tree(t *testing.T, dir string) {
	t.Helper()
	for p, body := range map[string]string{"usr/local/bin/hoard": "#!binary", "etc/passwd": "root:x:0:0::/:/sbin/nologin\n"} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(dir, "usr/local/bin/hoard"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "tmp"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "tmp"), 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "var/lib/hoard"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../local/bin/hoard", filepath.Join(dir, "usr/local/hoard")); err != nil {
		t.Fatal(err)
	}
}

func sum(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// TestReproducible: the same tree, made twice at different times with
// different file dates, gives byte-identical archives; the image's
// layer holds the tree normalized (owners, modes, dates).
func TestReproducible(t *testing.T) {
	out := t.TempDir()
	args := func(dir, file string) []string {
		return []string{"--out", filepath.Join(out, file), "--name", "docker.io/hoard-io/hoard:test", "--layer", dir,
			"--entrypoint", "/usr/local/bin/hoard", "--user", "65532:65532", "--owner", "/var/lib/hoard=65532:65532", "--epoch", "1700000000"}
	}
	a, b := t.TempDir(), t.TempDir()
	tree(t, a)
	tree(t, b)
	old := time.Unix(1e9, 0)
	if err := os.Chtimes(filepath.Join(b, "etc/passwd"), old, old); err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	if err := run(args(a, "a.tar"), &stdout); err != nil {
		t.Fatal(err)
	}
	if err := run(args(b, "b.tar"), &stdout); err != nil {
		t.Fatal(err)
	}
	if sum(t, filepath.Join(out, "a.tar")) != sum(t, filepath.Join(out, "b.tar")) {
		t.Fatalf("two builds of the same tree differ:\n%s", stdout.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != 2 || strings.Fields(lines[0])[2] != strings.Fields(lines[1])[2] {
		t.Fatalf("digests differ: %q", lines)
	}

	// Open the archive as an OCI layout and read the image back.
	dir := t.TempDir()
	untar(t, filepath.Join(out, "a.tar"), dir)
	lp, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := lp.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Annotations["io.containerd.image.name"] != "docker.io/hoard-io/hoard:test" || im.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "test" {
		t.Fatalf("index: %+v", im.Manifests)
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != "65532:65532" || cf.Config.Entrypoint[0] != "/usr/local/bin/hoard" || cf.OS != "linux" || cf.Created.Unix() != 1700000000 {
		cj, _ := json.Marshal(cf)
		t.Fatalf("config: %s", cj)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %d, %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	got := map[string]*tar.Header{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got[h.Name] = h
	}
	for name, want := range map[string]struct {
		mode     int64
		uid      int
		typ      byte
		linkname string
	}{
		"usr/local/bin/hoard": {0o755, 0, tar.TypeReg, ""},
		"etc/passwd":          {0o644, 0, tar.TypeReg, ""},
		"tmp/":                {0o1777, 0, tar.TypeDir, ""},
		"var/lib/hoard/":      {0o755, 65532, tar.TypeDir, ""},
		"usr/local/hoard":     {0o777, 0, tar.TypeSymlink, "../local/bin/hoard"},
	} {
		h := got[name]
		if h == nil {
			t.Errorf("%s missing from the layer", name)
			continue
		}
		if h.Mode != want.mode || h.Uid != want.uid || h.Gid != want.uid || h.Typeflag != want.typ || h.Linkname != want.linkname || h.ModTime.Unix() != 1700000000 {
			t.Errorf("%s: mode %o uid %d gid %d type %c link %q date %v", name, h.Mode, h.Uid, h.Gid, h.Typeflag, h.Linkname, h.ModTime)
		}
	}
}

// TestBadInput: what the builder cannot honour is refused, naming it,
// and writes nothing.
func TestBadInput(t *testing.T) {
	out := t.TempDir()
	dir := t.TempDir()
	tree(t, dir)
	base := []string{"--out", filepath.Join(out, "x.tar"), "--name", "x:1", "--layer", dir}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--out", filepath.Join(out, "x.tar")}, "required"},
		{append(base, "--owner", "var/lib=1:1"), "want /PATH=UID:GID"},
		{append(base, "--env", "NOEQUALS"), "want KEY=VALUE"},
		{append(base, "--epoch", "yesterday"), "not a number"},
		{[]string{"--out", filepath.Join(out, "x.tar"), "--name", "x:1", "--layer", filepath.Join(dir, "etc/passwd")}, "not a directory"},
	} {
		err := run(c.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error saying %q", c.args, err, c.want)
		}
	}
	entries, _ := os.ReadDir(out)
	if len(entries) != 0 {
		t.Errorf("refused builds left %d files", len(entries))
	}
}

func untar(t *testing.T, archive, dir string) {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
