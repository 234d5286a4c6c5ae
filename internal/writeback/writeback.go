// Package writeback is the background write queue of one cachelet: it
// persists the writes that the weaker consistency modes acknowledge before
// the store has them (owner/sync, owner/async and local targets; see
// docs/design/cooperative-cache.md, "Writes and consistency").
//
// The queue keeps three promises. Writes of one key reach the Sink in the
// order they were enqueued, one at a time; a queued write that a later write
// of the same key replaces before it starts is skipped, because the later
// write carries the whole object. Transient failures are retried with capped
// exponential backoff for as long as the queue is open, so a store outage
// delays writes but does not lose them. And nothing is dropped silently:
// every write's channel receives exactly one outcome, and Close names each
// write it had to give up on.
//
// The queue lives in memory: a crash loses what is queued, which is the
// "medium" and "low" fault tolerance of the modes that use it, unless the
// cachelet logs each write durably first (package writelog, ADR 0030).
package writeback

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hoard-io/hoard/internal/clock"
	"github.com/hoard-io/hoard/internal/store"
)

// Write is one object write to persist in the background.
type Write struct {
	Bucket, Key string
	// Data is the whole object. The queue neither modifies nor copies it;
	// the caller must not modify it after Enqueue.
	Data []byte
	// Delete makes this a delete of the key instead of a put; Data and
	// Opts are then unused.
	Delete bool
	Opts   store.PutOptions
	// Guard, when set, makes a put conditional on the store's version
	// of the key (a durable log's replay, ADR 0030). The queue only
	// carries it; the Sink judges it.
	Guard *Guard
	// Stored, when set, is called by a Sink that put the write in the
	// store, with the store's answer, before Persist returns.
	Stored func(store.PutResult)
	// Settled, when set, is called once the write is settled, with the
	// outcome its channel receives (nil: persisted; ErrSuperseded; the
	// Sink's permanent error; an error wrapping ErrClosed), before Drain
	// counts it as settled: what a caller records about the write is gone
	// by the time a Drain that waited for it returns. It runs with the
	// queue's lock held, so it must be quick and must not call the queue.
	Settled func(err error)
}

// Guard says which store versions a put may replace: the Sink puts it
// only over one of Replaces (ETags, "" for no object) or over ETag, its
// own (a put that reached the store before its outcome was recorded). nil
// Replaces: they are not known.
type Guard struct {
	ETag     string
	Replaces []string
	// IfMoved: the Sink judges the guard only when the key is no longer
	// its to deliver (another cachelet owns it now, or did since the
	// write was held); else the put is unconditional.
	IfMoved bool
}

// Sink persists one write: to the store, or to the key's owner.
//
// Persist is called by the queue's workers, concurrently for different keys
// and never concurrently for the same key. ctx is cancelled only when Close
// gives up on the writes still queued; Persist should then return promptly.
// An error that Config.Permanent does not accept is retried after a backoff,
// so Persist must be safe to repeat (a put or delete of a whole object is).
type Sink interface {
	Persist(ctx context.Context, w Write) error
}

// Defaults of Config.
const (
	DefaultWorkers    = 4
	DefaultMinBackoff = 50 * time.Millisecond
	DefaultMaxBackoff = 5 * time.Second
)

// Config configures a Queue.
type Config struct {
	// Sink persists the writes. Required.
	Sink Sink
	// Workers is how many writes of different keys may be persisted at
	// once. Default DefaultWorkers (4).
	Workers int
	// MinBackoff is the nominal wait before the first retry of a write;
	// each further retry doubles it, up to MaxBackoff. The actual wait is
	// drawn from [nominal/2, nominal] so that writes failed by the same
	// outage do not retry in lockstep. Default DefaultMinBackoff (50ms).
	MinBackoff time.Duration
	// MaxBackoff caps the nominal wait between retries. Default
	// DefaultMaxBackoff (5s); it must not be below MinBackoff.
	MaxBackoff time.Duration
	// Permanent reports whether an error from the Sink is not worth
	// retrying: such a write fails at once and its channel receives the
	// error. Default (nil): every error is transient and retried while the
	// queue is open.
	Permanent func(error) bool
	// Logger receives retries (debug), permanent failures (warn) and the
	// writes Close gave up on (error). Default: discard.
	Logger *slog.Logger
	// Registerer, if set, receives the hoard_writeback_* metrics.
	Registerer prometheus.Registerer
	// Clock is what ages (Stats.OldestAge) are measured with. Default
	// the system clock. Backoff waits use the runtime's timers.
	Clock clock.Clock
}

// Validate checks the config and fills in defaults.
func (c *Config) Validate() error {
	if c.Sink == nil {
		return errors.New("writeback: a sink is required")
	}
	if c.Workers < 0 {
		return fmt.Errorf("writeback: workers %d must not be negative", c.Workers)
	}
	if c.Workers == 0 {
		c.Workers = DefaultWorkers
	}
	if c.MinBackoff < 0 || c.MaxBackoff < 0 {
		return errors.New("writeback: backoffs must not be negative")
	}
	if c.MinBackoff == 0 {
		c.MinBackoff = DefaultMinBackoff
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = max(DefaultMaxBackoff, c.MinBackoff)
	}
	if c.MaxBackoff < c.MinBackoff {
		return fmt.Errorf("writeback: max backoff %v is below min backoff %v", c.MaxBackoff, c.MinBackoff)
	}
	if c.Permanent == nil {
		c.Permanent = func(error) bool { return false }
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	c.Clock = clock.Or(c.Clock)
	return nil
}

var (
	// ErrClosed is the outcome of a write enqueued after Close began. A
	// write that Close gave up on before it was persisted receives an error
	// that wraps ErrClosed (and the write's last Sink error, if any).
	ErrClosed = errors.New("writeback: queue closed")
	// ErrSuperseded is the outcome of a write that a later write of the
	// same key replaced before it started. The caller's write is not lost:
	// the key ends up as the later write leaves it, exactly as if both had
	// been persisted in order. To learn when the key is persisted, wait on
	// the later write's channel or call Drain.
	ErrSuperseded = errors.New("writeback: superseded by a later write of the same key")
)

// CloseError is what Close returns when its context ended before every
// write was persisted. Each write it lists received an error wrapping
// ErrClosed on its channel and was logged.
type CloseError struct {
	// Unpersisted are the writes given up on, in enqueue order. The caller
	// may still try to persist them some other way.
	Unpersisted []Write
	// Err is the context's error.
	Err error
}

func (e *CloseError) Error() string {
	const show = 10
	var b strings.Builder
	fmt.Fprintf(&b, "writeback: closed with %d writes not persisted (", len(e.Unpersisted))
	for i, w := range e.Unpersisted {
		if i == show {
			fmt.Fprintf(&b, ", and %d more", len(e.Unpersisted)-show)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(w.Bucket + "/" + w.Key)
	}
	fmt.Fprintf(&b, "): %v", e.Err)
	return b.String()
}

func (e *CloseError) Unwrap() error { return e.Err }

// Stats is a snapshot of a queue's state and counters.
type Stats struct {
	// Depth is how many writes are enqueued and not yet settled, counting
	// the ones being persisted or waiting to be retried.
	Depth int
	// OldestAge is how long ago the oldest of them was enqueued; 0 when
	// Depth is 0.
	OldestAge time.Duration
	// Persisted counts writes the Sink accepted.
	Persisted uint64
	// Retries counts failed attempts that were retried.
	Retries uint64
	// Superseded counts writes replaced before they started.
	Superseded uint64
	// Failed counts writes that failed permanently or that Close gave up
	// on.
	Failed uint64
}

// objectKey identifies the object a write is for.
type objectKey struct{ bucket, key string }

// entry is one enqueued write until it is settled.
type entry struct {
	w        Write
	seq      uint64
	enqueued time.Time
	result   chan error // buffered; receives the outcome once
	attempts int
	lastErr  error

	prev, next *entry // the queue's list of unsettled writes, oldest first
}

// keyState is what the queue knows of one key with unsettled writes. At
// most one write of the key is running (being persisted or waiting to be
// retried) and at most one is pending behind it: a newer write replaces the
// pending one.
type keyState struct {
	id      objectKey
	running *entry
	pending *entry
	queued  bool        // in Queue.ready
	timer   *time.Timer // the running write's retry, while it waits
}

// drainWaiter is one Drain call waiting for the writes enqueued before it.
type drainWaiter struct {
	seq  uint64 // the last write it waits for
	left int    // of those, how many are not settled yet
	done chan struct{}
}

// Queue persists writes in the background through a Sink. Its methods are
// safe for concurrent use.
type Queue struct {
	cfg       Config
	ctx       context.Context // given to the Sink; cancelled when Close gives up
	cancel    context.CancelFunc
	workers   sync.WaitGroup
	timers    sync.WaitGroup // retry timers armed and not yet stopped or run
	closeDone chan struct{}  // closed when the first Close returns
	closeErr  error          // set before closeDone is closed

	mu        sync.Mutex
	work      *sync.Cond // ready grew, or stopping was set
	keys      map[objectKey]*keyState
	ready     []*keyState // keys with an attempt to start, in FIFO order
	head      *entry      // oldest unsettled write
	tail      *entry      // newest unsettled write
	seq       uint64      // of the newest write
	depth     int         // unsettled writes
	drains    []*drainWaiter
	closing   bool     // Enqueue refuses
	stopping  bool     // workers exit, retries are no longer scheduled
	abandoned []*entry // writes Close gave up on
	stats     Stats    // counters only
}

// New validates cfg, registers the queue's metrics and starts its workers.
// Close stops them.
func New(cfg Config) (*Queue, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	q := &Queue{
		cfg:       cfg,
		ctx:       ctx,
		cancel:    cancel,
		closeDone: make(chan struct{}),
		keys:      make(map[objectKey]*keyState),
	}
	q.work = sync.NewCond(&q.mu)
	if cfg.Registerer != nil {
		if err := registerMetrics(cfg.Registerer, q); err != nil {
			cancel()
			return nil, err
		}
	}
	q.workers.Add(cfg.Workers)
	for range cfg.Workers {
		go q.worker()
	}
	return q, nil
}

// Enqueue queues w to be persisted and returns a channel that receives
// exactly one value: nil once w is persisted, the Sink's error if it is
// permanent, ErrSuperseded if a later write of the same key replaced w
// before it started, or ErrClosed (possibly wrapped) if the queue is
// closing or Close gave up on w. The channel is buffered: the caller may
// ignore it.
//
// Writes of one key are persisted in the order of their Enqueue calls. A
// write already being persisted (or waiting to be retried) is never
// cancelled by a later write of its key; the later one waits for it.
func (q *Queue) Enqueue(w Write) <-chan error {
	result := make(chan error, 1)
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closing {
		if w.Settled != nil {
			w.Settled(ErrClosed)
		}
		result <- ErrClosed
		return result
	}
	q.seq++
	e := &entry{w: w, seq: q.seq, enqueued: q.cfg.Clock.Now(), result: result}
	q.link(e)
	id := objectKey{w.Bucket, w.Key}
	ks := q.keys[id]
	if ks == nil {
		ks = &keyState{id: id}
		q.keys[id] = ks
	}
	if old := ks.pending; old != nil {
		q.stats.Superseded++
		q.settle(old, ErrSuperseded)
	}
	ks.pending = e
	if ks.running == nil && !ks.queued {
		q.push(ks)
	}
	return result
}

// Drain waits until every write enqueued before the call is settled
// (persisted, failed, superseded or given up on; their channels say which),
// or until ctx ends, when it returns ctx's error. Writes enqueued after the
// call began are not waited for, even when one of them supersedes an
// earlier write (which Drain then counts as settled). Drain may be called
// concurrently with anything, including Close.
func (q *Queue) Drain(ctx context.Context) error {
	q.mu.Lock()
	if q.depth == 0 {
		q.mu.Unlock()
		return nil
	}
	d := &drainWaiter{seq: q.seq, left: q.depth, done: make(chan struct{})}
	q.drains = append(q.drains, d)
	q.mu.Unlock()

	select {
	case <-d.done:
		return nil
	case <-ctx.Done():
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if d.left == 0 {
		return nil // settled while we took the lock
	}
	for i, x := range q.drains {
		if x == d {
			q.drains = append(q.drains[:i], q.drains[i+1:]...)
			break
		}
	}
	return ctx.Err()
}

// Close stops accepting writes (Enqueue then answers ErrClosed), waits
// until every queued write is settled or ctx ends, and stops the workers.
// Until ctx ends, failed writes keep being retried.
//
// If ctx ends first, Close cancels the Sink calls in progress, stops the
// retries, settles every write not yet persisted with an error wrapping
// ErrClosed, logs each one with its key and returns a *CloseError listing
// them. Close always waits for the workers to return, so a Sink that
// ignores its context delays it.
//
// Close is idempotent: later calls wait for the first to finish (or for
// their own ctx) and return its result.
func (q *Queue) Close(ctx context.Context) error {
	q.mu.Lock()
	if q.closing {
		q.mu.Unlock()
		select {
		case <-q.closeDone:
			return q.closeErr
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	q.closing = true
	q.mu.Unlock()

	drainErr := q.Drain(ctx)

	q.mu.Lock()
	q.stopping = true
	q.work.Broadcast()
	q.mu.Unlock()
	if drainErr != nil {
		q.cancel() // interrupts Sink calls in progress
	}
	q.workers.Wait()

	q.mu.Lock()
	for _, ks := range q.keys {
		if ks.timer != nil && ks.timer.Stop() {
			q.timers.Done() // its function will not run
		}
		ks.timer = nil
	}
	for q.head != nil {
		q.abandon(q.head)
	}
	abandoned := q.abandoned
	slices.SortFunc(abandoned, func(a, b *entry) int { return cmp.Compare(a.seq, b.seq) })
	q.abandoned = nil
	q.keys = nil
	q.ready = nil
	q.mu.Unlock()
	q.timers.Wait() // timers that fired meanwhile see stopping and return
	q.cancel()

	if len(abandoned) > 0 {
		ce := &CloseError{Err: drainErr, Unpersisted: make([]Write, len(abandoned))}
		for i, e := range abandoned {
			ce.Unpersisted[i] = e.w
			q.cfg.Logger.Error("writeback: write not persisted before close",
				"bucket", e.w.Bucket, "key", e.w.Key, "delete", e.w.Delete,
				"bytes", len(e.w.Data), "attempts", e.attempts, "last_error", e.lastErr)
		}
		if ce.Err == nil {
			ce.Err = ErrClosed // unreachable: drained queues abandon nothing
		}
		q.closeErr = ce
	}
	close(q.closeDone)
	return q.closeErr
}

// Stats returns a snapshot of the queue's depth, age and counters.
func (q *Queue) Stats() Stats {
	q.mu.Lock()
	defer q.mu.Unlock()
	s := q.stats
	s.Depth = q.depth
	if q.head != nil {
		s.OldestAge = max(0, q.cfg.Clock.Now().Sub(q.head.enqueued))
	}
	return s
}

// link appends e to the list of unsettled writes. q.mu is held.
func (q *Queue) link(e *entry) {
	e.prev = q.tail
	if q.tail != nil {
		q.tail.next = e
	} else {
		q.head = e
	}
	q.tail = e
	q.depth++
}

// settle delivers e's outcome and forgets it. The caller has already
// detached e from its keyState. q.mu is held.
func (q *Queue) settle(e *entry, err error) {
	if e.w.Settled != nil {
		e.w.Settled(err)
	}
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		q.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		q.tail = e.prev
	}
	e.prev, e.next = nil, nil
	q.depth--
	for i := 0; i < len(q.drains); {
		d := q.drains[i]
		if d.seq >= e.seq {
			d.left--
			if d.left == 0 {
				close(d.done)
				q.drains = append(q.drains[:i], q.drains[i+1:]...)
				continue
			}
		}
		i++
	}
	e.result <- err
}

// abandon settles e, which Close gives up on. q.mu is held.
func (q *Queue) abandon(e *entry) {
	q.stats.Failed++
	q.abandoned = append(q.abandoned, e)
	err := fmt.Errorf("%w: %s/%s not persisted", ErrClosed, e.w.Bucket, e.w.Key)
	if e.lastErr != nil {
		err = fmt.Errorf("%w: %s/%s not persisted: %w", ErrClosed, e.w.Bucket, e.w.Key, e.lastErr)
	}
	q.settle(e, err)
}

// push marks ks as having an attempt to start and wakes a worker. q.mu is
// held.
func (q *Queue) push(ks *keyState) {
	ks.queued = true
	q.ready = append(q.ready, ks)
	q.work.Signal()
}
