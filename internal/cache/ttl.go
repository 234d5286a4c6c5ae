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
	heap     []*Entry
	admitted uint64 // admissions, for ties
}

func newTTLOrder(ttl time.Duration, now func() time.Time) *ttlOrder {
	return &ttlOrder{ttl: ttl, now: now}
}

func (o *ttlOrder) added(e *Entry) {
	o.admitted++
	e.tick = o.admitted
	e.expires = o.now().Add(o.ttl)
	e.idx = len(o.heap)
	o.heap = append(o.heap, e)
	o.up(e.idx)
}

// touched does nothing: a read does not extend an entry's life.
func (o *ttlOrder) touched(*Entry) {}

func (o *ttlOrder) removed(e *Entry) {
	i, last := e.idx, len(o.heap)-1
	if i != last {
		o.swap(i, last)
	}
	o.heap[last] = nil
	o.heap = o.heap[:last]
	if i != last {
		if !o.down(i) {
			o.up(i)
		}
	}
	e.idx = -1
}

func (o *ttlOrder) victim() *Entry {
	if len(o.heap) == 0 {
		return nil
	}
	return o.heap[0]
}

// expired reports whether e's life is over: at its expiry instant it is.
func (o *ttlOrder) expired(e *Entry) bool {
	return !o.now().Before(e.expires)
}

func (o *ttlOrder) less(i, j int) bool {
	a, b := o.heap[i], o.heap[j]
	if !a.expires.Equal(b.expires) {
		return a.expires.Before(b.expires)
	}
	return a.tick < b.tick
}

func (o *ttlOrder) swap(i, j int) {
	o.heap[i], o.heap[j] = o.heap[j], o.heap[i]
	o.heap[i].idx = i
	o.heap[j].idx = j
}

func (o *ttlOrder) up(i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if !o.less(i, parent) {
			return
		}
		o.swap(i, parent)
		i = parent
	}
}

// down sifts i toward the leaves and reports whether it moved.
func (o *ttlOrder) down(i int) bool {
	start := i
	for {
		child := 2*i + 1
		if child >= len(o.heap) {
			break
		}
		if r := child + 1; r < len(o.heap) && o.less(r, child) {
			child = r
		}
		if !o.less(child, i) {
			break
		}
		o.swap(i, child)
		i = child
	}
	return i > start
}
