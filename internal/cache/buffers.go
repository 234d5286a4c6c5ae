package cache

import "sync"

// Buffers keeps the memory of entries that nobody reads any more, for the
// next fills to reuse: a cache that evicts all the time would otherwise
// allocate a new buffer per fill while the evicted ones wait for the
// garbage collector, and the process would hold both.
//
// Objects differ in size, so the pool deals in chunks of ChunkSize bytes:
// an entry made by Cache.NewEntry holds its object in as many chunks as
// it needs, and any chunk serves any fill. An entry's chunks come back
// only when its last reference is released (Entry.Release), so no reader
// ever sees memory reused under it. The pool keeps at most its bound in
// free chunks; beyond that a released chunk is left to the collector.
//
// Safe for concurrent use.
type Buffers struct {
	mu    sync.Mutex
	max   int64
	free  [][]byte
	stats BufferStats
}

// BufferStats counts what the pool did.
type BufferStats struct {
	Reused    uint64 // chunks Get took from the pool
	Allocated uint64 // chunks Get allocated
	Dropped   uint64 // chunks Put left to the collector: the pool was full
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
	out := make([][]byte, n)
	p.mu.Lock()
	i := int64(0)
	for ; i < n && len(p.free) > 0; i++ {
		last := len(p.free) - 1
		out[i], p.free[last] = p.free[last], nil
		p.free = p.free[:last]
	}
	p.stats.Reused += uint64(i)
	p.stats.Allocated += uint64(n - i)
	p.mu.Unlock()
	for ; i < n; i++ {
		out[i] = make([]byte, ChunkSize)
	}
	return out
}

// put gives chunks back for reuse: the caller must be their last user.
func (p *Buffers) put(cs [][]byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		if int64(len(p.free)+1)*ChunkSize > p.max {
			p.stats.Dropped++
			continue
		}
		p.free = append(p.free, c)
	}
}

// SetMax changes the bound, dropping free chunks beyond it.
func (p *Buffers) SetMax(limit int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.max = limit
	keep := int(max(p.max, 0) / ChunkSize)
	if keep < len(p.free) {
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
