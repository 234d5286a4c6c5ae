package cache

// maxClasses bounds how many classes an lruClasses order may have.
const maxClasses = 4

// lruClasses is the core of the LRU-based policies: each entry falls in one
// class, each class is an LRU list, and the victim is the least recently
// used entry of the first class that has any. added, touched and removed
// are O(1), victim is O(classes); ownershipChanged is O(n·classes).
type lruClasses struct {
	// heads are the lists' sentinels: heads[c].next is class c's most
	// recently used entry, heads[c].prev its least.
	heads   [maxClasses]Entry
	n       int // classes in use
	len     int // entries held
	classOf func(*Entry) uint8
	// uses counts admissions and hits; an entry's tick is the count at its
	// last use, so recency can be compared across classes.
	uses uint64
}

func newLRUClasses(n int, classOf func(*Entry) uint8) *lruClasses {
	o := &lruClasses{n: n, classOf: classOf}
	for i := range o.heads[:n] {
		h := &o.heads[i]
		h.next, h.prev = h, h
	}
	return o
}

func (o *lruClasses) added(e *Entry) {
	o.len++
	e.class = o.classOf(e)
	o.use(e)
}

func (o *lruClasses) touched(e *Entry) {
	unlink(e)
	o.use(e)
}

func (o *lruClasses) use(e *Entry) {
	o.uses++
	e.tick = o.uses
	pushFront(&o.heads[e.class], e)
}

func (o *lruClasses) removed(e *Entry) {
	o.len--
	unlink(e)
}

func (o *lruClasses) victim() *Entry {
	for i := range o.heads[:o.n] {
		if h := &o.heads[i]; h.prev != h {
			return h.prev
		}
	}
	return nil
}

// ownershipChanged re-classifies every entry and rebuilds the lists so
// that each stays in recency order: it merges the lists from their least
// recently used ends by tick and pushes each entry to the front of its new
// class.
func (o *lruClasses) ownershipChanged() {
	all := make([]*Entry, 0, o.len)
	var cur [maxClasses]*Entry
	for i := range o.heads[:o.n] {
		cur[i] = o.heads[i].prev
	}
	for {
		oldest := -1
		for i := range o.heads[:o.n] {
			if cur[i] != &o.heads[i] && (oldest < 0 || cur[i].tick < cur[oldest].tick) {
				oldest = i
			}
		}
		if oldest < 0 {
			break
		}
		all = append(all, cur[oldest])
		cur[oldest] = cur[oldest].prev
	}
	for i := range o.heads[:o.n] {
		h := &o.heads[i]
		h.next, h.prev = h, h
	}
	for _, e := range all {
		e.prev, e.next = nil, nil
		e.class = o.classOf(e)
		pushFront(&o.heads[e.class], e)
	}
}

func unlink(e *Entry) {
	if e.prev != nil {
		e.prev.next = e.next
		e.next.prev = e.prev
		e.prev, e.next = nil, nil
	}
}

func pushFront(head, e *Entry) {
	e.prev = head
	e.next = head.next
	head.next.prev = e
	head.next = e
}
