package disktier

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// FuzzOpen: whatever bytes a file in the tier holds (damaged, truncated,
// planted by a process that shares the directory), Open either refuses it
// (ErrCorrupt, the file dropped) or serves an object whose bytes are
// exactly those the file's own checksum vouches for, for the key asked;
// it never panics and never reads past the file.
func FuzzOpen(f *testing.F) {
	dir := f.TempDir()
	tr, err := New(Config{Dir: dir, Budget: 1 << 30, MinObjectSize: 1, CleanInterval: 1 << 62})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { tr.Close() })
	good := data("k", 300)
	if err := tr.Write(f.Context(), "b", "k", info("k", len(good)), io.NopCloser(bytes.NewReader(good))); err != nil {
		f.Fatal(err)
	}
	path := tr.path(nameOf("b", "k"))
	valid, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid)
	f.Add(valid[:len(valid)-1])
	f.Add(append(bytes.Clone(valid), 0))
	f.Add([]byte{})
	f.Add(valid[:prefixLen])
	f.Fuzz(func(t *testing.T, raw []byte) {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, raw, 0o600); err != nil {
			t.Fatal(err)
		}
		inf, body, err := tr.Open("b", "k")
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Open: %v, want ErrCorrupt or success", err)
			}
			if _, serr := os.Stat(path); !errors.Is(serr, os.ErrNotExist) {
				t.Fatal("a refused file was kept")
			}
			return
		}
		got, err := io.ReadAll(body)
		body.Close()
		if err != nil {
			t.Fatalf("read after a verified Open: %v", err)
		}
		if int64(len(got)) != inf.Size || inf.Key != "k" || inf.Bucket != "b" {
			t.Fatalf("served %d bytes for %s/%s, size %d", len(got), inf.Bucket, inf.Key, inf.Size)
		}
		// Accepted: the file was a well-formed one for this key; its bytes
		// are what it holds between header and trailer.
		if !bytes.Contains(raw, got) {
			t.Fatal("served bytes the file does not hold")
		}
	})
}
