package cachelet

import (
	"context"
	"io"
	"time"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/store"
)

// Fills: a store (or owner) answer copied into memory while readers
// stream from it. Fills run on goroutines of their own (or on the reader
// that missed, for small objects), detached from the request that started
// them; Close cancels them and waits.

// install takes a store body of a whole object and either starts filling
// memory from it (returning the entry, which readers can read at once) or,
// when the object is not admitted, hands the body back for streaming. fl is
// the registered GET the body answers; a doomed GET's entry is filled for
// the readers already waiting on it, but no new read finds it and it is
// never admitted. The caller holds a reference to the entry returned
// (cache.Entry.Acquire), which it must release.
func (c *Cachelet) install(k cache.Key, body io.ReadCloser, info store.ObjectInfo, fl *flight) (*cache.Entry, io.ReadCloser, error) {
	sb, split := body.(splittable)
	split = split && c.split.splits(info)
	// Unfinished fills reserve a bounded share of the cache
	// (cache.Config.MaxFillReserve): beyond it a cold read streams
	// uncached, so many slow cold reads cannot evict the cache. The
	// entry holds the fill's reference, released by admit; it lands in
	// the memory of what its reservation evicted, where nobody reads
	// that any more (cache.ReserveEntry).
	var e *cache.Entry
	switch {
	case !split:
		e = c.cache.ReserveEntry(cache.ForFill, k, info)
	case c.cache.ReserveFill(info.Size):
		// A split download fills byte ranges in place: one buffer,
		// not chunks.
		e = cache.NewEntry(k, info)
	}
	if e == nil {
		return nil, body, nil
	}
	charge := e.Charge()
	if !c.keys.install(k, fl, e, &c.wg) {
		// No new fill goroutines once Close began: stream this one.
		c.cache.FillDone(charge)
		c.cache.Release(charge)
		e.Release()
		return nil, body, nil
	}
	e.Acquire() // the caller's: the fill holds one, so this one is taken
	if info.Size <= syncFillMax {
		// Small objects arrive in one read or two: filling them here
		// spares a goroutine and a wake-up per cold read, and streaming
		// would gain nothing. A failure is the reader's error before any
		// header is sent, not a broken body after.
		if err := c.fill(e, body); err != nil {
			e.Release()
			return nil, nil, err
		}
		return e, nil, nil
	}
	if split {
		go c.fillSplit(e, sb.ReadCloser)
		return e, nil, nil
	}
	go c.fill(e, body) // its readers see its error
	return e, nil, nil
}

// syncFillMax is the largest object filled by the reader that missed
// rather than by a goroutine of its own.
const syncFillMax = 64 << 10

// fill copies a store body into e and admits e to the cache; it returns
// the error that aborted the fill, if any.
func (c *Cachelet) fill(e *cache.Entry, body io.ReadCloser) error {
	defer c.wg.Done()
	start := c.clock.Now()
	_, err := e.ReadFrom(body)
	body.Close()
	c.admit(e, err, start)
	return err
}

// admit ends a fill: a complete entry is added to the cache (unless a
// write doomed it or the budget shrank), a failed one releases its
// reservation. The fill's reference to e is released.
func (c *Cachelet) admit(e *cache.Entry, err error, start time.Time) {
	defer e.Release()
	c.cache.FillDone(e.Charge())
	// Add before the fill ends in the table: an Invalidate in between either dooms
	// e (so Add refuses it) or removes it from the cache after.
	switch {
	case err != nil:
		c.cache.Release(e.Charge())
		c.m.fills.WithLabelValues("aborted").Inc()
		c.log.Warn("cache fill aborted", "bucket", e.Key().Bucket, "key", e.Key().Object, "err", err)
	case c.cache.Add(e):
		c.m.fillOK.Inc()
		c.m.fillSeconds.Observe(c.clock.Now().Sub(start).Seconds())
		c.writeAhead(e)
	case e.Doomed():
		c.m.fills.WithLabelValues("doomed").Inc()
	default: // the budget was lowered below the fills in flight
		c.m.fills.WithLabelValues("over_budget").Inc()
	}
	c.keys.fillDone(e)
}

// fillContext detaches a store request from the client's request: a fill
// outlives the reader that started it, and other readers may depend on it.
// Close cancels it.
func (c *Cachelet) fillContext(ctx context.Context) (context.Context, context.CancelFunc) {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.FillTimeout)
	stop := context.AfterFunc(c.stopped, cancel)
	return fctx, func() { stop(); cancel() }
}

// cancelOnClose releases a request context when its body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}
