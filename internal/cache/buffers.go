package cache

import "sync"

// Buffers keeps the memory of entries that nobody reads any more, for the
// next fills to reuse: a cache that evicts all the time would otherwise
// allocate a new buffer per fill while the evicted ones wait for the
// garbage collector, and the process would hold both; and a fill into
// new memory pays for it again, zeroed or faulted in page by page.
//
// Objects differ in size, so the pool deals in chunks of ChunkSize bytes:
// an entry made by Cache.NewEntry holds its object in as many chunks as
// it needs, and any chunk serves any fill. An entry's chunks come back
// only when its last reference is released (Entry.Release), so no reader
// ever sees memory reused under it.
//
// The pool keeps free chunks up to its bound, the larger of two: its own
// limit (NewBuffers, SetMax: memory besides a cache's budget) and the
// room a Cache's budget has left beside its entries and reservations
// (setRoom: memory the budget allows anyway). Beyond the bound a released
// chunk is left to the collector, and free chunks beyond a bound that
// fell are dropped at once.
//
// Safe for concurrent use.
type Buffers struct {
	mu    sync.Mutex
	max   int64 // the pool's own limit (SetMax)
	room  int64 // the room a cache's budget has left (setRoom); 0 without one
	free  [][]byte
	stats BufferStats
}

// BufferStats counts what the pool did.
type BufferStats struct {
	Reused    uint64 // chunks Get took from the pool
	Allocated uint64 // chunks Get allocated
	Dropped   uint64 // chunks given back and left to the collector: the pool was full
	Shed      uint64 // free chunks left to the collector because the bound fell
	FreeBytes int64  // held in free chunks now
}

// ChunkSize is the size of the chunks pooled entries are made of.
const ChunkSize = 64 << 10

// MinPooled is the smallest object held in chunks: a smaller one is held
// in a buffer of its own size (left to the collector once dropped), so
// that the last chunk's unused part stays under an eighth of the object.
const MinPooled = 8 * ChunkSize

// NewBuffers returns a pool that keeps at most limit bytes of free chunks.
func NewBuffers(limit int64) *Buffers {
	return &Buffers{max: limit}
}

// chunks returns how many chunks hold n bytes.
func chunks(n int64) int64 { return (n + ChunkSize - 1) / ChunkSize }

// get returns n chunks, from the pool as far as it has them. Their
// contents are whatever their last users left.
func (p *Buffers) get(n int64) [][]byte {
	out := make([][]byte, 0, n)
	out = p.take(out, n)
	return p.allocate(out, n)
}

// take appends up to n free chunks to out, as many as the pool has,
// allocating none: quick enough to be called under a cache's lock.
func (p *Buffers) take(out [][]byte, n int64) [][]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := int64(0)
	for ; i < n && len(p.free) > 0; i++ {
		last := len(p.free) - 1
		out = append(out, p.free[last])
		p.free[last] = nil
		p.free = p.free[:last]
	}
	p.stats.Reused += uint64(i)
	return out
}

// allocate appends new chunks to out until it holds n.
func (p *Buffers) allocate(out [][]byte, n int64) [][]byte {
	if k := n - int64(len(out)); k > 0 {
		p.mu.Lock()
		p.stats.Allocated += uint64(k)
		p.mu.Unlock()
	}
	for int64(len(out)) < n {
		out = append(out, make([]byte, ChunkSize))
	}
	return out
}

// put gives chunks back for reuse: the caller must be their last user.
func (p *Buffers) put(cs [][]byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		if int64(len(p.free)+1)*ChunkSize > p.bound() {
			p.stats.Dropped++
			continue
		}
		p.free = append(p.free, c)
	}
}

// bound is the most bytes of free chunks kept. Called with mu held.
func (p *Buffers) bound() int64 { return max(p.max, p.room) }

// SetMax changes the pool's own limit, dropping free chunks beyond the
// bound.
func (p *Buffers) SetMax(limit int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.max = limit
	p.trim()
}

// setRoom tells the pool how much room its cache's budget has left
// beside the entries and reservations (Cache calls it, under its lock,
// whenever that changes), dropping free chunks beyond the bound.
func (p *Buffers) setRoom(room int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.room = room
	p.trim()
}

// trim drops free chunks beyond the bound. Called with mu held.
func (p *Buffers) trim() {
	keep := int(max(p.bound(), 0) / ChunkSize)
	if keep < len(p.free) {
		p.stats.Shed += uint64(len(p.free) - keep)
		clear(p.free[keep:])
		p.free = p.free[:keep]
	}
}

// Stats returns the pool's counters.
func (p *Buffers) Stats() BufferStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.FreeBytes = int64(len(p.free)) * ChunkSize
	return s
}
