package appspec

import (
	"bytes"
	"errors"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hoard-io/hoard/internal/blockfmt"
)

func TestBlockPackagesRefused(t *testing.T) {
	mk := func(build func(w *blockfmt.Writer)) []byte {
		var buf bytes.Buffer
		w, err := blockfmt.NewWriter(&buf, blockfmt.WithBlockSize(blockfmt.MinBlockSize))
		if err != nil {
			t.Fatal(err)
		}
		build(w)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	spec := "name: a\nfunctions: {f: {handler: m.h}}\n"
	good := mk(func(w *blockfmt.Writer) {
		w.AddFile(FileName, 0o644, strings.NewReader(spec))
		w.AddFile("m.py", 0o644, strings.NewReader(strings.Repeat("def h(e, c): return 1\n", 2000)))
	})
	pkg, err := ReadPackage(good)
	if err != nil || pkg.Format != FormatBlocks || len(pkg.IndexSHA256) != 64 {
		t.Fatalf("good package: %v", err)
	}
	// The index digest binds every block: another content, another digest.
	other := mk(func(w *blockfmt.Writer) {
		w.AddFile(FileName, 0o644, strings.NewReader(spec))
		w.AddFile("m.py", 0o644, strings.NewReader(strings.Repeat("def h(e, c): return 2\n", 2000)))
	})
	if o, err := ReadPackage(other); err != nil || o.IndexSHA256 == pkg.IndexSHA256 {
		t.Fatalf("another package's index digest: %v, same %v", err, o != nil && o.IndexSHA256 == pkg.IndexSHA256)
	}
	corrupt := bytes.Clone(good)
	corrupt[len(corrupt)/3] ^= 0xff
	for name, data := range map[string][]byte{
		"no spec":     mk(func(w *blockfmt.Writer) { w.AddFile("m.py", 0o644, strings.NewReader("x")) }),
		"spec is dir": mk(func(w *blockfmt.Writer) { w.AddDir(FileName, 0o755) }),
		"not archive": mk(func(w *blockfmt.Writer) { w.Write([]byte(spec)) }),
		"truncated":   good[:len(good)-1],
		"corrupt":     corrupt,
		"magic only":  []byte(blockMagic),
	} {
		if _, err := ReadPackage(data); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: ReadPackage: %v", name, err)
		}
		if err := Unpack(data, filepath.Join(t.TempDir(), "code")); err == nil {
			t.Errorf("%s: Unpack succeeded", name)
		}
	}
}

// PackBlocksTo writes to a file what PackBlocks returns, and the file
// reads back (ReadPackageAt, UnpackAt) as the bytes do; limits are
// settings: a package past Limits.Package or Limits.Unpacked is refused
// by name.
func TestPackageFileLimits(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(FileName, "name: a\nfunctions: {f: {handler: m.h}}\n")
	noise := make([]byte, 3<<20)
	rand.New(rand.NewSource(1)).Read(noise)
	write("m.bin", string(noise))
	mem, err := PackBlocks(dir)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "pkg"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pkg, err := PackBlocksTo(dir, f, DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	if pkg.Data != nil || pkg.Size != int64(len(mem.Data)) || pkg.SHA256 != mem.SHA256 {
		t.Fatalf("PackBlocksTo: %d bytes %s; PackBlocks %d bytes %s", pkg.Size, pkg.SHA256, len(mem.Data), mem.SHA256)
	}
	for _, sum := range []string{"", pkg.SHA256} {
		got, err := ReadPackageAt(f, pkg.Size, sum, DefaultLimits())
		if err != nil || got.SHA256 != mem.SHA256 || got.IndexSHA256 == "" || len(got.BlockSums) == 0 || got.Spec.Name != "a" {
			t.Fatalf("ReadPackageAt(sum %q): %+v, %v", sum, got, err)
		}
	}
	dest := filepath.Join(t.TempDir(), "code")
	if err := UnpackAt(f, pkg.Size, dest, DefaultLimits()); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dest, "m.bin")); err != nil || !bytes.Equal(b, noise) {
		t.Fatalf("unpacked m.bin: %d bytes, %v", len(b), err)
	}

	small := Limits{Package: 1 << 20, Unpacked: 64 << 20}
	if _, err := PackBlocksTo(dir, io.Discard, small); err == nil || !strings.Contains(err.Error(), "more than 1MiB compressed") {
		t.Errorf("PackBlocksTo past Limits.Package: %v", err)
	}
	if _, err := PackBlocksTo(dir, io.Discard, Limits{Package: 64 << 20, Unpacked: 1 << 20}); err == nil || !strings.Contains(err.Error(), "more than 1MiB") {
		t.Errorf("PackBlocksTo past Limits.Unpacked: %v", err)
	}
	if _, err := ReadPackageAt(f, pkg.Size, "", small); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "1MiB") {
		t.Errorf("ReadPackageAt past Limits.Package: %v", err)
	}
	if _, err := ReadPackageAt(f, pkg.Size, "", Limits{Package: 64 << 20, Unpacked: 1 << 20}); !errors.Is(err, ErrInvalid) {
		t.Errorf("ReadPackageAt past Limits.Unpacked: %v", err)
	}
	if err := UnpackAt(f, pkg.Size, filepath.Join(t.TempDir(), "code"), small); !errors.Is(err, ErrInvalid) {
		t.Errorf("UnpackAt past Limits.Package: %v", err)
	}
	if _, err := ReadPackageAt(f, pkg.Size-1, "", DefaultLimits()); !errors.Is(err, ErrInvalid) {
		t.Errorf("ReadPackageAt of a truncated package: %v", err)
	}
	if err := (Limits{}).Validate(); err == nil {
		t.Error("zero limits are valid")
	}
}
