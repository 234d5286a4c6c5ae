package cachelet

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/cacheconfig"
	"github.com/hoard-io/hoard/internal/peer"
	"github.com/hoard-io/hoard/internal/store"
)

// Migration (OFC §6.4, ADR 32): hot objects move to another member
// instead of being dropped, when a ring change gives their keys to
// another member (handoff.go, cluster.go) and when a shrink of the budget
// evicts them (budget.go). The sender offers each over the peer
// protocol's install call (peer.Client.Install); the receiver keeps it
// only once it verified it (PeerInstall): it owns the key, holds nothing
// of it, has room, the bytes match what was signed and the store's
// checksum or MD5, and, where reads trust copies (the owner settings,
// local), the store has that very version after a clean handoff.

// MigrateConfig bounds migrations. The zero value is the default: on in
// an application (Router and Peers set), off for a cachelet alone.
type MigrateConfig struct {
	// Disabled turns migration off: nothing is offered, offers are
	// refused.
	Disabled bool
	// HotReads and HotIdle say what is hot: accessed at least HotReads
	// times (the application's reads and reads served to peers as the
	// key's owner), the last within HotIdle. Defaults: Sweep.MinReads
	// and Sweep.Idle when set, else OFC's 5 reads and 30 minutes (an
	// object the sweep would keep).
	HotReads int
	HotIdle  time.Duration
	// MaxObjects and MaxBytes bound one migration (one handoff, one
	// ring change or one shrink): the hottest objects first. Defaults 64
	// and 64 MiB.
	MaxObjects int
	MaxBytes   int64
	// Timeout bounds each offer to a peer, and the receiver's request to
	// the store for the offered object's metadata. Default 2 s.
	Timeout time.Duration
}

func (m *MigrateConfig) validate(sweep SweepConfig) error {
	if m.HotReads < 0 || m.HotIdle < 0 || m.MaxObjects < 0 || m.MaxBytes < 0 || m.Timeout < 0 {
		return errors.New("cachelet: migration settings must not be negative")
	}
	if m.HotReads == 0 {
		m.HotReads = orDefault(sweep.MinReads, cacheconfig.OFCSweepMinReads)
	}
	if m.HotIdle == 0 {
		m.HotIdle = orDefault(sweep.Idle, cacheconfig.OFCSweepIdle)
	}
	if m.MaxObjects == 0 {
		m.MaxObjects = defaultMigrateObjects
	}
	if m.MaxBytes == 0 {
		m.MaxBytes = defaultMigrateBytes
	}
	if m.Timeout == 0 {
		m.Timeout = defaultMigrateTimeout
	}
	return nil
}

// settings is m as the application's settings: a bound at its default
// (what validate fills in) is reported as zero, the document's "the
// default", so that a cachelet reports the settings it was given.
func (m MigrateConfig) settings(sweep SweepConfig) cacheconfig.Migrate {
	if m.Disabled {
		return cacheconfig.Migrate{Off: true}
	}
	unless := func(v, def int64) int64 {
		if v == def {
			return 0
		}
		return v
	}
	return cacheconfig.Migrate{
		HotReads:   int(unless(int64(m.HotReads), int64(orDefault(sweep.MinReads, cacheconfig.OFCSweepMinReads)))),
		HotIdle:    cacheconfig.Duration(unless(int64(m.HotIdle), int64(orDefault(sweep.Idle, cacheconfig.OFCSweepIdle)))),
		MaxObjects: int(unless(int64(m.MaxObjects), defaultMigrateObjects)),
		MaxBytes:   unless(m.MaxBytes, defaultMigrateBytes),
		Timeout:    cacheconfig.Duration(unless(int64(m.Timeout), int64(defaultMigrateTimeout))),
	}
}

// Defaults of MigrateConfig's bounds.
const (
	defaultMigrateObjects = 64
	defaultMigrateBytes   = 64 << 20
	defaultMigrateTimeout = 2 * time.Second
)

// orDefault is v, or def when v is zero.
func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Why a migration runs (the why label of the metrics).
const (
	migrateHandoff = "handoff" // a ring change (with or without a handoff)
	migrateShrink  = "shrink"  // a shrink of the budget
)

// migrating is the cachelet's migration state. Safe for concurrent use.
type migrating struct {
	// served counts the reads served to peers as the key's owner, which
	// the access log does not (they are not the application's).
	mu     sync.Mutex
	served map[cache.Key]*servedCount
	// running: a migration of that kind is under way; another one
	// offers nothing (what it would have offered is dropped as before),
	// so the bytes held for offers stay within one MaxBytes per kind.
	running [2]atomic.Bool
	// handoffFailed: the last handoff ended with errors; offers are
	// refused until one ends cleanly.
	handoffFailed atomic.Bool
}

type servedCount struct {
	n    int
	last time.Time
}

// migrates reports whether this cachelet migrates: in an application, not
// turned off.
func (c *Cachelet) migrates() bool {
	return !c.cfg.Migrate.Disabled && c.cfg.Router != nil && c.cfg.Peers != nil
}

// servedPeer records a read served to a peer as k's owner.
func (c *Cachelet) servedPeer(k cache.Key) {
	if !c.migrates() {
		return
	}
	now := c.clock.Now()
	mg := &c.mig
	mg.mu.Lock()
	defer mg.mu.Unlock()
	if mg.served == nil {
		mg.served = map[cache.Key]*servedCount{}
	}
	s := mg.served[k]
	if s == nil {
		if len(mg.served) >= MaxAccessObjects {
			// Forget those served longest ago, a tenth at a time.
			all := make([]cache.Key, 0, len(mg.served))
			for k := range mg.served {
				all = append(all, k)
			}
			sort.Slice(all, func(i, j int) bool { return mg.served[all[i]].last.Before(mg.served[all[j]].last) })
			for _, k := range all[:len(all)/10+1] {
				delete(mg.served, k)
			}
		}
		s = &servedCount{}
		mg.served[k] = s
	}
	s.n++
	s.last = now
}

// hotKeys returns the hot keys (MigrateConfig.HotReads, HotIdle) with
// their access counts.
func (c *Cachelet) hotKeys() map[cache.Key]int {
	now := c.clock.Now()
	cfg := c.cfg.Migrate
	counts := map[cache.Key]int{}
	lasts := map[cache.Key]time.Time{}
	c.access.mu.Lock()
	for k, e := range c.access.objs {
		counts[k] = int(e.o.Reads())
		lasts[k] = e.o.Last
	}
	c.access.mu.Unlock()
	c.mig.mu.Lock()
	for k, s := range c.mig.served {
		counts[k] += s.n
		if s.last.After(lasts[k]) {
			lasts[k] = s.last
		}
	}
	c.mig.mu.Unlock()
	for k, n := range counts {
		if n < cfg.HotReads || now.Sub(lasts[k]) >= cfg.HotIdle {
			delete(counts, k)
		}
	}
	return counts
}

// candidate is a hot entry held (a reference taken) to be offered.
type candidate struct {
	e     *cache.Entry
	reads int
}

// bound keeps the hottest candidates within MaxObjects and MaxBytes and
// releases the others.
func (c *Cachelet) bound(cs []candidate) []candidate {
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].reads > cs[j].reads })
	var kept []candidate
	var bytes int64
	for _, x := range cs {
		if len(kept) < c.cfg.Migrate.MaxObjects && bytes+x.e.Size() <= c.cfg.Migrate.MaxBytes {
			kept = append(kept, x)
			bytes += x.e.Size()
			continue
		}
		x.e.Release()
	}
	return kept
}

// hotOwned takes references to the complete hot entries this cachelet
// owned by the ring they were classified with (before a ring change
// re-classifies or clears them), bounded. Nil when there are none, a
// migration of this kind runs already (see migrating.running) or
// migration is off; a non-nil result holds the running flag, and the
// caller passes it to offer or dropCandidates, which end it.
func (c *Cachelet) hotOwned() []candidate {
	if !c.migrates() || !c.mig.running[0].CompareAndSwap(false, true) {
		return nil
	}
	hot := c.hotKeys()
	var cs []candidate
	if len(hot) > 0 {
		for _, e := range c.cache.AcquireEach(func(e *cache.Entry) bool {
			_, ok := hot[e.Key()]
			return ok && e.Owned() && c.whole(e)
		}) {
			cs = append(cs, candidate{e: e, reads: hot[e.Key()]})
		}
	}
	cs = c.bound(cs)
	if len(cs) == 0 {
		c.mig.running[0].Store(false)
		return nil
	}
	return cs
}

// whole reports whether e may be offered: a whole object's entry (not a
// page or a block of one, whose keys hold a NUL), not a final output.
func (c *Cachelet) whole(e *cache.Entry) bool {
	k := e.Key()
	return strings.IndexByte(k.Object, 0) < 0 && e.Size() == e.Info().Size && !c.finalOutput(k.Bucket, k.Object)
}

// shrinkCollector returns the function SetBudget passes to the cache to
// keep references to the hot entries a shrink evicts, and the candidates
// it collected once the shrink is over; nil, nil when a shrink's
// migration runs already or migration is off. With no candidates
// collected, the caller ends the migration (endShrink).
func (c *Cachelet) shrinkCollector() (func(*cache.Entry), *[]candidate) {
	if !c.migrates() || !c.mig.running[1].CompareAndSwap(false, true) {
		return nil, nil
	}
	hot := c.hotKeys()
	cs := &[]candidate{}
	var bytes int64
	return func(e *cache.Entry) {
		n, ok := hot[e.Key()]
		// Only copies of keys another member owns: the owner is where
		// the others look for a key, so a key this cachelet owns has
		// nowhere to go.
		if !ok || e.Owned() || len(*cs) >= c.cfg.Migrate.MaxObjects || bytes+e.Size() > c.cfg.Migrate.MaxBytes ||
			!c.whole(e) || !e.Acquire() {
			return
		}
		bytes += e.Size()
		*cs = append(*cs, candidate{e: e, reads: n})
	}, cs
}

// kind is the index in migrating.running of a migration for why.
func kind(why string) int {
	if why == migrateShrink {
		return 1
	}
	return 0
}

// dropCandidates releases candidates without offering them, ending
// their migration.
func (c *Cachelet) dropCandidates(why string, cs []candidate) {
	if cs == nil {
		return
	}
	for _, x := range cs {
		x.e.Release()
	}
	c.mig.running[kind(why)].Store(false)
}

// endShrink ends a shrink's migration that collected nothing.
func (c *Cachelet) endShrink() { c.mig.running[1].Store(false) }

// offer offers each candidate to its key's owner by the current ring,
// when that is another member, and releases it; with candidates, it ends
// the migration of its kind (hotOwned and shrinkCollector began it: a
// non-nil list of candidates is one that holds its kind's running flag).
// Each offer is one peer call bounded by Migrate.Timeout, all of them by
// handoffTimeout and Close.
func (c *Cachelet) offer(why string, cs []candidate) {
	if cs == nil {
		return
	}
	defer c.mig.running[kind(why)].Store(false)
	inst, _ := c.cfg.Peers.(installer)
	ctx, cancel := context.WithTimeout(c.stopped, handoffTimeout)
	defer cancel()
	var n [3]int // installed, refused, failed
	var bytes [3]int64
	synced := map[string]bool{}
	for _, x := range cs {
		k := x.e.Key()
		addr, self := c.cfg.owner(k)
		if self || addr == "" || inst == nil || ctx.Err() != nil {
			x.e.Release()
			continue
		}
		if why == migrateHandoff && !c.cfg.ownerMode() && !synced[addr] {
			// Without a handoff nothing made sure the new owner has
			// seen the ring that makes it the owner: a flush waits
			// for that (and has nothing to deliver under strong).
			synced[addr] = true
			c.awaitRevision(ctx, addr)
		}
		res := c.offerOne(ctx, inst, addr, x.e) // releases x.e
		n[res]++
		bytes[res] += x.e.Size()
		c.m.migrated.WithLabelValues(why, migrateResults[res]).Inc()
		c.m.migratedBytes.WithLabelValues(why, migrateResults[res]).Add(float64(x.e.Size()))
	}
	if n[0]+n[1]+n[2] > 0 {
		c.log.Info("hot objects offered to their owners", "why", why, "installed", n[0], "installed_bytes", bytes[0],
			"refused", n[1], "refused_bytes", bytes[1], "failed", n[2], "failed_bytes", bytes[2])
	}
}

// awaitRevision waits, within Migrate.Timeout, until the member at addr
// has seen the membership revision this cachelet has (a flush does); an
// offer it refuses all the same is counted as refused.
func (c *Cachelet) awaitRevision(ctx context.Context, addr string) {
	if c.cfg.Revision == nil {
		return
	}
	fctx, cancel := context.WithTimeout(ctx, c.cfg.Migrate.Timeout)
	defer cancel()
	if err := c.cfg.Peers.Flush(fctx, addr, c.cfg.Revision.Revision()); err != nil {
		c.log.Debug("new owner not known to have seen the ring", "peer", addr, "err", err)
	}
}

// migrateResults are the result labels, by offerOne's result.
var migrateResults = [3]string{"installed", "refused", "failed"}

// installer is the peer client's install call (peer.Client has it).
type installer interface {
	Install(ctx context.Context, addr string, info store.ObjectInfo, body io.Reader, crc uint32) error
}

// offerOne offers e to addr and releases the caller's reference to it:
// 0 installed, 1 refused, 2 failed (the peer could not be asked, or the
// offer broke on the way).
func (c *Cachelet) offerOne(ctx context.Context, inst installer, addr string, e *cache.Entry) int {
	info, size := e.Info(), e.Size()
	info.Size = size
	crc, ok := e.CRC32C()
	if !ok && e.Acquire() {
		h := crc32.New(castagnoli)
		r := e.ReadCloser(0, size)
		_, err := io.Copy(h, r)
		r.Close()
		if err != nil {
			e.Release()
			return 2
		}
		crc = h.Sum32()
		e.SetCRC32C(crc)
	}
	body := e.ReadCloser(0, size) // takes the caller's reference
	defer body.Close()
	octx, cancel := context.WithTimeout(ctx, c.cfg.Migrate.Timeout)
	defer cancel()
	err := inst.Install(octx, addr, info, body, crc)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, peer.ErrRefused), errors.Is(err, peer.ErrNotOwner):
		c.log.Debug("offer refused", "bucket", info.Bucket, "key", info.Key, "peer", addr, "err", err)
		return 1
	}
	c.log.Debug("offer failed", "bucket", info.Bucket, "key", info.Key, "peer", addr, "err", err)
	return 2
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// PeerInstall takes a copy of an object a peer offers (peer.Installer),
// keeping it only once verified (see the top of this file and ADR 32);
// otherwise it refuses (peer.ErrRefused) and keeps nothing.
func (c *Cachelet) PeerInstall(ctx context.Context, info store.ObjectInfo, body io.Reader) error {
	k := cache.Key{Bucket: info.Bucket, Object: info.Key}
	refuse := func(why string, args ...any) error {
		c.m.installs.WithLabelValues("refused").Inc()
		err := fmt.Errorf("%w: %s", peer.ErrRefused, fmt.Sprintf(why, args...))
		c.log.Debug("offered copy refused", "bucket", k.Bucket, "key", k.Object, "etag", info.ETag, "reason", err)
		return err
	}
	if !c.migrates() {
		return refuse("migration is off here")
	}
	if _, self := c.cfg.owner(k); !self {
		return refuse("not the key's owner")
	}
	if c.cfg.ownerMode() {
		if err := c.waitHandoff(ctx); err != nil {
			return refuse("%v", err)
		}
	}
	trusting := c.cfg.ReadMode != ReadVersionCheck // reads trust what is kept
	if trusting && c.mig.handoffFailed.Load() {
		return refuse("the last ownership handoff ended with errors")
	}
	if c.finalOutput(k.Bucket, k.Object) || (c.ec != nil && c.ecSharded(k, info)) {
		return refuse("not kept whole here")
	}
	if c.cache.Peek(k) != nil || c.keys.holds(k) {
		return refuse("a copy, a fill or a write of the key is here already")
	}
	// Registered as a store request of the key: a write or an
	// invalidation from now on dooms what it installs, as it dooms a
	// fill from the store.
	fl := c.keys.ask(k)
	defer c.keys.endAsk(k, fl)
	if trusting {
		sctx, cancel := context.WithTimeout(ctx, c.cfg.Migrate.Timeout)
		st, err := c.store.Stat(sctx, k.Bucket, k.Object)
		cancel()
		switch {
		case err != nil:
			return refuse("the store's version unknown: %v", err)
		case st.ETag != info.ETag || st.Size != info.Size || st.VersionID != info.VersionID:
			return refuse("version %q is not the store's %q", info.ETag, st.ETag)
		}
		if st.Checksums == nil {
			st.Checksums, st.ChecksumType = info.Checksums, info.ChecksumType
		}
		info = st // the store's word on the version's metadata
	}
	e := c.cache.ReserveEntry(cache.ForRoom, k, info)
	if e == nil {
		return refuse("no room for %d bytes", info.Size)
	}
	charge := e.Charge()
	if !c.keys.install(k, fl, e, &c.wg) {
		c.cache.FillDone(charge)
		c.cache.Release(charge)
		e.Release()
		return refuse("closing")
	}
	// The bytes are the version's: the store's full-object checksum of
	// it when there is one, else the MD5 a single-part ETag is; else
	// (a multipart object stored without a checksum) the signed CRC32C
	// alone vouches for them, as for an owner's answer (verify.go).
	rc := checkedAgainstStore(io.NopCloser(body), info)
	if _, _, has := storeChecksum(info); !has {
		if sum, ok := plainMD5(info.ETag); ok {
			rc = &sumChecked{ReadCloser: rc, h: md5.New(), want: sum, remaining: info.Size, mismatch: errMD5}
		}
	}
	if err := c.fill(e, rc); err != nil {
		c.m.installs.WithLabelValues("refused").Inc()
		return fmt.Errorf("%w: %w", peer.ErrRefused, err)
	}
	if c.cache.Peek(k) != e {
		return refuse("overtaken by a write or an invalidation")
	}
	c.cache.MarkUnread(k, e) // not read here yet: the sweep counts from its first read (sweep.go)
	c.m.installs.WithLabelValues("installed").Inc()
	c.log.Debug("offered copy installed", "bucket", k.Bucket, "key", k.Object, "etag", info.ETag, "bytes", info.Size)
	return nil
}

// plainMD5 returns the MD5 an ETag is, for single-part objects stored
// without encryption: 32 hex digits. Other ETags (multipart, encrypted
// objects' with no MD5 to match) are not checked this way.
func plainMD5(etag string) ([]byte, bool) {
	if len(etag) != 32 {
		return nil, false
	}
	sum, err := hex.DecodeString(etag)
	return sum, err == nil
}

// errMD5: an offered body is not the MD5 its ETag says.
var errMD5 = fmt.Errorf("%w: offered bytes do not match the version's MD5", peer.ErrRefused)
