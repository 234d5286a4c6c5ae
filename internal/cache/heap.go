package cache

// entryHeap is a binary min-heap of entries under less, each entry
// knowing its index (Entry.idx): the orders that rank entries by a value
// (ttlOrder, gdsfOrder) share it. push and remove are O(log n), min O(1).
type entryHeap struct {
	h    []*Entry
	less func(a, b *Entry) bool
}

// min returns the least entry, nil when the heap is empty.
func (h *entryHeap) min() *Entry {
	if len(h.h) == 0 {
		return nil
	}
	return h.h[0]
}

func (h *entryHeap) push(e *Entry) {
	e.idx = len(h.h)
	h.h = append(h.h, e)
	h.up(e.idx)
}

func (h *entryHeap) remove(e *Entry) {
	i, last := e.idx, len(h.h)-1
	if i != last {
		h.swap(i, last)
	}
	h.h[last] = nil
	h.h = h.h[:last]
	if i != last {
		h.fix(i)
	}
	e.idx = -1
}

// fix restores the order after the entry at i changed its value.
func (h *entryHeap) fix(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

func (h *entryHeap) lessAt(i, j int) bool { return h.less(h.h[i], h.h[j]) }

func (h *entryHeap) swap(i, j int) {
	h.h[i], h.h[j] = h.h[j], h.h[i]
	h.h[i].idx = i
	h.h[j].idx = j
}

func (h *entryHeap) up(i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if !h.lessAt(i, parent) {
			return
		}
		h.swap(i, parent)
		i = parent
	}
}

// down sifts i toward the leaves and reports whether it moved.
func (h *entryHeap) down(i int) bool {
	start := i
	for {
		child := 2*i + 1
		if child >= len(h.h) {
			break
		}
		if r := child + 1; r < len(h.h) && h.lessAt(r, child) {
			child = r
		}
		if !h.lessAt(child, i) {
			break
		}
		h.swap(i, child)
		i = child
	}
	return i > start
}
