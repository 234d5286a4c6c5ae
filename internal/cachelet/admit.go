package cachelet

// Admission by predicted benefit (package admission, OFC §5.2): the
// platform measures, per function, whether extracting and loading data
// is more than half of its run time, and tells the cachelet before each
// invocation whether the function's inputs are worth caching
// (control's POST /v1/admission). One invocation runs at a time on an
// instance, so the setting is the cachelet's, not a read's.
//
// A read not admitted is served as a pass-through is today when the
// fill reserve is full (fill.go): through the key state table (flights,
// pending and unpersisted writes, dooms) exactly as before, and only at
// the end, instead of filling an entry, the store's (or the owner's)
// body streams to the client and nothing is published. A copy already
// held (memory or a write not yet persisted) still serves the read: it
// is no miss. Under the store write target the store holds every
// acknowledged write, so a miss not admitted goes there directly, not
// through the key's owner (which would keep a copy) nor the disk tier
// (which would bring one into memory). Under the owner and local write
// targets the owner may hold the only copy of the newest write, so the
// read still asks it; only this cachelet's copy is not kept. Reads a
// peer makes of this cachelet as the key's owner are the peer's, and
// always admitted here. A ranged read that would fill pages (pages.go)
// asks the store for its range alone and keeps no page; pages held
// already serve it.

// SetAdmit says whether the running function's misses are kept.
func (c *Cachelet) SetAdmit(admit bool) { c.noAdmit.Store(!admit) }

// Admitting says whether misses are kept (SetAdmit; true at start).
func (c *Cachelet) Admitting() bool { return !c.noAdmit.Load() }

// admits says whether a read (route: a read by this cachelet's client,
// not a peer's) keeps what it misses.
func (c *Cachelet) admits(route bool) bool { return !route || !c.noAdmit.Load() }
