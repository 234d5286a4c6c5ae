package cache

// s3fifoOrder is PolicyS3FIFO (Yang et al., SOSP 2023): three FIFO queues.
// New entries go to a small queue S holding about a tenth of the bytes;
// an entry leaving S that was used while there moves to the main queue M,
// the others are evicted and their keys remembered in a ghost queue G. An
// entry admitted again while its key is in G goes straight to M. An entry
// at M's tail that was used since it got there is reinserted at M's head
// with its use count (0–3) decremented; one not used is evicted. Most
// one-hit wonders thus leave quickly from S, and hits cost no list moves.
// added, touched and removed are O(1); victim is O(1) amortized.
type s3fifoOrder struct {
	small, main entryList
	keys        keyHasher
	// ghost holds the hashes of keys evicted from S, oldest first from
	// ghostHead, at most as many as M holds entries (and ghostMin);
	// ghosts maps each remembered hash to the sequence number of its
	// newest slot, so that an older slot lapsing does not forget it.
	ghost     []ghostSlot
	ghostHead int
	ghostSeq  uint64
	ghosts    map[uint64]uint64
	// evicting is the victim last returned: its removal is an eviction.
	evicting *Entry
}

type ghostSlot struct{ hash, seq uint64 }

const (
	classSmall uint8 = iota
	classMain
)

// s3fifoSmallShare is S's share of the bytes: 1/10, as in the paper.
const s3fifoSmallShare = 10

// ghostMin is the fewest keys the ghost queue may hold.
const ghostMin = 64

func newS3FIFOOrder() *s3fifoOrder {
	o := &s3fifoOrder{keys: newKeyHasher(), ghosts: make(map[uint64]uint64)}
	o.small.init()
	o.main.init()
	return o
}

func (o *s3fifoOrder) added(e *Entry) {
	e.freq = 0
	if h := o.keys.hash(e.key); o.remembers(h) {
		delete(o.ghosts, h)
		e.class = classMain
		o.main.pushFront(e)
		return
	}
	e.class = classSmall
	o.small.pushFront(e)
}

func (o *s3fifoOrder) touched(e *Entry) {
	if e.freq < 3 {
		e.freq++
	}
}

func (o *s3fifoOrder) removed(e *Entry) {
	if e.class == classSmall {
		o.small.remove(e)
	} else {
		o.main.remove(e)
	}
	if e == o.evicting {
		o.evicting = nil
		if e.class == classSmall {
			o.remember(o.keys.hash(e.key))
		}
	}
}

func (o *s3fifoOrder) victim() *Entry {
	for {
		total := o.small.bytes + o.main.bytes
		if t := o.small.back(); t != nil && (o.small.bytes*s3fifoSmallShare >= total || o.main.back() == nil) {
			if t.freq == 0 {
				o.evicting = t
				return t
			}
			o.small.remove(t)
			t.freq, t.class = 0, classMain
			o.main.pushFront(t)
			continue
		}
		t := o.main.back()
		if t == nil {
			return nil
		}
		if t.freq == 0 {
			o.evicting = t
			return t
		}
		t.freq--
		o.main.remove(t)
		o.main.pushFront(t)
	}
}

// remembers reports whether h is in the ghost queue.
func (o *s3fifoOrder) remembers(h uint64) bool {
	_, ok := o.ghosts[h]
	return ok
}

// remember adds h to the ghost queue, dropping the oldest ghosts beyond
// its bound.
func (o *s3fifoOrder) remember(h uint64) {
	o.ghostSeq++
	o.ghost = append(o.ghost, ghostSlot{h, o.ghostSeq})
	o.ghosts[h] = o.ghostSeq
	limit := max(o.main.n, ghostMin)
	for len(o.ghost)-o.ghostHead > limit {
		old := o.ghost[o.ghostHead]
		o.ghost[o.ghostHead] = ghostSlot{}
		o.ghostHead++
		if o.ghosts[old.hash] == old.seq {
			delete(o.ghosts, old.hash)
		}
	}
	if o.ghostHead > len(o.ghost)/2 {
		n := copy(o.ghost, o.ghost[o.ghostHead:])
		o.ghost = o.ghost[:n]
		o.ghostHead = 0
	}
}
