package cache

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hoard-io/hoard/internal/clock"
	"github.com/hoard-io/hoard/internal/store"
)

// Config sizes the memory tier and picks its eviction policy.
type Config struct {
	// Budget is the most bytes the cache holds, counting fills in progress.
	// Required (> 0). SetBudget changes it at run time (down to 0).
	Budget int64
	// MaxObjectSize is the largest object admitted; larger ones are streamed
	// through without being kept. Default (0): Budget / 2, so one huge
	// object cannot wipe everything else out.
	MaxObjectSize int64
	// MaxUploadReserve is the most bytes that reservations for uploads in
	// progress (ReserveUpload) may hold together. An upload is reserved
	// before its body has arrived, and a client may send it as slowly as
	// the front allows, or not at all: this bound keeps unfinished uploads
	// from evicting more than this share of the cache. Default (0):
	// Budget / 4.
	MaxUploadReserve int64
	// MaxFillReserve is the most bytes that reservations for fills in
	// progress (ReserveFill) may hold together, beyond the first: a fill
	// of any admissible object may start when no other is in progress.
	// A fill reserves its whole object, evicting to make room, before
	// its bytes arrive from a store that may be slow: this bound keeps
	// many unfinished cold reads from evicting more than this share of
	// the cache (or one object). Default (0): Budget / 4.
	MaxFillReserve int64
	// OnEvict, if set, is called (under the cache's lock, so it must be
	// quick and must not call back into the cache) for each entry evicted
	// to make room or to fit a budget SetBudget lowered. Removals by
	// Remove, and expired entries dropped when looked up, are not
	// evictions. It is called before the cache lets go of the entry, so
	// the entry is complete and Acquire succeeds on it: a callback may
	// take a reference to keep its bytes (the disk tier's spill).
	OnEvict func(*Entry)

	// Policy picks which entry is evicted when room is needed: one of
	// PolicyOwnerLRU, PolicySizeAware, PolicyTTL, PolicyGDSF, PolicyS3FIFO,
	// PolicyWTinyLFU. Default PolicyOwnerLRU.
	Policy Policy
	// Owns reports whether this cachelet owns k on the application's ring.
	// The cache asks it once per Add and once per entry on
	// OwnershipChanged, with its lock held: it must be quick and must not
	// call back into the cache. Default (nil): every key is owned, which
	// makes PolicyOwnerLRU plain LRU.
	Owns func(Key) bool
	// LargeObjectSize is, under PolicySizeAware, the size above which an
	// entry is large. Default 12 KiB; set only with PolicySizeAware.
	LargeObjectSize int64
	// TTL is, under PolicyTTL, how long after its Add an entry expires.
	// Required (> 0) with PolicyTTL; set only with it.
	TTL time.Duration
	// Clock is what TTLs are measured with. Default the system clock.
	Clock clock.Clock
	// TrackReads has Get count each entry's reads and stamp the last one,
	// for Sweep (sweep.go): a clock read per hit. Default false: hits
	// cost no clock read, and Sweep must not be used.
	TrackReads bool

	// PoolBytes is the free memory kept for fills and uploads to reuse
	// besides the budget (see Buffers, NewEntry, NewBuilder): entries
	// made by Cache.NewEntry take their chunks from the pool and give
	// them back once their last reader is done. Besides it, the pool
	// keeps free chunks in the room the budget has left beside the
	// entries and reservations, which the budget allows anyway: what the
	// cache holds in entries, reservations and free chunks together
	// stays within Budget + PoolBytes. Default (0): Budget / 8 up to
	// DefaultPoolBytes, following the budget as SetBudget moves it.
	// Negative: no pool (every fill allocates).
	PoolBytes int64
}

// DefaultPoolBytes is the most free memory a cache's pool keeps besides
// its budget by default: enough for the chunks of objects whose last
// readers finish after their room was taken, and a fixed part of what a
// process holds besides its budget (cacheconfig.DefaultMemoryOverhead),
// whatever the budget.
const DefaultPoolBytes = 8 << 20

// DefaultLargeObjectSize is PolicySizeAware's default LargeObjectSize: the
// threshold of Faa$T's size-aware policy.
const DefaultLargeObjectSize = 12 << 10

// Validate checks the config and fills in defaults.
func (c *Config) Validate() error {
	if c.Budget <= 0 {
		return errors.New("cache: budget must be positive")
	}
	if c.MaxObjectSize == 0 {
		c.MaxObjectSize = c.Budget / 2
	}
	if c.MaxObjectSize < 0 || c.MaxObjectSize > c.Budget {
		return fmt.Errorf("cache: max object size %d must be in [1, budget %d]", c.MaxObjectSize, c.Budget)
	}
	if c.MaxUploadReserve == 0 {
		c.MaxUploadReserve = c.Budget / 4
	}
	if c.MaxUploadReserve < 0 || c.MaxUploadReserve > c.Budget {
		return fmt.Errorf("cache: max upload reserve %d must be in [0, budget %d]", c.MaxUploadReserve, c.Budget)
	}
	if c.MaxFillReserve == 0 {
		c.MaxFillReserve = c.Budget / 4
	}
	if c.MaxFillReserve < 0 || c.MaxFillReserve > c.Budget {
		return fmt.Errorf("cache: max fill reserve %d must be in [0, budget %d]", c.MaxFillReserve, c.Budget)
	}
	if c.Policy == "" {
		c.Policy = PolicyOwnerLRU
	}
	switch c.Policy {
	case PolicyOwnerLRU, PolicySizeAware, PolicyTTL, PolicyGDSF, PolicyS3FIFO, PolicyWTinyLFU:
	default:
		return fmt.Errorf("cache: unknown eviction policy %q (valid: %s)", c.Policy, validPolicies)
	}
	if c.Policy == PolicySizeAware {
		if c.LargeObjectSize == 0 {
			c.LargeObjectSize = DefaultLargeObjectSize
		}
		if c.LargeObjectSize < 0 {
			return fmt.Errorf("cache: large object size %d must be positive", c.LargeObjectSize)
		}
	} else if c.LargeObjectSize != 0 {
		return fmt.Errorf("cache: large object size is for the %s policy, not %s", PolicySizeAware, c.Policy)
	}
	if c.Policy == PolicyTTL {
		if c.TTL <= 0 {
			return fmt.Errorf("cache: the %s policy needs a positive TTL", PolicyTTL)
		}
	} else if c.TTL != 0 {
		return fmt.Errorf("cache: TTL is for the %s policy, not %s", PolicyTTL, c.Policy)
	}
	c.Clock = clock.Or(c.Clock)
	return nil
}

// poolBytes is the pool's bound for a budget.
func (c *Config) poolBytes(budget int64) int64 {
	if c.PoolBytes != 0 {
		return c.PoolBytes
	}
	return min(budget/8, DefaultPoolBytes)
}

// Stats is a snapshot of the cache's occupancy.
type Stats struct {
	Objects   int
	Bytes     int64  // held by complete entries
	Reserved  int64  // held by fills in progress
	Uploading int64  // of Reserved, held by uploads in progress (ReserveUpload)
	Filling   int64  // of Reserved, held by fills in progress (ReserveFill)
	Budget    int64  // as configured, or as SetBudget last set it
	Evictions uint64 // entries evicted to make room or to fit a lowered budget
	// EvictedNotOwned and EvictedOwned split Evictions by whether this
	// cachelet owned the entry (by Owns at its Add or at the last
	// OwnershipChanged).
	EvictedNotOwned uint64
	EvictedOwned    uint64
	// Expired counts entries dropped because their TTL had passed when Get
	// or Peek looked them up, or Expire found them (PolicyTTL). Expired
	// entries evicted to make room count as evictions instead.
	Expired uint64
	// Swept counts entries dropped by Sweep.
	Swept uint64
}

// Cache is an index of complete entries under a byte budget that also
// counts the reservations of fills in progress; its Policy picks what to
// evict. Safe for concurrent use.
type Cache struct {
	cfg Config

	mu        sync.Mutex
	items     map[Key]*Entry
	order     evictionOrder
	expiry    expirer // order, when its entries lapse; else nil
	bytes     int64
	reserved  int64
	uploading int64 // of reserved, by ReserveUpload and not yet UploadDone
	filling   int64 // of reserved, by ReserveFill and not yet FillDone
	stats     Stats // the counters only

	pool *Buffers // nil without one (Config.PoolBytes < 0)
}

// New returns an empty cache.
func New(cfg Config) (*Cache, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Cache{cfg: cfg, items: make(map[Key]*Entry)}
	order, err := newOrder(&c.cfg) // orders that size their parts read the budget as SetBudget moves it
	if err != nil {
		return nil, err
	}
	c.order = order
	c.expiry, _ = order.(expirer)
	if cfg.PoolBytes >= 0 {
		c.pool = NewBuffers(cfg.poolBytes(cfg.Budget))
	}
	return c, nil
}

// Charge is what a fill of an object of size bytes charges the budget:
// size, or for an entry held in chunks from the pool (NewEntry) the
// size of its chunks, less than an eighth more. Reserve and Release take
// charges.
func (c *Cache) Charge(size int64) int64 {
	if c.pooled(size) {
		return chunks(size) * ChunkSize
	}
	return size
}

func (c *Cache) pooled(size int64) bool {
	return c.pool != nil && size >= MinPooled && chunks(size)*ChunkSize <= c.cfg.MaxObjectSize
}

// NewEntry returns an empty entry to fill for info, as the package's
// NewEntry does, held in chunks from the cache's pool where there is one
// and the object is large enough (MinPooled): the caller must have
// reserved Charge(info.Size), and holds the entry's first reference,
// which it releases (Entry.Release) once it is done with the entry; the
// chunks go back to the pool once every reference is released. Such an
// entry cannot be filled by FillParts. The reservation may have dropped
// free chunks the entry could have taken: ReserveEntry reserves and
// makes the entry in one step, taking them first.
func (c *Cache) NewEntry(k Key, info store.ObjectInfo) *Entry {
	if c.pooled(info.Size) {
		return NewPooledEntry(c.pool, k, info)
	}
	return NewEntry(k, info)
}

// PageCharge and NewPageEntry are Charge and NewEntry for a page of a
// larger object: a page that is a whole number of chunks is held in
// chunks from the pool whatever its size (nothing of its last chunk is
// unused), so pages evicted give their memory to the next fills instead
// of to the collector.
func (c *Cache) PageCharge(size int64) int64 {
	if c.pooledPage(size) {
		return size
	}
	return c.Charge(size)
}

// NewPageEntry: see PageCharge; the caller must have reserved
// PageCharge(info.Size).
func (c *Cache) NewPageEntry(k Key, info store.ObjectInfo) *Entry {
	if c.pooledPage(info.Size) {
		return NewPooledEntry(c.pool, k, info)
	}
	return c.NewEntry(k, info)
}

func (c *Cache) pooledPage(size int64) bool {
	return c.pool != nil && size > 0 && size%ChunkSize == 0 && size <= c.cfg.MaxObjectSize
}

// BufferStats returns the pool's counters (zero without a pool).
func (c *Cache) BufferStats() BufferStats {
	if c.pool == nil {
		return BufferStats{}
	}
	return c.pool.Stats()
}

// Admissible reports whether an object of this size may be kept at all.
func (c *Cache) Admissible(size int64) bool {
	return size >= 0 && size <= c.cfg.MaxObjectSize
}

// Get returns the complete entry for k and records the hit with the
// policy (under the LRU-based policies it becomes the most recently used),
// or nil. An expired entry is dropped and reported as nil.
func (c *Cache) Get(k Key) *Entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.items[k]
	if e == nil || c.lapsed(e) {
		return nil
	}
	c.order.touched(e)
	e.output = false // read: someone's input now
	if c.cfg.TrackReads {
		if e.reads < ^uint32(0) {
			e.reads++
		}
		e.lastRead = c.cfg.Clock.Now()
		if e.counting.IsZero() {
			e.counting = e.lastRead // its first read: the count starts (MarkUnread)
		}
	}
	return e
}

// Peek returns the entry for k without recording a hit, or nil. An expired
// entry is dropped and reported as nil.
func (c *Cache) Peek(k Key) *Entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.items[k]
	if e == nil || c.lapsed(e) {
		return nil
	}
	return e
}

// lapsed drops e and reports true if its policy says it expired. Called
// with mu held.
func (c *Cache) lapsed(e *Entry) bool {
	if c.expiry == nil || !c.expiry.expired(e) {
		return false
	}
	c.remove(e)
	c.stats.Expired++
	return true
}

// Add moves a completed fill's reservation into the cache as e, replacing
// any entry of the same key. e must be complete and must have been
// reserved with Reserve(e.Charge()); the caller must hold a reference to
// it. If e is doomed (Doom was called on it), or SetBudget has since
// lowered the budget so far that e no longer fits beside the other
// reservations, the reservation is released and e is not added; Add
// reports whether e was added. Config.Owns is asked about e's key. The
// cache takes a reference of its own to e, released when e leaves it.
func (c *Cache) Add(e *Entry) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.fitPool()
	c.reserved -= e.Charge()
	if e.doomed.Load() || !e.Complete() {
		return false
	}
	if c.reserved+e.Charge() > c.cfg.Budget {
		// SetBudget lowered the budget below what the fills in flight
		// had reserved: this one no longer fits, even with every entry
		// evicted. It is not added (its readers keep their copy).
		return false
	}
	if old := c.items[e.key]; old != nil {
		c.remove(old)
	}
	if !e.Acquire() {
		return false // released by its holders: nothing to add
	}
	// Reservations may have shrunk the room since Reserve; keep the budget.
	c.makeRoom(e.Charge())
	c.items[e.key] = e
	c.bytes += e.Charge()
	e.inCache = true
	e.output = false
	e.owned = c.owns(e.key)
	if c.cfg.TrackReads {
		e.added, e.lastRead, e.reads = c.cfg.Clock.Now(), time.Time{}, 0
		e.counting = e.added // admitted by a read (a fill), unless MarkUnread said not
		if e.unread {
			e.counting = time.Time{}
		}
	}
	c.order.added(e)
	return true
}

// OwnershipChanged tells the cache that Config.Owns may answer differently
// (the ring's membership changed). It re-classifies eagerly: it asks Owns
// about every entry and lets the policy re-rank them, all under the
// cache's lock, which costs O(n) calls of Owns plus, for the LRU-based
// policies, an O(n) rebuild of their lists and one n-pointer allocation
// (about 10 ms at 100k entries; every other call on the cache waits). Until
// it is called, entries keep the ownership Owns gave them at Add. It does
// nothing when Owns is nil. Call it once per ring change, without holding
// any lock that Owns takes.
func (c *Cache) OwnershipChanged() {
	if c.cfg.Owns == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.items {
		e.owned = c.cfg.Owns(k)
	}
	if r, ok := c.order.(reclassifier); ok {
		r.ownershipChanged()
	}
}

// Keys returns the keys of the complete entries that match, in no order.
// It holds the cache's lock for one pass over the entries, so it suits
// occasional bulk operations (dropping a pipeline run's objects), not
// per-request use.
func (c *Cache) Keys(match func(Key) bool) []Key {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Key
	for k := range c.items {
		if match(k) {
			out = append(out, k)
		}
	}
	return out
}

// MarkOutput marks e, k's entry, as an output the store has: a version
// written through the cachelet and persisted, which nobody has read
// since. SetBudget evicts such entries before any other (OFC §6.4); a Get
// of the entry clears the mark. It reports false, marking nothing, when
// e is no longer k's entry.
func (c *Cache) MarkOutput(k Key, e *Entry) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur := c.items[k]; cur != e || e == nil {
		return false
	}
	e.output = true
	return true
}

// AcquireEach returns the complete entries keep accepts, each with a
// reference taken for the caller, who releases it (Entry.Release). keep
// is called under the cache's lock, where Entry.Owned may be read: it
// must be quick and must not call back into the cache. One pass over the
// entries: for occasional bulk operations (a ring change), not per
// request.
func (c *Cache) AcquireEach(keep func(*Entry) bool) []*Entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*Entry
	for _, e := range c.items {
		if e.Complete() && keep(e) && e.Acquire() {
			out = append(out, e)
		}
	}
	return out
}

func (c *Cache) owns(k Key) bool { return c.cfg.Owns == nil || c.cfg.Owns(k) }

// Doom marks a fill in progress as obsolete: a write or delete overtook it,
// so Add must not admit it. Safe to call on any entry, any number of times.
func (c *Cache) Doom(e *Entry) {
	e.doomed.Store(true)
}

// Remove drops the entry for k, if any, and reports whether there was one.
func (c *Cache) Remove(k Key) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.items[k]
	if e == nil {
		return false
	}
	c.remove(e)
	return true
}

// RemoveIf drops the entry for k only if it is e (so a newer version that
// replaced it stays).
func (c *Cache) RemoveIf(k Key, e *Entry) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur := c.items[k]; cur == e && e != nil {
		c.remove(e)
		return true
	}
	return false
}

// RemoveBucket drops every entry of one bucket and returns how many.
func (c *Cache) RemoveBucket(bucket string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for k, e := range c.items {
		if k.Bucket == bucket {
			c.remove(e)
			n++
		}
	}
	return n
}

// Clear drops every entry and returns how many. Reservations of fills in
// flight stay (their fills decide themselves whether they are added).
func (c *Cache) Clear() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(c.items)
	for _, e := range c.items {
		c.remove(e)
	}
	return n
}

// SetBudget changes the budget to n bytes (a negative n is 0) and, when
// it shrinks, evicts complete entries until what they hold plus the
// reservations of fills in flight fits in n, or no entry is left: first
// the outputs the store has (MarkOutput), in no particular order, then
// the rest in the policy's order. It returns the bytes of the entries it
// evicted; they count as evictions (Stats.Evictions, Config.OnEvict) like
// those that make room.
//
// Reservations are never evicted: if those of the fills in flight alone
// exceed n, the cache holds no complete entry until enough of them end, a
// fill that no longer fits when it completes is not added (Add refuses
// it), and Reserve refuses new fills until there is room. Raising the
// budget evicts nothing. MaxObjectSize stays as configured, but no object
// larger than the budget can be reserved. The memory daemon calls it
// (through the cachelet) to give the function memory the cache holds.
func (c *Cache) SetBudget(n int64) (freed int64) {
	return c.SetBudgetEach(n, nil)
}

// SetBudgetEach is SetBudget that also calls each (if set) for every
// entry it evicts, under the cache's lock while the cache still holds it
// (as Config.OnEvict, which is called too: quick, no calls back into the
// cache; a reference taken there keeps the bytes).
func (c *Cache) SetBudgetEach(n int64, each func(*Entry)) (freed int64) {
	n = max(n, 0)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cfg.Budget = n
	if c.pool != nil {
		c.pool.SetMax(c.cfg.poolBytes(n))
		defer c.fitPool() // once every eviction is done
	}
	before := c.bytes
	if c.bytes+c.reserved > n {
		for _, e := range c.items {
			if c.bytes+c.reserved <= n {
				break
			}
			if e.output {
				c.evict(e, each)
			}
		}
	}
	for c.bytes+c.reserved > n {
		victim := c.order.victim()
		if victim == nil {
			break
		}
		c.evict(victim, each)
	}
	return before - c.bytes
}

// Stats returns a snapshot of occupancy.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Objects, s.Bytes, s.Reserved, s.Budget = len(c.items), c.bytes, c.reserved, c.cfg.Budget
	s.Uploading, s.Filling = c.uploading, c.filling
	return s
}

// makeRoom evicts in the policy's order until size more bytes fit. Called
// with mu held.
func (c *Cache) makeRoom(size int64) {
	for c.bytes+c.reserved+size > c.cfg.Budget {
		victim := c.order.victim()
		if victim == nil {
			return
		}
		c.evict(victim, nil)
	}
}

// evict drops e as an eviction, calling Config.OnEvict and then each (if
// set) while the cache still holds it. Called with mu held.
func (c *Cache) evict(e *Entry, each func(*Entry)) {
	if c.cfg.OnEvict != nil {
		c.cfg.OnEvict(e) // while the cache still holds it
	}
	if each != nil {
		each(e)
	}
	c.remove(e)
	c.stats.Evictions++
	if e.owned {
		c.stats.EvictedOwned++
	} else {
		c.stats.EvictedNotOwned++
	}
}

func (c *Cache) remove(e *Entry) {
	c.order.removed(e)
	delete(c.items, e.key)
	c.bytes -= e.Charge()
	e.inCache, e.left = false, true
	c.fitPool()
	e.Release()
}

// Doomed reports whether Doom was called on e.
func (e *Entry) Doomed() bool { return e.doomed.Load() }
