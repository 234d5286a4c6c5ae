package cachelet

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/peer"
	"github.com/hoard-io/hoard/internal/store"
)

// Reads while a key's owner is down (replicated durable writes, ADR 0030,
// "reads while the owner is down"). A write acknowledged by the owner and
// its backup may not be in the store yet: a reader that cannot reach the
// owner must not take the store's word alone, or it serves an older
// version (or none) until the owner's lease expires and its backup
// delivers. So such a reader first asks the key's backups (the members
// the owner picks, as this cachelet's view has them:
// cluster.Member.BackupsOf) for the newest record of the key they keep,
// all of them at once, each within BackupConfig.Timeout:
//
//   - every one answers none: the owner's acknowledged writes of the key
//     are all in the store (a write no backup kept was acknowledged only
//     once the store had it); the store is read, as before;
//   - one has a record (the newest of those found, by the order a
//     takeover uses): it is the key's newest acknowledged write, unless
//     the store holds a version the write was not written over (another
//     route wrote the key since, or the owner delivered a later write
//     whose done mark, or record, is older here): a HEAD decides, as the
//     guarded delivery would. The store holding a version of the
//     record's base (or nothing, where the base says so): the record's
//     bytes are served, checked against its CRC32C and version (its MD5);
//     the store holding the record's own version or another: the store is
//     read;
//   - any backup does not answer in time, or the HEAD fails: 503. A
//     doubt is never served as data, nor is the store's possibly older
//     version.
//
// The owner up, nothing of this runs: the backups are asked only when the
// owner could not answer.

// errBackupsUnsure: a reader could not reach a key's owner and could not
// learn from its backups whether the store is current for the key.
var errBackupsUnsure = fmt.Errorf("%w: the key's owner is unreachable and its backups could not say whether the store has its last acknowledged write", store.ErrUnavailable)

// readFromBackups is a read of k whose owner at owner could not answer,
// under replicated durable writes. handled false: the store is current
// for k (or replicated writes are off here), read it as before. With e (a
// copy held here, the caller's reference) it is served where it is the
// record's version, else dropped.
func (c *Cachelet) readFromBackups(ctx context.Context, k cache.Key, owner string, e *cache.Entry) (served, bool, error) {
	b := c.bk
	if b == nil || c.cfg.BackupRing == nil || c.cfg.BackupPeers == nil {
		return served{}, false, nil
	}
	rec, data, err := c.findBackup(ctx, k, owner)
	if err == nil && rec != nil {
		var current bool
		current, err = c.recordCurrent(ctx, k, rec)
		if err == nil && !current {
			rec = nil
		}
	}
	switch {
	case err != nil:
		b.m.reads.WithLabelValues("unavailable").Inc()
		c.log.Debug("owner unavailable and its backups unsure: refusing the read", "bucket", k.Bucket, "key", k.Object, "owner", owner, "err", err)
		if e != nil {
			e.Release()
		}
		return served{}, true, fmt.Errorf("%w: %v", errBackupsUnsure, err)
	case rec == nil:
		b.m.reads.WithLabelValues("store").Inc()
		return served{}, false, nil
	}
	b.m.reads.WithLabelValues("record").Inc()
	if e != nil {
		if e.Info().ETag == rec.ETag {
			return fromEntry(e, LocalHit), true, nil
		}
		c.cache.RemoveIf(k, e)
		e.Release()
	}
	// Served from the backup's memory, never kept here: the next read
	// asks again (the owner, or its backups while it is down).
	return served{entry: c.writeEntry(k, data, rec.ETag, rec.Opts), outcome: RemoteHit, fromPeer: true}, true, nil
}

// findBackup asks k's backups (as owner picks them) for the newest record
// of k they keep: nil when none does, an error when one did not answer.
func (c *Cachelet) findBackup(ctx context.Context, k cache.Key, owner string) (*peer.BackupRecord, []byte, error) {
	addrs := c.cfg.BackupRing.BackupsOf(owner, k.Bucket, k.Object)
	addrs = addrs[:min(len(addrs), maxBackupTries)]
	if len(addrs) == 0 {
		// The owner is not a member in this view (or it has no other
		// member): nothing to ask; its takeover runs where it is gone.
		return nil, nil, errors.New("no member to ask for the owner's writes")
	}
	type found struct {
		rec  *peer.BackupRecord
		data []byte
		err  error
	}
	ch := make(chan found, len(addrs))
	fctx, cancel := context.WithTimeout(ctx, c.bk.cfg.Timeout)
	defer cancel()
	for _, addr := range addrs {
		go func() {
			rec, data, err := c.cfg.BackupPeers.BackupFind(fctx, addr, k.Bucket, k.Object, c.bk.cfg.MaxBytes)
			if err != nil {
				err = fmt.Errorf("backup %s: %w", addr, err)
			}
			ch <- found{rec, data, err}
		}()
	}
	var best found
	var errs error
	for range addrs {
		f := <-ch
		switch {
		case f.err != nil:
			errs = errors.Join(errs, f.err)
		case f.rec != nil && (best.rec == nil || newerRecord(*f.rec, *best.rec)):
			best = f
		}
	}
	if errs != nil {
		return nil, nil, errs
	}
	return best.rec, best.data, nil
}

// recordCurrent reports whether rec, a kept record of k, is newer than
// what the store holds of k: the store holds a version of rec's base
// (nothing, where the base names ""), or rec's base is unknown. The
// store holding rec's own version or another is current.
func (c *Cachelet) recordCurrent(ctx context.Context, k cache.Key, rec *peer.BackupRecord) (bool, error) {
	hctx, cancel := context.WithTimeout(ctx, c.bk.cfg.Timeout)
	defer cancel()
	info, err := c.raw.Stat(hctx, k.Bucket, k.Object)
	switch {
	case errors.Is(err, store.ErrNoSuchKey):
		return rec.Replaces == nil || slices.Contains(rec.Replaces, ""), nil
	case err != nil:
		return false, err
	case info.ETag == rec.ETag:
		return false, nil
	}
	// A placeholder of rec (or of a version it was written over) is
	// in its base (durable_shadow.go).
	return rec.Replaces == nil || c.baseHolds(k, rec.Replaces, rec.ETag, info), nil
}

// PeerBackupFind returns the newest record of bucket/key this cachelet
// keeps for another member, not yet done or being delivered for an owner
// that is gone (peer.BackupFinder); nil when it keeps none.
func (c *Cachelet) PeerBackupFind(_ context.Context, bucket, key string) (*peer.BackupRecord, []byte, error) {
	b := c.bk
	if b == nil {
		return nil, nil, fmt.Errorf("%w: this cachelet keeps no backups of durable writes", peer.ErrBadRequest)
	}
	k := cache.Key{Bucket: bucket, Object: key}
	var best *keptRecord
	consider := func(r keptRecord) {
		if best == nil || newerRecord(r.rec, best.rec) {
			best = &r
		}
	}
	b.mu.Lock()
	for _, incs := range b.held {
		for _, set := range incs {
			for _, r := range set.recs {
				if r.rec.Bucket == bucket && r.rec.Key == key {
					consider(r)
				}
			}
		}
	}
	for _, r := range b.inFlight[k] {
		consider(r)
	}
	b.mu.Unlock()
	if best == nil {
		return nil, nil, nil
	}
	rec := best.rec
	return &rec, best.data, nil
}

// delivering notes that r, a record of k taken over, is on its way to the
// store (readers asking for k are still answered it); the returned func
// says it is settled.
func (b *backups) delivering(k cache.Key, r keptRecord) func() {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.deliveringLocked(k, r)
}

// deliveringLocked is delivering with b.mu held: a takeover moves a
// record from held to in flight in one step, so that no reader asking
// for its key in between finds it in neither and trusts the store,
// which does not have it yet.
func (b *backups) deliveringLocked(k cache.Key, r keptRecord) func() {
	m := b.inFlight[k]
	if m == nil {
		m = map[uint64]keptRecord{}
		b.inFlight[k] = m
	}
	m[r.id] = r
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		delete(b.inFlight[k], r.id)
		if len(b.inFlight[k]) == 0 {
			delete(b.inFlight, k)
		}
	}
}
