package cachelet

import (
	"context"
	"io"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/media"
	"github.com/hoard-io/hoard/internal/store"
)

// Put writes an object through to the store and, once the store has
// acknowledged it, keeps its bytes in memory. size is the payload's length
// (-1 when unknown: such a write is not kept). body must report any payload
// verification failure (bad signature, checksum mismatch) as a read error,
// so the store never commits a body the client did not send.
//
// Under the owner and local write targets an object the memory tier admits
// is held whole and persisted in the background (see consistency.go);
// larger ones, and every write under the store target, go through to the
// store before Put returns.
//
// Whatever the target, the body's first bytes are kept as they stream by
// (at most media.MaxPrefix, and only while they look like media), and the
// media features read from them go with the version written in the
// access metadata (Media).
func (c *Cachelet) Put(ctx context.Context, bucket, key string, body io.Reader, size int64, opts store.PutOptions) (res store.PutResult, err error) {
	start := c.clock.Now()
	var capture *media.Capture
	if size != 0 {
		capture = media.NewCapture(body)
		body = capture
	}
	defer func() {
		c.m.countWrite(err, start)
		if err == nil {
			var m *media.Features
			if f, ok := capture.Features(size); ok {
				m = &f
			}
			c.access.wrote(cache.Key{Bucket: bucket, Object: key}, res.ETag, size, m, c.clock.Now())
		}
		if err == nil && c.ec != nil && size >= 0 {
			// A large object written is sharded at once (erasure.go).
			c.ecFill(cache.Key{Bucket: bucket, Object: key}, store.ObjectInfo{Bucket: bucket, Key: key, ETag: res.ETag, Size: size})
		}
	}()
	buffered := c.cfg.WriteTarget != WriteStore && size >= 0 && c.cache.Admissible(size) && c.logAdmits(size)
	if opts.IfMatch != "" || opts.IfNoneMatch != "" || (buffered && c.writeThrough(ctx, bucket)) {
		// Only the store can judge a condition, and only against every
		// write before this one: deliver those, then write through. A
		// refused write leaves the key invalidated, never wrong. So it
		// goes with writes whose answer only the store knows (a version
		// id: versioning.go).
		if err := c.syncPoint(ctx, bucket, key); err != nil {
			return res, err
		}
		res, err = c.putThrough(ctx, bucket, key, body, size, opts)
		// The store changed behind the owners: drop their copies, as a
		// delete does.
		c.tellOwners(ctx, bucket, key)
		return res, err
	}
	if buffered {
		return c.putBuffered(ctx, bucket, key, body, size, opts)
	}
	return c.putThrough(ctx, bucket, key, body, size, opts)
}

// putThrough writes to the store, then keeps the bytes.
func (c *Cachelet) putThrough(ctx context.Context, bucket, key string, body io.Reader, size int64, opts store.PutOptions) (store.PutResult, error) {
	k := cache.Key{Bucket: bucket, Object: key}
	c.Invalidate(bucket, key)

	// Buffer the payload on its way to the store when memory admits it.
	var e *cache.Entry
	var buf *teeBuffer
	// The reservation is bounded (cache.Config.MaxUploadReserve): an
	// upload that finds the bound reached streams to the store uncached,
	// so unfinished uploads cannot evict the cache.
	charge := c.cache.Charge(size)
	final := c.finalOutput(bucket, key)
	if !c.cfg.DisableWriteCaching && !final && size >= 0 {
		if b := c.cache.ReserveBuilder(size); b != nil {
			e = cache.NewEntry(k, store.ObjectInfo{}) // a marker for Invalidate to doom
			c.keys.beginWrite(k, e)
			buf = &teeBuffer{r: body, b: b}
			body = buf
		}
	}
	res, err := c.store.Put(ctx, bucket, key, body, size, opts)
	c.m.writes.WithLabelValues("put", resultLabel(err)).Inc()
	if e != nil {
		c.cache.UploadDone(charge)
	}
	if e == nil {
		c.Invalidate(bucket, key)
		if final && err == nil {
			c.m.finalOutputs.WithLabelValues("written").Inc()
		}
		return res, err
	}
	if err != nil || buf.over || buf.b.Len() != size {
		c.dropWrite(k, e, charge)
		buf.b.Discard() // into the room the reservation left
		return res, err
	}
	// The store's word on the version just written (its ETag, its
	// Last-Modified) is what later reads check against. If someone else's
	// write already replaced ours, keep nothing.
	info, serr := c.store.Stat(ctx, bucket, key)
	if serr != nil || info.ETag != res.ETag || info.Size != size || e.Doomed() {
		// Doomed: a write that began before the store acknowledged this
		// one may have cached its own bytes, which the store has since
		// replaced with these. Keep neither.
		c.dropWrite(k, e, charge)
		buf.b.Discard()
		return res, nil
	}
	// Swap the placeholder for the real entry while it is still
	// registered, so an Invalidate racing with Add dooms or removes it.
	// Reads that asked the store after the Invalidate above, but before it
	// had this write, may hold the older version: doom them too, or their
	// fill would land over this entry.
	ne := buf.b.Entry(k, info)
	c.keys.writeAcked(k, e, ne)
	added := c.cache.Add(ne)
	if added {
		c.cache.MarkOutput(k, ne) // in the store: a shrink gives it up first (budget.go)
		c.cache.MarkUnread(k, ne) // written, not read: the sweep counts from its first read (sweep.go)
	}
	c.keys.writeDone(k, ne)
	ne.Release() // this write's reference: the cache holds its own
	if !added {
		// Refused: doomed since the check above (an Invalidate, a
		// DropPrefix) or over a lowered budget. Had it been added it
		// would have replaced whatever is cached; not added, an older
		// version a read cached meanwhile could stay behind this write.
		// Keep nothing.
		c.Invalidate(bucket, key)
	}
	return res, nil
}

// dropWrite abandons a buffered write's cache copy, which reserved charge.
func (c *Cachelet) dropWrite(k cache.Key, e *cache.Entry, charge int64) {
	c.keys.writeDone(k, e)
	c.cache.Release(charge)
	c.Invalidate(k.Bucket, k.Object)
}

// teeBuffer copies what the store reads into b, which takes memory as
// the bytes arrive (cache.Builder), so a client that declares a large body
// and sends little holds little.
type teeBuffer struct {
	r    io.Reader
	b    *cache.Builder
	over bool // more than announced: nothing is kept, the store will refuse it
}

func (t *teeBuffer) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if n > 0 && !t.over {
		if _, werr := t.b.Write(p[:n]); werr != nil {
			t.over = true
			t.b.Discard()
		}
	}
	return n, err
}

// firstBuffer is the first allocation for a body held in memory.
const firstBuffer = 64 << 10

// grow gives b room for limit bytes, keeping its contents: firstBuffer
// at first, then, once the client has sent that much, all of limit at
// once. Doubling instead would leave as much garbage as the body itself
// for the collector (a process's memory is its cache plus that garbage);
// what a client that stops sending holds is bounded by the upload
// reservations (cache.Config.MaxUploadReserve) and the body's idle
// timeout. Callers grow only while b is short of limit.
func grow(b []byte, limit int64) []byte {
	c := limit
	if cap(b) < firstBuffer {
		c = min(firstBuffer, limit)
	}
	nb := make([]byte, len(b), c)
	copy(nb, b)
	return nb
}

// Delete removes an object from the store and the cache.
func (c *Cachelet) Delete(ctx context.Context, bucket, key string) error {
	c.Invalidate(bucket, key)
	if err := c.syncPoint(ctx, bucket, key); err != nil {
		return err
	}
	err := c.store.Delete(ctx, bucket, key)
	c.Invalidate(bucket, key)
	c.tellOwners(ctx, bucket, key)
	c.m.writes.WithLabelValues("delete", resultLabel(err)).Inc()
	return err
}

// DeleteMany removes up to 1000 objects; see store.Store.DeleteMany.
func (c *Cachelet) DeleteMany(ctx context.Context, bucket string, keys []string) (map[string]error, error) {
	for _, k := range keys {
		c.Invalidate(bucket, k)
	}
	if err := c.syncPoint(ctx, bucket, keys...); err != nil {
		return nil, err
	}
	failed, err := c.store.DeleteMany(ctx, bucket, keys)
	for _, k := range keys {
		c.Invalidate(bucket, k)
	}
	c.tellOwners(ctx, bucket, keys...)
	c.m.writes.WithLabelValues("delete_many", resultLabel(err)).Inc()
	return failed, err
}

// Copy copies an object inside the store; the destination's cached copy,
// if any, is dropped.
func (c *Cachelet) Copy(ctx context.Context, src store.CopySource, dstBucket, dstKey string, opts store.CopyOptions) (store.CopyResult, error) {
	start := c.clock.Now()
	c.Invalidate(dstBucket, dstKey)
	if err := c.syncPoint(ctx, dstBucket, dstKey); err != nil {
		return store.CopyResult{}, err
	}
	if err := c.syncPoint(ctx, src.Bucket, src.Key); err != nil {
		return store.CopyResult{}, err
	}
	res, err := c.store.Copy(ctx, src, dstBucket, dstKey, opts)
	c.Invalidate(dstBucket, dstKey)
	c.tellOwners(ctx, dstBucket, dstKey)
	c.m.writes.WithLabelValues("copy", resultLabel(err)).Inc()
	c.m.countWrite(err, start)
	return res, err
}

// CompleteMultipartUpload completes an upload; the key's cached copy, if
// any, is dropped.
func (c *Cachelet) CompleteMultipartUpload(ctx context.Context, bucket, key, uploadID string, parts []store.Part, opts store.CompleteOptions) (store.PutResult, error) {
	start := c.clock.Now()
	c.Invalidate(bucket, key)
	if err := c.syncPoint(ctx, bucket, key); err != nil {
		return store.PutResult{}, err
	}
	res, err := c.store.CompleteMultipartUpload(ctx, bucket, key, uploadID, parts, opts)
	c.Invalidate(bucket, key)
	c.tellOwners(ctx, bucket, key)
	c.m.writes.WithLabelValues("complete_multipart", resultLabel(err)).Inc()
	c.m.countWrite(err, start)
	return res, err
}

// DeleteBucket deletes a bucket in the store and drops anything cached of it.
func (c *Cachelet) DeleteBucket(ctx context.Context, bucket string) error {
	err := c.store.DeleteBucket(ctx, bucket)
	if err == nil {
		c.cache.RemoveBucket(bucket)
	}
	return err
}

func resultLabel(err error) string {
	if err != nil {
		return "error"
	}
	return "ok"
}

// Change runs op, a request that changes keys of bucket in the store
// directly (a request passed through as is: a versioned delete, a change
// of retention, a copy the typed path cannot express), as Delete runs its
// store call: the keys' cached copies and fills in flight are invalidated
// before and after, the writes of them still queued are delivered first,
// and their owners are told to drop their copies afterwards. op's error
// is returned as is. kind names the change in the writes metric:
// ChangePut, ChangeCopy and ChangeComplete write an object and count as
// a client's object write in Counters, as Put, Copy and
// CompleteMultipartUpload do; anything else is ChangeOther.
func (c *Cachelet) Change(ctx context.Context, bucket string, keys []string, kind ChangeKind, op func() error) error {
	start := c.clock.Now()
	for _, k := range keys {
		c.Invalidate(bucket, k)
	}
	if err := c.syncPoint(ctx, bucket, keys...); err != nil {
		return err
	}
	err := op()
	for _, k := range keys {
		c.Invalidate(bucket, k)
	}
	switch kind {
	case ChangeCopy, ChangeOther:
		// These may change an object's metadata alone (a copy onto
		// itself, tagging, retention), keeping its ETag: a copy kept
		// at any member would pass validation against the owner or
		// the store, so every member drops its own.
		for _, k := range keys {
			c.broadcastInvalidate(ctx, bucket, k)
		}
	}
	c.tellOwners(ctx, bucket, keys...)
	if kind == "" {
		kind = ChangeOther
	}
	c.m.writes.WithLabelValues(string(kind), resultLabel(err)).Inc()
	switch kind {
	case ChangePut, ChangeCopy, ChangeComplete:
		c.m.countWrite(err, start)
	}
	return err
}

// ChangeKind names a Change for metrics: the label of the writes metric
// the typed call of the same operation uses.
type ChangeKind string

// The kinds of Change.
const (
	ChangePut        ChangeKind = "put"                // an object written whole
	ChangeCopy       ChangeKind = "copy"               // an object copied onto the key
	ChangeComplete   ChangeKind = "complete_multipart" // a multipart upload completed
	ChangeDelete     ChangeKind = "delete"             // an object deleted
	ChangeDeleteMany ChangeKind = "delete_many"        // objects deleted by one request
	ChangeOther      ChangeKind = "pass"               // any other change (tagging, retention, a versioned delete, ...)
)

// Settle delivers the writes of keys of bucket still queued here or at
// the other cachelets (under the owner and local write targets) before a
// request that reads them from the store directly (a request passed
// through: a versioned read, tagging, attributes), so it sees every write
// made through the application's cachelets. Under the store target it
// returns at once.
func (c *Cachelet) Settle(ctx context.Context, bucket string, keys ...string) error {
	return c.syncPoint(ctx, bucket, keys...)
}
