package cache

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/hoard-io/hoard/internal/store"
)

// fillEntry fills e with its pattern (key, gen) and adds it; the caller's
// reference is released.
func fillEntry(t *testing.T, c *Cache, e *Entry, key, gen int) {
	t.Helper()
	if _, err := e.ReadFrom(bytes.NewReader(chunkPattern(key, gen, int(e.Size())))); err != nil {
		t.Fatal(err)
	}
	c.FillDone(e.Charge())
	if !c.Add(e) {
		t.Fatalf("entry %d.%d not added", key, gen)
	}
	e.Release()
}

// firstBytes identifies an entry's chunks by their first byte's address.
func firstBytes(e *Entry) map[*byte]bool {
	m := make(map[*byte]bool, len(e.chunks))
	for _, c := range e.chunks {
		m[&c[0]] = true
	}
	return m
}

// A fill that evicts to make room takes the chunks of what it evicted,
// allocating nothing, unless a reader still holds them: then it
// allocates, the reader keeps reading its own bytes, and the chunks come
// back once the reader is done, as far as the pool's bound allows.
func TestFillTakesTheChunksItEvicts(t *testing.T) {
	const size = MinPooled + 3*ChunkSize + 100
	c, err := New(Config{Budget: 3 * chunks(size) * ChunkSize, MaxObjectSize: 2 * size, PoolBytes: ChunkSize})
	if err != nil {
		t.Fatal(err)
	}
	var entries []*Entry
	for i := range 3 {
		e := c.ReserveEntry(ForFill, Key{"b", fmt.Sprint(i)}, store.ObjectInfo{Size: size})
		if e == nil {
			t.Fatalf("fill %d refused", i)
		}
		entries = append(entries, e)
		fillEntry(t, c, e, i, 1)
	}
	if s := c.Stats(); s.Bytes != s.Budget || s.Evictions != 0 {
		t.Fatalf("stats %+v, want a full cache", s)
	}

	// Entry 0 goes, nobody reads it: its chunks are the new entry's.
	before := c.BufferStats()
	e3 := c.ReserveEntry(ForFill, Key{"b", "3"}, store.ObjectInfo{Size: size})
	if e3 == nil {
		t.Fatal("fill 3 refused")
	}
	after := c.BufferStats()
	if after.Allocated != before.Allocated || after.Reused-before.Reused != uint64(chunks(size)) {
		t.Fatalf("pool %+v then %+v: want the %d chunks evicted reused, none allocated", before, after, chunks(size))
	}
	old := firstBytes(entries[0])
	for p := range firstBytes(e3) {
		if !old[p] {
			t.Fatal("the fill holds a chunk that is not the evicted entry's")
		}
	}
	fillEntry(t, c, e3, 3, 1)

	// Entry 1 is being read when it goes: the fill allocates.
	if !entries[1].Acquire() {
		t.Fatal("entry 1 refused a reference")
	}
	rc := entries[1].ReadCloser(0, size)
	half := make([]byte, size/2)
	if _, err := io.ReadFull(rc, half); err != nil {
		t.Fatal(err)
	}
	before = c.BufferStats()
	e4 := c.ReserveEntry(ForFill, Key{"b", "4"}, store.ObjectInfo{Size: size})
	if e4 == nil {
		t.Fatal("fill 4 refused")
	}
	if after := c.BufferStats(); after.Allocated-before.Allocated != uint64(chunks(size)) {
		t.Fatalf("pool %+v then %+v: want every chunk allocated while entry 1 is read", before, after)
	}
	held := firstBytes(entries[1])
	for p := range firstBytes(e4) {
		if held[p] {
			t.Fatal("the fill took a chunk a reader holds")
		}
	}
	fillEntry(t, c, e4, 4, 1)
	rest, err := io.ReadAll(rc)
	if err != nil || !bytes.Equal(append(half, rest...), chunkPattern(1, 1, size)) {
		t.Fatalf("the reader of entry 1 read other bytes (%v)", err)
	}
	if free := c.BufferStats().FreeBytes; free != 0 {
		t.Fatalf("%d bytes free while the reader holds the evicted entry", free)
	}
	rc.Close()
	// The cache is full: of the chunks back, the pool keeps its own
	// limit (one chunk) and leaves the rest to the collector.
	if bs := c.BufferStats(); bs.FreeBytes != ChunkSize {
		t.Fatalf("pool %+v, want one chunk kept in a full cache", bs)
	}
}

// Removed entries' chunks wait in the room the budget has left (beyond
// the pool's own limit), and are dropped as the room is taken: by
// reservations that do not take them, by a lower budget.
func TestFreeChunksFollowTheRoom(t *testing.T) {
	const mib = 1 << 20
	c, err := New(Config{Budget: 64 * mib, MaxObjectSize: 64 * mib, PoolBytes: ChunkSize})
	if err != nil {
		t.Fatal(err)
	}
	e := c.ReserveEntry(ForFill, Key{"b", "k"}, store.ObjectInfo{Size: 4 * mib})
	fillEntry(t, c, e, 1, 1)
	c.Remove(Key{"b", "k"})
	if bs := c.BufferStats(); bs.FreeBytes != 4*mib {
		t.Fatalf("pool %+v, want the 4 MiB removed kept", bs)
	}
	// A fill of the same size takes them all.
	before := c.BufferStats()
	e = c.ReserveEntry(ForFill, Key{"b", "k"}, store.ObjectInfo{Size: 4 * mib})
	if bs := c.BufferStats(); bs.Allocated != before.Allocated || bs.FreeBytes != 0 {
		t.Fatalf("pool %+v then %+v: want every chunk reused", before, bs)
	}
	fillEntry(t, c, e, 1, 2)
	c.Remove(Key{"b", "k"})

	check := func(what string, want int64) {
		t.Helper()
		s, bs := c.Stats(), c.BufferStats()
		if bs.FreeBytes != want {
			t.Fatalf("%s: %d bytes free, want %d (stats %+v)", what, bs.FreeBytes, want, s)
		}
		if s.Bytes+s.Reserved+bs.FreeBytes > s.Budget+ChunkSize {
			t.Fatalf("%s: %d held, reserved and free, over the budget %d and the pool's %d", what, s.Bytes+s.Reserved+bs.FreeBytes, s.Budget, ChunkSize)
		}
	}
	if !c.Reserve(60 * mib) {
		t.Fatal("refused")
	}
	check("60 MiB reserved", 4*mib)
	if !c.ReserveUpload(2 * mib) {
		t.Fatal("refused")
	}
	check("62 MiB reserved", 2*mib)
	c.UploadDone(2 * mib)
	c.Release(2 * mib)
	c.Release(60 * mib)
	check("released", 2*mib) // what was dropped is gone
	c.SetBudget(mib)
	check("budget 1 MiB", mib)
	c.SetBudget(0)
	check("budget 0", ChunkSize) // the pool's own limit
	if bs := c.BufferStats(); bs.Shed != uint64(4*mib-ChunkSize)/ChunkSize {
		t.Fatalf("pool %+v, want the chunks dropped counted", bs)
	}
}

// An upload's Builder takes the free chunks with its reservation, so the
// room of what it evicted is its own; its chunks come back on Discard.
func TestReserveBuilderTakesFreeChunks(t *testing.T) {
	const size = 2 << 20
	c, err := New(Config{Budget: 2 * size, MaxUploadReserve: size, PoolBytes: ChunkSize})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		fillEntry(t, c, c.ReserveEntry(ForFill, Key{"b", fmt.Sprint(i)}, store.ObjectInfo{Size: size}), i, 1)
	}
	before := c.BufferStats()
	b := c.ReserveBuilder(size) // evicts entry 0
	if b == nil {
		t.Fatal("refused")
	}
	data := chunkPattern(7, 1, size)
	if _, err := b.Write(data); err != nil {
		t.Fatal(err)
	}
	if bs := c.BufferStats(); bs.Allocated != before.Allocated || bs.Reused-before.Reused != uint64(chunks(size)) {
		t.Fatalf("pool %+v then %+v: want the evicted entry's chunks reused", before, bs)
	}
	if c.ReserveBuilder(2*size+1) != nil {
		t.Fatal("an upload over the budget reserved")
	}
	c.UploadDone(c.Charge(size))
	e := b.Entry(Key{"b", "up"}, store.ObjectInfo{})
	if got, _ := e.Bytes(); !bytes.Equal(got, data) || !c.Add(e) {
		t.Fatal("the upload's entry reads other bytes, or was not added")
	}
	e.Release()

	// A discarded upload gives its chunks back into the room it leaves.
	b = c.ReserveBuilder(size) // evicts entry 1
	if _, err := b.Write(data[:ChunkSize+1]); err != nil {
		t.Fatal(err)
	}
	c.UploadDone(c.Charge(size))
	c.Release(c.Charge(size))
	b.Discard()
	if bs := c.BufferStats(); bs.FreeBytes != size {
		t.Fatalf("pool %+v after Discard, want the %d bytes of chunks back", bs, size)
	}
}

// A random mix of fills (ReserveEntry of each kind), uploads, aborted
// fills, removals, readers holding evicted entries and budget changes:
// after every step, the free chunks lie within the room the budget left
// or the pool's own limit, so that entries, reservations and free chunks
// together stay within the budget plus that limit, and every entry reads
// back its own bytes.
func TestPoolStaysWithinTheBudget(t *testing.T) {
	const (
		budget = 48 * ChunkSize
		floor  = 2 * ChunkSize
		steps  = 3000
	)
	c, err := New(Config{Budget: budget, MaxObjectSize: budget / 2, MaxUploadReserve: budget / 2, PoolBytes: floor})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	type held struct {
		e        *Entry
		key, gen int
	}
	var readers []held
	gen := 0
	sizes := []int64{100, ChunkSize, MinPooled - 1, MinPooled, MinPooled + 7, 3 * MinPooled / 2, 2 * MinPooled}
	for step := range steps {
		gen++
		key := rng.IntN(12)
		size := sizes[rng.IntN(len(sizes))]
		info := store.ObjectInfo{Size: size, ETag: fmt.Sprintf("%d.%d", key, gen)}
		switch op := rng.IntN(10); {
		case op < 4: // a fill, added or aborted
			e := c.ReserveEntry(Reservation(rng.IntN(3)), Key{"b", fmt.Sprint(key)}, info)
			if e == nil {
				break
			}
			if rng.IntN(5) == 0 {
				e.Abort(io.ErrUnexpectedEOF)
				c.FillDone(e.Charge())
				c.Release(e.Charge())
				e.Release()
				break
			}
			fillEntry(t, c, e, key, gen)
		case op < 6: // an upload, kept or discarded
			b := c.ReserveBuilder(size)
			if b == nil {
				break
			}
			data := chunkPattern(key, gen, int(size))
			n := len(data)
			keep := rng.IntN(4) != 0
			if !keep {
				n = rng.IntN(n + 1)
			}
			if _, err := b.Write(data[:n]); err != nil {
				t.Fatal(err)
			}
			c.UploadDone(c.Charge(size))
			if !keep {
				c.Release(c.Charge(size))
				b.Discard()
				break
			}
			e := b.Entry(Key{"b", fmt.Sprint(key)}, info)
			c.Add(e)
			e.Release()
		case op < 7:
			c.Remove(Key{"b", fmt.Sprint(key)})
		case op < 8: // a reader that stays
			if e := c.Get(Key{"b", fmt.Sprint(key)}); e != nil && e.Acquire() {
				var k, g int
				fmt.Sscanf(e.Info().ETag, "%d.%d", &k, &g)
				readers = append(readers, held{e, k, g})
			}
		case op < 9 && len(readers) > 0: // a reader done
			i := rng.IntN(len(readers))
			r := readers[i]
			readers = append(readers[:i], readers[i+1:]...)
			got, _ := r.e.Bytes()
			if !bytes.Equal(got, chunkPattern(r.key, r.gen, int(r.e.Size()))) {
				t.Fatalf("step %d: a reader of %d.%d read other bytes", step, r.key, r.gen)
			}
			r.e.Release()
		default:
			c.SetBudget(budget/2 + rng.Int64N(budget/2+1))
		}
		s, bs := c.Stats(), c.BufferStats()
		if s.Reserved != 0 || s.Bytes > s.Budget {
			t.Fatalf("step %d: stats %+v", step, s)
		}
		if bs.FreeBytes > max(floor, s.Budget-s.Bytes) {
			t.Fatalf("step %d: %d bytes free, beyond the room %d and the pool's %d", step, bs.FreeBytes, s.Budget-s.Bytes, floor)
		}
	}
	for _, k := range c.Keys(func(Key) bool { return true }) {
		e := c.Peek(k)
		var key, g int
		fmt.Sscanf(e.Info().ETag, "%d.%d", &key, &g)
		if got, _ := e.Bytes(); !bytes.Equal(got, chunkPattern(key, g, int(e.Size()))) {
			t.Fatalf("%v reads other bytes", k)
		}
	}
	for _, r := range readers {
		r.e.Release()
	}
	if bs := c.BufferStats(); bs.Reused == 0 || bs.Shed == 0 {
		t.Fatalf("pool %+v: want chunks reused, and dropped as the room went", bs)
	}
}

// Under -race: readers hold entries while fills and uploads evict them
// and take the free chunks with their reservations; every byte read is
// the version opened, and what is held, reserved and free stays within
// the budget plus the pool's own limit once the work is done.
func TestReservedChunksAreNotReusedUnderReaders(t *testing.T) {
	const (
		keys    = 6
		size    = MinPooled + 3*ChunkSize + 100
		writes  = 60
		readers = 4
		floor   = ChunkSize
	)
	c, err := New(Config{Budget: 3 * chunks(size) * ChunkSize, MaxObjectSize: 2 * size, MaxUploadReserve: 2 * size, PoolBytes: floor})
	if err != nil {
		t.Fatal(err)
	}
	r := startCheckingReaders(t, c, readers, keys, size)
	for i := range writes {
		key := i % keys
		k, info := Key{"b", fmt.Sprint(key)}, store.ObjectInfo{Size: size, ETag: fmt.Sprintf("%d.%d", key, i)}
		if i%3 == 2 { // an upload
			b := c.ReserveBuilder(size)
			if b == nil {
				t.Fatalf("upload %d refused", i)
			}
			if _, err := io.Copy(b, &dribble{chunkPattern(key, i, size)}); err != nil {
				t.Fatal(err)
			}
			c.UploadDone(c.Charge(size))
			e := b.Entry(k, info)
			c.Add(e)
			e.Release()
			continue
		}
		e := c.ReserveEntry(ForFill, k, info)
		if e == nil {
			t.Fatalf("fill %d refused", i)
		}
		if _, err := e.ReadFrom(&dribble{chunkPattern(key, i, size)}); err != nil {
			t.Fatal(err)
		}
		c.FillDone(e.Charge())
		c.Add(e)
		e.Release()
	}
	reads := r.stop()
	s, bs := c.Stats(), c.BufferStats()
	if reads == 0 || s.Evictions == 0 || bs.Reused == 0 {
		t.Fatalf("%d reads, stats %+v, pool %+v: want reads, evictions and chunks reused", reads, s, bs)
	}
	if s.Bytes+s.Reserved+bs.FreeBytes > s.Budget+floor {
		t.Fatalf("stats %+v, pool %+v: over the budget and the pool's limit", s, bs)
	}
}
