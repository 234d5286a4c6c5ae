package cachelet

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/store"
	"github.com/hoard-io/hoard/internal/writeback"
	"github.com/hoard-io/hoard/internal/writelog"
)

// Durable writes (Config.Log, ADR 0030). Under the owner and local write
// targets a write this cachelet holds for the store is appended to a
// durable log (package writelog) and fsynced before it is acknowledged;
// once the store has it (or a later write of the key replaced it, or the
// store refused it for good) its record is marked done. A cachelet that
// starts on a log with records not done holds them again, newest of each
// key, as writes queued for the store before it serves: the next
// process with the same identity on that node delivers what a crashed one
// acknowledged, each only over a store version it was written over
// (durable_base.go).
//
// Log order is the order in which the store gets a key's writes after a
// crash, so it must agree with the order the cache saw them in: two
// writes of one key logged concurrently may reach hold (consistency.go) in the
// other order. The one logged first is then not held at all (its record
// is done at once): it is linearized just before the later one, which
// replaces it, as if both had been persisted in order.

// WriteLog is the durable log as the cachelet uses it (*writelog.Log).
// Safe for concurrent use.
type WriteLog interface {
	// Append returns once r is on disk, with its ID; it may wait for
	// room until ctx ends.
	Append(ctx context.Context, r writelog.Record) (uint64, error)
	// Done marks a record as no longer needed (never blocks on I/O).
	Done(id uint64)
	// Sync waits until the Done marks made so far are on disk.
	Sync(ctx context.Context) error
	// Fits reports whether an object of size bytes can be logged at all.
	Fits(size int64) bool
}

// logOrder is, per key, the ID of the newest logged write the cachelet
// holds, until that write is settled. Its lock is taken last (inside
// c.wmu and the queues' locks).
type logOrder struct {
	mu   sync.Mutex
	last map[cache.Key]uint64
}

// admit records id as k's newest held write, unless a later-logged one
// is held already.
func (o *logOrder) admit(k cache.Key, id uint64) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.last == nil {
		o.last = map[cache.Key]uint64{}
	}
	if id < o.last[k] {
		return false
	}
	o.last[k] = id
	return true
}

func (o *logOrder) settled(k cache.Key, id uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.last[k] == id {
		delete(o.last, k)
	}
}

// logAdmits reports whether a write of size bytes may be held under
// durable writes: larger ones than the log can hold go through to the
// store, as those the memory tier does not admit do.
func (c *Cachelet) logAdmits(size int64) bool {
	return c.cfg.Log == nil || c.cfg.Log.Fits(size)
}

// logAndHold logs w (under durable writes) and holds it, as hold does;
// an error means it was not logged, and must not be acknowledged. A
// write's base, record and hold come with no other write of the key
// logged in between (keyLocks).
func (c *Cachelet) logAndHold(ctx context.Context, k cache.Key, w writeback.Write, etag string, probe *baseProbe) (bool, error) {
	if c.cfg.Log == nil {
		return c.hold(k, w, etag, 0, nil, false), nil
	}
	unlock, err := c.keyLocks.lock(ctx, k)
	if err != nil {
		return false, err
	}
	defer unlock()
	base := c.baseFor(ctx, k, probe)
	if c.bk != nil {
		return c.logReplicated(ctx, k, w, etag, base)
	}
	id, err := c.logWrite(ctx, w, etag, base)
	if err != nil {
		return false, err
	}
	if c.cfg.Shadow {
		if err := c.writeShadow(ctx, k, etag, base, id); err != nil {
			return c.holdThrough(ctx, k, w, etag, id, base, "the store did not take the write's placeholder", err)
		}
	}
	return c.hold(k, w, etag, id, base, false), nil
}

// holdThrough holds a logged write queued for the store and returns once
// the store has it: acknowledged only then (why: what kept it from being
// acknowledged at once).
func (c *Cachelet) holdThrough(ctx context.Context, k cache.Key, w writeback.Write, etag string, id uint64, base []string, why string, cause error) (bool, error) {
	c.log.Debug("durable writes: waiting for the store", "bucket", k.Bucket, "key", k.Object, "why", why, "err", cause)
	held, done := c.holdQueued(k, w, etag, id, base, false)
	if !held {
		return false, nil
	}
	select {
	case err := <-done:
		if err != nil {
			return false, fmt.Errorf("%w: %s, and the store did not take it: %v", store.ErrUnavailable, why, err)
		}
		return true, nil
	case <-ctx.Done():
		return false, fmt.Errorf("%w: %s, and the store did not have it before the deadline: %v", store.ErrUnavailable, why, ctx.Err())
	}
}

// logWrite appends w, making etag over base, to the durable log and
// returns its ID. The write must not be acknowledged when it fails.
func (c *Cachelet) logWrite(ctx context.Context, w writeback.Write, etag string, base []string) (uint64, error) {
	id, err := c.cfg.Log.Append(ctx, writelog.Record{Bucket: w.Bucket, Key: w.Key, Opts: w.Opts, Data: w.Data, ETag: etag, Replaces: base})
	if err != nil {
		c.m.writes.WithLabelValues("logged", "error").Inc()
		return 0, fmt.Errorf("%w: the write could not be logged: %v", store.ErrUnavailable, err)
	}
	return id, nil
}

// logSettled is a logged write's Settled hook: its record is done unless
// the queue gave up on it at Close (it is then delivered by the next
// start).
func (c *Cachelet) logSettled(k cache.Key, id uint64, err error) {
	if id == 0 {
		return
	}
	c.order.settled(k, id)
	if !errors.Is(err, writeback.ErrClosed) {
		c.logDone(id)
	}
}

// fenceWrites returns once every write that checked for a handoff or a
// leave before the caller set it is queued: hold checks and enqueues under
// c.wmu, so a drain that follows the fence waits for those writes too.
// Logging a write takes time (an fsync) between a PUT's first checks and
// its enqueue; without the fence a handoff's drain could miss it.
func (c *Cachelet) fenceWrites() {
	c.wmu.Lock()
	//lint:ignore SA2001 an empty critical section is the fence
	c.wmu.Unlock()
}

// syncLog makes the done marks of the writes delivered so far durable,
// before an operation that changes the store directly: a delete must
// never be undone by the replay of a write it followed.
func (c *Cachelet) syncLog(ctx context.Context) error {
	if c.cfg.Log == nil {
		return nil
	}
	return c.cfg.Log.Sync(ctx)
}

// replay holds the writes a log found on open, newest of each key, as
// queued for the store; the older ones are done (the newest replaces
// them). Called by New before the cachelet serves.
func (c *Cachelet) replay(all []writelog.Pending) {
	var pending, backups []writelog.Pending
	for _, p := range all {
		if p.Backup != nil {
			backups = append(backups, p)
		} else {
			pending = append(pending, p)
		}
	}
	c.restoreBackups(backups)
	newest := map[cache.Key]int{}
	for i, p := range pending {
		newest[cache.Key{Bucket: p.Bucket, Object: p.Key}] = i
	}
	for i, p := range pending {
		k := cache.Key{Bucket: p.Bucket, Object: p.Key}
		if newest[k] != i {
			c.logDone(p.ID)
			continue
		}
		sum := md5.Sum(p.Data)
		c.hold(k, writeback.Write{Bucket: p.Bucket, Key: p.Key, Data: p.Data, Opts: p.Opts}, hex.EncodeToString(sum[:]), p.ID, p.Replaces, true)
	}
	if len(pending) > 0 {
		c.m.replayed.Add(float64(len(newest)))
		c.log.Info("durable log: holding acknowledged writes not yet in the store", "records", len(pending), "keys", len(newest))
	}
}
