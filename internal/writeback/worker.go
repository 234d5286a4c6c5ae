package writeback

import (
	"math/rand/v2"
	"time"
)

// worker starts the ready attempts, one at a time, until Close stops it.
//
// A write that fails transiently does not keep its worker while it waits:
// the worker arms a timer that puts the key back on the ready list, and
// moves on to other keys. The key stays busy meanwhile, so later writes of
// it still wait behind the failed one.
func (q *Queue) worker() {
	defer q.workers.Done()
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		for len(q.ready) == 0 && !q.stopping {
			q.work.Wait()
		}
		if q.stopping {
			return // Close settles whatever is still ready
		}
		ks := q.ready[0]
		q.ready[0] = nil
		q.ready = q.ready[1:]
		ks.queued = false
		if ks.running == nil {
			ks.running, ks.pending = ks.pending, nil
		}
		e := ks.running
		e.attempts++

		q.mu.Unlock()
		err := q.cfg.Sink.Persist(q.ctx, e.w)
		q.mu.Lock()

		q.finish(ks, e, err)
	}
}

// finish records the outcome of one attempt at ks's running write e. q.mu
// is held.
func (q *Queue) finish(ks *keyState, e *entry, err error) {
	switch {
	case err == nil:
		q.stats.Persisted++
		q.settle(e, nil)
	case q.cfg.Permanent(err):
		q.stats.Failed++
		q.cfg.Logger.Warn("writeback: write failed permanently",
			"bucket", e.w.Bucket, "key", e.w.Key, "delete", e.w.Delete, "attempts", e.attempts, "error", err)
		q.settle(e, err)
	case q.stopping:
		e.lastErr = err
		q.abandon(e)
	default:
		q.stats.Retries++
		e.lastErr = err
		d := backoff(q.cfg.MinBackoff, q.cfg.MaxBackoff, e.attempts)
		q.cfg.Logger.Debug("writeback: write failed, will retry",
			"bucket", e.w.Bucket, "key", e.w.Key, "attempts", e.attempts, "backoff", d, "error", err)
		q.timers.Add(1)
		ks.timer = time.AfterFunc(d, func() { q.retry(ks) })
		return
	}
	ks.running = nil
	switch {
	case ks.pending == nil:
		delete(q.keys, ks.id)
	case !q.stopping:
		q.push(ks)
	}
}

// retry puts ks's running write back on the ready list once its backoff is
// over.
func (q *Queue) retry(ks *keyState) {
	defer q.timers.Done()
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.stopping || ks.timer == nil {
		return // Close has taken over
	}
	ks.timer = nil
	q.push(ks)
}

// backoff is the wait before retrying a write that failed attempts times:
// a nominal min·2^(attempts-1), capped at max, of which a random half is
// taken off ("equal jitter"): writes failed by one outage spread out, and
// while the nominal wait doubles the actual waits still grow.
func backoff(lo, hi time.Duration, attempts int) time.Duration {
	d := lo
	for i := 1; i < attempts && d < hi; i++ {
		d *= 2
	}
	d = min(d, hi)
	half := d / 2
	return d - half + rand.N(half+1)
}
