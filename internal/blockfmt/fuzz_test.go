package blockfmt

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"testing"
)

// FuzzReader opens arbitrary bytes as an object: it must fail cleanly or
// read back, never panic or allocate beyond the object's own size.
func FuzzReader(f *testing.F) {
	f.Add(pack(f, payload(9000, 1)[4000:], WithBlockSize(4096)))
	f.Add(pack(f, nil))
	f.Add(buildArchive(f, map[string]string{"main.py": "x", "lib/a.py": "yy", "lib/pkg/b.bin": "zzz"}))
	f.Add([]byte(magic))
	// Footers declaring indexes larger than their counts allow.
	f.Add(hugeIndex(1, 1, 8<<10))
	f.Add(hugeIndex(2, 0, 64<<10))
	f.Fuzz(func(t *testing.T, obj []byte) {
		r, err := NewReader(context.Background(), ReaderAtSource(bytes.NewReader(obj)), int64(len(obj)), WithCacheBlocks(2))
		if err != nil {
			return
		}
		defer r.Close()
		// Read the start, the middle and the end: a few blocks, however
		// large the object claims to be.
		buf := make([]byte, 3000)
		for _, off := range []int64{0, r.Size() / 2, r.Size() - 10} {
			if _, err := r.ReadAt(buf, max(off, 0)); err != nil && err != io.EOF && !errors.Is(err, ErrChecksum) && !errors.Is(err, ErrFormat) {
				t.Fatalf("ReadAt %d: an error that is neither ErrChecksum nor ErrFormat: %v", off, err)
			}
		}
		if r.IsArchive() {
			fs.WalkDir(r, ".", func(p string, d fs.DirEntry, err error) error {
				if err == nil && !d.IsDir() {
					f, err := r.File(p)
					if err == nil {
						f.ReadAt(buf[:100], 0)
					}
				}
				return nil
			})
		}
	})
}

// FuzzRoundTrip packs arbitrary bytes and reads every range back.
func FuzzRoundTrip(f *testing.F) {
	f.Add([]byte("hello"), uint16(0), uint16(3))
	f.Add(payload(9000, 2), uint16(100), uint16(5000))
	f.Fuzz(func(t *testing.T, data []byte, a, n uint16) {
		r := open(t, pack(t, data, WithBlockSize(MinBlockSize)), WithCacheBlocks(1))
		got, err := io.ReadAll(io.NewSectionReader(r, 0, r.Size()))
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("read back %d of %d bytes: %v", len(got), len(data), err)
		}
		start := min(int(a), len(data))
		end := min(start+int(n), len(data))
		p := make([]byte, end-start)
		if _, err := r.ReadAt(p, int64(start)); err != nil && err != io.EOF || !bytes.Equal(p, data[start:end]) {
			t.Fatalf("[%d,%d): %v", start, end, err)
		}
	})
}
