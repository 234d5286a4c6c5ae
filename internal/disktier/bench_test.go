package disktier

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"testing"
)

// BenchmarkOpenRead: a disk hit's work in the tier, a 4 MiB object: open,
// check the whole file (header, length, CRC32C), then stream it (checked
// again), from the page cache.
func BenchmarkOpenRead(b *testing.B) {
	tr := newTier(b, b.TempDir(), 1<<30, nil)
	const size = 4 << 20
	d := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	if err := tr.Write(context.Background(), "b", "k", info("k", size), io.NopCloser(bytes.NewReader(d))); err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 256<<10)
	b.SetBytes(size)
	b.ReportAllocs()
	for b.Loop() {
		_, body, err := tr.Open("b", "k")
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{body}, buf)
		body.Close()
		if err != nil || n != size {
			b.Fatal(n, err)
		}
	}
}

// BenchmarkWrite: a spill's work, a 4 MiB object: temporary file, CRC32C,
// rename (no fsync).
func BenchmarkWrite(b *testing.B) {
	tr := newTier(b, b.TempDir(), 1<<30, nil)
	const size = 4 << 20
	d := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	b.SetBytes(size)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		k := fmt.Sprint("k", i%64)
		inf := info(k, size)
		inf.ETag = fmt.Sprint("v", i) // a new version each time
		i++
		if err := tr.Write(context.Background(), "b", k, inf, io.NopCloser(bytes.NewReader(d))); err != nil {
			b.Fatal(err)
		}
	}
}
