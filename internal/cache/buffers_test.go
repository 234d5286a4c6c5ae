package cache

import (
	"bytes"
	"crypto/md5"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hoard-io/hoard/internal/store"
)

// chunkPattern is the content of version gen of object key: no two (key, gen)
// pairs share a chunk's bytes, so a chunk reused under a reader shows.
func chunkPattern(key, gen, size int) []byte {
	b := make([]byte, size)
	seed := fmt.Sprintf("<%d.%d>", key, gen)
	for i := range b {
		b[i] = seed[i%len(seed)] ^ byte(i>>10)
	}
	return b
}

// dribble hands out its bytes a few at a time, so that a fill and its
// readers interleave.
type dribble struct{ b []byte }

func (d *dribble) Read(p []byte) (int, error) {
	if len(d.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), 8<<10)], d.b)
	d.b = d.b[n:]
	runtime.Gosched()
	return n, nil
}

// Readers hold references while fills keep evicting and reusing the
// chunks of what they read: every byte they read is the version they
// opened, and the pool is reused all the while. Run it under -race: a
// chunk reused under a reader is also a data race.
func TestPooledChunksAreNotReusedUnderReaders(t *testing.T) {
	const (
		keys    = 8
		size    = MinPooled + 3*ChunkSize + 100 // chunks, the last one partly used
		fills   = 60
		readers = 4
	)
	c, err := New(Config{Budget: 4 * size, MaxObjectSize: 2 * size})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Charge(size); got != chunks(size)*ChunkSize {
		t.Fatalf("Charge(%d) = %d, want its chunks", size, got)
	}
	r := startCheckingReaders(t, c, readers, keys, size)
	for i := range fills {
		key := i % keys
		if !c.Reserve(c.Charge(size)) {
			t.Fatalf("fill %d: no room", i)
		}
		e := c.NewEntry(Key{"b", fmt.Sprint(key)}, store.ObjectInfo{Size: size, ETag: fmt.Sprintf("%d.%d", key, i)})
		if e.Charge() != c.Charge(size) {
			t.Fatalf("entry charges %d, want %d", e.Charge(), c.Charge(size))
		}
		if _, err := e.ReadFrom(&dribble{chunkPattern(key, i, size)}); err != nil {
			t.Fatal(err)
		}
		c.Add(e)
		e.Release()
	}
	reads := r.stop()
	s, bs := c.Stats(), c.BufferStats()
	if reads == 0 || s.Evictions == 0 || bs.Reused == 0 {
		t.Fatalf("%d reads, stats %+v, pool %+v: want reads, evictions and chunks reused", reads, s, bs)
	}
	if s.Bytes+s.Reserved > s.Budget {
		t.Fatalf("stats %+v: over budget", s)
	}
}

// An entry's chunks go back to the pool with its last reference, not
// before; a pinned entry's (Reader) never do.
func TestReleaseGivesChunksBack(t *testing.T) {
	c, err := New(Config{Budget: 8 * MinPooled, PoolBytes: 8 * MinPooled})
	if err != nil {
		t.Fatal(err)
	}
	fill := func(name string) *Entry {
		t.Helper()
		if !c.Reserve(c.Charge(MinPooled)) {
			t.Fatal("no room")
		}
		e := c.NewEntry(Key{"b", name}, store.ObjectInfo{Size: MinPooled})
		if _, err := e.ReadFrom(bytes.NewReader(chunkPattern(1, 1, MinPooled))); err != nil {
			t.Fatal(err)
		}
		if !c.Add(e) {
			t.Fatal("not added")
		}
		return e
	}
	free := func() int64 { return c.BufferStats().FreeBytes }

	e := fill("a")
	if !e.Acquire() {
		t.Fatal("a live entry refused a reference")
	}
	rc := e.ReadCloser(0, e.Size())
	e.Release() // the filler's
	c.Remove(Key{"b", "a"})
	if free() != 0 {
		t.Fatalf("%d bytes free while a reader holds the entry", free())
	}
	rc.Close()
	rc.Close() // once
	if free() != MinPooled {
		t.Fatalf("%d bytes free after the last reference, want %d", free(), MinPooled)
	}
	if e.Acquire() {
		t.Fatal("a released entry took a reference")
	}

	p := fill("p")
	_ = p.Reader(0, 1) // a reader without a reference: never reused
	p.Release()
	c.Remove(Key{"b", "p"})
	if free() != 0 {
		t.Fatalf("%d bytes free: a pinned entry's chunks came back", free())
	}
	if r := c.BufferStats().Reused; int64(r) != chunks(MinPooled) {
		t.Fatalf("%d chunks reused, want %d (the second fill's)", r, chunks(MinPooled))
	}
	defer func() {
		if recover() == nil {
			t.Error("a reference released twice did not panic")
		}
	}()
	p.Release()
}

// Pages that are whole chunks are pooled whatever their size; a page
// that is not (an object's last) is held as Charge and NewEntry hold it.
func TestPagesArePooled(t *testing.T) {
	c, err := New(Config{Budget: 8 * MinPooled, PoolBytes: 8 * MinPooled})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		size   int64
		pooled bool
	}{{ChunkSize, true}, {4 * ChunkSize, true}, {ChunkSize + 1, false}, {100, false}, {MinPooled + 1, true}} {
		charge := c.PageCharge(tc.size)
		if !c.Reserve(charge) {
			t.Fatalf("no room for %d", tc.size)
		}
		e := c.NewPageEntry(Key{"b", "page"}, store.ObjectInfo{Size: tc.size})
		if e.Charge() != charge || (e.chunks != nil) != tc.pooled {
			t.Errorf("page of %d: charge %d (reserved %d), pooled %v; want pooled %v", tc.size, e.Charge(), charge, e.chunks != nil, tc.pooled)
		}
		data := chunkPattern(1, 1, int(tc.size))
		if _, err := e.ReadFrom(bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
		if got, _ := e.Bytes(); !bytes.Equal(got, data) {
			t.Errorf("page of %d reads back wrong", tc.size)
		}
		if !c.Add(e) {
			t.Fatal("not added")
		}
		e.Release()
		c.Remove(Key{"b", "page"})
	}
	if s := c.Stats(); s.Reserved != 0 || s.Bytes != 0 {
		t.Errorf("stats %+v, want nothing held", s)
	}
	if c.BufferStats().Reused == 0 {
		t.Error("no page reused a pooled chunk")
	}
}

// A Builder takes memory as bytes arrive, refuses more than announced,
// and its entry reads back what was written, in chunks or not.
func TestBuilder(t *testing.T) {
	c, err := New(Config{Budget: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	for _, size := range []int{0, 1000, MinPooled - 1, MinPooled, 3*MinPooled + 7} {
		data := chunkPattern(size, 0, size)
		b := c.NewBuilder(int64(size))
		for p := data; len(p) > 0; {
			n := min(len(p), 5000)
			if _, err := b.Write(p[:n]); err != nil {
				t.Fatal(err)
			}
			p = p[n:]
		}
		if _, err := b.Write([]byte{1}); err != ErrTooLong {
			t.Fatalf("size %d: a byte too many: %v", size, err)
		}
		e := b.Entry(Key{"b", "k"}, store.ObjectInfo{})
		got, ok := e.Bytes()
		if !ok || !bytes.Equal(got, data) || e.Size() != int64(size) || e.Charge() != c.Charge(int64(size)) {
			t.Fatalf("size %d: entry of %d bytes charging %d (want %d), same bytes %v", size, e.Size(), e.Charge(), c.Charge(int64(size)), bytes.Equal(got, data))
		}
		e.Release()
	}
	// A sender that stops early holds what it sent, not what it announced.
	before := c.BufferStats().FreeBytes
	b := c.NewBuilder(32 << 20)
	if _, err := b.Write(make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	if len(b.chunks) != 1 || c.BufferStats().FreeBytes != before-ChunkSize {
		t.Fatalf("%d chunks for 1000 bytes, pool %+v", len(b.chunks), c.BufferStats())
	}
	b.Discard()
	if c.BufferStats().FreeBytes != before {
		t.Fatalf("pool %+v after Discard, want the chunk back", c.BufferStats())
	}
}

// recordWrites keeps what is written to it and the size of each write.
type recordWrites struct {
	got    bytes.Buffer
	writes []int
}

func (w *recordWrites) Write(p []byte) (int, error) {
	w.writes = append(w.writes, len(p))
	return w.got.Write(p)
}

// WriteTo of a chunked entry gathers the chunks that are filled into
// writes of up to writeBatch bytes, from any offset to any end; while the
// entry fills, it writes what is there; the bytes are the entry's.
func TestWriteToGathersChunks(t *testing.T) {
	const size = 3<<20 + 5000
	c, err := New(Config{Budget: 16 << 20, MaxObjectSize: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	want := chunkPattern(1, 1, size)
	e := c.NewEntry(Key{"b", "k"}, store.ObjectInfo{Size: size, ETag: "1.1"})
	defer e.Release()
	if e.chunks == nil {
		t.Fatal("the entry is not held in chunks")
	}
	// Filling, with a reader writing out all the while.
	done := make(chan *recordWrites)
	go func() {
		w := &recordWrites{}
		if _, err := e.Reader(0, size).(io.WriterTo).WriteTo(w); err != nil {
			t.Error(err)
		}
		done <- w
	}()
	if _, err := e.ReadFrom(&dribble{b: want}); err != nil {
		t.Fatal(err)
	}
	if w := <-done; !bytes.Equal(w.got.Bytes(), want) {
		t.Fatalf("while filling: %d bytes written, not the entry's %d", w.got.Len(), size)
	}
	for _, r := range []struct{ off, n int64 }{
		{0, size},
		{1000, size - 1000 - 77},
		{3*ChunkSize + 5, 2 * ChunkSize},
		{ChunkSize, ChunkSize},
		{size - 10, 10},
	} {
		w := &recordWrites{}
		if n, err := e.Reader(r.off, r.n).(io.WriterTo).WriteTo(w); err != nil || n != r.n {
			t.Fatalf("[%d, +%d): %d, %v", r.off, r.n, n, err)
		}
		if !bytes.Equal(w.got.Bytes(), want[r.off:r.off+r.n]) {
			t.Fatalf("[%d, +%d): wrong bytes", r.off, r.n)
		}
		if wantWrites := (r.n + writeBatch - 1) / writeBatch; int64(len(w.writes)) != wantWrites {
			t.Errorf("[%d, +%d): writes %v, want %d of up to %d bytes", r.off, r.n, w.writes, wantWrites, writeBatch)
		}
	}
}

// The batch buffers are bounded: with every one taken, a writer writes
// chunk by chunk, and a buffer given back is taken again.
func TestWriteBatchesAreBounded(t *testing.T) {
	var held []*[]byte
	for {
		b := takeBatch()
		if b == nil {
			break
		}
		held = append(held, b)
		if len(held) > maxWriteBatches {
			t.Fatalf("%d batch buffers taken, more than %d", len(held), maxWriteBatches)
		}
	}
	c, err := New(Config{Budget: 16 << 20, MaxObjectSize: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	const size = 1<<20 + 100
	want := chunkPattern(2, 1, size)
	e := c.NewEntry(Key{"b", "k"}, store.ObjectInfo{Size: size, ETag: "2.1"})
	defer e.Release()
	if _, err := e.ReadFrom(bytes.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	w := &recordWrites{}
	if _, err := e.Reader(0, size).(io.WriterTo).WriteTo(w); err != nil || !bytes.Equal(w.got.Bytes(), want) {
		t.Fatalf("with no batch buffer free: %v, %d bytes", err, w.got.Len())
	}
	if len(w.writes) != int(chunks(size)) {
		t.Errorf("with no batch buffer free: writes %v, want one per chunk", w.writes)
	}
	for _, b := range held {
		writeBatches <- b
	}
	w = &recordWrites{}
	if _, err := e.Reader(0, size).(io.WriterTo).WriteTo(w); err != nil || !bytes.Equal(w.got.Bytes(), want) || len(w.writes) != 2 {
		t.Fatalf("with the buffers back: %v, writes %v", err, w.writes)
	}
}

// A writer in memory (a hash, a buffer, io.Discard) gets the chunks as
// they are, with no gathering copy.
func TestWriteToInMemoryWritesChunks(t *testing.T) {
	if !inMemory(io.Discard) || !inMemory(&bytes.Buffer{}) || !inMemory(md5.New()) || inMemory(&recordWrites{}) {
		t.Fatal("inMemory misjudges a writer")
	}
}

// checkingReaders are goroutines that read the cache's entries of keys
// "0".."keys-1" in turn, each holding a reference while it reads, and
// check every byte against the version its ETag ("key.gen") names.
type checkingReaders struct {
	done  atomic.Bool
	reads atomic.Int64
	wg    sync.WaitGroup
}

// startCheckingReaders starts n checking readers of c's objects of size
// bytes.
func startCheckingReaders(t *testing.T, c *Cache, n, keys, size int) *checkingReaders {
	r := &checkingReaders{}
	for first := range n {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			buf := make([]byte, 5<<10)
			for i := first; !r.done.Load(); i++ {
				e := c.Get(Key{"b", fmt.Sprint(i % keys)})
				if e == nil || !e.Acquire() {
					runtime.Gosched()
					continue
				}
				var key, gen int
				fmt.Sscanf(e.Info().ETag, "%d.%d", &key, &gen)
				rc := e.ReadCloser(0, e.Size())
				var got bytes.Buffer
				if _, err := io.CopyBuffer(struct{ io.Writer }{&got}, struct{ io.Reader }{rc}, buf); err != nil {
					t.Error(err)
				}
				rc.Close()
				if !bytes.Equal(got.Bytes(), chunkPattern(key, gen, size)) {
					t.Errorf("read of %d.%d: bytes of another object", key, gen)
					r.done.Store(true)
				}
				r.reads.Add(1)
			}
		}()
	}
	return r
}

// stop ends the readers and returns how many reads they made.
func (r *checkingReaders) stop() int64 {
	r.done.Store(true)
	r.wg.Wait()
	return r.reads.Load()
}
