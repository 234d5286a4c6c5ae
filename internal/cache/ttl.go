package cache

import "time"

// ttlOrder is PolicyTTL: a min-heap of entries by expiry (ties broken by
// admission order), so the victim is the entry closest to expiry, or the
// longest expired. added and removed are O(log n), touched and victim O(1).
// A heap rather than a FIFO keeps the order exact when the clock steps
// back.
type ttlOrder struct {
	ttl      time.Duration
	now      func() time.Time
	heap     entryHeap
	admitted uint64 // admissions, for ties
}

func newTTLOrder(ttl time.Duration, now func() time.Time) *ttlOrder {
	return &ttlOrder{ttl: ttl, now: now, heap: entryHeap{less: func(a, b *Entry) bool {
		if !a.expires.Equal(b.expires) {
			return a.expires.Before(b.expires)
		}
		return a.tick < b.tick
	}}}
}

func (o *ttlOrder) added(e *Entry) {
	o.admitted++
	e.tick = o.admitted
	e.expires = o.now().Add(o.ttl)
	o.heap.push(e)
}

// touched does nothing: a read does not extend an entry's life.
func (o *ttlOrder) touched(*Entry) {}

func (o *ttlOrder) removed(e *Entry) { o.heap.remove(e) }

func (o *ttlOrder) victim() *Entry { return o.heap.min() }

// expired reports whether e's life is over: at its expiry instant it is.
func (o *ttlOrder) expired(e *Entry) bool {
	return !o.now().Before(e.expires)
}
