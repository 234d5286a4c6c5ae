package appspec

import (
	"bytes"
	"errors"
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
