package cachelet

import (
	"context"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/erasure"
	"github.com/hoard-io/hoard/internal/store"
)

// Rebuild [InfiniCache: recovery]: after a membership change, the shards
// of a departed holder are coded again from the survivors and written to
// the members now in the object's placement that hold none. For each
// object, the one cachelet that does it is the first member of the new
// placement that holds a shard, so no two rebuild the same object; it
// reads k shards, rebuilds the missing ones stripe by stripe, checks them
// against the manifest and sends them, at most RebuildRate bytes a second.
// Up to r holders lost at once lose nothing.

// rebuildLoop runs rebuild passes when the membership changes, until the
// cachelet closes.
func (e *ecPath) rebuildLoop() {
	defer e.c.wg.Done()
	for {
		select {
		case <-e.c.stopped.Done():
			return
		case <-e.kick:
		}
		// The departed members' backups first, as soon as each departure
		// is seen: what they restore needs no rebuild. Let a burst of
		// changes (several members lost at once) settle into one pass.
		e.takeOverDeparted()
		delay := e.c.clock.After(e.cfg.RebuildDelay)
	settle:
		for {
			select {
			case <-e.c.stopped.Done():
				return
			case <-e.kick:
				e.takeOverDeparted()
			case <-delay:
				break settle
			}
		}
		start := e.c.clock.Now()
		e.rebuildAll(e.c.stopped)
		e.mu.Lock()
		e.lastRebuild = e.c.clock.Now().Sub(start)
		e.mu.Unlock()
	}
}

// takeOverDeparted restores the backups of the members seen leaving.
func (e *ecPath) takeOverDeparted() {
	if d := e.takeDeparted(); len(d) > 0 && e.cfg.BackupMemory > 0 {
		e.takeOver(e.c.stopped, d)
	}
}

// changed asks for a rebuild pass (the ring changed).
func (e *ecPath) changed() {
	e.noteMembers()
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// rebuildAll runs one pass over the objects this cachelet holds shards of.
func (e *ecPath) rebuildAll(ctx context.Context) {
	done := map[[3]string]bool{}
	for _, sk := range e.shards.Keys() {
		obj := [3]string{sk.Bucket, sk.Key, sk.ETag}
		if done[obj] || ctx.Err() != nil {
			continue
		}
		done[obj] = true
		e.rebuildOne(ctx, sk)
	}
}

// rebuildOne restores the redundancy of the object sk is a shard of, if
// this cachelet is the one to.
func (e *ecPath) rebuildOne(ctx context.Context, sk erasure.ShardKey) {
	own := e.shards.Get(sk.Bucket, sk.Key, sk.ETag)
	if own == nil {
		return
	}
	m := own.Manifest
	addrs := e.cfg.Placer.Place(sk.Bucket, sk.Key, m.Shards())
	if addrs == nil {
		return
	}
	self := e.cfg.Placer.PeerAddr()
	held := e.whoHolds(ctx, own, addrs, self)
	first := slices.IndexFunc(held, func(i int) bool { return i >= 0 })
	if first < 0 || addrs[first] != self {
		return // another holder rebuilds it (or none is placed: nothing to do)
	}
	var missing []int
	for i := range m.Shards() {
		if !slices.Contains(held, i) {
			missing = append(missing, i)
		}
	}
	var targets []string
	for i, addr := range addrs {
		if held[i] < 0 {
			targets = append(targets, addr)
		}
	}
	n := min(len(missing), len(targets))
	if n == 0 {
		return
	}
	missing, targets = missing[:n], targets[:n]
	var holders []string
	for i, addr := range addrs {
		if held[i] >= 0 {
			holders = append(holders, addr)
		}
	}
	written, err := e.recode(ctx, ecObject(own), m, own.Encoded, holders, missing, targets)
	for range written {
		e.rebuilds.WithLabelValues("rebuilt").Inc()
		e.counts.rebuilt.Add(1)
		e.rebuiltBytes.Add(float64(m.ShardSize()))
	}
	if failed := len(missing) - len(written); failed > 0 {
		e.rebuilds.WithLabelValues("failed").Add(float64(failed))
		e.c.log.Warn("erasure rebuild: shards not rebuilt", "bucket", sk.Bucket, "key", sk.Key, "failed", failed, "err", err)
	}
}

// pace waits as long as sending n bytes takes at RebuildRate.
func (e *ecPath) pace(ctx context.Context, n int64) {
	d := e.cfg.rebuildTime(n)
	if d <= 0 {
		return
	}
	select {
	case <-ctx.Done():
	case <-e.c.clock.After(d):
	}
}

// whoHolds asks every member of a placement which shard of own's object
// it holds (-1: none, or one of another manifest).
func (e *ecPath) whoHolds(ctx context.Context, own *erasure.Shard, addrs []string, self string) []int {
	held := make([]int, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		held[i] = -1
		if addr == self {
			held[i] = own.Key.Index
			continue
		}
		wg.Go(func() {
			sctx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
			defer cancel()
			sh, err := e.cfg.Peers.ShardGet(sctx, addr, own.Key.Bucket, own.Key.Key, own.Key.ETag, 0, 0)
			if err != nil {
				return
			}
			sh.Body.Close()
			if sh.Manifest == own.Encoded && sh.Index < own.Manifest.Shards() {
				held[i] = sh.Index
			}
		})
	}
	wg.Wait()
	return held
}

// rebuildMetrics registers the rebuild's counters.
func (e *ecPath) rebuildMetrics(reg prometheus.Registerer) {
	e.rebuilds = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hoard_erasure_rebuilds_total",
		Help: "Shards rebuilt from the survivors after a membership change, by result: rebuilt (written to its new holder), failed."}, []string{"result"})
	e.rebuiltBytes = prometheus.NewCounter(prometheus.CounterOpts{Name: "hoard_erasure_rebuilt_bytes_total",
		Help: "Bytes of shards rebuilt and written to new holders (the rebuild's network cost)."})
	if reg != nil {
		reg.MustRegister(e.rebuilds, e.rebuiltBytes)
	}
}

func ecObject(sh *erasure.Shard) cache.Key {
	return cache.Key{Bucket: sh.Key.Bucket, Object: sh.Key.Key}
}

func infoOf(m *erasure.Manifest) store.ObjectInfo {
	return store.ObjectInfo{ETag: m.ETag, Size: m.Size}
}
