package keystate

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// model drives a Table the way the cachelet's shell does, from a stream of
// choices, and checks the table's invariants after every step:
//
//   - no new read is served a doomed entry or joins a flight a write
//     overtook (an older download never lands after a write);
//   - an answer to a GET a write overtook is never published (Install
//     dooms it);
//   - an entry that stops being what reads join, other than by its fill
//     ending, is doomed;
//   - a write's final entry is doomed exactly when an Invalidate or
//     another write overtook it;
//   - an answer to a GET given while a queued write is unpersisted, or
//     asked before that write reached the store, is never published;
//   - a read that misses the cache while a queued write is unpersisted
//     is served the newest queued write;
//   - once every read and write has ended, the table holds nothing.
type model struct {
	t   *Table[int, string, string]
	err error

	seq     int            // names entries and flights
	epoch   map[int]int    // per key: bumped by every Invalidate and WriteAcked
	asks    map[string]int // live ask -> the key's epoch when it was registered
	askKey  map[string]int
	leaders map[string]bool // asks that are joinable flights
	fills   map[string]int  // entries filling -> key
	doomed  map[string]bool
	writes  map[string]int // pending write -> key
	wepoch  map[string]int // pending write -> count of overtakes when it began
	wover   map[int]int    // per key: Invalidates and BeginWrites so far
	queued  map[int]string // per key: the newest unpersisted write
	served  map[int]string // per key: the entry filling, as the table says
}

func newModel() *model {
	return &model{
		t:     New[int, string, string](),
		epoch: map[int]int{}, asks: map[string]int{}, askKey: map[string]int{}, leaders: map[string]bool{},
		fills: map[string]int{}, doomed: map[string]bool{}, writes: map[string]int{}, wepoch: map[string]int{},
		wover: map[int]int{}, queued: map[int]string{}, served: map[int]string{},
	}
}

func (m *model) name(p string) string {
	m.seq++
	return fmt.Sprintf("%s%d", p, m.seq)
}

func (m *model) fail(format string, args ...any) {
	if m.err == nil {
		m.err = fmt.Errorf(format, args...)
	}
}

func (m *model) doom(es []string) {
	for _, e := range es {
		m.doomed[e] = true
	}
}

// overtaken is what Invalidate and WriteAcked do to the model's view.
func (m *model) overtaken(k int) {
	m.epoch[k]++
	if e := m.served[k]; e != "" && !m.doomed[e] {
		m.fail("%s stopped filling key %d without being doomed", e, k)
	}
	delete(m.served, k)
}

// pick returns a random element of the keys of set, sorted for
// reproducibility, or "" when empty.
func pick[V any](r *rand.Rand, set map[string]V) string {
	if len(set) == 0 {
		return ""
	}
	ks := make([]string, 0, len(set))
	for k := range set {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks[r.IntN(len(ks))]
}

const modelKeys = 3

// step applies one random event.
func (m *model) step(r *rand.Rand) {
	k := r.IntN(modelKeys)
	t := m.t
	switch r.IntN(12) {
	case 0, 1: // a read begins
		var cached string // the shell's cache lookup is outside the table: none here
		d := t.BeginRead(k, cached, func() string { return m.name("f") })
		switch {
		case d.From == Filling:
			if m.doomed[d.Entry] {
				m.fail("read of key %d served doomed %s", k, d.Entry)
			}
			if m.served[k] != d.Entry {
				m.fail("read of key %d served %s, filling is %s", k, d.Entry, m.served[k])
			}
		case d.From == Unpersisted:
			if m.served[k] != "" {
				m.fail("read of key %d served unpersisted %s while %s fills", k, d.Entry, m.served[k])
			}
			if m.queued[k] != d.Entry {
				m.fail("read of key %d served %s, newest queued write is %s", k, d.Entry, m.queued[k])
			}
		case d.Lead:
			if m.served[k] != "" || m.queued[k] != "" {
				m.fail("read of key %d leads while %q fills and %q is queued", k, m.served[k], m.queued[k])
			}
			m.asks[d.Flight], m.askKey[d.Flight], m.leaders[d.Flight] = m.epoch[k], k, true
		default: // joins
			if ep, ok := m.asks[d.Flight]; !ok || !m.leaders[d.Flight] || m.askKey[d.Flight] != k {
				m.fail("read of key %d joins %s, not a live flight of the key", k, d.Flight)
			} else if ep != m.epoch[k] {
				m.fail("read of key %d joins %s, which a write overtook", k, d.Flight)
			}
		}
	case 2: // a version check asks
		f := m.name("f")
		t.Ask(k, f)
		m.asks[f], m.askKey[f] = m.epoch[k], k
	case 3, 4: // an ask's answer is installed
		f := pick(r, m.asks)
		if f == "" {
			return
		}
		k := m.askKey[f]
		e := m.name("e")
		d := t.Install(k, f, e)
		m.doom(d.Doom)
		// Overtaken by a write, or answered while a queued write was
		// unpersisted (the store may not have had it).
		overtook := m.asks[f] != m.epoch[k] || m.queued[k] != ""
		switch {
		case d.Stream:
			m.fail("install streamed before close")
		case overtook && !m.doomed[e]:
			m.fail("install of %s for %s published an answer a write overtook", e, f)
		case !overtook:
			if m.doomed[e] {
				m.fail("install of %s for %s doomed a current answer", e, f)
			}
			if old := m.served[k]; old != "" && !m.doomed[old] {
				m.fail("install of %s replaced %s without dooming it", e, old)
			}
			m.served[k] = e
		}
		m.fills[e] = k
		if r.IntN(2) == 0 { // the GET ends at once (else later, case 5)
			m.endAsk(f)
		}
	case 5: // an ask ends
		if f := pick(r, m.asks); f != "" {
			m.endAsk(f)
		}
	case 6: // a fill ends
		e := pick(r, m.fills)
		if e == "" {
			return
		}
		k := m.fills[e]
		t.FillDone(k, e)
		delete(m.fills, e)
		if m.served[k] == e {
			delete(m.served, k)
		}
	case 7: // Invalidate
		m.doom(t.Invalidate(k))
		m.wover[k]++
		m.overtaken(k)
		for w, wk := range m.writes {
			if wk == k && !m.doomed[w] {
				m.fail("invalidate of key %d left pending write %s", k, w)
			}
		}
	case 8: // a write-through begins
		m.doom(t.Invalidate(k))
		m.wover[k]++
		m.overtaken(k)
		w := m.name("p")
		m.doom(t.BeginWrite(k, w))
		m.wover[k]++
		m.writes[w], m.wepoch[w] = k, m.wover[k]
	case 9: // a write-through is acknowledged (and lands), or abandoned
		w := pick(r, m.writes)
		if w == "" {
			return
		}
		k := m.writes[w]
		delete(m.writes, w)
		if r.IntN(4) == 0 {
			t.WriteDone(k, w)
			return
		}
		final := m.name("w")
		d := t.WriteAcked(k, w, final)
		m.doom(d)
		m.overtaken(k)
		if over := m.wover[k] != m.wepoch[w]; over != slices.Contains(d, final) {
			m.fail("write %s overtaken=%v, but its final entry doomed=%v", w, over, !over)
		}
		t.WriteDone(k, final)
	case 10: // a write is queued for the store (the shell invalidates first)
		m.doom(t.Invalidate(k))
		m.wover[k]++
		m.overtaken(k)
		w := m.name("q")
		t.Unpersisted(k, w)
		m.queued[k] = w
	case 11: // the newest queued write reaches the store
		if w := m.queued[k]; w != "" {
			m.doom(t.Persisted(k, w))
			delete(m.queued, k)
			m.overtaken(k)
		}
	}
}

func (m *model) endAsk(f string) {
	k := m.askKey[f]
	if m.leaders[f] {
		m.t.EndFlight(k, f)
	} else {
		m.t.EndAsk(k, f)
	}
	delete(m.asks, f)
	delete(m.askKey, f)
	delete(m.leaders, f)
}

// finish ends everything in flight and checks nothing is left.
func (m *model) finish() {
	for f := range m.asks {
		m.endAsk(f)
	}
	for e, k := range m.fills {
		m.t.FillDone(k, e)
	}
	for w, k := range m.writes {
		m.t.WriteDone(k, w)
	}
	for k, w := range m.queued {
		m.t.Persisted(k, w)
	}
	if n := m.t.Len(); n != 0 {
		m.fail("%d keys left with state once everything ended", n)
	}
}

func runModel(seed1, seed2 uint64, steps int) error {
	r := rand.New(rand.NewPCG(seed1, seed2))
	m := newModel()
	for i := 0; i < steps && m.err == nil; i++ {
		m.step(r)
	}
	if m.err == nil {
		m.finish()
	}
	return m.err
}

// TestInvariants runs many random event sequences through the model.
func TestInvariants(t *testing.T) {
	n := 2000
	if testing.Short() {
		n = 200
	}
	for seed := range uint64(n) {
		if err := runModel(seed, 42, 300); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
	}
}

// FuzzInvariants explores further: go test -fuzz FuzzInvariants.
func FuzzInvariants(f *testing.F) {
	f.Add(uint64(1), uint64(2), uint16(500))
	f.Fuzz(func(t *testing.T, a, b uint64, steps uint16) {
		if err := runModel(a, b, int(steps)); err != nil {
			t.Fatal(err)
		}
	})
}
