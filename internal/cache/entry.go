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
	"errors"
	"fmt"
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
// concurrently with the single filler calling ReadFrom (or Abort).
type Entry struct {
	// The eviction order's state, under the cache's lock; first, so that
	// a hit touches one cache line of the entry.
	prev, next *Entry    // lruClasses: links in the list of class
	tick       uint64    // lruClasses: last use; ttlOrder: admission
	class      uint8     // lruClasses: which list
	idx        int       // ttlOrder: index in the heap
	expires    time.Time // ttlOrder

	key  Key
	info store.ObjectInfo
	size int64
	buf  []byte

	filled atomic.Int64 // bytes of buf that are final
	state  atomic.Int32 // stateFilling, stateDone, stateAborted

	mu   sync.Mutex
	cond *sync.Cond
	err  error // why the fill was aborted

	doomed atomic.Bool // a write made this fill obsolete: never admit it

	// Owned by Cache under its lock.
	inCache bool
	owned   bool // Config.Owns said so at Add or the last OwnershipChanged
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
func NewEntry(key Key, info store.ObjectInfo) *Entry {
	e := &Entry{key: key, info: info, size: info.Size, buf: make([]byte, info.Size)}
	e.cond = sync.NewCond(&e.mu)
	return e
}

// NewCompleteEntry wraps data that is already whole. The entry takes
// ownership of data.
func NewCompleteEntry(key Key, info store.ObjectInfo, data []byte) *Entry {
	info.Size = int64(len(data))
	e := &Entry{key: key, info: info, size: info.Size, buf: data}
	e.cond = sync.NewCond(&e.mu)
	e.filled.Store(int64(len(data)))
	e.state.Store(stateDone)
	return e
}

// Key returns the object's key.
func (e *Entry) Key() Key { return e.key }

// Owned reports whether the entry's key was this cache's own (Config.Owns)
// when it was added or at the last OwnershipChanged. Read it only from
// Config.OnEvict or under the owner's synchronisation.
func (e *Entry) Owned() bool { return e.owned }

// Info returns the object's metadata. The caller must not modify its maps.
func (e *Entry) Info() store.ObjectInfo { return e.info }

// Size is the object's size in bytes, which is also what it charges the budget.
func (e *Entry) Size() int64 { return e.size }

// Complete reports whether every byte is in memory.
func (e *Entry) Complete() bool { return e.state.Load() == stateDone }

// Bytes returns the whole object if the entry is complete, else nil, false.
// The returned slice is shared and must not be modified.
func (e *Entry) Bytes() ([]byte, bool) {
	if e.state.Load() != stateDone {
		return nil, false
	}
	return e.buf, true
}

// ReadFrom fills the entry from r until it is full. It is the filler's only
// call: it returns nil once every byte arrived (and marks the entry
// complete), or the error that stopped it (and aborts the entry). A body
// longer than the announced size is an error too: the store said otherwise.
func (e *Entry) ReadFrom(r io.Reader) (int64, error) {
	var total int64
	size := int64(len(e.buf))
	for total < size {
		end := total + fillStep
		if end > size {
			end = size
		}
		n, err := io.ReadFull(r, e.buf[total:end])
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
		return int64(len(e.buf)), nil
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
// filled. off and n must lie within the object.
func (e *Entry) Reader(off, n int64) io.Reader {
	return &entryReader{e: e, off: off, end: off + n}
}

type entryReader struct {
	e        *Entry
	off, end int64
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
	n := copy(p, r.e.buf[r.off:avail])
	r.off += int64(n)
	return n, nil
}

// WriteTo lets io.Copy hand large spans of the buffer to the destination
// without an intermediate copy.
func (r *entryReader) WriteTo(w io.Writer) (int64, error) {
	var total int64
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
		n, werr := w.Write(r.e.buf[r.off:avail])
		r.off += int64(n)
		total += int64(n)
		if werr != nil {
			return total, werr
		}
	}
	return total, nil
}

// fillStep is how many bytes a fill reads before waking its readers: small
// enough that a cold read streams instead of waiting for the whole object,
// large enough that waking readers costs little next to moving the bytes.
const fillStep = 128 << 10
