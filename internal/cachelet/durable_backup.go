package cachelet

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/cacheconfig"
	"github.com/hoard-io/hoard/internal/peer"
	"github.com/hoard-io/hoard/internal/store"
	"github.com/hoard-io/hoard/internal/writeback"
	"github.com/hoard-io/hoard/internal/writelog"
)

// Replicated durable writes (Config.Backup, `durable_writes: replicated`,
// ADR 0030): a write this cachelet holds as a key's owner is appended to
// its own log and, at the same time, sent to a second member of the
// application (its backup: the first member after the owner in the key's
// ring order on another node, else the first after it), which logs it as
// a backup record naming the owner before it answers. The write is
// acknowledged once both hold it. A backup that does not answer in time
// or refuses makes the owner try the next; none left, the write is
// acknowledged only once the store has it (never on one copy). With no
// other member at all it has one copy, the log, as under plain durable
// writes (logged once).
//
// Once a write is settled at the owner (in the store, or replaced), its
// sequence number joins a batch of done marks sent to its backup every
// DoneInterval, which drops the record. When the owner leaves the
// membership (its lease expired: a crash, or its node lost) or a later
// process of it appears, the backup hands the newest record of each key to
// its store queue with the replay's guard (durable_base.go: put only over
// a version the write was written over, or its own), held as a replayed
// write where this cachelet now owns the key (its reads wait until it is
// settled), before it answers any flush for the new membership: the key's
// new owner's handoff flushes every member, so it serves none of those
// keys from the store before they are delivered.

// DefaultBackupBytes is BackupConfig.MaxBytes's default.
const DefaultBackupBytes = cacheconfig.DefaultDurableBackupBytes

// BackupConfig turns on replicated durable writes (Config.Backup).
type BackupConfig struct {
	// MaxBytes bounds the bytes of other members' writes this cachelet
	// keeps as their backup (in memory, and in its log); past it a
	// backup request is refused at once and the owner tries another.
	// Default DefaultBackupBytes (64 MiB).
	MaxBytes int64
	// Timeout bounds one backup's round trip (the peer's fsync
	// included), within the write's own deadline. Default 3 s.
	Timeout time.Duration
	// DoneInterval is how often done marks go to the backups. Default
	// 100 ms.
	DoneInterval time.Duration
}

func (b *BackupConfig) validate(c *Config) error {
	if b.MaxBytes < 0 || b.Timeout < 0 || b.DoneInterval < 0 {
		return errors.New("cachelet: backup bounds must not be negative")
	}
	if b.MaxBytes == 0 {
		b.MaxBytes = DefaultBackupBytes
	}
	if b.Timeout == 0 {
		b.Timeout = cacheconfig.DefaultDurableBackupTimeout
	}
	if b.DoneInterval == 0 {
		b.DoneInterval = 100 * time.Millisecond
	}
	if c.Log == nil {
		return errors.New("cachelet: replicated durable writes need the durable log")
	}
	if c.WriteTarget != WriteOwner {
		return errors.New("cachelet: replicated durable writes need the owner write target (a key's owner keeps the write and picks its backup)")
	}
	return nil
}

// BackupRing is the membership as replicated durable writes use it
// (cluster.Member). Safe for concurrent use.
type BackupRing interface {
	// DurableBackups returns the members that may keep the second copy
	// of a write of bucket/key this cachelet owns, best first, and how
	// many lead the list on other nodes than this one.
	DurableBackups(bucket, key string) (addrs []string, otherNodes int)
	// BackupsOf is DurableBackups as the member at peer address owner
	// picks them (this cachelet among them, where it is one); nil when
	// owner is not a member.
	BackupsOf(owner, bucket, key string) []string
	// Present reports whether member id is in the current membership.
	Present(id string) bool
	// ID is this cachelet's member ID.
	ID() string
}

// BackupPeers is the client side of backups (peer.Client).
type BackupPeers interface {
	Backup(ctx context.Context, addr string, rec peer.BackupRecord, data []byte) error
	BackupDone(ctx context.Context, addr, owner string, inc uint64, seqs []uint64) error
	BackupFind(ctx context.Context, addr, bucket, key string, maxBytes int64) (*peer.BackupRecord, []byte, error)
}

// maxBackupTries bounds the members a write tries as its backup.
const maxBackupTries = 3

// maxPendingDone bounds the done marks waiting for one backup; past it
// the oldest are dropped (the backup keeps those records until the owner
// leaves, then delivers them guarded: harmless, and bounded by its bytes).
const maxPendingDone = 1 << 16

// backups is the state of replicated durable writes.
type backups struct {
	cfg BackupConfig
	inc uint64 // this process's incarnation
	seq atomic.Uint64
	m   backupMetrics
	// alone is set while writes find no other member (logged on each
	// change to it).
	alone atomic.Bool

	mu sync.Mutex
	// As an owner: where the copy of each logged write went (by log
	// ID), and the done marks waiting per backup address.
	sent    map[uint64]sentCopy
	pending map[string][]uint64
	// As a backup: the records kept, by owner and incarnation, and their
	// sizes by local log ID.
	held map[string]map[uint64]*ownerRecords
	// inFlight are the records taken over and not yet settled, by key
	// and local log ID: readers of the key are still answered them
	// (durable_read.go).
	inFlight map[cache.Key]map[uint64]keptRecord
	sizes    map[uint64]int64
	bytes    int64

	// tmu runs one takeover at a time (a flush waits for one running).
	tmu sync.Mutex
}

// sentCopy is where the copy of one of this cachelet's writes went, and
// the write (its bytes are the held write's, not a copy) to send again
// should that member leave.
type sentCopy struct {
	addr   string
	seq    uint64
	rec    peer.BackupRecord
	data   []byte
	moving bool // being sent to another member (rebackup)
}

// ownerRecords are the records kept for one incarnation of an owner.
type ownerRecords struct {
	recs     map[uint64]keptRecord // by the owner's sequence number
	taken    bool                  // the owner is gone: records go to the store
	absentAt time.Time             // when a periodic check first missed the owner
}

// periodicTakeoverAfter is how long the periodic check must miss an owner
// before it takes its records over: a ring change seen here takes them at
// once, and a member that just joined may write before this cachelet's
// view lists it.
const periodicTakeoverAfter = 2 * time.Second

type keptRecord struct {
	id   uint64 // in this cachelet's log
	rec  peer.BackupRecord
	data []byte
}

func newBackups(cfg BackupConfig, now time.Time, reg prometheus.Registerer) *backups {
	return &backups{cfg: cfg, inc: uint64(now.UnixNano()), m: newBackupMetrics(reg),
		sent: map[uint64]sentCopy{}, pending: map[string][]uint64{},
		held: map[string]map[uint64]*ownerRecords{}, inFlight: map[cache.Key]map[uint64]keptRecord{}, sizes: map[uint64]int64{}}
}

// logDone marks a record of this cachelet's log done: its own write (its
// backup is told, in the next batch) or a backup record (its room is
// free).
func (c *Cachelet) logDone(id uint64) {
	c.cfg.Log.Done(id)
	b := c.bk
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if s, ok := b.sent[id]; ok {
		delete(b.sent, id)
		p := b.pending[s.addr]
		if len(p) >= maxPendingDone {
			p = p[1:]
			b.m.done.WithLabelValues("dropped").Inc()
		}
		b.pending[s.addr] = append(p, s.seq)
	}
	if n, ok := b.sizes[id]; ok {
		delete(b.sizes, id)
		b.bytes -= n
	}
}

// logReplicated logs w (making etag over base) and has a backup keep a
// copy before it holds it; called by logAndHold with k's write lock held,
// so a key's records reach its backup in log order. An error means the
// write must not be acknowledged.
func (c *Cachelet) logReplicated(ctx context.Context, k cache.Key, w writeback.Write, etag string, base []string) (bool, error) {
	b := c.bk
	var addrs []string
	var other int
	if c.cfg.BackupRing != nil && c.cfg.BackupPeers != nil {
		addrs, other = c.cfg.BackupRing.DurableBackups(k.Bucket, k.Object)
	}
	if len(addrs) == 0 {
		if !b.alone.Swap(true) {
			c.log.Warn("durable writes: replicated, but no other member of the application can keep second copies: writes have one copy, the log, until one joins")
		}
		b.m.alone.Inc()
		id, err := c.logWrite(ctx, w, etag, base)
		if err != nil {
			return false, err
		}
		if c.cfg.Shadow {
			if err := c.writeShadow(ctx, k, etag, base, id); err != nil {
				return c.holdThrough(ctx, k, w, etag, id, base, "the store did not take the write's placeholder", err)
			}
		}
		return c.hold(k, w, etag, id, base, false), nil
	}
	if b.alone.Swap(false) {
		c.log.Info("durable writes: replicated: another member keeps second copies again")
	}
	rec := peer.BackupRecord{Owner: c.cfg.BackupRing.ID(), Incarnation: b.inc, Seq: b.seq.Add(1),
		Bucket: k.Bucket, Key: k.Object, Opts: w.Opts, ETag: etag, Replaces: base}
	type sent struct {
		addr string
		err  error
	}
	ch := make(chan sent, 1)
	go func() {
		addr, err := c.sendBackup(ctx, rec, w.Data, addrs[:min(len(addrs), maxBackupTries)], other)
		ch <- sent{addr, err}
	}()
	id, lerr := c.logWrite(ctx, w, etag, base)
	s := <-ch
	if lerr != nil {
		if s.err == nil {
			b.mu.Lock()
			b.pending[s.addr] = append(b.pending[s.addr], rec.Seq) // the copy goes too
			b.mu.Unlock()
		}
		return false, lerr
	}
	if s.err == nil {
		b.mu.Lock()
		b.sent[id] = sentCopy{addr: s.addr, seq: rec.Seq, rec: rec, data: w.Data}
		b.mu.Unlock()
		if c.cfg.Shadow {
			if err := c.writeShadow(ctx, k, etag, base, rec.Seq); err != nil {
				return c.holdThrough(ctx, k, w, etag, id, base, "the store did not take the write's placeholder", err)
			}
		}
		return c.hold(k, w, etag, id, base, false), nil
	}
	// No backup took it: acknowledged only once the store has it.
	b.m.through.Inc()
	return c.holdThrough(ctx, k, w, etag, id, base, "no backup could keep the write", s.err)
}

// rebackup sends the writes not yet settled whose backup has left the
// application to another member, so that they have two copies again
// (called on ring changes). A later write of the same key may reach the
// new backup first: a takeover picks each key's newest by sequence
// number, whatever the order it arrived in.
func (c *Cachelet) rebackup() {
	b := c.bk
	if b == nil || c.cfg.Members == nil || c.cfg.BackupRing == nil || c.cfg.BackupPeers == nil {
		return
	}
	live := map[string]bool{}
	for _, a := range c.cfg.Members.PeerAddrs() {
		live[a] = true
	}
	type job struct {
		id uint64
		s  sentCopy
	}
	var jobs []job
	b.mu.Lock()
	for id, s := range b.sent {
		if !live[s.addr] && !s.moving {
			s.moving = true
			b.sent[id] = s
			jobs = append(jobs, job{id, s})
		}
	}
	b.mu.Unlock()
	if len(jobs) == 0 {
		return
	}
	sort.Slice(jobs, func(i, j int) bool { return jobs[i].s.seq < jobs[j].s.seq })
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		moved := 0
		for _, j := range jobs {
			addrs, other := c.cfg.BackupRing.DurableBackups(j.s.rec.Bucket, j.s.rec.Key)
			addr, err := c.sendBackup(c.stopped, j.s.rec, j.s.data, addrs[:min(len(addrs), maxBackupTries)], other)
			b.mu.Lock()
			if s, ok := b.sent[j.id]; ok {
				s.moving = false
				if err == nil {
					s.addr = addr
					moved++
				}
				b.sent[j.id] = s
			} else if err == nil {
				// Settled meanwhile: the new copy may go too.
				b.pending[addr] = append(b.pending[addr], j.s.seq)
			}
			b.mu.Unlock()
			if err == nil {
				b.m.resent.Inc()
			}
		}
		c.log.Info("durable writes: a member keeping copies of this cachelet's writes left; sent them to others", "writes", len(jobs), "sent", moved)
	}()
}

// sendBackup has the first of addrs that answers keep rec; it returns
// that member's address.
func (c *Cachelet) sendBackup(ctx context.Context, rec peer.BackupRecord, data []byte, addrs []string, otherNodes int) (string, error) {
	var errs error
	for i, addr := range addrs {
		bctx, cancel := context.WithTimeout(ctx, c.bk.cfg.Timeout)
		err := c.cfg.BackupPeers.Backup(bctx, addr, rec, data)
		cancel()
		if err == nil {
			c.bk.m.sent.Inc()
			if i >= otherNodes {
				c.bk.m.sameNode.Inc()
			}
			return addr, nil
		}
		c.bk.m.failed.Inc()
		errs = errors.Join(errs, fmt.Errorf("backup %s: %w", addr, err))
		if ctx.Err() != nil {
			break
		}
	}
	return "", errs
}

// PeerBackup keeps a copy of another member's durable write
// (peer.BackupKeeper): verified, logged and fsynced before it returns.
func (c *Cachelet) PeerBackup(ctx context.Context, rec peer.BackupRecord, body io.Reader) error {
	b := c.bk
	if b == nil || c.cfg.BackupRing == nil {
		c.bkRefused("off")
		return fmt.Errorf("%w: this cachelet keeps no backups of durable writes", peer.ErrBadRequest)
	}
	if rec.Owner == c.cfg.BackupRing.ID() || rec.Size < 0 {
		b.m.received.WithLabelValues("refused").Inc()
		return fmt.Errorf("%w: a backup of this cachelet's own write", peer.ErrBadRequest)
	}
	b.mu.Lock()
	if b.bytes+rec.Size > b.cfg.MaxBytes {
		b.mu.Unlock()
		b.m.received.WithLabelValues("full").Inc()
		return fmt.Errorf("%w: no room for backups (%d bytes kept)", store.ErrUnavailable, b.cfg.MaxBytes)
	}
	b.bytes += rec.Size
	b.mu.Unlock()
	kept := false
	defer func() {
		if !kept {
			b.mu.Lock()
			b.bytes -= rec.Size
			b.mu.Unlock()
		}
	}()
	data, _, err := readWhole(body, rec.Size)
	if err != nil {
		b.m.received.WithLabelValues("refused").Inc()
		return err
	}
	sum := md5.Sum(data)
	if crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli)) != rec.CRC32C || hex.EncodeToString(sum[:]) != rec.ETag {
		b.m.received.WithLabelValues("refused").Inc()
		return fmt.Errorf("%w: the bytes do not make the version or checksum the backup names", peer.ErrBadRequest)
	}
	id, err := c.cfg.Log.Append(ctx, writelog.Record{Bucket: rec.Bucket, Key: rec.Key, Opts: rec.Opts, Data: data, ETag: rec.ETag,
		Replaces: rec.Replaces, Backup: &writelog.BackupOf{Owner: rec.Owner, Incarnation: rec.Incarnation, Seq: rec.Seq}})
	if err != nil {
		b.m.received.WithLabelValues("error").Inc()
		return fmt.Errorf("%w: the backup could not be logged: %v", store.ErrUnavailable, err)
	}
	kept = true
	b.m.received.WithLabelValues("kept").Inc()
	if b.keep(id, rec, data) {
		c.takeOver() // the owner is gone already, or restarted
	}
	return nil
}

func (c *Cachelet) bkRefused(why string) {
	if c.bk != nil {
		c.bk.m.received.WithLabelValues(why).Inc()
	}
}

// keep records a logged backup record; it reports whether a takeover is
// due (its owner's incarnation was taken over already, or it shows an
// older one to be gone).
func (b *backups) keep(id uint64, rec peer.BackupRecord, data []byte) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	rec.Size = int64(len(data))
	b.sizes[id] = rec.Size
	incs := b.held[rec.Owner]
	if incs == nil {
		incs = map[uint64]*ownerRecords{}
		b.held[rec.Owner] = incs
	}
	set := incs[rec.Incarnation]
	if set == nil {
		set = &ownerRecords{recs: map[uint64]keptRecord{}}
		incs[rec.Incarnation] = set
	}
	set.recs[rec.Seq] = keptRecord{id: id, rec: rec, data: data}
	due := set.taken
	for inc, s := range incs {
		due = due || (inc < rec.Incarnation && !s.taken)
	}
	return due
}

// PeerBackupDone drops the records an owner has settled
// (peer.BackupKeeper).
func (c *Cachelet) PeerBackupDone(_ context.Context, owner string, inc uint64, seqs []uint64) {
	b := c.bk
	if b == nil {
		return
	}
	var ids []uint64
	b.mu.Lock()
	if set := b.held[owner][inc]; set != nil {
		for _, s := range seqs {
			if r, ok := set.recs[s]; ok {
				delete(set.recs, s)
				ids = append(ids, r.id)
			}
		}
		if len(set.recs) == 0 && !set.taken {
			delete(b.held[owner], inc)
			if len(b.held[owner]) == 0 {
				delete(b.held, owner)
			}
		}
	}
	b.mu.Unlock()
	for _, id := range ids {
		c.logDone(id)
	}
	b.m.dropped.Add(float64(len(ids)))
}

// restoreBackups keeps the backup records a log held on open (New).
func (c *Cachelet) restoreBackups(pending []writelog.Pending) {
	for _, p := range pending {
		if c.bk == nil {
			// Replicated writes are off now: deliver them as this
			// cachelet's own, guarded.
			c.deliverBackup(cache.Key{Bucket: p.Bucket, Object: p.Key}, keptRecord{id: p.ID, data: p.Data,
				rec: peer.BackupRecord{Bucket: p.Bucket, Key: p.Key, Opts: p.Opts, ETag: p.ETag, Replaces: p.Replaces}})
			continue
		}
		rec := peer.BackupRecord{Owner: p.Backup.Owner, Incarnation: p.Backup.Incarnation, Seq: p.Backup.Seq,
			Bucket: p.Bucket, Key: p.Key, Opts: p.Opts, ETag: p.ETag, Replaces: p.Replaces}
		c.bk.mu.Lock()
		c.bk.bytes += int64(len(p.Data))
		c.bk.mu.Unlock()
		c.bk.keep(p.ID, rec, p.Data)
	}
	if len(pending) > 0 {
		c.log.Info("durable writes: kept backups of other members' writes found in the log", "records", len(pending))
	}
}

// takeOver hands the records of owners that are gone (no longer members,
// or followed by a later process of theirs) to the store queue: per key
// the newest, guarded; the older ones are done. Called on every ring
// change, before a flush, at start and when a record shows an owner
// restarted; cheap when there is nothing to take.
func (c *Cachelet) takeOver() { c.takeOverAfter(0) }

// takeOverAfter is takeOver that takes the records of an owner missing
// from the membership only once it has been missed for at least
// minAbsent (0: at once).
func (c *Cachelet) takeOverAfter(minAbsent time.Duration) {
	b := c.bk
	if b == nil || c.cfg.BackupRing == nil {
		return
	}
	b.tmu.Lock()
	defer b.tmu.Unlock()
	type taken struct {
		keptRecord
		settled func() // its in-flight mark's end (deliveringLocked)
	}
	var recs []taken
	b.mu.Lock()
	for owner, incs := range b.held {
		var newest uint64
		for inc := range incs {
			newest = max(newest, inc)
		}
		present := c.cfg.BackupRing.Present(owner)
		for inc, set := range incs {
			gone := inc < newest
			switch {
			case present:
				set.absentAt = time.Time{}
			case minAbsent == 0:
				gone = true
			case set.absentAt.IsZero():
				set.absentAt = c.clock.Now()
			default:
				gone = gone || c.clock.Now().Sub(set.absentAt) >= minAbsent
			}
			if !set.taken && gone {
				set.taken = true
				c.log.Info("durable writes: a member whose writes this cachelet backs up is gone: delivering them", "owner", owner, "records", len(set.recs))
			}
			if set.taken {
				for s, r := range set.recs {
					// In flight before it leaves held, under one
					// lock: readers asking for its key find it all
					// along (PeerBackupFind).
					k := cache.Key{Bucket: r.rec.Bucket, Object: r.rec.Key}
					recs = append(recs, taken{r, b.deliveringLocked(k, r)})
					delete(set.recs, s)
				}
			}
		}
	}
	b.mu.Unlock()
	if len(recs) == 0 {
		return
	}
	sort.Slice(recs, func(i, j int) bool {
		a, b := recs[i].rec, recs[j].rec
		if a.Incarnation != b.Incarnation {
			return a.Incarnation < b.Incarnation
		}
		return a.Seq < b.Seq
	})
	newest := map[cache.Key]int{}
	for i, r := range recs {
		k := cache.Key{Bucket: r.rec.Bucket, Object: r.rec.Key}
		if j, ok := newest[k]; !ok || newerRecord(r.rec, recs[j].rec) {
			newest[k] = i
		}
	}
	for i, r := range recs {
		k := cache.Key{Bucket: r.rec.Bucket, Object: r.rec.Key}
		if newest[k] != i {
			c.logDone(r.id)
			b.m.delivered.WithLabelValues("replaced").Inc()
			r.settled() // the key's newest stays in flight
			continue
		}
		b.m.takenOver.Inc()
		c.deliverBackupMarked(k, r.keptRecord, r.settled)
	}
}

// newerRecord reports whether x is a later write of its key than y: by
// sequence within one owner's process; else when x was written over y's
// version, or y not over x's, by the later process (a key moves between
// owners only through a handoff, which delivers the older owner's writes
// first, so the version chain tells them apart where it can).
func newerRecord(x, y peer.BackupRecord) bool {
	switch {
	case x.Owner == y.Owner && x.Incarnation == y.Incarnation:
		return x.Seq > y.Seq
	case slices.Contains(x.Replaces, y.ETag):
		return true
	case slices.Contains(y.Replaces, x.ETag):
		return false
	}
	return x.Incarnation > y.Incarnation
}

// deliverBackup queues a gone owner's write for the store, guarded: as a
// replayed write where this cachelet owns the key (its reads wait until
// it is settled), else without a cached copy, and once the store has it
// the other members drop their copies of the key.
func (c *Cachelet) deliverBackup(k cache.Key, r keptRecord) {
	var settled func()
	if c.bk != nil {
		settled = c.bk.delivering(k, r)
	}
	c.deliverBackupMarked(k, r, settled)
}

// deliverBackupMarked is deliverBackup for a record already marked in
// flight (settled ends the mark; nil without backups).
func (c *Cachelet) deliverBackupMarked(k cache.Key, r keptRecord, settled func()) {
	w := writeback.Write{Bucket: k.Bucket, Key: k.Object, Data: r.data, Opts: r.rec.Opts}
	count := func(err error) {
		if c.bk == nil {
			return
		}
		settled()
		switch {
		case err == nil:
			c.bk.m.delivered.WithLabelValues("delivered").Inc()
		case errors.Is(err, errNewerInStore), errors.Is(err, writeback.ErrSuperseded):
			c.bk.m.delivered.WithLabelValues("superseded").Inc()
		case errors.Is(err, writeback.ErrClosed):
			c.bk.m.delivered.WithLabelValues("left").Inc()
		default:
			c.bk.m.delivered.WithLabelValues("failed").Inc()
		}
	}
	if addr, self := c.cfg.owner(k); self && addr != "" {
		w.Settled = count
		c.holdQueued(k, w, r.rec.ETag, r.id, r.rec.Replaces, true)
		return
	}
	w.Guard = &writeback.Guard{ETag: r.rec.ETag, Replaces: r.rec.Replaces}
	w.Settled = func(err error) {
		if !errors.Is(err, writeback.ErrClosed) {
			c.logDone(r.id)
		}
		if err == nil {
			// The key's new owner may have read the store's older
			// version once its handoff's bound ran out before this
			// delivery landed: every member drops its copy (they
			// read the store again, which has the write now). Not
			// here: Settled runs under the queue's lock. Close
			// closes the queue before it waits for c.wg.
			c.wg.Add(1)
			go func() {
				defer c.wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), c.bk.cfg.Timeout)
				defer cancel()
				c.broadcastInvalidate(ctx, k.Bucket, k.Object)
			}()
		}
		count(err)
	}
	c.wmu.Lock()
	c.toStore.Enqueue(w)
	c.wmu.Unlock()
}

// backupDoneLoop sends the done marks every DoneInterval, and takes over
// the records of owners gone without a ring change seen here, until
// Close.
func (c *Cachelet) backupDoneLoop() {
	defer c.wg.Done()
	for {
		select {
		case <-c.stopped.Done():
			return
		case <-c.clock.After(c.bk.cfg.DoneInterval):
		}
		c.flushBackupDone(c.stopped)
		c.takeOverAfter(periodicTakeoverAfter)
	}
}

// flushBackupDone sends the done marks waiting, one batch per backup.
func (c *Cachelet) flushBackupDone(ctx context.Context) {
	b := c.bk
	if b == nil || c.cfg.BackupPeers == nil || c.cfg.BackupRing == nil {
		return
	}
	b.mu.Lock()
	pending := b.pending
	b.pending = map[string][]uint64{}
	b.mu.Unlock()
	for addr, seqs := range pending {
		for len(seqs) > 0 {
			n := min(len(seqs), peer.MaxBackupDone)
			dctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
			err := c.cfg.BackupPeers.BackupDone(dctx, addr, c.cfg.BackupRing.ID(), b.inc, seqs[:n])
			cancel()
			if err != nil {
				// The backup keeps those records until this cachelet
				// leaves, then delivers them guarded: harmless.
				b.m.done.WithLabelValues("failed").Add(float64(n))
				c.log.Debug("durable writes: done marks not delivered to the backup", "backup", addr, "marks", n, "err", err)
			} else {
				b.m.done.WithLabelValues("sent").Add(float64(n))
			}
			seqs = seqs[n:]
		}
	}
}

// backupMetrics are the hoard_cachelet_durable_backup_* metrics.
type backupMetrics struct {
	sent, failed, through, alone, sameNode, takenOver, dropped, resent prometheus.Counter
	received, delivered, done, reads                                   *prometheus.CounterVec
}

func newBackupMetrics(reg prometheus.Registerer) backupMetrics {
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: "hoard_cachelet_durable_backup_" + name, Help: help})
	}
	m := backupMetrics{
		sent:      counter("sent_total", "Durable writes a backup member acknowledged keeping (logged and fsynced there) before the write was acknowledged."),
		failed:    counter("failed_total", "Attempts to have a backup member keep a durable write that failed (refused, unreachable, past the deadline); the next member is tried."),
		through:   counter("through_total", "Durable writes no backup member kept: acknowledged only once the store had them (or refused)."),
		alone:     counter("alone_total", "Durable writes logged with no other member in the application to keep a second copy: one copy, the log."),
		sameNode:  counter("same_node_total", "Durable writes whose backup member is on the owner's node (no other node has a member, or none answered): a loss of that node loses both copies."),
		takenOver: counter("taken_over_total", "Backup records of owners gone from the application handed to the store queue (newest of each key), guarded."),
		dropped:   counter("dropped_total", "Backup records dropped on their owner's done marks (the owner had them in the store)."),
		resent:    counter("resent_total", "Writes not yet in the store sent again to another member because the member that kept their copy left the application."),
		received: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hoard_cachelet_durable_backup_received_total",
			Help: "Backup requests from owners by result: kept (logged and fsynced), full (no room), refused (bad record or bytes), error (the log failed), off (no backups kept here)."}, []string{"result"}),
		delivered: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hoard_cachelet_durable_backup_delivered_total",
			Help: "Backup records of gone owners by outcome: delivered to the store, superseded (the store or a later write had a newer version), replaced (a newer record of the key), failed (refused by the store for good), left (at Close, for the next start)."}, []string{"result"}),
		done: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hoard_cachelet_durable_backup_done_marks_total",
			Help: "Done marks for backups by result: sent, failed (not delivered: the backup keeps those records until this owner leaves), dropped (over the bound)."}, []string{"result"}),
		reads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hoard_cachelet_durable_backup_reads_total",
			Help: "Reads whose key's owner could not answer, by what the key's backups said: record (one kept a write newer than the store's version: its bytes were served), store (none: the store was read), unavailable (one did not answer in time, or the store's version could not be learned: 503)."}, []string{"result"}),
	}
	if reg != nil {
		reg.MustRegister(m.sent, m.failed, m.through, m.alone, m.sameNode, m.takenOver, m.dropped, m.resent, m.received, m.delivered, m.done, m.reads)
	}
	return m
}
