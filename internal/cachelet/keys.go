package cachelet

import (
	"sync"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/cachelet/keystate"
)

// keyState is the keystate table behind the one mutex that serialises it.
// Each method takes the lock, tells the table what happened, dooms in the
// memory tier the entries the table names, and lets go: no reader or
// writer of a key consults the table between a decision and its dooms.
// Safe for concurrent use; no method does I/O or blocks on anything but
// the lock.
type keyState struct {
	mu    sync.Mutex
	t     *keystate.Table[cache.Key, *cache.Entry, *flight]
	cache *cache.Cache
	// handoffDone is closed when the newest ownership handoff ends;
	// superseded handoffs close their own.
	handoffDone chan struct{}
}

func newKeyState(c *cache.Cache) *keyState {
	return &keyState{t: keystate.New[cache.Key, *cache.Entry, *flight](), cache: c}
}

// flight is the shell's side of a store GET whose answer may be installed
// in memory; the table keeps the rest (whether a write doomed it, the
// entry its answer fills). A cold read's flight is shared by the readers
// that arrive before its answer does: they wait for done.
type flight struct {
	done chan struct{} // nil unless others can join
	// Set by the leader before done is closed: the entry its answer was
	// installed into (nil: none), and the error that ended its GET.
	entry *cache.Entry
	err   error
}

// newJoinable returns the flight of a cold read that others may join.
func newJoinable() *flight { return &flight{done: make(chan struct{})} }

// doomLocked dooms the entries the table names. Called with mu held.
func (s *keyState) doomLocked(es []*cache.Entry) {
	for _, e := range es {
		s.cache.Doom(e)
	}
}

// beginRead decides how a read of k is served: the cached copy, the fill
// in flight, an unpersisted write, or a cold read to join or lead. The
// caller holds a reference to the entry it returns (cache.Entry.Acquire).
func (s *keyState) beginRead(k cache.Key) keystate.Read[*cache.Entry, *flight] {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		r := s.t.BeginRead(k, s.cache.Get(k), newJoinable)
		// A fill in the table holds its entry; a cached entry may have
		// been evicted since Get, and released by its last reader: then
		// it is gone, and the next look finds what replaced it.
		if r.Entry == nil || r.Entry.Acquire() {
			return r
		}
	}
}

// holds reports whether k has a fill or a write in flight (keystate's
// Holds).
func (s *keyState) holds(k cache.Key) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.t.Holds(k)
}

// endFlight ends a cold read's flight that ended with err, and readies it
// for its joiners (the caller then closes fl.done).
func (s *keyState) endFlight(k cache.Key, fl *flight, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fl.entry = s.t.EndFlight(k, fl)
	fl.err = err
}

// ask registers a store GET of k that no other reader joins, about to be
// sent, so that writes doom its answer; endAsk ends it.
func (s *keyState) ask(k cache.Key) *flight {
	fl := &flight{}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.t.Ask(k, fl)
	return fl
}

func (s *keyState) endAsk(k cache.Key, fl *flight) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.t.EndAsk(k, fl)
}

// install decides whether the answer to fl is filled into e, and reports
// false when it is streamed instead (the cachelet closed). A fill that
// goes ahead is added to fills under the lock, so Close, which closes the
// table under the same lock before it waits for fills, never misses it.
func (s *keyState) install(k cache.Key, fl *flight, e *cache.Entry, fills *sync.WaitGroup) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.t.Install(k, fl, e)
	if d.Stream {
		return false
	}
	s.doomLocked(d.Doom) // a doomed GET's entry, or the older answer e replaces
	fills.Add(1)
	return true
}

// fillDone ends e's fill.
func (s *keyState) fillDone(e *cache.Entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.t.FillDone(e.Key(), e)
}

// invalidate dooms what reads and writes of k have in flight.
func (s *keyState) invalidate(k cache.Key) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.doomLocked(s.t.Invalidate(k))
}

// beginWrite records a write-through's entry as k's pending write.
func (s *keyState) beginWrite(k cache.Key, w *cache.Entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.doomLocked(s.t.BeginWrite(k, w))
}

// writeAcked swaps the pending placeholder for final, once the store
// acknowledged the write, and dooms the reads that may predate it.
func (s *keyState) writeAcked(k cache.Key, placeholder, final *cache.Entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.doomLocked(s.t.WriteAcked(k, placeholder, final))
}

// writeDone ends the write whose pending entry is w.
func (s *keyState) writeDone(k cache.Key, w *cache.Entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.t.WriteDone(k, w)
}

// unpersisted records w as k's write queued for the store; persisted
// ends it.
func (s *keyState) unpersisted(k cache.Key, w *cache.Entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.t.Unpersisted(k, w)
}

func (s *keyState) persisted(k cache.Key, w *cache.Entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.doomLocked(s.t.Persisted(k, w))
}

// doomInFlight dooms what the keys match accepts have in flight (fills,
// store GETs, pending writes), except keys with unpersisted writes.
func (s *keyState) doomInFlight(match func(cache.Key) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.doomLocked(s.t.DoomInFlight(match))
}

// dropCached drops the cached copies of keys, except those with
// unpersisted writes, dooming what they have in flight, and returns how
// many it dropped.
func (s *keyState) dropCached(keys []cache.Key) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, k := range keys {
		doom, ok := s.t.Drop(k)
		if !ok {
			continue // unpersisted: the only copy until the store has it
		}
		s.doomLocked(doom)
		if s.cache.Remove(k) {
			n++
		}
	}
	return n
}

// prewarmed records that k was pre-warmed; localHit reports whether a
// local hit on k is the first since.
func (s *keyState) prewarmed(k cache.Key) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.t.Prewarmed(k)
}

func (s *keyState) localHit(k cache.Key) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.t.LocalHit(k)
}

// close turns later answers into pass-through.
func (s *keyState) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.t.Close()
}

// beginHandoff starts an ownership handoff, superseding any running, and
// returns its id and the channel to close when it ends.
func (s *keyState) beginHandoff() (uint64, chan struct{}) {
	done := make(chan struct{})
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handoffDone = done
	return s.t.BeginHandoff(), done
}

// endHandoff ends handoff id, and reports whether it was the newest (a
// superseded one ends nothing); the caller then closes its channel.
func (s *keyState) endHandoff(id uint64) (newest bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.t.EndHandoff(id)
}

// handingOff reports whether a handoff runs, and the channel closed when
// the newest one ends.
func (s *keyState) handingOff() (bool, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, running := s.t.HandingOff()
	return running, s.handoffDone
}
