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
//
// Layout. The cachelet is an I/O shell around keystate, a pure table of
// what each key has in flight (single-flight fills, the store GETs a write
// dooms, pending and unpersisted writes, the ownership handoff), which
// keys.go serialises under one lock. By verb: get.go reads (Get, Stat),
// validate.go the version checks concurrent reads share, fill.go copies
// answers into memory, put.go writes through to the store
// (Put, Delete, Copy, ...), consistency.go holds the owner and local write
// targets' buffered writes and their background persistence, cluster.go
// the peer protocol's owner side, handoff.go ownership handoffs on ring
// changes, split.go the bandwidth policy's split downloads, pages.go
// ranges kept in pages, drop.go bulk
// drops, access.go access metadata and pre-warming, budget.go run-time
// budget changes, external.go the store's change notifications (writers
// outside hoard), counters.go and metrics.go what is counted.
package cachelet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/cacheconfig"
	"github.com/hoard-io/hoard/internal/clock"
	"github.com/hoard-io/hoard/internal/store"
	"github.com/hoard-io/hoard/internal/writeback"
	"github.com/hoard-io/hoard/internal/writelog"
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
	// ServeStaleIfError serves a cached copy whose validation failed
	// because the store is unavailable (store.ErrUnavailable: down, hung,
	// past its deadline), as outcome StaleHit, instead of failing the
	// read. Default false: a doubt is a miss, and the read fails with
	// ErrUnavailable (503 to clients). Only ReadVersionCheck and
	// ReadOwner validate, so only they are affected.
	ServeStaleIfError bool
	// FillTimeout bounds one download from the store into memory, which
	// outlives the request that started it. Default 10 minutes.
	FillTimeout time.Duration
	// PageSize is the size of the pages that ranges of objects not cached
	// whole are fetched and kept in (pages.go, ADR 0021). Default
	// DefaultPageSize; negative turns pages off (a ranged read of an
	// uncached object then fetches the whole object).
	PageSize int64
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
	// FinalOutputs are where the application's final outputs land
	// (cacheconfig.Settings.FinalOutputs, final.go): writes under them
	// leave memory once the store has them.
	FinalOutputs []cacheconfig.Location
	// MemoryLimitOverhead, when positive, has the cachelet keep the Go
	// runtime's soft memory limit (runtime/debug.SetMemoryLimit, what
	// GOMEMLIMIT sets) at the cache's budget plus this many bytes less
	// ResidentBase, from New on and after every SetBudget (budget.go), so
	// that the process's resident memory stays near budget plus this
	// rather than growing to twice its live bytes between collections.
	// The limit is the process's: set it only where the cachelet is alone
	// in its process (`hoard serve`, which defaults it to
	// cacheconfig.DefaultMemoryOverhead). While the live heap is smaller
	// than this, the collector is also paced to let the heap grow by this
	// much between collections rather than by the live heap's size
	// (GOGC; gcpace.go, ADR 0039), unless $GOGC is set. Default 0: the
	// limit and the pace are left alone.
	MemoryLimitOverhead int64
	// ResidentBase is the process's resident memory that the Go runtime
	// does not count (the binary's mapped pages), which the soft memory
	// limit leaves room for within MemoryLimitOverhead. The limit keeps
	// at least a quarter of the overhead whatever ResidentBase says.
	// Default 0 (instance.Start measures it for `hoard serve`).
	ResidentBase int64
	// Sweep sweeps the memory tier periodically (sweep.go). Default:
	// OFC's, every 300 s; Sweep.Off turns it off.
	Sweep SweepConfig
	// Migrate bounds the offers of hot objects to their owners on ring
	// changes and shrinks (migrate.go, ADR 32). Default: on in an
	// application, with its defaults.
	Migrate MigrateConfig
	// Disk, when set, is the node's disk tier for this application
	// (disk.go): owned objects evicted from memory are kept there, and a
	// memory miss looks there before the store. Default nil: memory only.
	Disk Disk
	// Bandwidth, when set, turns on the bandwidth policy (split.go):
	// large objects are downloaded in byte ranges by several of the
	// application's cachelets at once. It needs Members and Ranges.
	// Default nil: off.
	Bandwidth *BandwidthConfig
	// External, when set, follows the store's change notifications so
	// that objects changed outside hoard are dropped (external.go, ADR
	// 0028). Default nil: local reads trust their copies as they are.
	External *ExternalConfig

	// Log, when set, makes writes held for the store durable before they
	// are acknowledged (durable.go, ADR 0030); Replay is what the log
	// held on open, which New holds again before the cachelet serves.
	// Only under the owner and local write targets. Default nil: held
	// writes live in memory until the store has them.
	Log    WriteLog
	Replay []writelog.Pending
	// Backup, with Log under the owner write target, has a second member
	// of the application keep a copy of each write before it is
	// acknowledged (durable_backup.go, `durable_writes: replicated`). It
	// needs BackupRing and BackupPeers (filled from Router and Peers);
	// without them (no application) the log alone holds writes, and
	// New says so once. Default nil: one copy.
	Backup *BackupConfig
	// Shadow, with Log, puts a placeholder of each durable write in the
	// store before it is acknowledged: an empty object whose metadata
	// names the pending version (durable_shadow.go). Default false.
	Shadow bool
	// ShadowKey signs placeholders (HMAC-SHA256): only an object whose
	// MAC verifies under it is taken for one, by reads, replays and
	// backups' takeovers. All the application's cachelets must share it
	// (the replay or takeover of one's write may run in another), and
	// it must outlive the log. At least MinShadowKey bytes; required
	// with Shadow. Without it, with Log, no object is a placeholder.
	ShadowKey []byte

	// Erasure, when set, keeps large objects as erasure-coded shards
	// over the application's cachelets (erasure.go). Default nil: off.
	Erasure *ErasureConfig

	// Optional capabilities of the application's membership and peer
	// protocol. Each may be nil; Validate fills a nil one from Router
	// (Members, Revision, Self) or Peers (Ranges) when that value offers
	// it, as cluster.Member and peer.Client do.
	//
	// Members lists every other member, so synchronization points and
	// handoffs reach their queues. Nil: only owners are flushed.
	Members PeerLister
	// Revision tells the membership revision this cachelet has seen, so a
	// handoff's flushes wait for peers to catch up. Nil: they do not wait.
	Revision Revisioner
	// Ranges serves byte ranges and bandwidth probes (the bandwidth
	// policy).
	Ranges RangePeers
	// Self tells this cachelet's own peer address, which a cachelet alone
	// probes for the peer bandwidth. Nil: it does not probe when alone.
	Self PeerAddresser
	// BackupRing and BackupPeers pick and reach the members that keep
	// copies of durable writes (Backup).
	BackupRing  BackupRing
	BackupPeers BackupPeers

	// Clock tells the time for timestamps, ages and durations. Default:
	// the system clock.
	Clock clock.Clock
}

// PeerAddresser tells a cachelet's own peer address (cluster.Member does).
type PeerAddresser interface {
	PeerAddr() string
}

// capabilities fills the nil optional capabilities from Router and Peers.
// It is the one place the cachelet looks for them by type.
func (c *Config) capabilities() {
	if c.Members == nil {
		c.Members, _ = c.Router.(PeerLister)
	}
	if c.Revision == nil {
		c.Revision, _ = c.Router.(Revisioner)
	}
	if c.Self == nil {
		c.Self, _ = c.Router.(PeerAddresser)
	}
	if c.Ranges == nil {
		c.Ranges, _ = c.Peers.(RangePeers)
	}
	if c.BackupRing == nil {
		c.BackupRing, _ = c.Router.(BackupRing)
	}
	if c.BackupPeers == nil {
		c.BackupPeers, _ = c.Peers.(BackupPeers)
	}
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
	if c.PageSize == 0 {
		c.PageSize = DefaultPageSize
	}
	if c.PageSize > 0 && (c.PageSize < 4<<10 || c.PageSize > 64<<20) {
		return fmt.Errorf("cachelet: page size %d out of range (4 KiB to 64 MiB, or negative for none)", c.PageSize)
	}
	c.Clock = clock.Or(c.Clock)
	c.capabilities()
	if c.DrainTimeout == 0 {
		c.DrainTimeout = 30 * time.Second
	}
	if c.MemoryLimitOverhead < 0 || c.ResidentBase < 0 {
		return errors.New("cachelet: memory limit overhead and resident base must not be negative")
	}
	if err := c.validateWrites(); err != nil {
		return err
	}
	if c.Log != nil && c.WriteTarget == WriteStore {
		return errors.New("cachelet: durable writes need the owner or local write target (under the store target every write is in the store before it is acknowledged)")
	}
	if c.Shadow && c.Log == nil {
		return errors.New("cachelet: shadows need durable writes (a placeholder stands for a logged write)")
	}
	if (c.Shadow || c.ShadowKey != nil) && len(c.ShadowKey) < MinShadowKey {
		return fmt.Errorf("cachelet: shadows need a placeholder key (ShadowKey) of at least %d bytes", MinShadowKey)
	}
	if c.Log == nil && len(c.Replay) > 0 {
		return errors.New("cachelet: writes to replay without their log")
	}
	if c.Backup != nil {
		b := *c.Backup
		if err := b.validate(c); err != nil {
			return err
		}
		c.Backup = &b
	}
	if err := c.Sweep.validate(); err != nil {
		return err
	}
	if err := c.Migrate.validate(c.Sweep); err != nil {
		return err
	}
	if c.ReadMode == ReadOwner && (c.Router == nil) != (c.Peers == nil) {
		return errors.New("cachelet: Router and Peers go together")
	}
	// The budget is split first: the erasure memory comes out of it, and
	// the memory tier's defaults are taken from what is left.
	if c.Erasure != nil {
		ec := *c.Erasure
		if err := ec.validate(c); err != nil {
			return err
		}
		c.Erasure = &ec
	}
	return c.validateTier()
}

// validateTier validates the memory tier's settings against its own
// budget, Cache.Budget less Erasure.Memory and Erasure.BackupMemory, and
// sets their defaults from
// it (the largest object kept half of it, the fill and upload
// reservations a quarter each): with a whole budget's defaults, an
// erasure memory above half the budget would leave a largest object
// larger than the tier. Cache.Budget stays the whole budget.
func (c *Config) validateTier() error {
	tier := c.Cache
	if c.Erasure != nil {
		tier.Budget -= c.Erasure.held()
	}
	if err := tier.Validate(); err != nil {
		if c.Erasure != nil {
			return fmt.Errorf("cachelet: the memory tier's budget %d (the budget %d less the erasure memory %d and backup memory %d): %w",
				tier.Budget, c.Cache.Budget, c.Erasure.Memory, c.Erasure.BackupMemory, err)
		}
		return err
	}
	tier.Budget = c.Cache.Budget
	c.Cache = tier
	return nil
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
	// DiskHit (disk.go): served from the node's disk tier.

	// StaleHit: served from memory without the store's confirmation,
	// because the store was unavailable and ServeStaleIfError is on.
	// Counted with local hits.
	StaleHit Outcome = "stale_hit"
)

// Cachelet serves reads and writes for one instance. Every exported
// method is safe for concurrent use.
//
// It is the I/O shell around a keystate.Table, the pure record of what
// each key has in flight (single-flight fills, store GETs whose answers a
// write must doom, pending and unpersisted writes, pre-warmed keys, the
// ownership handoff): the shell tells the table what happened and does
// what it answers (dooms entries, joins or leads a flight, streams an
// answer through); keys.go serialises the table under one lock.
type Cachelet struct {
	cfg Config
	// stopGCPace ends this cachelet's hold on the collector's pace
	// (gcpace.go); nil without Config.MemoryLimitOverhead.
	stopGCPace func()
	store      store.Store
	// raw is the store as given; store is raw, or with shadows on the
	// store as readers see it (durable_shadow.go).
	raw     store.Store
	shadows *prometheus.CounterVec
	cache   *cache.Cache
	log     *slog.Logger
	m       *metrics
	clock   clock.Clock

	// keys is what each key has in flight, behind its own lock (keys.go).
	keys *keyState
	// wmu orders buffered writes: cache, unpersisted and queue alike.
	wmu sync.Mutex
	// order keeps the held writes in their durable log's order (durable.go).
	order logOrder
	// bk is the state of replicated durable writes; nil when off
	// (durable_backup.go).
	bk *backups
	// Under durable writes: what each key's store version may be, the
	// lock that logs one write of a key at a time, and the keys whose
	// replayed write is not settled (durable_base.go).
	known    versionBook
	keyLocks keyLocks
	replays  replayGate
	// hmu guards begun, a handoff OwnershipChanging began (handoff.go).
	hmu   sync.Mutex
	begun *begunHandoff
	// buffering and accepting bound the bodies of buffered writes held
	// in memory at once (consistency.go): this cachelet's clients', and
	// those peers hand it as the owner. Apart, so that two owners
	// forwarding to each other never wait on each other's room.
	buffering, accepting *byteGate
	// leaving is set once the cachelet stops taking writes as an owner;
	// left is closed once what it queued before is delivered.
	leaving atomic.Bool
	left    chan struct{}

	wg sync.WaitGroup // fill, persistence and handoff goroutines
	// sweeping is the loops that run until Close, apart from wg (which
	// waits for work that ends): the sweeper (sweep.go) and the disk
	// tier's write-ahead (disk.go).
	sweeping sync.WaitGroup

	// Background persistence: writes queued for the store, and writes
	// queued for their owner (owner target, async mode).
	toStore, toOwner *writeback.Queue

	// budgetMu serializes budget changes (budget.go).
	budgetMu sync.Mutex

	// Keys evicted, for counting repeat evictions (counters.go).
	evicted evictionLog

	// noAdmit: the running function's inputs are not worth caching, so
	// its misses are served without keeping a copy (admit.go).
	noAdmit atomic.Bool

	// Access metadata (access.go).
	access accessLog
	// mig is the state of migrations (migrate.go).
	mig migrating

	// The bandwidth policy's state; nil when off (split.go).
	split *splitter

	// The erasure-coded path of large objects; nil when off (erasure.go).
	ec *ecPath
	// The page index and page fills (pages.go).
	pages *pages
	// Unpacked reads of block-format objects (unpacked.go).
	unpacked *unpackedState
	// Buckets' versioning, for writes held in memory (versioning.go).
	vers versioning

	// Owners whose answers failed verification lately (verify.go).
	distrust distrustList

	// valMu guards the shared validations of cached copies (validate.go).
	valMu sync.Mutex
	vals  validations

	// The store's change subscriptions; nil when not followed
	// (external.go).
	ext *external

	// ahead are the keys of objects to write to the disk tier ahead of
	// their eviction; nil without a disk tier (disk.go).
	ahead chan cache.Key

	// stopped ends when Close begins; fills derive from it.
	stopped   context.Context
	stopFills context.CancelFunc
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
		cfg:   cfg,
		store: st,
		raw:   st,
		log:   log,
		clock: cfg.Clock,
		left:  make(chan struct{}),
		// As much as uploads through the cache may reserve, and room
		// for the largest object the cache keeps.
		buffering: newByteGate(max(cfg.Cache.MaxUploadReserve, cfg.Cache.MaxObjectSize)),
		accepting: newByteGate(max(cfg.Cache.MaxUploadReserve, cfg.Cache.MaxObjectSize)),
	}
	c.stopped, c.stopFills = context.WithCancel(context.Background())
	c.m = newMetrics(reg, c)
	c.m.clock = cfg.Clock
	if cfg.Shadow {
		c.shadows = newShadowCounter(reg)
		c.store = shadowRead{Store: st, c: c}
	}
	var err error
	if c.split, err = newSplitter(cfg, st, log, reg); err != nil {
		return nil, err
	}
	c.pages = newPages(cfg.PageSize, reg)
	c.unpacked = newUnpackedState(reg)
	ccfg := cfg.Cache
	if cfg.Erasure != nil {
		if cfg.Erasure.Placer == nil || cfg.Erasure.Peers == nil {
			return nil, errNoApplication
		}
		// The shards held for the application come out of the budget.
		ccfg.Budget -= cfg.Erasure.held()
		c.ec = newECPath(c, *cfg.Erasure, reg)
	}
	owns := ccfg.Owns
	if cfg.Router != nil && owns == nil {
		owns = func(k cache.Key) bool {
			_, self := cfg.Router.Owner(k.Bucket, k.Object)
			return self
		}
	}
	ccfg.Owns = owns
	ccfg.TrackReads = ccfg.TrackReads || !cfg.Sweep.Off // read counts for the sweep (sweep.go)
	user := ccfg.OnEvict
	ccfg.OnEvict = func(e *cache.Entry) {
		c.m.evictedBytes.Add(float64(e.Size()))
		if e.Owned() {
			c.evicted.note(e.Key())
		}
		if user != nil {
			user(e)
		}
		c.spill(e)
	}
	if c.cache, err = cache.New(ccfg); err != nil {
		return nil, err
	}
	c.keys = newKeyState(c.cache)
	c.cfg.applyMemoryLimit(cfg.Cache.Budget) // the shards held too
	wrap := func(q string) prometheus.Registerer {
		if reg == nil {
			return nil
		}
		return prometheus.WrapRegistererWith(prometheus.Labels{"queue": q}, reg)
	}
	if c.toStore, err = writeback.New(writeback.Config{Sink: storeSink{st: st, c: c}, Permanent: permanent,
		Logger: log.With("queue", "store"), Registerer: wrap("store")}); err != nil {
		return nil, err
	}
	if c.toOwner, err = writeback.New(writeback.Config{Sink: ownerSink{c}, Permanent: permanent,
		Logger: log.With("queue", "owner"), Registerer: wrap("owner")}); err != nil {
		return nil, err
	}
	if cfg.Backup != nil {
		c.bk = newBackups(*cfg.Backup, cfg.Clock.Now(), reg)
		if cfg.BackupRing == nil || cfg.BackupPeers == nil {
			log.Warn("durable writes: replicated, but this cachelet is in no application: writes have one copy, the log (as plain durable writes)")
		}
	}
	c.replay(cfg.Replay)
	c.cfg.Replay = nil
	c.takeOver() // backups of members gone while this cachelet was down
	if c.bk != nil && cfg.BackupRing != nil {
		c.wg.Add(1)
		go c.backupDoneLoop()
	}
	if c.ec != nil {
		c.wg.Add(1)
		go c.ec.rebuildLoop()
		if c.ec.cfg.WarmUp > 0 {
			c.wg.Add(1)
			go c.ec.warmLoop()
		}
		if c.ec.cfg.Backup > 0 {
			c.wg.Add(1)
			go c.ec.backupLoop()
		}
	}
	if c.cfg.ownerMode() {
		// A cachelet joining an application takes keys over from the
		// members that owned them: it hands off like any ring change.
		c.startHandoff()
	}
	c.startSweeps()
	if cfg.Disk != nil {
		c.ahead = make(chan cache.Key, writeAheadQueue)
		c.sweeping.Add(1)
		go c.writeAheadLoop()
	}
	if cfg.External != nil {
		c.ext = newExternal(c, *cfg.External, reg)
	}
	if cfg.MemoryLimitOverhead > 0 {
		// The process's collector, with the process's memory limit
		// (gcpace.go).
		c.stopGCPace = startGCPacer(cfg.MemoryLimitOverhead)
	}
	return c, nil
}

// Store returns the store the cachelet fronts.
func (c *Cachelet) Store() store.Store { return c.store }

// WritesThrough reports whether every write reaches the store before it
// is acknowledged (the store write target).
func (c *Cachelet) WritesThrough() bool { return c.cfg.WriteTarget == WriteStore }

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
	c.flushBackupDone(ctx) // the backups drop what the store has now
	c.ext.close()
	kctx, kcancel := context.WithTimeout(context.Background(), min(diskKeepTimeout, c.cfg.DrainTimeout))
	c.keepOnDisk(kctx)
	kcancel()
	c.keys.close()
	c.pages.close()
	c.closeValidations()
	if c.ec != nil {
		c.ec.closeChecks()
	}
	c.stopFills()
	c.wg.Wait()
	c.sweeping.Wait()
	if c.stopGCPace != nil {
		c.stopGCPace()
	}
	return err
}

// Invalidate drops the cached copy of bucket/key and dooms every fill of it
// in flight, and every store GET of it whose answer is not in yet. Writes
// call it before and after they reach the store.
func (c *Cachelet) Invalidate(bucket, key string) {
	k := cache.Key{Bucket: bucket, Object: key}
	c.keys.invalidate(k)
	c.cache.Remove(k)
	if c.cfg.Disk != nil {
		c.cfg.Disk.Remove(bucket, key)
	}
	if c.ec != nil {
		c.ecInvalidate(k)
	}
	c.pages.forget(k)
}
