package blockfmt

import (
	"bytes"
	"context"
	"io"
	"testing"
)

const benchSize = 32 << 20

func BenchmarkPack(b *testing.B) {
	data := payload(benchSize, 5)
	b.SetBytes(benchSize)
	b.ReportAllocs()
	var out int
	for b.Loop() {
		out = len(pack(b, data))
	}
	b.ReportMetric(float64(out)/benchSize, "ratio")
}

func BenchmarkUnpack(b *testing.B) {
	obj := pack(b, payload(benchSize, 5))
	buf := make([]byte, 1<<20)
	b.SetBytes(benchSize)
	b.ReportAllocs()
	for b.Loop() {
		r, err := NewReader(context.Background(), ReaderAtSource(bytes.NewReader(obj)), int64(len(obj)))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.CopyBuffer(io.Discard, io.NewSectionReader(r, 0, r.Size()), buf); err != nil {
			b.Fatal(err)
		}
		r.Close()
	}
}

// BenchmarkSmallRange reads 4 KiB from the middle of a 32 MiB object and
// reports the bytes fetched (tail and covering block) against the whole.
func BenchmarkSmallRange(b *testing.B) {
	obj := pack(b, payload(benchSize, 5))
	p := make([]byte, 4096)
	b.ReportAllocs()
	var fetched int64
	for b.Loop() {
		r, err := NewReader(context.Background(), ReaderAtSource(bytes.NewReader(obj)), int64(len(obj)))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := r.ReadAt(p, benchSize/2+100); err != nil {
			b.Fatal(err)
		}
		fetched = r.Stats().BytesFetched
		r.Close()
	}
	b.ReportMetric(float64(fetched), "bytes-fetched")
	b.ReportMetric(float64(fetched)/float64(len(obj)), "fraction-of-object")
}
