// Package cache holds a cachelet's objects in memory under a byte budget.
//
// An Entry is one version of one object. It is created empty when a fill
// from the store starts and is readable at once: readers of bytes not yet
// filled wait for them, so a cold read streams at the store's pace while the
// object lands in memory, and every concurrent reader of the same object
// shares one download. A complete Entry is immutable and is served straight
// from its buffer.
//
// The Cache is the index of complete entries under a byte budget. It
// decides when to evict; the application's Policy decides which entry goes
// next: owner-aware LRU (the default), size-aware, or TTL. It does no I/O
// and starts no goroutines; the cachelet drives fills.
package cache

import (
	"bytes"
	"errors"
	"fmt"
	"hash"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hoard-io/hoard/internal/store"
)

// ErrFillAborted is returned to readers of an entry whose fill was
// abandoned before it completed (the store connection broke, the body was
// shorter than announced, or the fill was cancelled).
var ErrFillAborted = errors.New("cache: fill aborted")

// Key names an object in the store's namespace.
type Key struct {
	Bucket, Object string
}

func (k Key) String() string { return k.Bucket + "/" + k.Object }

// Entry is one version of an object, complete or being filled.
//
// Concurrency: any number of readers may call Bytes, Reader and Info
// concurrently with the single filler calling ReadFrom (or Abort). A
// reader holds a reference (Acquire, ReadCloser) while it reads, so that
// the memory of an entry from the pool is not reused under it.
type Entry struct {
	// The eviction order's state, under the cache's lock; first, so that
	// a hit touches one cache line of the entry.
	prev, next *Entry    // lruClasses: links in the list of class
	tick       uint64    // lruClasses: last use; ttlOrder: admission
	class      uint8     // lruClasses: which list
	idx        int       // ttlOrder, gdsfOrder: index in the heap
	expires    time.Time // ttlOrder
	prio       float64   // gdsfOrder: the entry's H value
	freq       uint32    // gdsfOrder: hits since admission; s3fifoOrder: 0–3

	key  Key
	info store.ObjectInfo
	size int64
	// The object's bytes: one buffer, or, for an entry from the pool,
	// chunks of ChunkSize (see span).
	buf    []byte
	chunks [][]byte

	filled atomic.Int64 // bytes of buf that are final
	state  atomic.Int32 // stateFilling, stateDone, stateAborted

	mu   sync.Mutex
	cond *sync.Cond
	err  error // why the fill was aborted

	doomed atomic.Bool // a write made this fill obsolete: never admit it

	crc atomic.Uint64 // 1<<32 | CRC32C of the whole object, once known (SetCRC32C)

	// refs counts the references to the bytes (see Acquire); at 0,
	// pooled chunks go back to pool, unless pinned says that a reader
	// without a reference (Reader) may still use them.
	refs   atomic.Int32
	pool   *Buffers
	pinned atomic.Bool

	// Owned by Cache under its lock.
	inCache bool
	owned   bool // Config.Owns said so at Add or the last OwnershipChanged
	output  bool // MarkOutput said so, and no Get since: SetBudget evicts it first
	// For sweeps (sweep.go): when it was added, reads (Get) since, the
	// last one's time, and when its read count started (counting: its
	// Add, or its first read if MarkUnread said it came in unread; zero
	// until then).
	added, lastRead, counting time.Time
	reads                     uint32
	unread                    bool // MarkUnread before its Add
	left                      bool // it was in the cache and left it
}

const (
	stateFilling int32 = iota
	stateDone
	stateAborted
)

// NewEntry returns an empty entry sized for info.Size bytes, ready to be
// filled with ReadFrom. The caller must have checked that info.Size is
// admissible. Even an empty object's entry is complete only once ReadFrom
// has seen its body end: a body longer than announced must abort it.
//
// The caller holds the entry's first reference (see Acquire).
func NewEntry(key Key, info store.ObjectInfo) *Entry {
	e := newEntry(key, info)
	e.buf = make([]byte, info.Size)
	return e
}

// NewPooledEntry is NewEntry holding the object in chunks from pool
// (what the entry charges the budget, Charge, is their size), given back
// to pool when the entry's last reference is released. It cannot be
// filled by FillParts.
func NewPooledEntry(pool *Buffers, key Key, info store.ObjectInfo) *Entry {
	e := newEntry(key, info)
	e.chunks, e.pool = pool.get(chunks(info.Size)), pool
	return e
}

func newEntry(key Key, info store.ObjectInfo) *Entry {
	e := &Entry{key: key, info: info, size: info.Size}
	e.cond = sync.NewCond(&e.mu)
	e.refs.Store(1)
	return e
}

// NewCompleteEntry wraps data that is already whole. The entry takes
// ownership of data; the caller holds its first reference.
func NewCompleteEntry(key Key, info store.ObjectInfo, data []byte) *Entry {
	info.Size = int64(len(data))
	e := newEntry(key, info)
	e.buf = data
	e.filled.Store(int64(len(data)))
	e.state.Store(stateDone)
	return e
}

// span returns the longest run of the entry's memory that starts at
// byte off and ends at end at most: all of [off, end) for one buffer, up
// to the end of off's chunk for chunks.
func (e *Entry) span(off, end int64) []byte {
	if e.chunks == nil {
		return e.buf[off:end]
	}
	c, at := off/ChunkSize, off%ChunkSize
	return e.chunks[c][at:min(ChunkSize, at+end-off)]
}

// Acquire takes a reference to the entry's bytes, which keeps its buffer
// from being reused until Release, and reports whether it could: an entry
// whose last reference was released is gone (its buffer may be another
// entry's by now), and must be looked up again. Whoever creates an entry
// holds its first reference; the cache holds one while the entry is in
// it; every reader holds one while it reads (ReadCloser).
func (e *Entry) Acquire() bool {
	for {
		n := e.refs.Load()
		if n <= 0 {
			return false
		}
		if e.refs.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// Release gives back a reference taken by Acquire (or the creator's).
// The last one gives a pooled buffer back to its pool. Each reference is
// released once.
func (e *Entry) Release() {
	n := e.refs.Add(-1)
	switch {
	case n < 0:
		panic("cache: entry released more often than acquired")
	case n == 0 && e.pool != nil && !e.pinned.Load():
		e.pool.put(e.chunks)
	}
}

// Charge is what the entry charges the budget: its size, or for an entry
// from the pool the size of its chunks (less than an eighth more).
func (e *Entry) Charge() int64 {
	if e.chunks != nil {
		return int64(len(e.chunks)) * ChunkSize
	}
	return e.size
}

// Key returns the object's key.
func (e *Entry) Key() Key { return e.key }

// Owned reports whether the entry's key was this cache's own (Config.Owns)
// when it was added or at the last OwnershipChanged. Read it only from
// Config.OnEvict or under the owner's synchronisation.
func (e *Entry) Owned() bool { return e.owned }

// Info returns the object's metadata. The caller must not modify its maps.
func (e *Entry) Info() store.ObjectInfo { return e.info }

// Size is the object's size in bytes (what it charges the budget is Charge).
func (e *Entry) Size() int64 { return e.size }

// CRC32C returns the CRC32C (Castagnoli) of the whole object, when
// SetCRC32C recorded it.
func (e *Entry) CRC32C() (uint32, bool) {
	v := e.crc.Load()
	return uint32(v), v != 0
}

// SetCRC32C records the CRC32C of the whole object, computed by a reader
// that read all of a complete entry (the bytes do not change once
// complete), so that later readers needing it skip the pass.
func (e *Entry) SetCRC32C(sum uint32) { e.crc.Store(1<<32 | uint64(sum)) }

// Complete reports whether every byte is in memory.
func (e *Entry) Complete() bool { return e.state.Load() == stateDone }

// Bytes returns the whole object if the entry is complete, else nil, false.
// The returned slice is shared and must not be modified; for an entry
// held in chunks it is a copy, which the caller must hold a reference
// for while it is made.
func (e *Entry) Bytes() ([]byte, bool) {
	if e.state.Load() != stateDone {
		return nil, false
	}
	if e.chunks == nil {
		return e.buf, true
	}
	out := make([]byte, 0, e.size)
	for off := int64(0); off < e.size; {
		b := e.span(off, e.size)
		out = append(out, b...)
		off += int64(len(b))
	}
	return out, true
}

// ReadFrom fills the entry from r until it is full. It is the filler's only
// call: it returns nil once every byte arrived (and marks the entry
// complete), or the error that stopped it (and aborts the entry). A body
// longer than the announced size is an error too: the store said otherwise.
func (e *Entry) ReadFrom(r io.Reader) (int64, error) {
	var total int64
	size := e.size
	for total < size {
		end := total + fillStep
		if end > size {
			end = size
		}
		n, err := io.ReadFull(r, e.span(total, end))
		total += int64(n)
		e.publish(total)
		if err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
				err = fmt.Errorf("store body ended after %d of %d bytes: %w", total, size, io.ErrUnexpectedEOF)
			}
			e.Abort(err)
			return total, err
		}
	}
	// The store must not have more to say than it announced.
	var one [1]byte
	if n, _ := r.Read(one[:]); n > 0 {
		err := fmt.Errorf("store body longer than its announced %d bytes", size)
		e.Abort(err)
		return total, err
	}
	e.finish()
	return total, nil
}

func (e *Entry) publish(n int64) {
	e.mu.Lock()
	e.filled.Store(n)
	e.mu.Unlock()
	e.cond.Broadcast()
}

func (e *Entry) finish() {
	e.mu.Lock()
	e.state.Store(stateDone)
	e.mu.Unlock()
	e.cond.Broadcast()
}

// Abort ends an incomplete fill; waiting readers get ErrFillAborted
// wrapping err. Aborting a complete entry does nothing.
func (e *Entry) Abort(err error) {
	e.mu.Lock()
	if e.state.Load() == stateFilling {
		e.err = fmt.Errorf("%w: %w", ErrFillAborted, err)
		e.state.Store(stateAborted)
	}
	e.mu.Unlock()
	e.cond.Broadcast()
}

// Aborted reports whether the fill failed.
func (e *Entry) Aborted() bool { return e.state.Load() == stateAborted }

// wait blocks until at least n bytes are filled or the fill ended, and
// returns how many are available.
func (e *Entry) wait(n int64) (int64, error) {
	if e.state.Load() == stateDone {
		return e.size, nil
	}
	if f := e.filled.Load(); f >= n {
		return f, nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for {
		f := e.filled.Load()
		switch {
		case f >= n || e.state.Load() == stateDone:
			return e.filled.Load(), nil
		case e.state.Load() == stateAborted:
			return f, e.err
		}
		e.cond.Wait()
	}
}

// Reader returns a reader of bytes [off, off+n) that blocks on bytes not yet
// filled. off and n must lie within the object. The reader holds no
// reference, so the entry's buffer is never reused after Reader; readers
// that can say when they are done use ReadCloser instead.
func (e *Entry) Reader(off, n int64) io.Reader {
	e.pinned.Store(true)
	return &entryReader{e: e, off: off, end: off + n}
}

// ReadCloser is Reader for a caller that holds a reference (Acquire): the
// reader takes it over, and Close releases it. After Close it reads
// nothing (io.EOF).
func (e *Entry) ReadCloser(off, n int64) io.ReadCloser {
	return &entryReader{e: e, off: off, end: off + n, held: true}
}

type entryReader struct {
	e        *Entry
	off, end int64
	held     bool // a reference, released by Close
	closed   bool
}

// Close releases the reader's reference, once.
func (r *entryReader) Close() error {
	if r.held && !r.closed {
		r.closed = true
		r.off = r.end
		r.e.Release()
	}
	return nil
}

func (r *entryReader) Read(p []byte) (int, error) {
	if r.off >= r.end {
		return 0, io.EOF
	}
	avail, err := r.e.wait(r.off + 1)
	if avail <= r.off {
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		return 0, err
	}
	if avail > r.end {
		avail = r.end
	}
	n := copy(p, r.e.span(r.off, avail))
	r.off += int64(n)
	return n, nil
}

// WriteTo lets io.Copy hand large spans of the buffer to the destination.
// A span of a chunked entry is one chunk at most, and one write per chunk
// costs a system call per 64 KiB on a socket: where more than one chunk
// is ready, up to writeBatch bytes of them are gathered into one buffer
// and written at once (a copy in memory costs far less than the calls it
// saves); a writer in memory gets the chunks as they are. The buffers
// are bounded (writeBatches) and each is held only while its write
// lasts: a writer that finds none free writes that span chunk by chunk.
//
// A destination that takes several buffers at once (Vector: a TCP
// socket) gets up to writeBatch bytes of chunks per call instead, with
// no copy.
func (r *entryReader) WriteTo(w io.Writer) (int64, error) {
	if r.e.chunks != nil {
		if v := Vector(w); v != nil {
			return r.writeVectors(v)
		}
	}
	var total int64
	gather := r.e.chunks != nil && !inMemory(w)
	for r.off < r.end {
		avail, err := r.e.wait(r.off + 1)
		if avail <= r.off {
			if err == nil {
				err = io.ErrUnexpectedEOF
			}
			return total, err
		}
		if avail > r.end {
			avail = r.end
		}
		p := r.e.span(r.off, avail)
		var batch *[]byte
		if gather && avail-r.off > int64(len(p)) {
			batch = takeBatch()
		}
		if batch != nil {
			b := (*batch)[:0]
			for at := r.off; at < avail && len(b) < cap(b); {
				sp := r.e.span(at, min(avail, at+int64(cap(b)-len(b))))
				b = append(b, sp...)
				at += int64(len(sp))
			}
			p = b
		}
		n, werr := w.Write(p)
		if batch != nil {
			writeBatches <- batch // held only while written
		}
		r.off += int64(n)
		total += int64(n)
		if werr != nil {
			return total, werr
		}
	}
	return total, nil
}

// writeVectors is WriteTo to a destination that takes several buffers at
// once: the chunks ready, up to writeBatch bytes, go in one call.
func (r *entryReader) writeVectors(w VectorWriter) (int64, error) {
	var total int64
	vec := make([][]byte, 0, writeBatch/ChunkSize+1)
	for r.off < r.end {
		avail, err := r.e.wait(r.off + 1)
		if avail <= r.off {
			if err == nil {
				err = io.ErrUnexpectedEOF
			}
			return total, err
		}
		avail = min(avail, r.end, r.off+writeBatch)
		vec = vec[:0]
		for at := r.off; at < avail; {
			sp := r.e.span(at, avail)
			vec = append(vec, sp)
			at += int64(len(sp))
		}
		n, werr := w.WriteVector(vec)
		r.off += n
		total += n
		if werr != nil {
			return total, werr
		}
	}
	return total, nil
}

// writeBatch is the most a chunked entry's WriteTo gathers per write;
// maxWriteBatches bounds the buffers for it, made as first needed and
// kept (at most 16 MiB in all).
const (
	writeBatch      = 1 << 20
	maxWriteBatches = 16
)

var (
	writeBatches     = make(chan *[]byte, maxWriteBatches)
	writeBatchesMade atomic.Int32
)

// inMemory reports whether w is a writer in memory (a hash, a buffer,
// io.Discard), for which a write per chunk costs no system call and a
// gathered write only adds a copy.
func inMemory(w io.Writer) bool {
	switch w.(type) {
	case hash.Hash, *bytes.Buffer:
		return true
	}
	return w == io.Discard
}

// takeBatch returns a free batch buffer, a new one while fewer than
// maxWriteBatches were made, else nil. Give it back on writeBatches.
func takeBatch() *[]byte {
	select {
	case b := <-writeBatches:
		return b
	default:
	}
	if writeBatchesMade.Add(1) <= maxWriteBatches {
		b := make([]byte, 0, writeBatch)
		return &b
	}
	writeBatchesMade.Add(-1)
	return nil
}

// fillStep is how many bytes a fill reads before waking its readers: small
// enough that a cold read streams instead of waiting for the whole object,
// large enough that waking readers costs little next to moving the bytes.
const fillStep = 128 << 10
