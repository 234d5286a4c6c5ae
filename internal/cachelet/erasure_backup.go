package cachelet

import (
	"bytes"
	"context"
	"io"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hoard-io/hoard/internal/erasure"
)

// Backups [InfiniCache: backup]: every Backup, a cachelet sends the
// shards it holds that changed since its last backup (new or replaced)
// to its backup holder, the member the ring names for it
// (BackupPlacer.BackupHolder; when that member changes, everything is
// sent again). The holder keeps them apart from its own shards, within
// BackupMemory (LRU, verified like any shard). When a member leaves, its
// backup holder, as soon as it sees the departure and before any rebuild
// pass, writes each backed-up shard whose index no member of the object's
// placement holds any more to the first member of the placement holding
// none of the object (itself included): the replacement takes the shard
// over as a copy, and the rebuild pass that follows finds nothing to
// code from k survivors. Shards changed since the last backup are the
// rebuild's.
//
// Stale backups are dropped [ADR 23]: a backup is worth keeping only
// while its origin holds the shard. Each backup pass also names to the
// holder the shards sent before that the origin no longer holds (written
// over, deleted or evicted there), and the holder drops their backups; a
// drop that fails is named again at the next pass (at most
// maxPendingDrops, the rest left to the holder's LRU). When an origin
// starts sending to a holder (its first pass after it started: a member
// that came back at the same address holds nothing of its earlier life,
// or a new holder), it first has the holder drop every backup of its
// address, and the holder before drop them too. A holder drops on its own
// the backups of a present member whose backup holder it no longer is, at
// each pass; a write's invalidation of a version drops that version's
// backups along with its shards. hoard_erasure_backup_dropped_total
// counts them by reason.

// BackupPlacer names a member's backup holder (cluster.Member).
type BackupPlacer interface {
	// BackupHolder returns the peer address of the member keeping the
	// backups of the member at origin, "" when none.
	BackupHolder(origin string) string
}

// ShardBackups is the client side of backups (peer.Client).
type ShardBackups interface {
	ShardBackup(ctx context.Context, addr, origin, bucket, key, etag string, index int, manifest string, body io.Reader, size int64) error
	ShardBackupDrop(ctx context.Context, addr, origin, bucket, key, etag string, index int) error
}

// backupState is the sender's and the keeper's state.
type backupState struct {
	mu      sync.Mutex
	to      string                              // the holder of the last backup
	sent    map[erasure.ShardKey]*erasure.Shard // what it holds of ours
	store   *erasure.Store                      // backups kept for peers
	origins map[string]map[erasure.ShardKey]bool

	// pending are drops the last holder failed to take (retried).
	pending map[erasure.ShardKey]bool

	sends, restores, dropped *prometheus.CounterVec
	sentBytes                prometheus.Counter
}

// maxPendingDrops bounds the drops kept for the next pass.
const maxPendingDrops = 4096

// Reasons a backup is dropped (hoard_erasure_backup_dropped_total).
const (
	dropNotHeld     = "not_held"    // its origin no longer holds the shard
	dropReset       = "reset"       // its origin (re)started sending here
	dropMoved       = "moved"       // its origin's backup holder is another member
	dropInvalidated = "invalidated" // a write changed the object
)

func (e *ecPath) backupInit(reg prometheus.Registerer) {
	b := &e.bk
	b.sent = map[erasure.ShardKey]*erasure.Shard{}
	b.store = erasure.NewStore(e.cfg.BackupMemory)
	b.origins = map[string]map[erasure.ShardKey]bool{}
	b.pending = map[erasure.ShardKey]bool{}
	b.dropped = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hoard_erasure_backup_dropped_total",
		Help: "Backups this cachelet kept for its peers and dropped as stale, by reason: not_held (the origin no longer holds the shard), reset (the origin started sending here again), moved (the origin's backup holder is another member), invalidated (a write changed the object)."}, []string{"reason"})
	for _, r := range []string{dropNotHeld, dropReset, dropMoved, dropInvalidated} {
		b.dropped.WithLabelValues(r)
	}
	b.sends = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hoard_erasure_backups_total",
		Help: "Shards sent to this cachelet's backup holder (changed since the last backup), by result: sent, failed."}, []string{"result"})
	b.sentBytes = prometheus.NewCounter(prometheus.CounterOpts{Name: "hoard_erasure_backup_bytes_total",
		Help: "Bytes of shards sent to this cachelet's backup holder (the backups' cost)."})
	b.restores = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hoard_erasure_backup_restores_total",
		Help: "Backed-up shards of departed members written to their object's placement, by result: restored, failed."}, []string{"result"})
	kept := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "hoard_erasure_backup_held_bytes",
		Help: "Bytes of backups this cachelet keeps for its peers."}, func() float64 { return float64(b.store.Stats().Bytes) })
	budget := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "hoard_erasure_backup_budget_bytes",
		Help: "Bytes this cachelet may keep of backups, apart from its shards' (erasure.backup_memory; follows the budget)."}, func() float64 { return float64(b.store.Stats().Budget) })
	evicted := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "hoard_erasure_backup_evicted_total",
		Help: "Backups this cachelet kept for its peers and evicted to make room for newer ones (erasure.backup_memory too small for what its origins send)."}, func() float64 { return float64(b.store.Stats().Evicted) })
	shards := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "hoard_erasure_budget_bytes",
		Help: "Bytes this cachelet may keep of shards for its application (erasure.memory; follows the budget)."}, func() float64 { return float64(e.shards.Stats().Budget) })
	if reg != nil {
		reg.MustRegister(b.sends, b.sentBytes, b.restores, b.dropped, kept, budget, evicted, shards)
	}
}

// backupLoop sends a delta every Backup until the cachelet closes.
func (e *ecPath) backupLoop() {
	defer e.c.wg.Done()
	for {
		select {
		case <-e.c.stopped.Done():
			return
		case <-e.c.clock.After(e.cfg.Backup):
		}
		e.pruneBackups()
		e.backupOnce(e.c.stopped)
	}
}

// backupOnce sends the shards changed since the last backup, and says
// how many it sent.
func (e *ecPath) backupOnce(ctx context.Context) int {
	bp, ok1 := e.cfg.Placer.(BackupPlacer)
	peers, ok2 := e.cfg.Peers.(ShardBackups)
	if !ok1 || !ok2 {
		return 0
	}
	self := e.cfg.Placer.PeerAddr()
	to := bp.BackupHolder(self)
	if to == "" {
		return 0
	}
	b := &e.bk
	b.mu.Lock()
	prev := b.to
	b.mu.Unlock()
	if to != prev {
		// A holder new to this cachelet's life: whatever it keeps of
		// this address is of an earlier life, and the holder before keeps
		// what it no longer needs.
		if !e.dropAt(ctx, peers, to, self, erasure.ShardKey{Index: -1}) {
			return 0 // next pass
		}
		if prev != "" {
			e.dropAt(ctx, peers, prev, self, erasure.ShardKey{Index: -1})
		}
		b.mu.Lock()
		b.to, b.sent, b.pending = to, map[erasure.ShardKey]*erasure.Shard{}, map[erasure.ShardKey]bool{}
		b.mu.Unlock()
	}
	b.mu.Lock()
	sent := b.sent
	b.mu.Unlock()
	held := map[erasure.ShardKey]bool{}
	n := 0
	for _, k := range e.shards.Keys() {
		held[k] = true
		sh := e.shards.Peek(k)
		if sh == nil || sent[k] == sh || ctx.Err() != nil {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
		err := peers.ShardBackup(sctx, to, self, k.Bucket, k.Key, k.ETag, k.Index, sh.Encoded, bytes.NewReader(sh.Data), int64(len(sh.Data)))
		cancel()
		if err != nil {
			b.sends.WithLabelValues("failed").Inc()
			e.c.log.Debug("shard backup failed", "bucket", k.Bucket, "key", k.Key, "holder", to, "err", err)
			continue
		}
		b.sends.WithLabelValues("sent").Inc()
		b.sentBytes.Add(float64(len(sh.Data)))
		n++
		b.mu.Lock()
		if b.to == to {
			b.sent[k] = sh
		}
		b.mu.Unlock()
	}
	// What was sent and is held no more: its backup goes too.
	b.mu.Lock()
	for k := range b.sent {
		if !held[k] {
			delete(b.sent, k) // dropped here: sent again if it returns
			if len(b.pending) < maxPendingDrops {
				b.pending[k] = true
			}
		}
	}
	var drops []erasure.ShardKey
	for k := range b.pending {
		if !held[k] {
			drops = append(drops, k)
		}
		delete(b.pending, k)
	}
	b.mu.Unlock()
	for _, k := range drops {
		if !e.dropAt(ctx, peers, to, self, k) {
			b.mu.Lock()
			if b.to == to && len(b.pending) < maxPendingDrops {
				b.pending[k] = true
			}
			b.mu.Unlock()
		}
	}
	return n
}

// dropAt asks the holder at addr to drop the backup of k it keeps for
// self (every backup of self when k.Bucket is ""), and says whether it
// did.
func (e *ecPath) dropAt(ctx context.Context, peers ShardBackups, addr, self string, k erasure.ShardKey) bool {
	if ctx.Err() != nil {
		return false
	}
	sctx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
	defer cancel()
	if err := peers.ShardBackupDrop(sctx, addr, self, k.Bucket, k.Key, k.ETag, k.Index); err != nil {
		e.c.log.Debug("backup drop failed", "bucket", k.Bucket, "key", k.Key, "holder", addr, "err", err)
		return false
	}
	return true
}

// PeerShardBackupDrop drops the backups kept for origin of shard index
// of bucket/key at etag (index -1: every index; etag "": every version;
// bucket "": every one of origin's) (peer.ShardBackupHolder).
func (c *Cachelet) PeerShardBackupDrop(_ context.Context, origin, bucket, key, etag string, index int) {
	if c.ec == nil {
		return
	}
	b := &c.ec.bk
	reason := dropNotHeld
	if bucket == "" {
		reason = dropReset
	}
	n := 0
	b.mu.Lock()
	ks := b.origins[origin]
	for k := range ks {
		if bucket == "" || (k.Bucket == bucket && k.Key == key && (etag == "" || k.ETag == etag) && (index < 0 || k.Index == index)) {
			delete(ks, k)
			if b.dropKept(origin, k) {
				n++
			}
		}
	}
	if len(ks) == 0 {
		delete(b.origins, origin)
	}
	b.mu.Unlock()
	b.dropped.WithLabelValues(reason).Add(float64(n))
}

// dropKept drops the backup of k unless another origin than origin
// names it too, and says whether it did. b.mu is held.
func (b *backupState) dropKept(origin string, k erasure.ShardKey) bool {
	for o, ks := range b.origins {
		if o != origin && ks[k] {
			return false
		}
	}
	return b.store.Remove(k)
}

// pruneBackups drops the backups of the present members whose backup
// holder this cachelet is no longer (their backups go to the member the
// ring names now). Those of members that left stay for takeOver.
func (e *ecPath) pruneBackups() {
	bp, ok := e.cfg.Placer.(BackupPlacer)
	if !ok || e.c.cfg.Members == nil {
		return
	}
	present := map[string]bool{}
	for _, a := range e.c.cfg.Members.PeerAddrs() {
		present[a] = true
	}
	self := e.cfg.Placer.PeerAddr()
	b := &e.bk
	n := 0
	b.mu.Lock()
	for o, ks := range b.origins {
		if !present[o] || bp.BackupHolder(o) == self {
			continue
		}
		delete(b.origins, o)
		for k := range ks {
			if b.dropKept(o, k) {
				n++
			}
		}
	}
	b.mu.Unlock()
	b.dropped.WithLabelValues(dropMoved).Add(float64(n))
}

// dropVersion drops the backups of bucket/key at etag kept here, whatever
// their origin: a write changed the object.
func (e *ecPath) dropVersion(bucket, key, etag string) {
	if n := e.bk.store.Delete(bucket, key, etag); n > 0 {
		e.bk.dropped.WithLabelValues(dropInvalidated).Add(float64(n))
	}
}

// PeerShardBackup keeps a backup of a shard the member at origin holds
// (peer.ShardBackupHolder), verified against its manifest.
func (c *Cachelet) PeerShardBackup(_ context.Context, origin, bucket, key, etag string, index int, manifest string, body io.Reader, size int64) error {
	if c.ec == nil || c.ec.cfg.BackupMemory == 0 {
		return errNoBackups
	}
	b := &c.ec.bk
	k := erasure.ShardKey{Bucket: bucket, Key: key, ETag: etag, Index: index}
	if err := b.store.Receive(k, manifest, body, size); err != nil {
		return shardError(err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.origins[origin] == nil {
		b.origins[origin] = map[erasure.ShardKey]bool{}
	}
	b.origins[origin][k] = true
	// Bound the index: forget what the store evicted.
	if len(b.origins[origin]) > 2*b.store.Stats().Shards+64 {
		for o, ks := range b.origins {
			for k := range ks {
				if b.store.Peek(k) == nil {
					delete(ks, k)
				}
			}
			if len(ks) == 0 {
				delete(b.origins, o)
			}
		}
	}
	return nil
}

// takeOver writes the backed-up shards of the departed members whose
// index their placement lost, and drops those members' backups.
func (e *ecPath) takeOver(ctx context.Context, departed []string) {
	b := &e.bk
	var keys []erasure.ShardKey
	b.mu.Lock()
	for _, o := range departed {
		for k := range b.origins[o] {
			keys = append(keys, k)
		}
		delete(b.origins, o)
	}
	b.mu.Unlock()
	self := e.cfg.Placer.PeerAddr()
	for _, k := range keys {
		sh := b.store.Peek(k)
		if sh == nil || ctx.Err() != nil {
			continue
		}
		b.store.Remove(k) // this one alone: others' backups of the object stay
		m := sh.Manifest
		addrs := e.cfg.Placer.Place(k.Bucket, k.Key, m.Shards())
		if addrs == nil {
			continue
		}
		held := e.whoHoldsAny(ctx, sh, addrs, self)
		if slices.Contains(held, k.Index) || !slices.ContainsFunc(held, func(i int) bool { return i >= 0 }) {
			// Still held; or held by none: a version written over (or
			// lost), not worth a shard alone.
			continue
		}
		restored := false
		for i, addr := range addrs {
			if held[i] >= 0 || ctx.Err() != nil {
				continue
			}
			// The first member holding none that takes it (a member
			// that left unnoticed yet fails, the next is tried).
			var err error
			if addr == self {
				err = e.shards.Put(&erasure.Shard{Key: k, Manifest: m, Encoded: sh.Encoded, Data: sh.Data})
			} else {
				sctx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
				err = e.cfg.Peers.ShardPut(sctx, addr, k.Bucket, k.Key, k.ETag, k.Index, sh.Encoded, bytes.NewReader(sh.Data), int64(len(sh.Data)))
				cancel()
			}
			if err != nil {
				e.c.log.Debug("backup restore failed", "bucket", k.Bucket, "key", k.Key, "shard", k.Index, "holder", addr, "err", err)
				continue
			}
			restored = true
			break
		}
		if !restored {
			b.restores.WithLabelValues("failed").Inc()
			continue
		}
		b.restores.WithLabelValues("restored").Inc()
		e.counts.restored.Add(1)
		e.pace(ctx, int64(len(sh.Data)))
	}
}

// whoHoldsAny is whoHolds for a shard this cachelet may not hold itself:
// which shard of sh's object each member of a placement holds (-1: none).
func (e *ecPath) whoHoldsAny(ctx context.Context, sh *erasure.Shard, addrs []string, self string) []int {
	probe := sh
	if own := e.shards.Get(sh.Key.Bucket, sh.Key.Key, sh.Key.ETag); own != nil && own.Encoded == sh.Encoded {
		probe = own
	} else {
		probe = &erasure.Shard{Key: sh.Key, Manifest: sh.Manifest, Encoded: sh.Encoded}
		probe.Key.Index = -1
	}
	return e.whoHolds(ctx, probe, addrs, self)
}

// takeDeparted returns and clears the members seen leaving.
func (e *ecPath) takeDeparted() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	d := e.departed
	e.departed = nil
	return d
}
