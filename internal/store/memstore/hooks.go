package memstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/hoard-io/hoard/internal/store"
)

// Operation names, as Calls counts them.
const (
	OpGet               = "get"
	OpStat              = "stat"
	OpPut               = "put"
	OpDelete            = "delete"
	OpDeleteMany        = "delete_many"
	OpCopy              = "copy"
	OpList              = "list"
	OpListBuckets       = "list_buckets"
	OpCreateBucket      = "create_bucket"
	OpHeadBucket        = "head_bucket"
	OpDeleteBucket      = "delete_bucket"
	OpCreateMultipart   = "create_multipart"
	OpUploadPart        = "upload_part"
	OpCompleteMultipart = "complete_multipart"
	OpAbortMultipart    = "abort_multipart"
	OpListParts         = "list_parts"
)

// GetCounts counts Get calls by how they were answered.
type GetCounts struct {
	// Total is every Get call, including those refused because the store
	// was down or the context was done.
	Total int
	// Conditional is the Gets that carried IfNoneMatch or IfMatch and
	// reached an answer.
	Conditional int
	// NotModified is the Gets answered store.ErrNotModified.
	NotModified int
	// Bodies is the Gets answered with a body, whole or ranged.
	Bodies int
	// FullBodies is the Gets answered with the whole object's body: the
	// downloads a cache tries to share.
	FullBodies int
	// Ranged is the Gets answered with a ranged body.
	Ranged int
}

// hooks is the test instrumentation of a Store.
type hooks struct {
	mu     sync.Mutex
	down   bool
	calls  map[string]int
	gets   GetCounts
	holds  []*Hold // HoldGet and HoldBody holds not yet released
	breaks map[objKey][]bodyBreak
}

type objKey struct{ bucket, key string }

type bodyBreak struct {
	after int64
	err   error
}

func (h *hooks) count(op string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.calls == nil {
		h.calls = make(map[string]int)
	}
	h.calls[op]++
	if op == OpGet {
		h.gets.Total++
	}
}

func (h *hooks) isDown() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.down
}

func (h *hooks) recordGet(opts store.GetOptions, rng *store.ByteRange, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if opts.IfNoneMatch != "" || opts.IfMatch != "" {
		h.gets.Conditional++
	}
	switch {
	case errors.Is(err, store.ErrNotModified):
		h.gets.NotModified++
	case err != nil:
	case rng != nil:
		h.gets.Bodies++
		h.gets.Ranged++
	default:
		h.gets.Bodies++
		h.gets.FullBodies++
	}
}

// SetDown takes the store down (every call then fails with an error
// wrapping store.ErrUnavailable) or brings it back up. Bodies already open
// keep reading.
func (s *Store) SetDown(down bool) {
	s.hooks.mu.Lock()
	s.hooks.down = down
	s.hooks.mu.Unlock()
}

// Calls returns how many calls of operation op (OpGet, OpPut, ...) the
// store received since it was created or ResetCounts was called.
func (s *Store) Calls(op string) int {
	s.hooks.mu.Lock()
	defer s.hooks.mu.Unlock()
	return s.hooks.calls[op]
}

// GetCounts returns how Gets were answered since the store was created or
// ResetCounts was called.
func (s *Store) GetCounts() GetCounts {
	s.hooks.mu.Lock()
	defer s.hooks.mu.Unlock()
	return s.hooks.gets
}

// ResetCounts zeroes Calls and GetCounts.
func (s *Store) ResetCounts() {
	s.hooks.mu.Lock()
	defer s.hooks.mu.Unlock()
	s.hooks.calls = nil
	s.hooks.gets = GetCounts{}
}

// Hold stops Gets or bodies of one object at a chosen point until a test
// releases them. It lets a test put a download "in flight" and act while it
// is, without sleeping.
type Hold struct {
	s           *Store
	obj         objKey
	body        bool  // a body hold (else a Get hold, or a Stat hold)
	stat        bool  // a Stat hold
	after       int64 // body holds: bytes delivered before stopping
	reached     chan struct{}
	reachedOnce sync.Once
	release     chan struct{}
	releaseOnce sync.Once
}

// HoldGet makes every Get of bucket/key that reaches its answer while the
// hold is in place wait, its answer decided (the object's version is fixed
// at that point), before returning it, until Release. A waiting Get whose
// context ends returns the context's error.
func (s *Store) HoldGet(bucket, key string) *Hold {
	return s.addHold(&Hold{obj: objKey{bucket, key}})
}

// HoldStat makes every Stat of bucket/key that reaches its answer while
// the hold is in place wait, its answer decided, before returning it,
// until Release. A waiting Stat whose context ends returns the context's
// error.
func (s *Store) HoldStat(bucket, key string) *Hold {
	return s.addHold(&Hold{obj: objKey{bucket, key}, stat: true})
}

// HoldBody makes every body of bucket/key opened while the hold is in
// place stop after delivering `after` bytes until Release (a Read then
// waits; it returns early with an error if the body is closed or the Get's
// context ends). A body of at most `after` bytes is not held.
func (s *Store) HoldBody(bucket, key string, after int64) *Hold {
	return s.addHold(&Hold{obj: objKey{bucket, key}, body: true, after: after})
}

func (s *Store) addHold(h *Hold) *Hold {
	h.s = s
	h.reached = make(chan struct{})
	h.release = make(chan struct{})
	s.hooks.mu.Lock()
	s.hooks.holds = append(s.hooks.holds, h)
	s.hooks.mu.Unlock()
	return h
}

// Reached is closed when a Get or body first stops at the hold.
func (h *Hold) Reached() <-chan struct{} { return h.reached }

// Release lets everything stopped at the hold go on, and removes the hold
// so that later Gets and bodies pass freely. Idempotent.
func (h *Hold) Release() {
	h.releaseOnce.Do(func() {
		h.s.hooks.mu.Lock()
		h.s.hooks.holds = slices.DeleteFunc(h.s.hooks.holds, func(x *Hold) bool { return x == h })
		h.s.hooks.mu.Unlock()
		close(h.release)
	})
}

func (h *Hold) released() bool {
	select {
	case <-h.release:
		return true
	default:
		return false
	}
}

// wait blocks at the hold until it is released or done is closed.
func (h *Hold) wait(ctx context.Context, closed <-chan struct{}) error {
	h.reachedOnce.Do(func() { close(h.reached) })
	select {
	case <-h.release:
		return nil
	case <-closed:
		return errBodyClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// BreakBody makes the next body opened for bucket/key fail with err after
// delivering `after` bytes, as a connection dropped mid-transfer would.
// Breaks queue: each applies to one body, in the order they were set.
func (s *Store) BreakBody(bucket, key string, after int64, err error) {
	s.hooks.mu.Lock()
	defer s.hooks.mu.Unlock()
	if s.hooks.breaks == nil {
		s.hooks.breaks = make(map[objKey][]bodyBreak)
	}
	k := objKey{bucket, key}
	s.hooks.breaks[k] = append(s.hooks.breaks[k], bodyBreak{after: after, err: err})
}

// holdGet waits at the Get holds of bucket/key, if any (stat: at the Stat
// holds). It returns the context's error if it ends meanwhile.
func (h *hooks) holdGet(ctx context.Context, bucket, key string, stat bool) error {
	h.mu.Lock()
	var mine []*Hold
	for _, x := range h.holds {
		if !x.body && x.stat == stat && x.obj == (objKey{bucket, key}) {
			mine = append(mine, x)
		}
	}
	h.mu.Unlock()
	for _, x := range mine {
		if err := x.wait(ctx, nil); err != nil {
			return err
		}
	}
	return nil
}

// body wraps the bytes a Get answers with the body holds and breaks in
// place for bucket/key.
func (h *hooks) body(ctx context.Context, bucket, key string, data []byte) io.ReadCloser {
	b := &body{ctx: ctx, data: data, breakAt: -1, closed: make(chan struct{})}
	k := objKey{bucket, key}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, x := range h.holds {
		if x.body && x.obj == k {
			b.holds = append(b.holds, x)
		}
	}
	if q := h.breaks[k]; len(q) > 0 {
		b.breakAt, b.breakErr = q[0].after, q[0].err
		if len(q) == 1 {
			delete(h.breaks, k)
		} else {
			h.breaks[k] = q[1:]
		}
	}
	return b
}

var errBodyClosed = errors.New("memstore: read on a closed body")

// body is a Get's body: a window on an immutable version of an object.
type body struct {
	ctx       context.Context
	data      []byte
	off       int64
	holds     []*Hold
	breakAt   int64 // < 0: no break
	breakErr  error
	closed    chan struct{}
	closeOnce sync.Once
}

func (b *body) Read(p []byte) (int, error) {
	select {
	case <-b.closed:
		return 0, errBodyClosed
	default:
	}
	end := int64(len(b.data))
	for _, h := range b.holds {
		if h.after >= end || h.released() {
			continue
		}
		if b.off >= h.after {
			if err := h.wait(b.ctx, b.closed); err != nil {
				return 0, err
			}
			continue
		}
		end = min(end, h.after)
	}
	if b.breakAt >= 0 {
		if b.off >= b.breakAt {
			return 0, fmt.Errorf("memstore: body broken after %d bytes: %w", b.off, b.breakErr)
		}
		end = min(end, b.breakAt)
	}
	if b.off >= end {
		return 0, io.EOF
	}
	if err := b.ctx.Err(); err != nil {
		return 0, err
	}
	n := copy(p, b.data[b.off:end])
	b.off += int64(n)
	return n, nil
}

func (b *body) Close() error {
	b.closeOnce.Do(func() { close(b.closed) })
	return nil
}
