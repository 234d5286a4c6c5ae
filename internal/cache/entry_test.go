package cache

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/hoard-io/hoard/internal/store"
)

// pattern returns n bytes in which every offset has a recognisable value,
// so a byte out of place shows.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	return b
}

func newFilling(size int) *Entry {
	return NewEntry(Key{"bk", "obj"}, store.ObjectInfo{Bucket: "bk", Key: "obj", Size: int64(size), ETag: "etag"})
}

// pipeFill starts filling e from a pipe that a writer feeds with data in
// pieces of random sizes, and returns the filler's result.
func pipeFill(e *Entry, data []byte, seed uint64) <-chan error {
	pr, pw := io.Pipe()
	go func() {
		rng := rand.New(rand.NewPCG(seed, seed))
		for rest := data; len(rest) > 0; {
			n := min(len(rest), 1+rng.IntN(200<<10))
			if _, err := pw.Write(rest[:n]); err != nil {
				return
			}
			rest = rest[n:]
		}
		pw.Close()
	}()
	done := make(chan error, 1)
	go func() {
		_, err := e.ReadFrom(pr)
		done <- err
	}()
	return done
}

// TestReadersOfAFillingEntry has readers of the whole object and of
// sub-ranges, with both Read and WriteTo, run while the filler writes in
// pieces; every reader must see exactly its bytes in order.
func TestReadersOfAFillingEntry(t *testing.T) {
	data := pattern(3<<20 + 12345) // crosses several publication steps
	e := newFilling(len(data))
	type span struct{ off, n int64 }
	spans := []span{
		{0, int64(len(data))},
		{0, 1},
		{1 << 20, 1 << 20},
		{1<<20 - 1, 2},
		{int64(len(data)) - 10, 10},
		{5, 0},
	}
	var wg sync.WaitGroup
	for _, sp := range spans {
		for _, useWriteTo := range []bool{false, true} {
			wg.Go(func() {
				r := e.Reader(sp.off, sp.n)
				var got []byte
				var err error
				if useWriteTo {
					var buf bytes.Buffer
					_, err = r.(io.WriterTo).WriteTo(&buf)
					got = buf.Bytes()
				} else {
					got, err = io.ReadAll(readerOnly{r}) // plain Read calls, small buffers
				}
				if err != nil {
					t.Errorf("span %+v (WriteTo %v): %v", sp, useWriteTo, err)
					return
				}
				if want := data[sp.off : sp.off+sp.n]; !bytes.Equal(got, want) {
					t.Errorf("span %+v (WriteTo %v): %d bytes differ from the object's", sp, useWriteTo, len(got))
				}
			})
		}
	}
	if err := <-pipeFill(e, data, 7); err != nil {
		t.Fatalf("ReadFrom: %v", err)
	}
	wg.Wait()
	if !e.Complete() || e.Aborted() {
		t.Errorf("entry complete=%v aborted=%v after a full fill", e.Complete(), e.Aborted())
	}
	if b, ok := e.Bytes(); !ok || !bytes.Equal(b, data) {
		t.Error("Bytes() of the complete entry differ")
	}
}

// readerOnly hides WriteTo so io.ReadAll goes through Read.
type readerOnly struct{ r io.Reader }

func (r readerOnly) Read(p []byte) (int, error) {
	if len(p) > 4096 {
		p = p[:4096]
	}
	return r.r.Read(p)
}

func TestBytesOfAnIncompleteEntry(t *testing.T) {
	e := newFilling(10)
	if b, ok := e.Bytes(); ok || b != nil {
		t.Errorf("Bytes() of a filling entry = %v, %v", b, ok)
	}
}

// TestAbortWakesBlockedReaders: readers waiting for bytes that will never
// come must wake with ErrFillAborted.
func TestAbortWakesBlockedReaders(t *testing.T) {
	for _, useWriteTo := range []bool{false, true} {
		t.Run(fmt.Sprint("WriteTo=", useWriteTo), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newFilling(10)
				pr, pw := io.Pipe()
				go e.ReadFrom(pr) //nolint:errcheck // the readers see the outcome
				errs := make(chan error, 1)
				got := make(chan []byte, 1)
				go func() {
					var buf bytes.Buffer
					var err error
					if useWriteTo {
						_, err = e.Reader(0, 10).(io.WriterTo).WriteTo(&buf)
					} else {
						_, err = buf.ReadFrom(readerOnly{e.Reader(0, 10)})
					}
					got <- buf.Bytes()
					errs <- err
				}()
				synctest.Wait() // the reader is blocked on unfilled bytes
				broken := errors.New("connection reset")
				pw.CloseWithError(broken)
				err := <-errs
				if !errors.Is(err, ErrFillAborted) || !errors.Is(err, broken) {
					t.Errorf("reader error = %v, want ErrFillAborted wrapping the cause", err)
				}
				if b := <-got; len(b) != 0 {
					t.Errorf("reader got %q from a fill that delivered nothing", b)
				}
				if !e.Aborted() || e.Complete() {
					t.Errorf("aborted=%v complete=%v", e.Aborted(), e.Complete())
				}
			})
		})
	}
}

func TestAbortAfterSomeBytes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		data := pattern(100)
		e := newFilling(len(data))
		pr, pw := io.Pipe()
		go e.ReadFrom(pr) //nolint:errcheck
		result := make(chan error, 1)
		var got []byte
		go func() {
			var err error
			got, err = io.ReadAll(e.Reader(0, 100))
			result <- err
		}()
		go func() {
			pw.Write(data[:40])
			pw.CloseWithError(errors.New("broken"))
		}()
		err := <-result
		if !errors.Is(err, ErrFillAborted) {
			t.Fatalf("read = %d bytes, %v; want ErrFillAborted", len(got), err)
		}
		// What a reader got before the error is a prefix of the object.
		if !bytes.Equal(got, data[:len(got)]) || len(got) > 40 {
			t.Errorf("got %d bytes before the error, not a prefix of the 40 sent", len(got))
		}
		// Readers arriving later get the error too, even for the bytes
		// that did arrive: a reader of bytes past them cannot finish.
		if _, err := io.ReadAll(e.Reader(50, 10)); !errors.Is(err, ErrFillAborted) {
			t.Errorf("late reader: %v, want ErrFillAborted", err)
		}
	})
}

func TestAbortOfACompleteEntryDoesNothing(t *testing.T) {
	data := pattern(10)
	e := NewCompleteEntry(Key{"bk", "k"}, store.ObjectInfo{}, data)
	e.Abort(errors.New("late"))
	if !e.Complete() || e.Aborted() {
		t.Fatal("Abort changed a complete entry")
	}
	if got, err := io.ReadAll(e.Reader(0, 10)); err != nil || !bytes.Equal(got, data) {
		t.Errorf("read = %q, %v", got, err)
	}
}

// TestReadFromWrongLength: a store body shorter or longer than the size it
// announced aborts the fill.
func TestReadFromWrongLength(t *testing.T) {
	for _, tc := range []struct {
		name      string
		announced int
		sent      int
		wantErr   bool
	}{
		{"exact", 100, 100, false},
		{"exact, over a MiB", 1<<20 + 1, 1<<20 + 1, false},
		{"empty", 0, 0, false},
		{"short", 100, 99, true},
		{"nothing", 100, 0, true},
		{"short at a MiB", 1<<20 + 1, 1 << 20, true},
		{"long", 100, 101, true},
		{"long, over a MiB", 1 << 20, 1<<20 + 1, true},
		{"long, announced empty", 0, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newFilling(tc.announced)
			data := pattern(tc.sent)
			n, err := e.ReadFrom(bytes.NewReader(data))
			if (err != nil) != tc.wantErr {
				t.Fatalf("ReadFrom = %d, %v; want error %v", n, err, tc.wantErr)
			}
			if tc.sent < tc.announced && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("short body: error %v, want io.ErrUnexpectedEOF", err)
			}
			if got := e.Aborted(); got != tc.wantErr {
				t.Errorf("Aborted() = %v, want %v", got, tc.wantErr)
			}
			if got := e.Complete(); got == tc.wantErr {
				t.Errorf("Complete() = %v, want %v", got, !tc.wantErr)
			}
			if !tc.wantErr {
				if b, ok := e.Bytes(); !ok || !bytes.Equal(b, data) {
					t.Error("Bytes() differ from the body")
				}
			}
		})
	}
}

func TestReaderOfACompleteEntry(t *testing.T) {
	data := pattern(1000)
	e := NewCompleteEntry(Key{"bk", "k"}, store.ObjectInfo{ETag: "x", Size: 1}, data)
	if e.Size() != 1000 || e.Info().Size != 1000 {
		t.Errorf("Size() = %d, Info().Size = %d; want the data's 1000", e.Size(), e.Info().Size)
	}
	for _, tc := range []struct{ off, n int64 }{
		{0, 1000}, {0, 0}, {999, 1}, {10, 90}, {500, 500}, {1000, 0},
	} {
		for _, useWriteTo := range []bool{false, true} {
			var got []byte
			var err error
			r := e.Reader(tc.off, tc.n)
			if useWriteTo {
				var buf bytes.Buffer
				_, err = io.Copy(&buf, r)
				got = buf.Bytes()
			} else {
				got, err = io.ReadAll(readerOnly{r})
			}
			if err != nil || !bytes.Equal(got, data[tc.off:tc.off+tc.n]) {
				t.Errorf("Reader(%d, %d) (WriteTo %v) = %d bytes, %v", tc.off, tc.n, useWriteTo, len(got), err)
			}
		}
	}
}

// failingWriter accepts limit bytes, then fails.
type failingWriter struct {
	limit int
	got   []byte
}

var errWriterFull = errors.New("writer full")

func (w *failingWriter) Write(p []byte) (int, error) {
	room := w.limit - len(w.got)
	if len(p) > room {
		w.got = append(w.got, p[:room]...)
		return room, errWriterFull
	}
	w.got = append(w.got, p...)
	return len(p), nil
}

func TestWriteToPropagatesWriterErrors(t *testing.T) {
	data := pattern(100)
	e := NewCompleteEntry(Key{"bk", "k"}, store.ObjectInfo{}, data)
	w := &failingWriter{limit: 30}
	n, err := e.Reader(10, 80).(io.WriterTo).WriteTo(w)
	if !errors.Is(err, errWriterFull) || n != 30 || !bytes.Equal(w.got, data[10:40]) {
		t.Errorf("WriteTo = %d, %v (wrote %d bytes); want 30, errWriterFull", n, err, len(w.got))
	}
}

func TestEmptyEntry(t *testing.T) {
	e := newFilling(0)
	if _, err := e.ReadFrom(strings.NewReader("")); err != nil {
		t.Fatal(err)
	}
	if !e.Complete() {
		t.Error("empty entry not complete after its fill")
	}
	if got, err := io.ReadAll(e.Reader(0, 0)); err != nil || len(got) != 0 {
		t.Errorf("read = %q, %v", got, err)
	}
}

func BenchmarkReadComplete1MiB(b *testing.B) {
	const size = 1 << 20
	e := NewCompleteEntry(Key{"bk", "k"}, store.ObjectInfo{}, pattern(size))
	sink := &copySink{buf: make([]byte, size)}
	b.SetBytes(size)
	b.ReportAllocs()
	for b.Loop() {
		sink.n = 0
		if _, err := io.Copy(sink, e.Reader(0, size)); err != nil {
			b.Fatal(err)
		}
	}
}

// copySink copies what it is given, as a socket write would; io.Discard
// would not touch the bytes at all.
type copySink struct {
	buf []byte
	n   int
}

func (s *copySink) Write(p []byte) (int, error) {
	s.n += copy(s.buf[s.n:], p)
	return len(p), nil
}

func BenchmarkReadComplete1MiBRead(b *testing.B) {
	const size = 1 << 20
	e := NewCompleteEntry(Key{"bk", "k"}, store.ObjectInfo{}, pattern(size))
	buf := make([]byte, 32<<10)
	b.SetBytes(size)
	b.ReportAllocs()
	for b.Loop() {
		r := e.Reader(0, size)
		for {
			_, err := r.Read(buf)
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
		}
	}
}
