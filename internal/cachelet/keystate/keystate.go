// Package keystate is the per-key state of one cachelet's reads and writes
// in flight, as a pure state machine: it does no I/O, starts no goroutines,
// reads no clock and takes no locks. The cachelet's I/O shell tells it what
// happened (a read begins, a store GET is about to be sent, its answer is
// being filled into memory, a write begins or was acknowledged, a queued
// write reached the store, the ring changed) and it answers what to do (serve
// this entry, join that flight, lead a fill, doom these entries, stream the
// body through without keeping it).
//
// What it keeps, per key:
//
//   - the joinable flight: a cold read's store GET that later readers of
//     the key share (single-flight) until its answer is in;
//   - the asks: every store GET whose answer may be installed in memory,
//     from before it is sent until its answer is installed (or not), with
//     whether a write doomed it and the entry it is being filled into;
//   - the filling entry: the newest answer being copied into memory, which
//     new reads of the key join;
//   - the pending write: a write-through's entry between the write's start
//     and its landing in the cache;
//   - the unpersisted write: a write queued for the store that the store
//     does not have yet, the key's truth until it does;
//   - whether the key was pre-warmed and not read since.
//
// And per table: whether the shell closed (no new fills) and the ownership
// handoff running, if any.
//
// The rule that makes the cachelet linearizable: a write dooms (Invalidate)
// everything reads of its key have in flight, so an older download never
// lands after the write. A doomed entry is still filled for the readers
// already on it, but no new read finds it and the cache refuses it. The
// table does not doom entries itself: it returns them, and the shell marks
// them (cache.Cache.Doom) before it lets go of the lock under which it
// called the table.
//
// The table is generic in the key K, the entry E (the shell's
// *cache.Entry; the zero value means none) and the flight handle F (the
// shell's *flight, which carries what the table does not: the channel
// joiners wait on; the zero value means none). Tests use strings for all
// three.
//
// Concurrency: a Table is not safe for concurrent use. The shell serialises
// every call under one mutex and applies the returned decisions (dooming
// entries) before releasing it.
package keystate

// Source says where a read found the entry it is served from.
type Source int

const (
	// None: the read found no entry; see Read.Lead.
	None Source = iota
	// Cached: the memory tier's complete copy (looked up by the shell).
	Cached
	// Filling: an answer still being copied into memory.
	Filling
	// Unpersisted: a write queued for the store that the store does not
	// have yet.
	Unpersisted
)

func (s Source) String() string {
	switch s {
	case Cached:
		return "cached"
	case Filling:
		return "filling"
	case Unpersisted:
		return "unpersisted"
	}
	return "none"
}

// Read is the decision for a read that begins.
type Read[E, F comparable] struct {
	// Entry, when From is not None, is what the read is served from (the
	// shell may still confirm it with the store or the owner).
	Entry E
	From  Source
	// Flight, when From is None, is the cold read's flight: Lead says
	// whether this read sends its store GET (and must end it with
	// EndFlight), or joins one already asking.
	Flight F
	Lead   bool
}

// Install is the decision for a store answer about to be filled into
// memory.
type Install[E comparable] struct {
	// Stream: the shell closed; fill nothing, stream the body through.
	Stream bool
	// Doom lists the entries to doom: the new entry itself when a write
	// overtook its GET (it is filled for the readers already waiting, but
	// never published), or the older answer it replaces.
	Doom []E
}

// ask is one registered store GET.
type ask[E comparable] struct {
	doomed bool
	entry  E // the entry its answer is being filled into, once installed
}

// key is the state of one key; a key with nothing left is deleted.
type key[E, F comparable] struct {
	flight      F // joinable cold read
	asks        map[F]*ask[E]
	filling     E
	pending     E
	unpersisted E
	prewarmed   bool
}

func (s *key[E, F]) empty() bool {
	var ze E
	var zf F
	return s.flight == zf && len(s.asks) == 0 && s.filling == ze && s.pending == ze &&
		s.unpersisted == ze && !s.prewarmed
}

// Table is the state of every key with something in flight. The zero
// value is not usable; call New.
type Table[K, E, F comparable] struct {
	keys   map[K]*key[E, F]
	closed bool

	// Ownership handoffs: the newest one's id, and whether it runs.
	handoff  uint64
	handing  bool
	handoffs uint64
}

// New returns an empty table.
func New[K, E, F comparable]() *Table[K, E, F] {
	return &Table[K, E, F]{keys: make(map[K]*key[E, F])}
}

func (t *Table[K, E, F]) get(k K) *key[E, F] {
	s := t.keys[k]
	if s == nil {
		s = &key[E, F]{}
		t.keys[k] = s
	}
	return s
}

// tidy forgets k when nothing of it is left.
func (t *Table[K, E, F]) tidy(k K, s *key[E, F]) {
	if s.empty() {
		delete(t.keys, k)
	}
}

// Len is the number of keys with state: 0 once every read and write has
// ended, which tests check to find leaks.
func (t *Table[K, E, F]) Len() int { return len(t.keys) }

// Holds reports whether k has an answer being filled or a write the
// store may not have yet: what a read of k would serve ahead of the store.
func (t *Table[K, E, F]) Holds(k K) bool {
	var ze E
	s := t.keys[k]
	return s != nil && (s.filling != ze || s.pending != ze || s.unpersisted != ze)
}

// BeginRead decides how a read of k is served. cached is the memory
// tier's copy (zero: none), which wins; then the answer being filled; then
// a write the store does not have yet (newer than anything the store could
// answer). With none of them, the read joins the key's cold read in flight
// or, when there is none, leads a new one with the flight newFlight returns,
// registered as an ask.
func (t *Table[K, E, F]) BeginRead(k K, cached E, newFlight func() F) Read[E, F] {
	var ze E
	var zf F
	if cached != ze {
		return Read[E, F]{Entry: cached, From: Cached}
	}
	s := t.keys[k]
	if s != nil {
		switch {
		case s.filling != ze:
			return Read[E, F]{Entry: s.filling, From: Filling}
		case s.unpersisted != ze:
			return Read[E, F]{Entry: s.unpersisted, From: Unpersisted}
		case s.flight != zf:
			return Read[E, F]{Flight: s.flight}
		}
	}
	f := newFlight()
	s = t.get(k)
	s.flight = f
	t.register(s, f)
	return Read[E, F]{Flight: f, Lead: true}
}

// EndFlight ends the cold read f of k that BeginRead had the caller lead:
// no later read joins it and its ask ends. It returns the entry f's answer
// was installed into (zero when none), which the joiners then serve from.
func (t *Table[K, E, F]) EndFlight(k K, f F) E {
	var ze E
	var zf F
	s := t.keys[k]
	if s == nil {
		return ze
	}
	if s.flight == f {
		s.flight = zf
	}
	return t.endAsk(k, s, f)
}

// Ask registers a store GET of k that no other read joins (a version
// check, a retry), about to be sent, so that writes doom its answer. End it
// with EndAsk.
func (t *Table[K, E, F]) Ask(k K, f F) {
	t.register(t.get(k), f)
}

func (t *Table[K, E, F]) register(s *key[E, F], f F) {
	if s.asks == nil {
		s.asks = make(map[F]*ask[E])
	}
	s.asks[f] = &ask[E]{}
}

// EndAsk ends the store GET f of k: its answer is installed, or will not
// be. It returns the entry the answer was installed into, if any.
func (t *Table[K, E, F]) EndAsk(k K, f F) E {
	var ze E
	s := t.keys[k]
	if s == nil {
		return ze
	}
	return t.endAsk(k, s, f)
}

func (t *Table[K, E, F]) endAsk(k K, s *key[E, F], f F) E {
	var e E
	if a := s.asks[f]; a != nil {
		e = a.entry
		delete(s.asks, f)
	}
	t.tidy(k, s)
	return e
}

// Install decides what becomes of the answer to the store GET f of k, to
// be filled into entry e (its memory already reserved). Once the shell
// closed, nothing is filled (Stream). An answer to a GET a write overtook,
// or given while k has an unpersisted write (the store's answer is never
// newer than that write, which lands over it), is filled for its readers
// but not published (Doom holds e). Otherwise e
// becomes what new reads of k join, and the older answer it replaces, if
// any, is doomed. A GET that is not registered counts as overtaken.
func (t *Table[K, E, F]) Install(k K, f F, e E) Install[E] {
	var ze E
	if t.closed {
		return Install[E]{Stream: true}
	}
	s := t.get(k)
	a := s.asks[f]
	if a == nil {
		t.tidy(k, s)
		return Install[E]{Doom: []E{e}}
	}
	a.entry = e
	if a.doomed || s.unpersisted != ze {
		// A write the store may not have had when it answered is
		// queued: the answer is older than what this cachelet holds.
		return Install[E]{Doom: []E{e}}
	}
	var doom []E
	if s.filling != ze && s.filling != e {
		doom = []E{s.filling} // e is a newer answer
	}
	s.filling = e
	return Install[E]{Doom: doom}
}

// FillDone says the fill of e ended (added to the cache, refused or
// aborted): reads of k no longer join it. The shell calls it after it
// tried to add e to the cache, so that an Invalidate in between either
// dooms e (and the cache refuses it) or removes it from the cache after.
func (t *Table[K, E, F]) FillDone(k K, e E) {
	var ze E
	s := t.keys[k]
	if s == nil {
		return
	}
	if s.filling == e {
		s.filling = ze
	}
	t.tidy(k, s)
}

// Invalidate dooms everything reads and writes of k have in flight: the
// pending write, the fill new reads would join, and every store GET whose
// answer is not in yet (with the entry it is filling, if any). Nothing
// doomed stays where a new read would find it: a read that begins after
// the write returned must not join a download that may predate the write.
// It returns the entries to doom. The unpersisted write stays: it is the
// only copy until the store has it.
func (t *Table[K, E, F]) Invalidate(k K) []E {
	s := t.keys[k]
	if s == nil {
		return nil
	}
	var ze E
	var doom []E
	if s.pending != ze {
		doom = append(doom, s.pending)
		s.pending = ze
	}
	doom = append(doom, t.doomReads(s)...)
	t.tidy(k, s)
	return doom
}

// doomReads is what a write that reached the store does to reads of k
// that asked the store before it had the write: every one of them is
// doomed, and the fill new reads would join is dropped. The pending write
// stays.
func (t *Table[K, E, F]) doomReads(s *key[E, F]) []E {
	var ze E
	var zf F
	var doom []E
	if s.filling != ze {
		doom = append(doom, s.filling)
		s.filling = ze
	}
	for _, a := range s.asks {
		a.doomed = true
		if a.entry != ze && (len(doom) == 0 || a.entry != doom[0]) {
			doom = append(doom, a.entry) // the filling one is in already
		}
	}
	s.flight = zf
	return doom
}

// BeginWrite records w, a write-through's entry, as k's pending write:
// until the write lands in the cache (WriteDone), an Invalidate dooms it.
// The shell invalidates k before. A pending write it replaces is doomed
// (returned).
func (t *Table[K, E, F]) BeginWrite(k K, w E) []E {
	var ze E
	s := t.get(k)
	var doom []E
	if s.pending != ze && s.pending != w {
		doom = []E{s.pending}
	}
	s.pending = w
	return doom
}

// WriteAcked says the store acknowledged the write whose pending entry is
// placeholder, and that final (holding the store's metadata) is about to
// be added to the cache in its place. Reads that asked the store before it
// had the write may hold the older version: they are doomed, or their fill
// would land over final. When an Invalidate overtook the write (the
// placeholder is no longer pending), final is doomed too: a write that
// began before the store acknowledged this one may have cached its bytes.
// It returns the entries to doom. The shell ends the write with WriteDone
// once it tried to add final.
func (t *Table[K, E, F]) WriteAcked(k K, placeholder, final E) []E {
	s := t.get(k)
	var doom []E
	if s.pending == placeholder {
		s.pending = final
	} else {
		doom = append(doom, final)
	}
	doom = append(doom, t.doomReads(s)...)
	t.tidy(k, s)
	return doom
}

// WriteDone ends the write whose pending entry is w (added to the cache,
// refused, or abandoned).
func (t *Table[K, E, F]) WriteDone(k K, w E) {
	var ze E
	s := t.keys[k]
	if s == nil {
		return
	}
	if s.pending == w {
		s.pending = ze
	}
	t.tidy(k, s)
}

// Unpersisted records w as k's write queued for the store: until the store
// has it (Persisted), reads that miss the cache are served from it. It
// replaces an older queued write of k, which the queue supersedes.
func (t *Table[K, E, F]) Unpersisted(k K, w E) {
	t.get(k).unpersisted = w
}

// Persisted says the queued write w of k reached the store (or was
// superseded, or given up): reads go to the store again. A newer queued
// write of k stays. When w was the newest, the store GETs of k in flight
// are doomed and returned: they may have been answered before the store
// had w, and Install no longer refuses them.
func (t *Table[K, E, F]) Persisted(k K, w E) []E {
	var ze E
	s := t.keys[k]
	if s == nil {
		return nil
	}
	var doom []E
	if s.unpersisted == w {
		s.unpersisted = ze
		doom = t.doomReads(s)
	}
	t.tidy(k, s)
	return doom
}

// IsUnpersisted reports whether k has a write the store does not have yet.
func (t *Table[K, E, F]) IsUnpersisted(k K) bool {
	var ze E
	s := t.keys[k]
	return s != nil && s.unpersisted != ze
}

// DoomInFlight invalidates every key that match accepts and that has a
// fill, a pending write or a store GET in flight, except keys with an
// unpersisted write (the only copy until the store has it). It returns the
// entries to doom. DropPrefix calls it before it searches the cache, so a
// fill either ends before the search (and is found there) or is refused
// when it ends.
func (t *Table[K, E, F]) DoomInFlight(match func(K) bool) []E {
	var ze E
	var doom []E
	for k, s := range t.keys {
		inFlight := s.filling != ze || s.pending != ze || len(s.asks) > 0
		if inFlight && s.unpersisted == ze && match(k) {
			doom = append(doom, t.Invalidate(k)...)
		}
	}
	return doom
}

// Drop decides whether the cached copy of k may be dropped (DropPrefix):
// not when k has an unpersisted write. When it may, k is invalidated
// first; the entries to doom are returned.
func (t *Table[K, E, F]) Drop(k K) (doom []E, ok bool) {
	if t.IsUnpersisted(k) {
		return nil, false
	}
	return t.Invalidate(k), true
}

// Prewarmed records that k was fetched by pre-warming and not read yet.
func (t *Table[K, E, F]) Prewarmed(k K) { t.get(k).prewarmed = true }

// LocalHit records a read of k served from memory, and reports whether it
// is the first since k was pre-warmed.
func (t *Table[K, E, F]) LocalHit(k K) bool {
	s := t.keys[k]
	if s == nil || !s.prewarmed {
		return false
	}
	s.prewarmed = false
	t.tidy(k, s)
	return true
}

// Close says the shell closed: later answers are streamed through, never
// filled into memory.
func (t *Table[K, E, F]) Close() { t.closed = true }

// Closed reports whether Close was called.
func (t *Table[K, E, F]) Closed() bool { return t.closed }

// BeginHandoff says the ring changed: an ownership handoff begins, and
// supersedes any still running (waiters wait for the newest). It returns
// the handoff's id, for EndHandoff.
func (t *Table[K, E, F]) BeginHandoff() uint64 {
	t.handoffs++
	t.handoff = t.handoffs
	t.handing = true
	return t.handoff
}

// EndHandoff says handoff id finished, and reports whether it was the
// newest: then no handoff runs any more. A superseded handoff's end
// changes nothing.
func (t *Table[K, E, F]) EndHandoff(id uint64) (newest bool) {
	if id != t.handoff {
		return false
	}
	t.handing = false
	return true
}

// HandingOff reports whether a handoff runs, and the newest one's id.
func (t *Table[K, E, F]) HandingOff() (id uint64, running bool) {
	return t.handoff, t.handing
}
