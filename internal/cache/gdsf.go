package cache

// gdsfOrder is PolicyGDSF, Greedy-Dual-Size-Frequency (Cherkasova 1998):
// each entry has a priority H = L + F/S, with F its uses since admission
// (1 at admission) and S its size; the victim is the entry of lowest H,
// and evicting it raises the inflation value L to its H, so that entries
// not used for a long time age out however often they were used before.
// Every entry costs the same to fetch (one store request), so GDSF keeps
// many small, often read objects: it aims at the object hit ratio, not the
// byte hit ratio. added, touched and removed are O(log n), victim O(1).
type gdsfOrder struct {
	heap    entryHeap
	inflate float64 // L
	uses    uint64  // admissions and hits, for ties (least recent first)
}

func newGDSFOrder() *gdsfOrder {
	return &gdsfOrder{heap: entryHeap{less: func(a, b *Entry) bool {
		if a.prio != b.prio {
			return a.prio < b.prio
		}
		return a.tick < b.tick
	}}}
}

func (o *gdsfOrder) rank(e *Entry) {
	o.uses++
	e.tick = o.uses
	size := max(e.Size(), 1)
	e.prio = o.inflate + float64(e.freq)/float64(size)
}

func (o *gdsfOrder) added(e *Entry) {
	e.freq = 1
	o.rank(e)
	o.heap.push(e)
}

func (o *gdsfOrder) touched(e *Entry) {
	if e.freq < 1<<31 {
		e.freq++
	}
	o.rank(e)
	o.heap.fix(e.idx)
}

func (o *gdsfOrder) removed(e *Entry) { o.heap.remove(e) }

// victim returns the entry of lowest priority and inflates L to it (the
// cache evicts every victim it is given).
func (o *gdsfOrder) victim() *Entry {
	v := o.heap.min()
	if v != nil && v.prio > o.inflate {
		o.inflate = v.prio
	}
	return v
}
