package cache

import (
	"bytes"
	"io"
	"testing"

	"github.com/hoard-io/hoard/internal/store"
)

// recordVectors is a VectorWriter that records each call's buffers.
type recordVectors struct {
	recordWrites
	calls [][]int
}

func (w *recordVectors) WriteVector(bufs [][]byte) (int64, error) {
	var lens []int
	var n int64
	for _, b := range bufs {
		lens = append(lens, len(b))
		w.got.Write(b)
		n += int64(len(b))
	}
	w.calls = append(w.calls, lens)
	return n, nil
}

// WriteTo of a chunked entry hands a VectorWriter the chunks themselves,
// up to writeBatch bytes a call, never a gathered copy, from any offset
// to any end, and while the entry fills.
func TestWriteToHandsChunksToVectors(t *testing.T) {
	const size = 3<<20 + 5000
	c, err := New(Config{Budget: 16 << 20, MaxObjectSize: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	want := chunkPattern(1, 1, size)
	e := c.NewEntry(Key{"b", "k"}, store.ObjectInfo{Size: size, ETag: "1.1"})
	defer e.Release()
	done := make(chan *recordVectors)
	go func() {
		w := &recordVectors{}
		if _, err := e.Reader(0, size).(io.WriterTo).WriteTo(w); err != nil {
			t.Error(err)
		}
		done <- w
	}()
	if _, err := e.ReadFrom(&dribble{b: want}); err != nil {
		t.Fatal(err)
	}
	if w := <-done; !bytes.Equal(w.got.Bytes(), want) || len(w.writes) != 0 {
		t.Fatalf("while filling: %d bytes, %d plain writes", w.got.Len(), len(w.writes))
	}
	for _, r := range []struct{ off, n int64 }{
		{0, size},
		{1000, size - 1000 - 77},
		{3*ChunkSize + 5, 2 * ChunkSize},
		{size - 10, 10},
	} {
		w := &recordVectors{}
		if n, err := e.Reader(r.off, r.n).(io.WriterTo).WriteTo(w); err != nil || n != r.n {
			t.Fatalf("[%d, +%d): %d, %v", r.off, r.n, n, err)
		}
		if !bytes.Equal(w.got.Bytes(), want[r.off:r.off+r.n]) || len(w.writes) != 0 {
			t.Fatalf("[%d, +%d): wrong bytes or plain writes %v", r.off, r.n, w.writes)
		}
		if wantCalls := (r.n + writeBatch - 1) / writeBatch; int64(len(w.calls)) != wantCalls {
			t.Errorf("[%d, +%d): calls %v, want %d of up to %d bytes", r.off, r.n, w.calls, wantCalls, writeBatch)
		}
		for _, call := range w.calls {
			for _, l := range call {
				if l > ChunkSize {
					t.Fatalf("[%d, +%d): a buffer of %d bytes, more than a chunk: gathered", r.off, r.n, l)
				}
			}
		}
	}
}
