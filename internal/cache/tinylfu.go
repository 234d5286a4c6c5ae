package cache

// tinyLFUOrder is PolicyWTinyLFU (Einziger et al., "TinyLFU", 2017, as
// Caffeine builds it): a small LRU window (1% of the budget) takes new
// entries; the main space is a segmented LRU of a probation and a
// protected segment (80% of the main space). An entry leaving the window
// enters the main space freely while it has room; once it is full, the
// entry waits among the arrivals and enters only if a count-min sketch of
// recent uses says it is used more often than the entry the main space
// would evict for it; otherwise it is the one evicted. A hit in probation
// promotes the entry to protected, whose overflow goes back to probation.
// The sketch ages by halving every counter after a number of uses
// proportional to its width, so frequencies follow the workload. added,
// touched and removed are O(1) amortized, victim O(1) amortized.
type tinyLFUOrder struct {
	window, arrivals, probation, protected entryList
	budget                                 func() int64
	keys                                   keyHasher
	sketch                                 countMin
	entries                                int
}

const (
	classWindow uint8 = iota
	classArrival
	classProbation
	classProtected
)

const (
	// tinyLFUWindowShare is the window's share of the budget: 1/100.
	tinyLFUWindowShare = 100
	// tinyLFUProtected is the protected segment's share of the main
	// space, in percent.
	tinyLFUProtected = 80
)

func newTinyLFUOrder(budget func() int64) *tinyLFUOrder {
	o := &tinyLFUOrder{budget: budget, keys: newKeyHasher()}
	for _, l := range []*entryList{&o.window, &o.arrivals, &o.probation, &o.protected} {
		l.init()
	}
	o.sketch.resize(0)
	return o
}

func (o *tinyLFUOrder) list(class uint8) *entryList {
	switch class {
	case classWindow:
		return &o.window
	case classArrival:
		return &o.arrivals
	case classProbation:
		return &o.probation
	}
	return &o.protected
}

func (o *tinyLFUOrder) move(e *Entry, class uint8) {
	o.list(e.class).remove(e)
	e.class = class
	o.list(class).pushFront(e)
}

func (o *tinyLFUOrder) added(e *Entry) {
	o.entries++
	o.sketch.grow(o.entries)
	o.sketch.add(o.keys.hash(e.key))
	e.class = classWindow
	o.window.pushFront(e)
	// The window's overflow leaves it, oldest first: into the main space
	// while it has room, else among the arrivals.
	budget := o.budget()
	mainRoom := budget - budget/tinyLFUWindowShare
	for o.window.n > 1 && o.window.bytes*tinyLFUWindowShare > budget {
		t := o.window.back()
		if o.probation.bytes+o.protected.bytes+t.Size() <= mainRoom {
			o.move(t, classProbation)
		} else {
			o.move(t, classArrival)
		}
	}
}

func (o *tinyLFUOrder) touched(e *Entry) {
	o.sketch.add(o.keys.hash(e.key))
	if e.class == classProbation {
		o.move(e, classProtected)
	} else {
		o.move(e, e.class)
	}
	// Protected's overflow goes back to probation, most recent first.
	for o.protected.n > 1 && o.protected.bytes*100 > (o.protected.bytes+o.probation.bytes)*tinyLFUProtected {
		o.move(o.protected.back(), classProbation)
	}
}

func (o *tinyLFUOrder) removed(e *Entry) {
	o.entries--
	o.list(e.class).remove(e)
}

// victim holds the contest: the oldest arrival, or else the window's
// oldest entry unless it is the window's last, against the main space's
// next victim. The one the sketch says is used less often goes; a tie keeps
// the main space's entry. (The cache makes room before it adds an entry,
// so the newcomer itself is not yet in the window: the window's last entry
// is the previous newcomer, kept for the hits that follow a miss.)
func (o *tinyLFUOrder) victim() *Entry {
	for {
		candidate := o.arrivals.back()
		if candidate == nil {
			candidate = o.window.back()
		}
		main := o.probation.back()
		if main == nil {
			main = o.protected.back()
		}
		switch {
		case candidate == nil:
			return main
		case main == nil && candidate.class == classArrival:
			// An empty main space takes the arrival unopposed.
			o.move(candidate, classProbation)
			continue
		case main == nil:
			return candidate
		}
		if o.sketch.estimate(o.keys.hash(candidate.key)) <= o.sketch.estimate(o.keys.hash(main.key)) {
			return candidate
		}
		o.move(candidate, classProbation)
		return main
	}
}

// countMin is a count-min sketch of 4-bit counters in four rows: the
// estimate of a key's uses is the least of its four counters, never below
// the truth (until aging halves them all). Each row indexes by the top
// bits of the key's hash times an odd constant of its own, so that the
// rows collide independently.
type countMin struct {
	rows  [4][]uint8 // one counter per byte, saturating at 15
	bits  uint       // log2 of a row's width
	adds  int        // since the last aging
	limit int        // adds between agings: 10 × the entries the width was sized for
}

// sketchMinBits is log2 of the fewest counters per row.
const sketchMinBits = 8

// sketchMul are the rows' multipliers (odd, from splitmix64 and xxhash).
var sketchMul = [4]uint64{0x9e3779b97f4a7c15, 0xbf58476d1ce4e5b9, 0x94d049bb133111eb, 0xc2b2ae3d27d4eb4f}

// grow widens the sketch when the entries it counts outgrow it (a row
// holds at least four counters per entry). Each new counter starts at the
// old counter its index narrows to, so no estimate falls below the truth.
func (s *countMin) grow(entries int) {
	if entries*4 > len(s.rows[0]) {
		s.resize(entries)
	}
}

func (s *countMin) resize(entries int) {
	bits := uint(sketchMinBits)
	for 1<<bits < entries*8 {
		bits++
	}
	shift := bits - s.bits
	for i := range s.rows {
		old := s.rows[i]
		s.rows[i] = make([]uint8, 1<<bits)
		if len(old) > 0 {
			for j := range s.rows[i] {
				s.rows[i][j] = old[j>>shift]
			}
		}
	}
	s.bits = bits
	s.limit = 10 * (1 << bits) / 4
}

// index is row i's counter for h.
func (s *countMin) index(h uint64, i int) uint64 {
	return (h * sketchMul[i]) >> (64 - s.bits)
}

func (s *countMin) add(h uint64) {
	for i := range s.rows {
		if c := &s.rows[i][s.index(h, i)]; *c < 15 {
			*c++
		}
	}
	s.adds++
	if s.adds >= s.limit {
		s.age()
	}
}

func (s *countMin) estimate(h uint64) uint8 {
	est := uint8(15)
	for i := range s.rows {
		est = min(est, s.rows[i][s.index(h, i)])
	}
	return est
}

// age halves every counter.
func (s *countMin) age() {
	for i := range s.rows {
		for j := range s.rows[i] {
			s.rows[i][j] >>= 1
		}
	}
	s.adds /= 2
}
