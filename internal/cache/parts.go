package cache

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
)

// Part is one byte range of an entry's object, filled by its own
// goroutine: the bandwidth policy has several cachelets download ranges
// of one large object at once, and the owner assembles them here.
type Part struct {
	Off, Len int64
	// Fill writes the range's bytes into dst (exactly Len bytes; dst
	// aliases the entry's buffer) in order, calling progress(n) whenever
	// the first n bytes of dst are final, and returns nil only when all
	// Len are. It must not touch dst after returning. It owns its retries
	// and its cancellation: FillParts waits for every Fill to return.
	Fill func(dst []byte, progress func(n int64)) error
}

// FillPrefix fills the first n bytes of the entry from r, publishing them
// to readers as they arrive, and leaves the entry filling: FillParts then
// fills the rest. The bandwidth policy reads the start of a large object
// (measuring the store's bandwidth) before it decides how to split the
// rest. An error aborts the entry.
func (e *Entry) FillPrefix(r io.Reader, n int64) error {
	size := e.size
	if n < 0 || n > size || e.filled.Load() != 0 {
		err := fmt.Errorf("cache: prefix of %d bytes of a %d-byte entry with %d filled", n, size, e.filled.Load())
		e.Abort(err)
		return err
	}
	var total int64
	for total < n {
		end := min(total+fillStep, n)
		m, err := io.ReadFull(r, e.span(total, end))
		total += int64(m)
		e.publish(total)
		if err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
				err = fmt.Errorf("store body ended after %d of %d bytes: %w", total, size, io.ErrUnexpectedEOF)
			}
			e.Abort(err)
			return err
		}
	}
	return nil
}

// FillParts fills the entry from parts, concurrently, in place of
// ReadFrom. The parts must cover the bytes not filled yet (all of them,
// or those after a FillPrefix) exactly, in order and without gaps (else
// nothing is filled and the entry is aborted). Readers see the
// bytes as soon as every byte before them is final: the entry's filled
// prefix is the parts complete from the first on, plus the progress of the
// first incomplete one, so a reader streams the object in order while the
// later parts arrive in parallel.
//
// verify, when set, sees the whole object before the last byte is
// released to readers; its error aborts the entry (a checksum that does
// not match the assembled bytes). The first part's error aborts the entry
// too, and FillParts returns it once every Fill has returned.
func (e *Entry) FillParts(parts []Part, verify func([]byte) error) error {
	size := e.size
	if e.chunks != nil {
		err := errors.New("cache: parts fill an entry of one buffer, not one from the pool")
		e.Abort(err)
		return err
	}
	base := e.filled.Load()
	off := base
	for i, p := range parts {
		if p.Off != off || p.Len <= 0 || p.Off+p.Len > size || p.Fill == nil {
			err := fmt.Errorf("cache: part %d [%d, +%d) does not continue the parts at %d of %d bytes", i, p.Off, p.Len, off, size)
			e.Abort(err)
			return err
		}
		off += p.Len
	}
	if off != size {
		err := fmt.Errorf("cache: parts cover [%d, %d) of %d bytes", base, off, size)
		e.Abort(err)
		return err
	}
	if off == base && verify == nil {
		e.finish()
		return nil
	}

	// The last byte is held back until verify passed.
	limit := size
	if verify != nil {
		limit = size - 1
	}
	done := make([]atomic.Int64, len(parts))
	publish := func() {
		e.mu.Lock()
		w := base
		for i, p := range parts {
			d := done[i].Load()
			w += d
			if d < p.Len {
				break
			}
		}
		if w > limit {
			w = limit
		}
		if w > e.filled.Load() {
			e.filled.Store(w)
		}
		e.mu.Unlock()
		e.cond.Broadcast()
	}

	var (
		wg       sync.WaitGroup
		errMu    sync.Mutex
		firstErr error
	)
	for i, p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := p.Fill(e.buf[p.Off:p.Off+p.Len], func(n int64) {
				if n > p.Len {
					n = p.Len
				}
				if n > done[i].Load() {
					done[i].Store(n)
					publish()
				}
			})
			if err == nil && done[i].Load() != p.Len {
				err = fmt.Errorf("cache: part %d returned after %d of %d bytes", i, done[i].Load(), p.Len)
			}
			if err != nil {
				errMu.Lock()
				if firstErr == nil {
					firstErr = fmt.Errorf("part %d [%d, +%d): %w", i, p.Off, p.Len, err)
					e.Abort(firstErr)
				}
				errMu.Unlock()
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	if verify != nil {
		if err := verify(e.buf); err != nil {
			e.Abort(err)
			return err
		}
	}
	e.mu.Lock()
	e.filled.Store(size)
	e.mu.Unlock()
	e.finish()
	return nil
}

// ErrPartsAborted may be returned by a Part's Fill that stopped because
// another part failed.
var ErrPartsAborted = errors.New("cache: another part of the fill failed")
