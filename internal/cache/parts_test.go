package cache

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"sync"
	"testing"
)

// chunkedParts splits data into n parts, each copying its range in random
// pieces after waiting for its own gate, so the parts finish in whatever
// order the test opens the gates.
func chunkedParts(data []byte, n int, gates []chan struct{}, fail map[int]error) []Part {
	size := int64(len(data))
	parts := make([]Part, n)
	var off int64
	for i := range n {
		l := size / int64(n)
		if i == n-1 {
			l = size - off
		}
		src := data[off : off+l]
		parts[i] = Part{Off: off, Len: l, Fill: func(dst []byte, progress func(int64)) error {
			<-gates[i]
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			var done int64
			for done < int64(len(src)) {
				if err := fail[i]; err != nil && done > int64(len(src))/2 {
					return err
				}
				k := min(int64(len(src))-done, 1+rng.Int64N(90<<10))
				copy(dst[done:done+k], src[done:done+k])
				done += k
				progress(done)
			}
			return nil
		}}
		off += l
	}
	return parts
}

func openGates(n int) []chan struct{} {
	g := make([]chan struct{}, n)
	for i := range g {
		g[i] = make(chan struct{})
	}
	return g
}

// TestFillPartsOutOfOrder: parts finishing last-first still give every
// reader exactly the object's bytes in order, and a reader of the first
// part's bytes is served before the later parts are done.
func TestFillPartsOutOfOrder(t *testing.T) {
	data := pattern(5<<20 + 4321)
	e := newFilling(len(data))
	gates := openGates(4)
	done := make(chan error, 1)
	go func() { done <- e.FillParts(chunkedParts(data, 4, gates, nil), nil) }()

	var wg sync.WaitGroup
	got := make([][]byte, 3)
	for r := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf bytes.Buffer
			if _, err := io.Copy(&buf, e.Reader(0, int64(len(data)))); err != nil {
				t.Errorf("reader %d: %v", r, err)
			}
			got[r] = buf.Bytes()
		}()
	}
	// The first part alone: its bytes are readable while the rest wait.
	close(gates[0])
	first := make([]byte, len(data)/4)
	if _, err := io.ReadFull(e.Reader(0, int64(len(first))), first); err != nil || !bytes.Equal(first, data[:len(first)]) {
		t.Fatalf("first part's bytes before the others: err %v, equal %v", err, bytes.Equal(first, data[:len(first)]))
	}
	if e.Complete() {
		t.Fatal("entry complete with three parts outstanding")
	}
	close(gates[3])
	close(gates[2])
	close(gates[1])
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for r, b := range got {
		if !bytes.Equal(b, data) {
			t.Errorf("reader %d: %d bytes, equal %v", r, len(b), bytes.Equal(b, data))
		}
	}
	if b, ok := e.Bytes(); !ok || !bytes.Equal(b, data) {
		t.Error("entry not complete with the object's bytes")
	}
}

// TestFillPartsFailure: one part failing aborts the entry; readers get
// ErrFillAborted, never a short object presented as whole.
func TestFillPartsFailure(t *testing.T) {
	data := pattern(2 << 20)
	e := newFilling(len(data))
	gates := openGates(3)
	for _, g := range gates {
		close(g)
	}
	boom := errors.New("peer went away")
	err := e.FillParts(chunkedParts(data, 3, gates, map[int]error{1: boom}), nil)
	if !errors.Is(err, boom) {
		t.Fatalf("FillParts: %v, want the part's error", err)
	}
	if !e.Aborted() {
		t.Fatal("entry not aborted")
	}
	_, err = io.Copy(io.Discard, e.Reader(0, int64(len(data))))
	if !errors.Is(err, ErrFillAborted) {
		t.Fatalf("reader: %v, want ErrFillAborted", err)
	}
}

// TestFillPartsVerify: the last byte is released only after verify
// passed; a failed verification aborts.
func TestFillPartsVerify(t *testing.T) {
	data := pattern(1 << 20)
	for _, bad := range []bool{false, true} {
		e := newFilling(len(data))
		gates := openGates(2)
		close(gates[0])
		close(gates[1])
		var sawWhole bool
		err := e.FillParts(chunkedParts(data, 2, gates, nil), func(b []byte) error {
			// Readers must not have the last byte yet.
			sawWhole = e.filled.Load() == int64(len(data))
			if bad {
				return errors.New("checksum mismatch")
			}
			return nil
		})
		if sawWhole {
			t.Errorf("bad=%v: the whole object was readable before verification", bad)
		}
		if bad != (err != nil) || bad != e.Aborted() || bad == e.Complete() {
			t.Errorf("bad=%v: err %v, aborted %v, complete %v", bad, err, e.Aborted(), e.Complete())
		}
	}
}

// TestFillPartsRefusesBadCover: parts that leave a gap, overlap or
// overrun are refused before anything is filled.
func TestFillPartsRefusesBadCover(t *testing.T) {
	fill := func(dst []byte, progress func(int64)) error { progress(int64(len(dst))); return nil }
	for name, parts := range map[string][]Part{
		"gap":     {{Off: 0, Len: 10, Fill: fill}, {Off: 11, Len: 89, Fill: fill}},
		"overlap": {{Off: 0, Len: 10, Fill: fill}, {Off: 9, Len: 91, Fill: fill}},
		"short":   {{Off: 0, Len: 50, Fill: fill}},
		"overrun": {{Off: 0, Len: 50, Fill: fill}, {Off: 50, Len: 51, Fill: fill}},
		"empty":   {{Off: 0, Len: 0, Fill: fill}, {Off: 0, Len: 100, Fill: fill}},
		"nofill":  {{Off: 0, Len: 100}},
	} {
		e := newFilling(100)
		if err := e.FillParts(parts, nil); err == nil || !e.Aborted() {
			t.Errorf("%s: err %v, aborted %v", name, err, e.Aborted())
		}
	}
}

// TestFillPrefixThenParts: the prefix is readable before the parts are
// planned, and the parts then fill the rest.
func TestFillPrefixThenParts(t *testing.T) {
	data := pattern(3 << 20)
	e := newFilling(len(data))
	const prefix = 1<<20 + 3
	if err := e.FillPrefix(bytes.NewReader(data[:prefix]), prefix); err != nil {
		t.Fatal(err)
	}
	head := make([]byte, prefix)
	if _, err := io.ReadFull(e.Reader(0, prefix), head); err != nil || !bytes.Equal(head, data[:prefix]) {
		t.Fatalf("prefix: err %v", err)
	}
	fill := func(off int64) func([]byte, func(int64)) error {
		return func(dst []byte, progress func(int64)) error {
			copy(dst, data[off:])
			progress(int64(len(dst)))
			return nil
		}
	}
	// A part starting at 0 again is refused: the prefix is filled.
	if err := newFillingWithPrefix(t, data, prefix).FillParts([]Part{{Off: 0, Len: int64(len(data)), Fill: fill(0)}}, nil); err == nil {
		t.Fatal("parts overlapping the prefix accepted")
	}
	mid := int64(prefix + 1<<20)
	if err := e.FillParts([]Part{{Off: prefix, Len: mid - prefix, Fill: fill(prefix)}, {Off: mid, Len: int64(len(data)) - mid, Fill: fill(mid)}}, nil); err != nil {
		t.Fatal(err)
	}
	if b, ok := e.Bytes(); !ok || !bytes.Equal(b, data) {
		t.Fatal("entry not complete with the object's bytes")
	}
	// A body shorter than the prefix aborts.
	e2 := newFilling(len(data))
	if err := e2.FillPrefix(bytes.NewReader(data[:10]), prefix); err == nil || !e2.Aborted() {
		t.Fatalf("short prefix: %v, aborted %v", err, e2.Aborted())
	}
}

func newFillingWithPrefix(t *testing.T, data []byte, n int64) *Entry {
	t.Helper()
	e := newFilling(len(data))
	if err := e.FillPrefix(bytes.NewReader(data), n); err != nil {
		t.Fatal(err)
	}
	return e
}
