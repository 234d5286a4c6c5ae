// Package cachelet is the read and write paths of one application
// instance's cache: it decides, per request, whether bytes come from memory
// or from the store, keeps the memory tier consistent with the store, and
// counts every outcome.
//
// Consistency. With the default ReadVersionCheck every read of a cached
// object first asks the store, with a conditional GET (If-None-Match: the
// cached ETag), whether the copy is still current; a match moves no data.
// Every write goes synchronously to the store and only then updates the
// cache. Writes and deletes through the cachelet doom any fill of the same
// key still in flight, so an older download can never land over a newer
// write. ReadLocal trusts the memory copy without asking (Faa$T's "local"
// reads): faster, and only as fresh as this cachelet's own writes.
package cachelet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/cacheconfig"
	"github.com/hoard-io/hoard/internal/store"
	"github.com/hoard-io/hoard/internal/writeback"
)

// ReadMode says how far a read trusts the memory copy (package
// cacheconfig names the modes).
type ReadMode = cacheconfig.ReadMode

const (
	// ReadVersionCheck confirms every cached copy against the store with a
	// conditional request before serving it. The default: strong.
	ReadVersionCheck = cacheconfig.ReadVersionCheck
	// ReadLocal serves cached copies without asking the store.
	ReadLocal = cacheconfig.ReadLocal
	// ReadOwner confirms cached copies with the key's owner, which holds
	// the newest version written through the application's cachelets;
	// the owner itself trusts its memory. Objects changed in the store
	// behind hoard's back are not seen until the owner drops its copy.
	ReadOwner = cacheconfig.ReadOwner
)

// Config configures a Cachelet.
type Config struct {
	// Cache sizes the memory tier (Budget is required).
	Cache cache.Config
	// ReadMode: ReadVersionCheck (default) or ReadLocal.
	ReadMode ReadMode
	// FillTimeout bounds one download from the store into memory, which
	// outlives the request that started it. Default 10 minutes.
	FillTimeout time.Duration
	// WriteTarget and WriteMode: where a write must land before Put
	// returns (see cacheconfig.Consistencies). Default WriteStore, WriteSync.
	WriteTarget WriteTarget
	WriteMode   WriteMode
	// DrainTimeout bounds how long Close waits for queued writes to reach
	// the store (or their owner). Default 30 s; what is left is logged.
	DrainTimeout time.Duration
	// Router and Peers make the cachelet one of its application's: misses
	// of keys another cachelet owns go to that owner (remote hit or
	// miss), which falls back to the store when the owner cannot answer.
	// Both nil (the default): a cachelet on its own.
	Router Router
	Peers  Peers
	// CacheWrites keeps the bytes of objects written through the cachelet
	// in memory (after the store acknowledged them). Default true; set
	// DisableWriteCaching to turn it off.
	DisableWriteCaching bool
	// MemoryLimitOverhead, when positive, has the cachelet keep the Go
	// runtime's soft memory limit (runtime/debug.SetMemoryLimit, what
	// GOMEMLIMIT sets) at the cache's budget plus this many bytes, from New
	// on and after every SetBudget (budget.go), so that the process's heap
	// stays near what it caches rather than growing to twice its live
	// bytes between collections. The limit is the process's: set it only
	// where the cachelet is alone in its process (`hoard serve` for the
	// platform's instances). Default 0: the limit is left alone.
	MemoryLimitOverhead int64
	// Bandwidth, when set, turns on the bandwidth policy (split.go):
	// large objects are downloaded in byte ranges by several of the
	// application's cachelets at once. It needs Router and Peers (that
	// list members and serve ranges). Default nil: off.
	Bandwidth *BandwidthConfig
}

// Validate checks the config and fills in defaults.
func (c *Config) Validate() error {
	if c.ReadMode == "" {
		c.ReadMode = ReadVersionCheck
	}
	if !cacheconfig.ValidReadMode(c.ReadMode) {
		return fmt.Errorf("cachelet: unknown read mode %q (want %q, %q or %q)", c.ReadMode, ReadVersionCheck, ReadOwner, ReadLocal)
	}
	if c.FillTimeout == 0 {
		c.FillTimeout = 10 * time.Minute
	}
	if c.FillTimeout < 0 {
		return errors.New("cachelet: fill timeout must be positive")
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = 30 * time.Second
	}
	if c.MemoryLimitOverhead < 0 {
		return errors.New("cachelet: memory limit overhead must not be negative")
	}
	if err := c.validateWrites(); err != nil {
		return err
	}
	if c.ReadMode == ReadOwner && (c.Router == nil) != (c.Peers == nil) {
		return errors.New("cachelet: Router and Peers go together")
	}
	return c.Cache.Validate()
}

// Outcome classifies how a read was served.
type Outcome string

const (
	// LocalHit: served from this cachelet's memory.
	LocalHit Outcome = "local_hit"
	// LocalMiss: fetched from the store into memory while being served.
	LocalMiss Outcome = "local_miss"
	// PassThrough: streamed from the store without being kept (too large
	// for the memory tier, or no room while other fills hold it).
	PassThrough Outcome = "pass_through"
)

// Cachelet serves reads and writes for one instance. Safe for concurrent use.
type Cachelet struct {
	cfg   Config
	store store.Store
	cache *cache.Cache
	log   *slog.Logger
	m     *metrics

	mu      sync.Mutex
	filling map[cache.Key]*cache.Entry // fills in flight, readable
	pending map[cache.Key]*cache.Entry // buffered writes awaiting the store
	flights map[cache.Key]*flight      // cold reads others may still join
	// asking holds every store GET whose answer may be installed, from
	// before it is sent until its answer is installed (or not): a write
	// must doom an answer that may predate it even before it is installed.
	asking map[cache.Key]map[*flight]struct{}
	// unpersisted holds the writes this cachelet queued for the store and
	// the store does not have yet (consistency.go), by key.
	unpersisted map[cache.Key]*cache.Entry
	// wmu orders buffered writes: cache, unpersisted and queue alike.
	wmu sync.Mutex
	// leaving is set once the cachelet stops taking writes as an owner;
	// left is closed once what it queued before is delivered.
	leaving atomic.Bool
	left    chan struct{}

	wg     sync.WaitGroup // fill goroutines
	closed bool

	// Background persistence: writes queued for the store, and writes
	// queued for their owner (owner target, async mode).
	toStore, toOwner *writeback.Queue

	// The running ownership handoff, if any (handoff.go).
	hmu     sync.Mutex
	handoff chan struct{}

	// budgetMu serializes budget changes (budget.go).
	budgetMu sync.Mutex

	// Keys evicted, for counting repeat evictions (counters.go).
	evicted evictionLog

	// Access metadata (access.go) and the keys pre-warmed and not read yet.
	access    accessLog
	prewarmMu sync.Mutex
	prewarmed map[cache.Key]bool

	// The bandwidth policy's state; nil when off (split.go).
	split *splitter

	// stopped ends when Close begins; fills derive from it.
	stopped   context.Context
	stopFills context.CancelFunc
}

// flight is a store GET whose answer may be installed in memory. A cold
// read's flight (done set) is shared by readers that arrive before its
// answer does.
type flight struct {
	done   chan struct{} // nil unless others can join
	entry  *cache.Entry  // set when the object is being filled
	err    error
	doomed bool // a write overtook this GET: whatever it returns is not cached
}

// askLocked registers a store GET of k about to be sent, so that writes
// doom its answer. Called with mu held; endAskLocked ends it.
func (c *Cachelet) askLocked(k cache.Key, fl *flight) *flight {
	set := c.asking[k]
	if set == nil {
		set = make(map[*flight]struct{})
		c.asking[k] = set
	}
	set[fl] = struct{}{}
	return fl
}

func (c *Cachelet) endAskLocked(k cache.Key, fl *flight) {
	if set := c.asking[k]; set != nil {
		delete(set, fl)
		if len(set) == 0 {
			delete(c.asking, k)
		}
	}
}

// ask registers a store GET of k that no other reader joins.
func (c *Cachelet) ask(k cache.Key) *flight {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.askLocked(k, &flight{})
}

func (c *Cachelet) endAsk(k cache.Key, fl *flight) {
	c.mu.Lock()
	c.endAskLocked(k, fl)
	c.mu.Unlock()
}

// New returns a Cachelet over st. reg may be nil (no metrics exported).
func New(cfg Config, st store.Store, log *slog.Logger, reg prometheus.Registerer) (*Cachelet, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Cachelet{
		cfg:     cfg,
		store:   st,
		log:     log,
		filling: make(map[cache.Key]*cache.Entry),
		pending: make(map[cache.Key]*cache.Entry),
		flights: make(map[cache.Key]*flight),
		asking:  make(map[cache.Key]map[*flight]struct{}),

		unpersisted: make(map[cache.Key]*cache.Entry),
		left:        make(chan struct{}),
	}
	c.stopped, c.stopFills = context.WithCancel(context.Background())
	c.m = newMetrics(reg, c)
	var err error
	if c.split, err = newSplitter(cfg, reg); err != nil {
		return nil, err
	}
	ccfg := cfg.Cache
	owns := ccfg.Owns
	if cfg.Router != nil && owns == nil {
		owns = func(k cache.Key) bool {
			_, self := cfg.Router.Owner(k.Bucket, k.Object)
			return self
		}
	}
	ccfg.Owns = owns
	user := ccfg.OnEvict
	ccfg.OnEvict = func(e *cache.Entry) {
		c.m.evictedBytes.Add(float64(e.Size()))
		if e.Owned() {
			c.evicted.note(e.Key())
		}
		if user != nil {
			user(e)
		}
	}
	if c.cache, err = cache.New(ccfg); err != nil {
		return nil, err
	}
	c.applyMemoryLimit(ccfg.Budget)
	wrap := func(q string) prometheus.Registerer {
		if reg == nil {
			return nil
		}
		return prometheus.WrapRegistererWith(prometheus.Labels{"queue": q}, reg)
	}
	if c.toStore, err = writeback.New(writeback.Config{Sink: storeSink{st}, Permanent: permanent,
		Logger: log.With("queue", "store"), Registerer: wrap("store")}); err != nil {
		return nil, err
	}
	if c.toOwner, err = writeback.New(writeback.Config{Sink: ownerSink{c}, Permanent: permanent,
		Logger: log.With("queue", "owner"), Registerer: wrap("owner")}); err != nil {
		return nil, err
	}
	if c.ownerMode() {
		// A cachelet joining an application takes keys over from the
		// members that owned them: it hands off like any ring change.
		c.startHandoff()
	}
	return c, nil
}

// Store returns the store the cachelet fronts.
func (c *Cachelet) Store() store.Store { return c.store }

// Stats returns the memory tier's occupancy.
func (c *Cachelet) Stats() cache.Stats { return c.cache.Stats() }

// Close cancels the fills still in flight (those no request is waiting
// for any more: the listener shut down first), waits for them, and turns
// later fills into pass-through. It does not close the store. Idempotent.
func (c *Cachelet) Close() error {
	// Queued writes first: to their owners (while the peers still
	// listen), then to the store. Nothing queued is dropped silently:
	// what cannot be persisted in time is reported.
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.DrainTimeout)
	defer cancel()
	err := errors.Join(c.toOwner.Close(ctx), c.toStore.Close(ctx))
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.stopFills()
	c.wg.Wait()
	return err
}

// Invalidate drops the cached copy of bucket/key and dooms every fill of it
// in flight, and every store GET of it whose answer is not in yet. Writes
// call it before and after they reach the store.
func (c *Cachelet) Invalidate(bucket, key string) {
	k := cache.Key{Bucket: bucket, Object: key}
	c.mu.Lock()
	c.doomLocked(k)
	c.mu.Unlock()
	c.cache.Remove(k)
}

// doomReadsLocked dooms what reads of k have in flight: fills, and store
// GETs not answered yet. Nothing doomed stays where a new read would find
// it: a read that starts after a write returned must not join a download
// that may predate the write. Called with mu held.
func (c *Cachelet) doomReadsLocked(k cache.Key) {
	if e := c.filling[k]; e != nil {
		c.cache.Doom(e)
		delete(c.filling, k)
	}
	for fl := range c.asking[k] {
		fl.doomed = true
		if fl.entry != nil {
			c.cache.Doom(fl.entry)
		}
	}
	delete(c.flights, k)
}

// install takes a store body of a whole object and either starts filling
// memory from it (returning the entry, which readers can read at once) or,
// when the object is not admitted, hands the body back for streaming. fl is
// the registered GET the body answers; a doomed GET's entry is filled for
// the readers already waiting on it, but no new read finds it and it is
// never admitted.
func (c *Cachelet) install(k cache.Key, body io.ReadCloser, info store.ObjectInfo, fl *flight) (*cache.Entry, io.ReadCloser, error) {
	if !c.cache.Reserve(info.Size) {
		return nil, body, nil
	}
	e := cache.NewEntry(k, info)
	c.mu.Lock()
	if c.closed {
		// No new fill goroutines once Close began: stream this one.
		c.mu.Unlock()
		c.cache.Release(info.Size)
		return nil, body, nil
	}
	fl.entry = e
	if fl.doomed {
		c.cache.Doom(e)
	} else {
		if old := c.filling[k]; old != nil {
			c.cache.Doom(old) // we hold a newer answer
		}
		c.filling[k] = e
	}
	c.wg.Add(1)
	c.mu.Unlock()
	if info.Size <= syncFillMax {
		// Small objects arrive in one read or two: filling them here
		// spares a goroutine and a wake-up per cold read, and streaming
		// would gain nothing. A failure is the reader's error before any
		// header is sent, not a broken body after.
		if err := c.fill(e, body); err != nil {
			return nil, nil, err
		}
		return e, nil, nil
	}
	if sb, ok := body.(splittable); ok && c.splits(info) {
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
	start := time.Now()
	_, err := e.ReadFrom(body)
	body.Close()
	c.admit(e, err, start)
	return err
}

// admit ends a fill: a complete entry is added to the cache (unless a
// write doomed it or the budget shrank), a failed one releases its
// reservation.
func (c *Cachelet) admit(e *cache.Entry, err error, start time.Time) {
	// Add before leaving c.filling: an Invalidate in between either dooms
	// e (so Add refuses it) or removes it from the cache after.
	switch {
	case err != nil:
		c.cache.Release(e.Size())
		c.m.fills.WithLabelValues("aborted").Inc()
		c.log.Warn("cache fill aborted", "bucket", e.Key().Bucket, "key", e.Key().Object, "err", err)
	case c.cache.Add(e):
		c.m.fills.WithLabelValues("ok").Inc()
		c.m.fillSeconds.Observe(time.Since(start).Seconds())
	case e.Doomed():
		c.m.fills.WithLabelValues("doomed").Inc()
	default: // the budget was lowered below the fills in flight
		c.m.fills.WithLabelValues("over_budget").Inc()
	}
	c.mu.Lock()
	if c.filling[e.Key()] == e {
		delete(c.filling, e.Key())
	}
	c.mu.Unlock()
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
