package cache

import (
	"errors"

	"github.com/hoard-io/hoard/internal/store"
)

// ErrTooLong is returned by Builder.Write past the size it was made for.
var ErrTooLong = errors.New("cache: more bytes than announced")

// Builder gathers an object's bytes as they arrive (an upload's body) to
// become a complete entry. Memory is taken as the bytes arrive, not on
// the sender's word: a sender that announces a large body and sends
// little holds little. An object the pool serves (Cache.Charge) is
// gathered in chunks from it, one at a time; a smaller one in one
// buffer, first of firstBuffer bytes, then of its whole size.
//
// A Builder is used by one goroutine. Entry or Discard ends it.
type Builder struct {
	pool   *Buffers // nil: one buffer
	size   int64
	n      int64
	buf    []byte
	chunks [][]byte
	spare  [][]byte // free chunks taken with the reservation (ReserveBuilder), used first
}

// firstBuffer is the first allocation of a Builder's one buffer.
const firstBuffer = 64 << 10

// NewBuilder returns a Builder of an object of size bytes, whose entry
// charges Charge(size).
func (c *Cache) NewBuilder(size int64) *Builder {
	b := &Builder{size: size}
	if c.pooled(size) {
		b.pool = c.pool
	}
	return b
}

// ReserveBuilder is ReserveUpload(Charge(size)) and NewBuilder(size) in
// one step: the free chunks the pool has, up to the object's, are set
// aside for the Builder under the reservation's lock, as ReserveEntry
// does for a fill, among them those of the entries evicted to make room.
// They are memory the pool held already, not taken on the sender's word.
// It returns nil, charging nothing, when the reservation is refused;
// the caller ends it as ReserveUpload's, with Charge(size).
func (c *Cache) ReserveBuilder(size int64) *Builder {
	charge := c.Charge(size)
	if size < 0 || !c.Admissible(charge) {
		return nil
	}
	b := c.NewBuilder(size)
	var spare [][]byte
	if b.pool != nil {
		spare = make([][]byte, 0, chunks(size))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.fits(reserveUpload, charge) {
		return nil
	}
	if b.pool != nil {
		b.spare = c.pool.take(spare, chunks(size))
	}
	c.hold(reserveUpload, charge)
	return b
}

// Len is how many bytes were written.
func (b *Builder) Len() int64 { return b.n }

// Write appends p. Bytes past the announced size are refused with
// ErrTooLong, and nothing of p is kept then.
func (b *Builder) Write(p []byte) (int, error) {
	if b.n+int64(len(p)) > b.size {
		return 0, ErrTooLong
	}
	if b.pool == nil {
		if int64(cap(b.buf))-b.n < int64(len(p)) {
			c := b.size
			if cap(b.buf) < firstBuffer && b.n+int64(len(p)) <= firstBuffer {
				c = min(firstBuffer, b.size)
			}
			nb := make([]byte, b.n, c)
			copy(nb, b.buf)
			b.buf = nb
		}
		b.buf = append(b.buf, p...)
		b.n += int64(len(p))
		return len(p), nil
	}
	for q := p; len(q) > 0; {
		at := b.n % ChunkSize
		if at == 0 {
			b.chunks = append(b.chunks, b.nextChunk())
		}
		m := copy(b.chunks[len(b.chunks)-1][at:], q)
		q = q[m:]
		b.n += int64(m)
	}
	return len(p), nil
}

// nextChunk is a spare chunk, else one from the pool.
func (b *Builder) nextChunk() []byte {
	if n := len(b.spare); n > 0 {
		c := b.spare[n-1]
		b.spare[n-1] = nil
		b.spare = b.spare[:n-1]
		return c
	}
	return b.pool.get(1)[0]
}

// Entry returns a complete entry of the bytes written, which must be all
// the announced size; it takes them over, and the caller holds its first
// reference (Entry.Release gives the chunks back to the pool).
func (b *Builder) Entry(k Key, info store.ObjectInfo) *Entry {
	if b.n != b.size {
		panic("cache: Builder.Entry before every byte arrived")
	}
	if b.pool == nil {
		return NewCompleteEntry(k, info, b.buf)
	}
	info.Size = b.size
	e := newEntry(k, info)
	e.chunks, e.pool = b.chunks, b.pool
	e.filled.Store(b.size)
	e.state.Store(stateDone)
	b.chunks = nil
	return e
}

// Discard gives the memory back: the bytes will not become an entry.
// Call it once the reservation is released, so that the chunks find its
// room in the pool.
func (b *Builder) Discard() {
	if b.pool != nil {
		b.pool.put(b.chunks)
		b.pool.put(b.spare)
	}
	b.chunks, b.spare, b.buf = nil, nil, nil
}
