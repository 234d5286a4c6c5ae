package cachelet

import (
	"bytes"
	"context"
	"errors"
	"io"
	"time"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/store"
)

// The disk tier's hooks (package disktier, ADR 0022): objects this
// cachelet would read from the store leave memory for disk when evicted
// (spill), come back from disk on a memory miss (fromDisk), and are
// dropped from disk when a write or delete makes them obsolete
// (Invalidate). A disk copy is a disk hit only once the store confirmed
// its version with a conditional GET (which moves no data when current),
// whatever the read mode: the directory is shared by the application's
// instances on the node and outlives them, so it is never trusted more
// than a local miss would be. Every failure of the disk is a miss.

// Disk is the disk tier as the cachelet uses it (disktier.Tier).
type Disk interface {
	// Spill offers an object evicted from memory; it takes body (closing
	// it) and never blocks: the cache calls it under its lock.
	Spill(bucket, key string, info store.ObjectInfo, body io.ReadCloser) bool
	// Write writes an object now (Close keeps memory on disk this way,
	// and objects too large to spill are written ahead); it takes body.
	Write(ctx context.Context, bucket, key string, info store.ObjectInfo, body io.ReadCloser) error
	// SpillMax is the largest object Spill can take (evicted objects wait
	// in memory for their write, a bounded amount together).
	SpillMax() int64
	// Open returns a verified copy of the object: its metadata and a body
	// of its bytes that fails rather than deliver bytes that changed
	// since. Any error is a miss.
	Open(bucket, key string) (store.ObjectInfo, io.ReadCloser, error)
	// Remove drops the object's copy, and any spill of it in progress.
	Remove(bucket, key string)
	// RemovePrefix drops the copies of bucket's keys under prefix that
	// this process knows of (DropPrefix).
	RemovePrefix(bucket, prefix string) int
}

// DiskHit: served from the node's disk tier after the store confirmed
// its version (no data moved from the store).
const DiskHit Outcome = "disk_hit"

// spillWorthy reports whether an entry leaving memory is worth a file:
// one this cachelet reads from the store itself (it owns the key, or is
// alone), complete and not made obsolete by a write.
func (c *Cachelet) spillWorthy(e *cache.Entry) bool {
	return c.cfg.Disk != nil && (c.cfg.Router == nil || e.Owned()) && e.Complete() && !e.Doomed() && !isPage(e.Key())
}

// spill is the cache's OnEvict hook: called under the cache's lock while
// the cache still holds e, so the reference taken here keeps its bytes
// until the disk tier has written them.
func (c *Cachelet) spill(e *cache.Entry) {
	if !c.spillWorthy(e) || !e.Acquire() {
		return
	}
	k := e.Key()
	c.cfg.Disk.Spill(k.Bucket, k.Object, e.Info(), e.ReadCloser(0, e.Size()))
}

// Objects larger than the disk tier's SpillMax cannot wait in memory for
// their write once evicted (what waits is memory outside the budget,
// bounded); without more, the largest objects, the ones a disk tier saves
// most on, would never reach the disk. So a fill of one is written
// ahead: once admitted, while it is in memory (inside the budget), a
// goroutine of the cachelet writes it to the tier, one at a time, from
// a bounded queue of keys (a full queue drops the key: the object is
// then only as it was before, in memory). The writer holds a reference
// to the entry only while it writes it: an entry evicted meanwhile keeps
// its bytes until the write ends, like any reader's, and one evicted
// before its turn is skipped. Its eviction then finds it on disk
// ("known"), and an instance reloaded on the node finds it there.

// writeAheadQueue bounds the keys waiting to be written ahead.
const writeAheadQueue = 64

// writeAheadTimeout bounds one write ahead.
const writeAheadTimeout = 2 * time.Minute

// writeAhead queues e's key for the disk tier when e, just admitted, is
// too large to spill on eviction. It never blocks.
func (c *Cachelet) writeAhead(e *cache.Entry) {
	if c.ahead == nil || e.Size() <= c.cfg.Disk.SpillMax() || !c.spillWorthy(e) {
		return
	}
	select {
	case c.ahead <- e.Key():
	default:
		c.m.writeAhead.WithLabelValues("busy").Inc()
	}
}

// writeAheadLoop writes the queued keys' entries to the disk tier, one
// at a time, until Close.
func (c *Cachelet) writeAheadLoop() {
	defer c.sweeping.Done()
	for {
		var k cache.Key
		select {
		case <-c.stopped.Done():
			return
		case k = <-c.ahead:
		}
		e := c.cache.Peek(k)
		if e == nil || e.Size() <= c.cfg.Disk.SpillMax() || !c.spillWorthy(e) || !e.Acquire() {
			c.m.writeAhead.WithLabelValues("gone").Inc()
			continue
		}
		ctx, cancel := context.WithTimeout(c.stopped, writeAheadTimeout)
		err := c.cfg.Disk.Write(ctx, k.Bucket, k.Object, e.Info(), e.ReadCloser(0, e.Size()))
		cancel()
		if err != nil {
			c.m.writeAhead.WithLabelValues("refused").Inc()
			c.log.Debug("disk tier: object not written ahead", "bucket", k.Bucket, "key", k.Object, "err", err)
			continue
		}
		c.m.writeAhead.WithLabelValues("written").Inc()
	}
}

// fromDisk serves a miss from the disk tier when it holds the object and
// the store confirms the version. handled is false when the disk has no
// usable copy (the caller reads the store); otherwise sv and err are the
// read's answer: a disk hit, or, when the object changed, the store's new
// body installed as a local miss.
func (c *Cachelet) fromDisk(ctx context.Context, k cache.Key, fl *flight) (sv served, handled bool, err error) {
	if c.cfg.Disk == nil {
		return served{}, false, nil
	}
	info, body, err := c.cfg.Disk.Open(k.Bucket, k.Object)
	if err != nil {
		return served{}, false, nil // absent, damaged (dropped) or unreadable: a miss
	}
	fctx, cancel := c.fillContext(ctx)
	sbody, sinfo, _, err := c.store.Get(fctx, k.Bucket, k.Object, store.GetOptions{IfNoneMatch: info.ETag, ChecksumMode: true})
	switch {
	case errors.Is(err, store.ErrNotModified):
		cancel()
	case err != nil:
		cancel()
		body.Close()
		if errors.Is(err, store.ErrNoSuchKey) || errors.Is(err, store.ErrNoSuchBucket) {
			c.cfg.Disk.Remove(k.Bucket, k.Object)
		}
		return served{}, true, err
	default:
		// Changed in the store: its answer is the read's, a local miss.
		body.Close()
		c.cfg.Disk.Remove(k.Bucket, k.Object)
		sv, err := c.installed(k, splittable{cancelOnClose{ReadCloser: sbody, cancel: cancel}}, sinfo, fl)
		return sv, true, err
	}
	if info.Size <= syncFillMax {
		// Read whole before anything is installed, so that a file that
		// changed since its check is a clean miss. Larger objects are
		// checked as they stream: a change aborts the fill, and its
		// readers see an error, never the changed bytes.
		b, err := io.ReadAll(body)
		body.Close()
		if err != nil || int64(len(b)) != info.Size {
			return served{}, false, nil
		}
		body = io.NopCloser(bytes.NewReader(b))
	}
	sv, err = c.installed(k, body, info, fl)
	if err != nil {
		return served{}, true, err
	}
	sv.outcome = DiskHit
	return sv, true, nil
}

// keepOnDisk writes what memory holds to the disk tier as the cachelet
// closes, so that an instance loaded again on this node starts warm. It
// stops at ctx's end; what is left is lost like any memory.
func (c *Cachelet) keepOnDisk(ctx context.Context) {
	if c.cfg.Disk == nil {
		return
	}
	n := 0
	for _, k := range c.cache.Keys(func(cache.Key) bool { return true }) {
		if ctx.Err() != nil {
			break
		}
		e := c.cache.Peek(k)
		if e == nil || !c.spillWorthy(e) || !e.Acquire() {
			continue
		}
		if c.cfg.Disk.Write(ctx, k.Bucket, k.Object, e.Info(), e.ReadCloser(0, e.Size())) == nil {
			n++
		}
	}
	c.log.Debug("kept memory on disk", "objects", n)
}

// diskKeepTimeout bounds keepOnDisk within Close.
const diskKeepTimeout = 10 * time.Second
