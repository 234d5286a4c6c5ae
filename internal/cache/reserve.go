package cache

import "github.com/hoard-io/hoard/internal/store"

// Reservations: a fill (or an upload) charges the budget for its whole
// object before its bytes arrive, evicting to make room, and passes the
// charge to Add once complete (or gives it back with Release).

// Reserve charges size bytes to a fill about to start, evicting entries in
// the policy's order to make room. It returns false, charging nothing,
// when the object is not admissible or the room cannot be made because
// other fills hold it.
func (c *Cache) Reserve(size int64) bool { return c.reserve(reserveAny, size) }

// ReserveUpload is Reserve for an upload whose body is still to arrive: it
// also refuses, charging nothing, when the reservations of uploads in
// progress would exceed Config.MaxUploadReserve. The caller calls
// UploadDone(size) once the body has arrived or failed, then Add or
// Release as for Reserve.
func (c *Cache) ReserveUpload(size int64) bool { return c.reserve(reserveUpload, size) }

// UploadDone ends the upload share of a ReserveUpload(size): the
// reservation stays, to be passed to Add or Release.
func (c *Cache) UploadDone(size int64) {
	c.mu.Lock()
	c.uploading -= size
	c.mu.Unlock()
}

// ReserveFill is Reserve for a fill whose bytes are still to arrive: it
// also refuses, charging nothing, when other fills are in progress and
// their reservations with this one would exceed Config.MaxFillReserve.
// The caller calls FillDone(size) once the fill has ended, then Add or
// Release as for Reserve.
func (c *Cache) ReserveFill(size int64) bool { return c.reserve(reserveFill, size) }

// FillDone ends the fill share of a ReserveFill(size): the reservation
// stays, to be passed to Add or Release.
func (c *Cache) FillDone(size int64) {
	c.mu.Lock()
	c.filling -= size
	c.mu.Unlock()
}

// ReserveFillFree is ReserveFill for a fill that must not evict anything:
// it refuses, charging nothing, unless size fits beside what the cache
// holds and has reserved (a copy offered by a peer is taken only into
// room the cache has).
func (c *Cache) ReserveFillFree(size int64) bool { return c.reserve(reserveRoom, size) }

// Reservation says how ReserveEntry reserves.
type Reservation uint8

const (
	// ForFill reserves as ReserveFill does, for an entry NewEntry makes.
	ForFill Reservation = iota
	// ForRoom reserves as ReserveFillFree does, for an entry NewEntry
	// makes.
	ForRoom
	// ForPage reserves as Reserve does, for a page NewPageEntry makes.
	ForPage
)

// ReserveEntry makes a reservation (how) and the entry to fill for info
// in one step: the reservation of what the entry charges (e.Charge())
// and the free chunks it takes from the pool are taken under one lock,
// so the chunks of the entries it evicted to make room, when nobody
// reads them any more, become this entry's at once: memory already
// faulted in, not garbage for the collector while the fill allocates
// anew. It returns nil, charging nothing, when the reservation is
// refused. The caller holds the entry's first reference and ends the
// reservation as the Reserve it names says (FillDone for ForFill and
// ForRoom; then Add or Release), with e.Charge().
func (c *Cache) ReserveEntry(how Reservation, k Key, info store.ObjectInfo) *Entry {
	kind, size := reserveFill, info.Size
	charge, pooled := c.Charge(size), c.pooled(size)
	switch how {
	case ForRoom:
		kind = reserveRoom
	case ForPage:
		kind = reserveAny
		if c.pooledPage(size) {
			charge, pooled = size, true
		}
	}
	if !c.Admissible(charge) {
		return nil
	}
	var took [][]byte
	n := chunks(size)
	if pooled {
		took = make([][]byte, 0, n)
	}
	c.mu.Lock()
	if !c.fits(kind, charge) {
		c.mu.Unlock()
		return nil
	}
	if pooled {
		// Before the room shrinks by the reservation: what it made
		// room with is in the pool now.
		took = c.pool.take(took, n)
	}
	c.hold(kind, charge)
	c.mu.Unlock()
	if !pooled {
		return NewEntry(k, info)
	}
	e := newEntry(k, info)
	e.chunks, e.pool = c.pool.allocate(took, n), c.pool
	return e
}

// reservation is what a reservation is for.
type reservation uint8

const (
	reserveAny    reservation = iota // Reserve
	reserveUpload                    // ReserveUpload
	reserveFill                      // ReserveFill
	reserveRoom                      // ReserveFillFree
)

func (c *Cache) reserve(kind reservation, size int64) bool {
	if !c.Admissible(size) {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.fits(kind, size) {
		return false
	}
	c.hold(kind, size)
	return true
}

// fits reports whether a reservation of size bytes may be made, making
// room for it where its kind evicts. Called with mu held.
func (c *Cache) fits(kind reservation, size int64) bool {
	switch kind {
	case reserveUpload:
		if c.uploading+size > c.cfg.MaxUploadReserve {
			return false
		}
	case reserveFill, reserveRoom:
		if c.filling > 0 && c.filling+size > c.cfg.MaxFillReserve {
			return false
		}
	}
	if kind == reserveRoom {
		return c.bytes+c.reserved+size <= c.cfg.Budget
	}
	if c.reserved+size > c.cfg.Budget {
		return false
	}
	c.makeRoom(size)
	return true
}

// hold charges a reservation that fits allowed. Called with mu held.
func (c *Cache) hold(kind reservation, size int64) {
	c.reserved += size
	switch kind {
	case reserveUpload:
		c.uploading += size
	case reserveFill, reserveRoom:
		c.filling += size
	}
	c.fitPool()
}

// fitPool tells the pool the room the budget has left beside the entries
// and reservations, where free chunks may lie (Buffers). Called with mu
// held after each change to them, before an entry removed is released
// (so that its chunks find the room it left).
func (c *Cache) fitPool() {
	if c.pool != nil {
		c.pool.setRoom(c.cfg.Budget - c.bytes - c.reserved)
	}
}

// Release returns a reservation whose fill will not be added.
func (c *Cache) Release(size int64) {
	c.mu.Lock()
	c.reserved -= size
	c.fitPool()
	c.mu.Unlock()
}
