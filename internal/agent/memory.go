package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/bytesize"
	"github.com/hoard-io/hoard/internal/control"
	"github.com/hoard-io/hoard/internal/sandbox"
)

// The memory daemon (Faa$T §3.4; DESIGN §3) keeps an instance's function
// and cachelet together within the instance's memory limit. The function's
// memory is not the daemon's to free, so it moves the one thing it can:
// the cachelet's budget. One goroutine per loaded instance samples the
// sandbox's working set every memorySample (and, where the kernel offers
// usage thresholds, at once when usage crosses memoryHigh of the limit);
// when the working set comes within 10% of the limit it lowers the budget
// over the control API (package control) so that the working set falls back to
// memoryTarget (the cachelet evicts by the application's policy and
// returns the memory to the kernel), never below 0; once the working set
// has stayed under memoryLow for memoryCalm, it raises the budget a step at
// a time, back to the spec's budget, as far as that keeps the working set
// under memoryTarget.
//
// It matters most with cache.shared (the cache lives inside the booked
// memory, as in Faa$T); without it the limit has room for the whole budget
// on top of the booked memory, and the daemon acts only when the function
// goes past what it booked. It never fails an invocation: it runs beside
// them, and a failed request to the cachelet is logged and retried at the
// next sample.
const (
	memoryHigh   = 0.90 // the working set's share of the limit that makes the daemon evict
	memoryTarget = 0.85 // where evicting brings it back to
	memoryLow    = 0.70 // below this for memoryCalm, the budget grows a step
	memorySample = 50 * time.Millisecond
	memoryCalm   = 2 * time.Second
	// memoryRaiseSteps: the spec's budget comes back in this many steps
	// (each at least 1 MiB).
	memoryRaiseSteps = 4
	// memoryRequestTimeout bounds one request to the cachelet.
	memoryRequestTimeout = 5 * time.Second
)

// MemoryDaemonEnv names the environment variable that, set to "off",
// turns the memory daemon off for the agents of the process that do not
// set Config.DisableMemoryDaemon (experiments comparing with and without
// it, as Faa$T's Table 5 does).
const MemoryDaemonEnv = "HOARD_MEMORY_DAEMON"

// nextBudget is the memory daemon's decision: the cache budget to set,
// given the sandbox's working set (usage) and limit, the bytes the cache
// holds, its budget now and the spec's budget. At or above memoryHigh of
// the limit it lowers the budget by what brings usage back to
// memoryTarget, counted from what the cache holds (a budget above that
// would free nothing), down to 0 at most: the rest is the function's. Below
// memoryLow it raises the budget a step (a memoryRaiseSteps-th of the
// spec's budget), up to the spec's budget and to what would keep usage at
// memoryTarget if the cache filled it. In between it keeps the budget. The
// caller applies raises only after usage has stayed low for memoryCalm.
func nextBudget(usage, limit, cacheBytes, budget, configured int64) int64 {
	if limit <= 0 {
		return budget
	}
	high, target, low := share(limit, memoryHigh), share(limit, memoryTarget), share(limit, memoryLow)
	switch {
	case usage >= high:
		need := usage - target
		return max(min(budget, cacheBytes)-need, 0)
	case usage < low && budget < configured:
		step := max(configured/memoryRaiseSteps, 1<<20)
		room := target - (usage - cacheBytes) // the cache size that puts usage at target
		return max(min(configured, budget+step, room), budget)
	}
	return budget
}

// share is f of n bytes.
func share(n int64, f float64) int64 { return int64(float64(n) * f) }

// cacheletControl is what the daemon asks of the instance's cachelet;
// *control.Client provides it.
type cacheletControl interface {
	Stats(ctx context.Context) (control.Stats, error)
	SetBudget(ctx context.Context, n int64) (control.BudgetResult, error)
}

// memoryDaemon is one instance's.
type memoryDaemon struct {
	in  *Instance
	box *sandbox.Sandbox // for usage notifications; nil in tests
	// usage and limit sample the sandbox: its working set, its limit.
	usage      func() (int64, error)
	limit      func() int64
	client     cacheletControl
	configured int64

	cancel context.CancelFunc
	done   chan struct{}

	calmSince time.Time // when usage last went under memoryLow; zero while it is not
	lastWarn  time.Time

	mu   sync.Mutex
	info api.MemoryDaemonInfo
	// extra is what the sizing of the invocation gave the cache on top of
	// configured (sizing.go): the budget the daemon raises back to is
	// configured + extra.
	extra int64
}

// setExtra changes what the cache has on top of its configured budget.
func (d *memoryDaemon) setExtra(n int64, budget int64) {
	d.mu.Lock()
	d.extra = n
	d.info.CacheBudget = budget
	d.mu.Unlock()
}

// startMemoryDaemon starts the instance's memory daemon, unless the agent
// runs without. Called once the instance is loaded.
func (in *Instance) startMemoryDaemon() {
	a := in.agent
	if a.cfg.DisableMemoryDaemon {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &memoryDaemon{
		in: in, box: in.box, usage: in.box.WorkingSet, limit: in.box.Limit, client: in.control(),
		configured: int64(in.spec.Cache.Budget),
		cancel:     cancel, done: make(chan struct{}),
	}
	d.info = api.MemoryDaemonInfo{Running: true, Shared: in.spec.Cache.Shared,
		ConfiguredBudget: d.configured, CacheBudget: d.configured}
	in.mu.Lock()
	if in.tornDown { // unloaded meanwhile (the agent is closing)
		in.mu.Unlock()
		cancel()
		return
	}
	in.mem = d
	in.mu.Unlock()
	go d.run(ctx)
}

// stopMemoryDaemon stops the daemon and waits for it; idempotent.
func (in *Instance) stopMemoryDaemon() {
	in.mu.Lock()
	d := in.mem
	in.mu.Unlock()
	if d == nil {
		return
	}
	d.cancel()
	<-d.done
}

// memoryInfo is the daemon's state for api.InstanceInfo; nil without one.
func (in *Instance) memoryInfo() *api.MemoryDaemonInfo {
	in.mu.Lock()
	d := in.mem
	in.mu.Unlock()
	if d == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	info := d.info
	return &info
}

func (d *memoryDaemon) run(ctx context.Context) {
	defer close(d.done)
	defer func() {
		d.mu.Lock()
		d.info.Running = false
		d.mu.Unlock()
	}()
	log := d.in.agent.log
	limit := d.limit()
	// Woken at once when usage crosses the high mark, where the kernel
	// tells (cgroup v1); polled in any case.
	var wake <-chan struct{}
	if d.box != nil && d.box.Enforced() {
		ch, stop, err := d.box.NotifyUsage(share(limit, memoryHigh))
		switch {
		case err == nil:
			wake = ch
			defer stop()
			d.mu.Lock()
			d.info.Notified = true
			d.mu.Unlock()
		case !errors.Is(err, sandbox.ErrNotSupported):
			log.Debug("memory daemon: no usage notifications, polling only", "instance", d.in.req.ID, "err", err)
		}
	}
	log.Info("memory daemon started", "instance", d.in.req.ID, "limit", bytesize.Format(limit),
		"budget", bytesize.Format(d.configured), "shared", d.in.spec.Cache.Shared, "notified", wake != nil)
	tick := time.NewTicker(memorySample)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case _, ok := <-wake:
			if !ok {
				wake = nil
				continue
			}
		}
		if !d.check(ctx, time.Now()) {
			return
		}
	}
}

// check samples the sandbox once and moves the budget if it must. It
// returns false once the sandbox is gone.
func (d *memoryDaemon) check(ctx context.Context, now time.Time) bool {
	start := time.Now()
	usage, err := d.usage()
	if errors.Is(err, sandbox.ErrDeleted) {
		return false
	}
	if err != nil {
		d.failed(now, "reading the sandbox's memory", err)
		return true
	}
	limit := d.limit()
	d.mu.Lock()
	d.info.PeakUsage = max(d.info.PeakUsage, usage)
	budget := d.info.CacheBudget
	configured := d.configured + d.extra
	d.mu.Unlock()

	high := usage >= share(limit, memoryHigh)
	low := usage < share(limit, memoryLow)
	switch {
	case !low:
		d.calmSince = time.Time{}
	case d.calmSince.IsZero():
		d.calmSince = now
	}
	calm := low && now.Sub(d.calmSince) >= memoryCalm
	if !(high && budget > 0) && !(calm && budget < configured) {
		return true
	}
	cacheBytes, current, err := d.cacheStats(ctx)
	if err != nil {
		if ctx.Err() == nil {
			d.failed(now, "reading the cachelet's stats", err)
		}
		return true
	}
	budget = current // the cachelet's word
	nb := nextBudget(usage, limit, cacheBytes, budget, configured)
	if nb == budget {
		d.mu.Lock()
		d.info.CacheBudget = budget
		d.mu.Unlock()
		return true
	}
	rctx, cancel := context.WithTimeout(ctx, memoryRequestTimeout)
	res, err := d.client.SetBudget(rctx, nb)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			d.failed(now, "setting the cachelet's budget", err)
		}
		return true
	}
	took := time.Since(start)
	after, _ := d.usage()
	d.mu.Lock()
	d.info.CacheBudget = res.Budget
	if nb < budget {
		d.info.Shrinks++
		d.info.FreedBytes += res.Freed
		d.info.LastShrink = now
	} else {
		d.info.Raises++
	}
	d.mu.Unlock()
	what := "memory daemon: cache budget lowered"
	if nb > budget {
		what = "memory daemon: cache budget raised"
		d.calmSince = now // another calm spell before the next step
	}
	d.in.agent.log.Info(what, "instance", d.in.req.ID, "usage", usage, "limit", limit,
		"usage_pct", fmt.Sprintf("%.1f", 100*float64(usage)/float64(limit)),
		"budget_from", budget, "budget_to", res.Budget, "cache_bytes_before", cacheBytes,
		"freed", res.Freed, "cache_bytes", res.CacheBytes, "usage_after", after, "took", took.Round(time.Microsecond))
	return true
}

// failed counts and logs (at most every 10 s) a failed request to the
// cachelet; the next sample tries again.
func (d *memoryDaemon) failed(now time.Time, what string, err error) {
	d.mu.Lock()
	d.info.Errors++
	d.mu.Unlock()
	if now.Sub(d.lastWarn) >= 10*time.Second {
		d.lastWarn = now
		d.in.agent.log.Warn("memory daemon: "+what, "instance", d.in.req.ID, "err", err)
	}
}

// cacheStats reads what the cachelet's cache holds and its budget.
func (d *memoryDaemon) cacheStats(ctx context.Context) (cacheBytes, budget int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, memoryRequestTimeout)
	defer cancel()
	s, err := d.client.Stats(ctx)
	if err != nil {
		return 0, 0, err
	}
	return s.CacheBytes, s.BudgetBytes, nil
}
