package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPackArchiveRoundTrip(t *testing.T) {
	tmp := t.TempDir()
	src := filepath.Join(tmp, "src")
	files := map[string]string{
		"main.py":        "def handler(e, c):\n    return e\n",
		"lib/util.py":    strings.Repeat("x = 1\n", 50000),
		"lib/deep/a.bin": string(bytes.Repeat([]byte{0, 1, 2, 250}, 70000)),
		"empty":          "",
	}
	for name, content := range files {
		p := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	obj := filepath.Join(tmp, "app.blk")
	var out bytes.Buffer
	if code := run(context.Background(), []string{"pack", "--block-size", "64KiB", src, obj}, &out, io.Discard); code != 0 {
		t.Fatalf("pack: exit %d", code)
	}
	if !strings.Contains(out.String(), "4 file(s)") {
		t.Fatalf("pack printed %q", out.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"pack", "--list", obj}, &out, io.Discard); code != 0 {
		t.Fatalf("list: exit %d", code)
	}
	for name := range files {
		if !strings.Contains(out.String(), " "+name+"\n") {
			t.Errorf("--list does not show %s:\n%s", name, out.String())
		}
	}
	dest := filepath.Join(tmp, "out")
	if code := run(context.Background(), []string{"pack", "--extract", obj, dest}, io.Discard, io.Discard); code != 0 {
		t.Fatalf("extract: exit %d", code)
	}
	for name, content := range files {
		got, err := os.ReadFile(filepath.Join(dest, name))
		if err != nil || string(got) != content {
			t.Errorf("%s: %d bytes, %v", name, len(got), err)
		}
		if st, _ := os.Stat(filepath.Join(dest, name)); st.Mode().Perm() != 0o640 {
			t.Errorf("%s: mode %v", name, st.Mode())
		}
	}
	// A damaged object is refused, not extracted wrong.
	data, _ := os.ReadFile(obj)
	data[len(data)/3] ^= 0xff
	bad := filepath.Join(tmp, "bad.blk")
	os.WriteFile(bad, data, 0o644)
	var stderr bytes.Buffer
	if code := run(context.Background(), []string{"pack", "--extract", bad, filepath.Join(tmp, "bad")}, io.Discard, &stderr); code != 1 {
		t.Fatalf("extract of a damaged object: exit %d, %s", code, stderr.String())
	}
}

func TestPackFileAndRefusals(t *testing.T) {
	tmp := t.TempDir()
	in := filepath.Join(tmp, "model.bin")
	content := bytes.Repeat([]byte("weights "), 200000)
	os.WriteFile(in, content, 0o644)
	obj := filepath.Join(tmp, "model.blk")
	if code := run(context.Background(), []string{"pack", in, obj}, io.Discard, io.Discard); code != 0 {
		t.Fatalf("pack: exit %d", code)
	}
	back := filepath.Join(tmp, "back.bin")
	if code := run(context.Background(), []string{"pack", "--extract", obj, back}, io.Discard, io.Discard); code != 0 {
		t.Fatalf("extract: exit %d", code)
	}
	if got, _ := os.ReadFile(back); !bytes.Equal(got, content) {
		t.Fatalf("extracted %d bytes, want %d", len(got), len(content))
	}
	dir := filepath.Join(tmp, "d")
	os.Mkdir(dir, 0o755)
	os.Symlink("/etc/passwd", filepath.Join(dir, "link"))
	var stderr bytes.Buffer
	if code := run(context.Background(), []string{"pack", dir, filepath.Join(tmp, "d.blk")}, io.Discard, &stderr); code != 1 || !strings.Contains(stderr.String(), "symbolic links") {
		t.Fatalf("symlink: exit %d, %s", code, stderr.String())
	}
	if _, err := os.Stat(filepath.Join(tmp, "d.blk")); !os.IsNotExist(err) {
		t.Fatalf("a failed pack left its output: %v", err)
	}
	for _, args := range [][]string{{"pack"}, {"pack", in}, {"pack", "--list"}, {"pack", "--list", "--extract", obj, back}, {"pack", "--block-size", "1KiB", in, obj + "2"}} {
		if code := run(context.Background(), args, io.Discard, io.Discard); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}
