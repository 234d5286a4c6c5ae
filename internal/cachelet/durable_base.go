package cachelet

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/store"
	"github.com/hoard-io/hoard/internal/writeback"
)

// A replay never puts a logged write over a store version newer than the
// one it was written over (ADR 0030, "Replay never goes back"). Each
// logged write records the store versions it may replace, as this
// cachelet knew the key when it logged it (its base): the version its
// previous write of the key got from the store, or the ETag of its cached
// copy, plus the versions of its writes of the key still queued; knowing
// nothing of the key, it asks the store (a HEAD, started as the request
// arrives, beside reading the body). It trusts what it knows where reads
// trust cached copies (knownBase). A replayed write is delivered only
// after a HEAD finds one of those versions (or its own: it reached the
// store before its done mark did), with If-Match on that version
// (If-None-Match: * for none): anything else, or a 412, means another
// writer wrote the key meanwhile, and the record is done, dropped,
// counted and logged. Until its delivery is settled a replayed write is
// not served: reads of its key wait.

// errNewerInStore is a replayed write's outcome when the store holds a
// version of the key its base does not know: someone else wrote it while
// this cachelet was down. Permanent: the record is done.
var errNewerInStore = errors.New("cachelet: the store holds a newer version of the key than the replayed write was written over")

// maxBase bounds the versions a write's base names; past it the base is
// unknown.
const maxBase = 16

// maxKnownKeys bounds the keys whose store version is remembered with
// nothing held; past it the idle ones are forgotten (a later write of one
// asks the store).
const maxKnownKeys = 1 << 16

// baseProbeTimeout bounds the HEAD that learns a key's version for a
// write's base; past it the base is unknown.
const baseProbeTimeout = 2 * time.Second

// versionBook is, per key this cachelet wrote under durable writes, the
// store versions the key may hold: before (nil: unknown) and the ETags of
// its held writes not settled (writing). Safe for concurrent use.
type versionBook struct {
	mu sync.Mutex
	m  map[cache.Key]*keyVersions
	// waiting counts the held writes whose base is unknown and not
	// learned yet (hoard_cachelet_durable_base_waiting).
	waiting atomic.Int64
}

type keyVersions struct {
	before  []string
	writing map[string]int
	// moved counts, per ETag, the held writes of the key not settled
	// when its ownership moved to another cachelet (forgetMoved): their
	// delivery is guarded even if the key comes back (movedWrite).
	moved map[string]int
	// unknown counts, per ETag, the held writes logged with an unknown
	// base that have not learned it since (waitBase); learned holds, per
	// ETag, what they learned (resolve).
	unknown map[string]int
	learned map[string][]string
}

// lookup returns the versions k may hold in the store and whether that is
// all of them (false: what the store had before is not known). More than
// maxBase of them: (nil, true), a base that is known to be unknown.
func (b *versionBook) lookup(k cache.Key) ([]string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	kv := b.m[k]
	if kv == nil {
		return nil, false
	}
	vs := slices.Clone(kv.before)
	for etag := range kv.writing {
		if vs = addVersion(vs, etag); vs == nil {
			return nil, true
		}
	}
	return vs, kv.before != nil
}

// held records a held write of k making etag over base (nil: unknown).
func (b *versionBook) held(k cache.Key, etag string, base []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[cache.Key]*keyVersions{}
	}
	kv := b.m[k]
	if kv == nil {
		kv = &keyVersions{writing: map[string]int{}}
		b.m[k] = kv
	}
	if kv.before == nil {
		kv.before = slices.Clone(base)
	} else {
		for _, v := range base { // a HEAD's answer, fresher
			if kv.before = addVersion(kv.before, v); kv.before == nil {
				break
			}
		}
	}
	kv.writing[etag]++
	b.trim()
}

// settled records the outcome of a held write of k: delivered (err nil)
// the store holds stored (its answer's ETag; etag when it gave none),
// and nothing older is left to arrive from here. owns says whether this
// cachelet owns k's writes now (asked under the book's lock, so that a
// ring change's forgetMoved comes before or after, never between): a
// key another cachelet owns is written by it from now on, and what this
// one delivered last says nothing of the store's version later.
func (b *versionBook) settled(k cache.Key, etag, stored string, err error, owns func(cache.Key) bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	kv := b.m[k]
	if kv == nil {
		return
	}
	if kv.writing[etag]--; kv.writing[etag] <= 0 {
		delete(kv.writing, etag)
	}
	if kv.moved[etag] > 0 {
		if kv.moved[etag]--; kv.moved[etag] == 0 {
			delete(kv.moved, etag)
		}
	}
	if kv.unknown[etag] > 0 {
		b.waiting.Add(-1)
		if kv.unknown[etag]--; kv.unknown[etag] == 0 {
			delete(kv.unknown, etag)
		}
	}
	if kv.writing[etag] == 0 {
		delete(kv.learned, etag)
	}
	switch {
	case err == nil && !owns(k):
		kv.before = nil
	case err == nil:
		if stored == "" {
			stored = etag
		}
		kv.before = []string{stored}
	case errors.Is(err, errNewerInStore):
		kv.before = nil // someone else's version: ask again
	}
	if kv.before == nil && len(kv.writing) == 0 {
		delete(b.m, k)
	}
}

// changed records a change of k in the store made by another route, as
// its notification reported it (external.go): a later write from here
// replaces it (and so may a replay). Notifications may come late, after a
// newer version: the version is added to those the key may hold, never
// put in their place. Without an ETag the key's version is unknown.
func (b *versionBook) changed(k cache.Key, etag string, removed bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	kv := b.m[k]
	if kv == nil || kv.before == nil {
		return
	}
	switch {
	case removed:
		kv.before = addVersion(kv.before, "")
	case etag == "":
		kv.before = nil
	default:
		kv.before = addVersion(kv.before, etag)
	}
	if kv.before == nil && len(kv.writing) == 0 {
		delete(b.m, k)
	}
}

// forgetMoved forgets the store versions of the keys this cachelet no
// longer owns (a ring change): another owner writes them now, so what
// this one knew goes stale, and a later write here, once a key comes
// back, asks the store (or trusts a cached copy, as reads do). Writes of
// them still held are marked moved: delivered guarded (hold).
func (b *versionBook) forgetMoved(owns func(cache.Key) bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for k, kv := range b.m {
		if owns(k) {
			continue
		}
		kv.before = nil
		if len(kv.writing) == 0 {
			delete(b.m, k)
			continue
		}
		kv.moved = maps.Clone(kv.writing)
	}
}

// movedWrite reports whether a held write of k making etag was held when
// k's ownership moved away.
func (b *versionBook) movedWrite(k cache.Key, etag string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	kv := b.m[k]
	return kv != nil && kv.moved[etag] > 0
}

// waitBase records that the held write of k making etag was logged with
// an unknown base: until resolve learns it, a delivery of the write after
// its key moved waits (learnedBase).
func (b *versionBook) waitBase(k cache.Key, etag string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	kv := b.m[k]
	if kv == nil || kv.writing[etag] == 0 {
		return
	}
	if kv.unknown == nil {
		kv.unknown = map[string]int{}
	}
	kv.unknown[etag]++
	b.waiting.Add(1)
}

// waitingBase reports whether the held write of k making etag still
// waits to learn its base, and whether it can still learn it (it has not
// moved: a store version read after a move may be the new owner's).
func (b *versionBook) waitingBase(k cache.Key, etag string) (waiting, learnable bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	kv := b.m[k]
	if kv == nil || kv.unknown[etag] == 0 {
		return false, false
	}
	return true, kv.moved[etag] == 0
}

// resolve records answer, the store's versions of k as a HEAD started
// while this cachelet owned k found them, as the base of the held write
// of k making etag, with the versions of the key's writes held here (one
// of which the store may have by now): the versions that write may
// replace. It reports false, recording nothing, when the write is
// settled, moved, or not waiting, or when this cachelet does not own k's
// writes now (asked under the book's lock, as settled does), or when
// there are more versions than a base names.
func (b *versionBook) resolve(k cache.Key, etag string, answer []string, owns func(cache.Key) bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	kv := b.m[k]
	if kv == nil || kv.unknown[etag] == 0 || kv.moved[etag] > 0 || !owns(k) {
		return false
	}
	vs := slices.Clone(answer)
	for v := range kv.writing {
		if vs = addVersion(vs, v); vs == nil {
			return false
		}
	}
	if kv.learned == nil {
		kv.learned = map[string][]string{}
	}
	kv.learned[etag] = vs
	b.waiting.Add(-int64(kv.unknown[etag]))
	delete(kv.unknown, etag)
	if kv.before == nil {
		kv.before = slices.Clone(vs) // what later writes of the key replace
	}
	return true
}

// learnedBase returns the base the held write of k making etag learned
// after it was logged (resolve), if it did.
func (b *versionBook) learnedBase(k cache.Key, etag string) ([]string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	kv := b.m[k]
	if kv == nil {
		return nil, false
	}
	vs, ok := kv.learned[etag]
	return slices.Clone(vs), ok
}

// trim forgets idle keys once there are too many. Called with mu held.
func (b *versionBook) trim() {
	if len(b.m) <= maxKnownKeys {
		return
	}
	for k, kv := range b.m {
		if len(kv.writing) == 0 {
			delete(b.m, k)
		}
		if len(b.m) <= maxKnownKeys/2 {
			return
		}
	}
}

// addVersion adds v to vs once; past maxBase the result is nil (unknown).
func addVersion(vs []string, v string) []string {
	if slices.Contains(vs, v) {
		return vs
	}
	if len(vs) >= maxBase {
		return nil
	}
	return append(vs, v)
}

// baseProbe is a HEAD of a key being written, for its base.
type baseProbe struct {
	done chan struct{}
	vs   []string // nil: unknown
}

// knownBase returns the store versions a write of k may replace as far
// as this cachelet knows them without asking, and where from ("known",
// "cached"); ok false when it must ask. It trusts what it knows of a
// key's version exactly where reads trust its cached copies: with no
// writers outside hoard expected, or while the bucket's change
// subscription is up (external.go).
func (c *Cachelet) knownBase(k cache.Key) (vs []string, from string, ok bool) {
	vs, complete := c.known.lookup(k)
	if complete && vs == nil {
		return nil, "unknown", true // more versions than a base names
	}
	if !c.ext.trusted(k.Bucket) {
		return vs, "", false
	}
	if complete {
		return vs, "known", true
	}
	if vs == nil && c.cfg.WriteTarget == WriteOwner {
		// Nothing of k held: an owner's cached copy's version is the
		// store's (a copy of a write delivered from here has the ETag
		// it was acknowledged with, the body's MD5, as a single PUT's
		// is). Under the local target a copy may be another
		// cachelet's write the store does not have yet.
		if e := c.cache.Peek(k); e != nil {
			return []string{e.Info().ETag}, "cached", true
		}
	}
	return vs, "", false
}

// probeBase starts learning k's store version for a write about to be
// logged, when this cachelet does not know it; nil when it needs no
// probe (no durable log, or the version is known).
func (c *Cachelet) probeBase(ctx context.Context, k cache.Key) *baseProbe {
	if c.cfg.Log == nil {
		return nil
	}
	if _, _, ok := c.knownBase(k); ok {
		return nil
	}
	p := &baseProbe{done: make(chan struct{})}
	go func() {
		defer close(p.done)
		pctx, cancel := context.WithTimeout(ctx, baseProbeTimeout)
		defer cancel()
		info, err := c.raw.Stat(pctx, k.Bucket, k.Object)
		p.vs = c.storeVersion(k, info, err)
	}()
	return p
}

// storeVersion is the version of k a HEAD's answer says the store holds,
// as a write's base names it ("" for none); nil when it did not answer.
func (c *Cachelet) storeVersion(k cache.Key, info store.ObjectInfo, err error) []string {
	switch {
	case err == nil && c.pendingOf(k, info) != "":
		// A placeholder (durable_shadow.go): the version pending is
		// what this write replaces.
		return []string{c.pendingOf(k, info)}
	case err == nil:
		return []string{info.ETag}
	case errors.Is(err, store.ErrNoSuchKey):
		return []string{""}
	}
	return nil
}

// Bases learned late. A logged write of a key whose base is unknown (the
// HEAD did not answer within baseProbeTimeout, or more writes of the key
// were held than a base names) is delivered as it is while this cachelet
// owns the key: the owner's own deliveries are unconditional. Were its
// key to move first, though, it could not be delivered guarded, and
// delivered as it is it could put an older version over one the new
// owner wrote since. So the write goes on asking: HEADs after a backoff
// (baseRetryMin doubling to baseRetryMax), each bounded by
// baseProbeTimeout, for as long as it is held and its key has not moved;
// an answer to a HEAD started and answered while this cachelet owned the
// key is its base (with the versions of the key's writes held here),
// trusted as the first HEAD's would have been. A moved write whose base
// is still unknown is never delivered unconditionally: its delivery
// fails with errBaseUnknown, which the store queue retries with its
// backoff (the write stays held and in the durable log: nothing
// acknowledged is lost), until it learned its base; one that can no
// longer learn it (it moved first) waits in the queue and, past this
// cachelet's close, in the log. hoard_cachelet_durable_base_waiting
// counts the writes waiting on their base.

// errBaseUnknown fails the delivery of a moved write whose base is not
// known yet; the store queue retries it.
var errBaseUnknown = fmt.Errorf("%w: a write whose key moved to another owner waits to learn the store version it was written over", store.ErrUnavailable)

// The backoff between the HEADs of a write learning its base.
const (
	baseRetryMin = time.Second
	baseRetryMax = 30 * time.Second
)

// learnBase has the held write of k making etag, logged with an unknown
// base, learn it (see above). It returns once the write learned it, is
// settled, moved, or this cachelet closes.
func (c *Cachelet) learnBase(k cache.Key, etag string) {
	defer c.wg.Done()
	wait := baseRetryMin
	for {
		select {
		case <-c.clock.After(wait):
		case <-c.stopped.Done():
			return
		}
		if waiting, learnable := c.known.waitingBase(k, etag); !waiting || !learnable {
			if waiting {
				c.log.Warn("durable writes: a write whose key moved before its base was known waits: it is not delivered unconditionally", "bucket", k.Bucket, "key", k.Object, "etag", etag)
			}
			return
		}
		pctx, cancel := context.WithTimeout(c.stopped, baseProbeTimeout)
		info, err := c.raw.Stat(pctx, k.Bucket, k.Object)
		cancel()
		if vs := c.storeVersion(k, info, err); vs != nil && c.known.resolve(k, etag, vs, c.ownsWrites) {
			c.m.durableBase.WithLabelValues("learned").Inc()
			return
		}
		wait = min(2*wait, baseRetryMax)
	}
}

// baseFor returns the store versions a write of k may replace (nil:
// unknown), from what this cachelet knows of k or else from p (started
// now if the caller did not): what the store answered, and the versions
// of the writes of k held here and not settled. Called with k's write
// lock held, so that no other write of k is logged between the answer
// and this one's hold.
func (c *Cachelet) baseFor(ctx context.Context, k cache.Key, p *baseProbe) []string {
	vs, from, ok := c.knownBase(k)
	if ok {
		c.m.durableBase.WithLabelValues(from).Inc()
		return vs
	}
	if p == nil {
		if p = c.probeBase(ctx, k); p == nil { // known meanwhile
			return c.baseFor(ctx, k, nil)
		}
	}
	select {
	case <-p.done:
	case <-ctx.Done():
	}
	select {
	case <-p.done:
		if p.vs != nil {
			c.m.durableBase.WithLabelValues("asked").Inc()
			out := slices.Clone(p.vs)
			for _, v := range vs {
				if out = addVersion(out, v); out == nil {
					break // more than a base names: unknown
				}
			}
			return out
		}
	default:
	}
	c.m.durableBase.WithLabelValues("unknown").Inc()
	return nil
}

// keyLocks serializes the logging of writes of one key (durable writes):
// a write's base, its record and its hold happen with no other write of
// the key in between. Bounded by the writes in flight.
type keyLocks struct {
	mu sync.Mutex
	m  map[cache.Key]chan struct{}
}

// lock takes k's lock, waiting until ctx ends; the returned func lets go.
func (l *keyLocks) lock(ctx context.Context, k cache.Key) (func(), error) {
	for {
		l.mu.Lock()
		if l.m == nil {
			l.m = map[cache.Key]chan struct{}{}
		}
		ch, busy := l.m[k]
		if !busy {
			ch = make(chan struct{})
			l.m[k] = ch
			l.mu.Unlock()
			return func() {
				l.mu.Lock()
				delete(l.m, k)
				l.mu.Unlock()
				close(ch)
			}, nil
		}
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: waiting for another write of the key: %v", store.ErrUnavailable, ctx.Err())
		}
	}
}

// replayGate holds reads of keys whose replayed write is not settled.
type replayGate struct {
	n  atomic.Int64
	mu sync.Mutex
	m  map[cache.Key]chan struct{}
}

func (g *replayGate) add(k cache.Key) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.m == nil {
		g.m = map[cache.Key]chan struct{}{}
	}
	if _, ok := g.m[k]; !ok {
		g.m[k] = make(chan struct{})
		g.n.Add(1)
	}
}

// release lets reads of k go (its replayed write settled, or a later
// write of the key is its truth now).
func (g *replayGate) release(k cache.Key) {
	if g.n.Load() == 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if ch, ok := g.m[k]; ok {
		delete(g.m, k)
		g.n.Add(-1)
		close(ch)
	}
}

// wait returns once k has no replayed write unsettled, or with an error
// when ctx ends first.
func (g *replayGate) wait(ctx context.Context, k cache.Key) error {
	if g.n.Load() == 0 {
		return nil
	}
	g.mu.Lock()
	ch, ok := g.m[k]
	g.mu.Unlock()
	if !ok {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: a write replayed from the durable log is not yet settled with the store: %v", store.ErrUnavailable, ctx.Err())
	}
}

// guard turns a replayed write into a put conditional on the store's
// version of the key (see the top of this file), or fails it with
// errNewerInStore.
func (c *Cachelet) guard(ctx context.Context, w writeback.Write) (store.PutOptions, error) {
	opts := w.Opts
	g := w.Guard
	wk := cache.Key{Bucket: w.Bucket, Object: w.Key}
	info, err := c.raw.Stat(ctx, w.Bucket, w.Key)
	present := true
	switch {
	case errors.Is(err, store.ErrNoSuchKey):
		present = false
	case err != nil:
		return opts, err
	}
	cur := info.ETag
	switch {
	case present && (cur == g.ETag || c.pendingOf(wk, info) == g.ETag):
		// Its own: it reached the store before its done mark did, or
		// its placeholder (durable_shadow.go) did.
	case g.Replaces == nil && present:
		// A record whose base is unknown (logged before bases were
		// kept, or when the store could not say): whether this
		// version is older cannot be told. Put as before, but only
		// over this version.
		c.m.replayUnverified.Inc()
		c.log.Warn("durable log: replaying a write whose base is unknown over the store's version", "bucket", w.Bucket, "key", w.Key, "store_etag", cur)
	case g.Replaces == nil, !present && slices.Contains(g.Replaces, ""), present && c.baseHolds(wk, g.Replaces, g.ETag, info):
	default:
		return opts, fmt.Errorf("%w (store version %q, written over %q)", errNewerInStore, cur, g.Replaces)
	}
	if present {
		opts.IfMatch = cur
	} else {
		opts.IfNoneMatch = "*"
	}
	return opts, nil
}

// replayed is the Settled step of a replayed write: reads of its key go
// on, and one that the store had a newer version of is dropped from
// memory (never served), counted and logged.
func (c *Cachelet) replayed(k cache.Key, e *cache.Entry, err error) {
	if errors.Is(err, errNewerInStore) {
		c.cache.Doom(e)
		c.cache.RemoveIf(k, e)
		c.m.replaySuperseded.Inc()
		c.log.Warn("durable log: a replayed write was not delivered: the key was written meanwhile by another route", "bucket", k.Bucket, "key", k.Object, "err", err)
	}
	c.replays.release(k)
}
