package instance

import (
	"context"
	"os"
	"time"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/cacheconfig"
	"github.com/hoard-io/hoard/internal/control"
	"github.com/hoard-io/hoard/internal/prewarm"
)

// Ready says where the instance serves: the control API's ready answer
// and `hoard serve --ready-file`'s content.
func (in *Instance) Ready() control.Ready {
	id := in.ID()
	if id == "" {
		id = in.cfg.ID // on its own: the ID configured, if any
	}
	return control.Ready{ID: id, App: in.cfg.App, Endpoint: in.Endpoint(), MetricsURL: in.MetricsURL(),
		PeerAddr: in.PeerAddr(), PID: os.Getpid()}
}

// statsSettle bounds how long Stats waits for reads whose bodies are
// still being closed (cachelet.SettledCounters): the agent reads an
// invocation's reads right after the function returned.
const statsSettle = 200 * time.Millisecond

// Stats is the cachelet's counters in the control API's form, once the
// reads in progress have been counted (at most statsSettle).
func (in *Instance) Stats() control.Stats {
	ctx, cancel := context.WithTimeout(context.Background(), statsSettle)
	defer cancel()
	c := in.cachelet.SettledCounters(ctx)
	r := c.Reads
	return control.Stats{
		Reads: map[string]control.ReadCount{
			"local_hit": control.ReadCount(r.LocalHit), "local_miss": control.ReadCount(r.LocalMiss),
			"remote_hit": control.ReadCount(r.RemoteHit), "remote_miss": control.ReadCount(r.RemoteMiss),
			"pass_through": control.ReadCount(r.PassThrough), "disk_hit": control.ReadCount(r.DiskHit),
		},
		Writes: c.Writes, CacheBytes: c.CacheBytes, CacheObjects: c.CacheObjects,
		BudgetBytes: c.BudgetBytes, EvictedAgain: c.EvictedAgain, Erasure: c.Erasure,
		NotAdmitted: c.NotAdmitted, Admitting: in.cachelet.Admitting(), WriteNanos: c.WriteNanos, StoreFit: c.StoreFit,
	}
}

// controlTarget is the instance as the control API drives it
// (control.Cachelet).
type controlTarget struct{ in *Instance }

func (t controlTarget) Ready() control.Ready { return t.in.Ready() }

func (t controlTarget) Settings() cacheconfig.Settings { return t.in.cfg.Cachelet.Settings() }

func (t controlTarget) Stats() control.Stats { return t.in.Stats() }

func (t controlTarget) Drop(bucket, prefix string) int {
	return t.in.cachelet.DropPrefix(bucket, prefix)
}

func (t controlTarget) SetBudget(n int64) control.BudgetResult {
	freed := t.in.cachelet.SetBudget(n)
	s := t.in.cachelet.Stats()
	budget, used := t.in.cachelet.Budget()
	return control.BudgetResult{Budget: budget, Freed: freed, CacheBytes: used, ReservedBytes: s.Reserved}
}

func (t controlTarget) Prewarm(ctx context.Context, keys []control.Key) (control.PrewarmResult, error) {
	ks := make([]cache.Key, len(keys))
	for i, k := range keys {
		ks[i] = cache.Key{Bucket: k.Bucket, Object: k.Key}
	}
	r, err := t.in.cachelet.Prewarm(ctx, ks)
	return control.PrewarmResult{Owned: r.Owned, Cached: r.Cached, Fetched: r.Fetched, Bytes: r.Bytes,
		Skipped: r.Skipped, Failed: r.Failed}, err
}

func (t controlTarget) AccessMetadata() []prewarm.Object { return t.in.cachelet.AccessMetadata() }

func (t controlTarget) SetAdmit(admit bool) { t.in.cachelet.SetAdmit(admit) }
