package cache

import (
	"errors"
	"fmt"
	"sync"
)

// Config sizes the memory tier.
type Config struct {
	// Budget is the most bytes the cache holds, counting fills in progress.
	// Required (> 0).
	Budget int64
	// MaxObjectSize is the largest object admitted; larger ones are streamed
	// through without being kept. Default (0): Budget / 2, so one huge
	// object cannot wipe everything else out.
	MaxObjectSize int64
	// OnEvict, if set, is called (under the cache's lock, so it must be
	// quick and must not call back into the cache) for each entry evicted
	// to make room. Removals by Remove are not evictions.
	OnEvict func(*Entry)
}

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
	return nil
}

// Stats is a snapshot of the cache's occupancy.
type Stats struct {
	Objects   int
	Bytes     int64 // held by complete entries
	Reserved  int64 // held by fills in progress
	Budget    int64
	Evictions uint64
}

// Cache is an LRU of complete entries under a byte budget that also counts
// the reservations of fills in progress. Safe for concurrent use.
type Cache struct {
	cfg Config

	mu        sync.Mutex
	items     map[Key]*Entry
	head      Entry // sentinel: head.next is most recent, head.prev least
	bytes     int64
	reserved  int64
	evictions uint64
}

// New returns an empty cache.
func New(cfg Config) (*Cache, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Cache{cfg: cfg, items: make(map[Key]*Entry)}
	c.head.next, c.head.prev = &c.head, &c.head
	return c, nil
}

// Admissible reports whether an object of this size may be kept at all.
func (c *Cache) Admissible(size int64) bool {
	return size >= 0 && size <= c.cfg.MaxObjectSize
}

// Get returns the complete entry for k and marks it recently used, or nil.
func (c *Cache) Get(k Key) *Entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.items[k]
	if e != nil {
		c.unlink(e)
		c.pushFront(e)
	}
	return e
}

// Peek returns the entry for k without touching recency, or nil.
func (c *Cache) Peek(k Key) *Entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.items[k]
}

// Reserve charges size bytes to a fill about to start, evicting least
// recently used entries to make room. It returns false, charging nothing,
// when the object is not admissible or the room cannot be made because
// other fills hold it.
func (c *Cache) Reserve(size int64) bool {
	if !c.Admissible(size) {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reserved+size > c.cfg.Budget {
		return false
	}
	c.makeRoom(size)
	c.reserved += size
	return true
}

// Release returns a reservation whose fill will not be added.
func (c *Cache) Release(size int64) {
	c.mu.Lock()
	c.reserved -= size
	c.mu.Unlock()
}

// Add moves a completed fill's reservation into the cache as e, replacing
// any entry of the same key. e must be complete and must have been
// reserved with Reserve(e.Size()). If e is doomed (Doom was called on it)
// the reservation is released and e is not added; Add reports whether e was
// added.
func (c *Cache) Add(e *Entry) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reserved -= e.Size()
	if e.doomed.Load() || !e.Complete() {
		return false
	}
	if old := c.items[e.key]; old != nil {
		c.remove(old)
	}
	// Reservations may have shrunk the room since Reserve; keep the budget.
	c.makeRoom(e.Size())
	c.items[e.key] = e
	c.bytes += e.Size()
	e.inCache = true
	c.pushFront(e)
	return true
}

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

// Stats returns a snapshot of occupancy.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Stats{Objects: len(c.items), Bytes: c.bytes, Reserved: c.reserved, Budget: c.cfg.Budget, Evictions: c.evictions}
}

// makeRoom evicts from the LRU end until size more bytes fit. Called with mu held.
func (c *Cache) makeRoom(size int64) {
	for c.bytes+c.reserved+size > c.cfg.Budget && c.head.prev != &c.head {
		victim := c.head.prev
		c.remove(victim)
		c.evictions++
		if c.cfg.OnEvict != nil {
			c.cfg.OnEvict(victim)
		}
	}
}

func (c *Cache) remove(e *Entry) {
	c.unlink(e)
	delete(c.items, e.key)
	c.bytes -= e.Size()
	e.inCache = false
}

func (c *Cache) unlink(e *Entry) {
	if e.prev != nil {
		e.prev.next = e.next
		e.next.prev = e.prev
		e.prev, e.next = nil, nil
	}
}

func (c *Cache) pushFront(e *Entry) {
	e.prev = &c.head
	e.next = c.head.next
	c.head.next.prev = e
	c.head.next = e
}

// Doomed reports whether Doom was called on e.
func (e *Entry) Doomed() bool { return e.doomed.Load() }
