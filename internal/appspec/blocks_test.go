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
	if pkg, err := ReadPackage(good); err != nil || pkg.Format != FormatBlocks {
		t.Fatalf("good package: %v", err)
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
