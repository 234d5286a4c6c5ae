package agent

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/bytesize"
)

// Sizing sandboxes per invocation (OFC §4, §5.3; ADR 0024). An instance's
// sandbox keeps the limit its spec books (the functions' memory, the
// cache's budget, the cachelet's overhead); inside it the worker has a
// cgroup of its own (sandbox.Function). Without a prediction the
// function's cgroup has the whole sandbox's limit, as before. With one
// (api.InvokeRequest.MemoryLimit), the function's cgroup gets the
// predicted size and the cache's budget gets what the function booked
// above it, so the sandbox's total is unchanged. While the invocation
// runs, a watcher lends the function memory from the node's slack pool
// when it nears its limit (raising the sandbox's limit by as much, so the
// cache gives nothing back); if it is killed for memory all the same, the
// cache gets its own budget back and the invocation runs again with the
// function's cgroup at the sandbox's limit: the user never sees a failure
// caused by a prediction.

const (
	// DefaultSlackPool is the memory a node keeps to lend to invocations
	// that outgrow their predicted size (OFC: 100 MB).
	DefaultSlackPool = 100 << 20
	// sizingNear: the function's share of its limit at which the watcher
	// lends it more.
	sizingNear = 0.85
	// sizingSample is how often the watcher samples the function's usage.
	sizingSample = 10 * time.Millisecond
	// sizingStep is the least one loan adds (one default interval).
	sizingStep = 16 << 20
)

// slackPool is a node's memory to lend. Safe for concurrent use. Its
// size follows the memory churn observed (OFC: re-estimated): twice the
// 95th percentile of what sized invocations needed beyond their
// predicted limit, over the last slackWindow of them, never below the
// configured size nor above slackMaxFactor times it.
type slackPool struct {
	mu         sync.Mutex
	size, free int64
	configured int64
	overs      []int64 // the last slackWindow overshoots, oldest first
}

const (
	slackWindow    = 200
	slackMaxFactor = 8
)

// observe records what a sized invocation needed beyond its limit (0 if
// nothing) and re-estimates the pool's size; it returns the new size.
func (p *slackPool) observe(over int64) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.overs = append(p.overs, max(over, 0))
	if len(p.overs) > slackWindow {
		p.overs = p.overs[len(p.overs)-slackWindow:]
	}
	sorted := slices.Clone(p.overs)
	slices.Sort(sorted)
	p95 := sorted[(len(sorted)*95)/100]
	if len(sorted) < 20 {
		p95 = sorted[len(sorted)-1] // few samples: the largest
	}
	size := min(max(p.configured, 2*p95), slackMaxFactor*p.configured)
	p.free += size - p.size // may go below 0 while loans are out
	p.size = size
	return size
}

// take lends up to n bytes; it returns what it lent.
func (p *slackPool) take(n int64) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	n = max(min(n, p.free), 0)
	p.free -= n
	return n
}

// give returns n bytes lent.
func (p *slackPool) give(n int64) {
	p.mu.Lock()
	p.free = min(p.free+n, p.size)
	p.mu.Unlock()
}

// Free is what the pool can lend now.
func (p *slackPool) Free() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.free
}

// sizing is one instance's state of sizing; guarded by invokeMu.
type sizing struct {
	base  int64 // the sandbox's own limit
	lent  int64 // what the slack pool lent the sandbox, not yet returned
	extra int64 // what the cache has on top of its budget
}

// size sets the function's cgroup for an invocation of a function that
// booked booked bytes, with the predicted limit pred (0: none): it returns
// the invocation's memory record. Failures to resize leave the function
// more memory, never less.
func (in *Instance) size(ctx context.Context, booked, pred int64) *api.InvocationMemory {
	mem := &api.InvocationMemory{Booked: booked, Limit: in.box.Limit()}
	if in.fn == nil {
		return mem
	}
	a := in.agent
	start := time.Now()
	extraBefore, lentBefore := in.sz.extra, in.sz.lent
	in.returnLoan()                 // the last invocation's
	want := in.sz.base + in.sz.lent // unsized: the function may use the whole sandbox, as without prediction
	if pred > 0 && pred < booked {
		want = pred
	}
	cur, err := in.fn.Limit()
	if err != nil {
		return mem
	}
	limitBefore := cur
	if want != cur {
		// A function's limit that grows first takes back what the cache
		// was given; one that shrinks gives the cache more only once the
		// kernel has taken it (a limit it cannot reclaim to fails, and
		// the function keeps what it has).
		if want > cur {
			in.setCacheExtra(ctx, in.cacheShare(booked, want))
		}
		if err := in.fn.SetLimit(want); err != nil {
			a.log.Debug("sizing: the function's limit stays", "instance", in.req.ID, "want", want, "have", cur, "err", err)
		}
		cur, _ = in.fn.Limit()
	}
	in.setCacheExtra(ctx, in.cacheShare(booked, cur))
	if changed := cur != limitBefore || in.sz.extra != extraBefore || in.sz.lent != lentBefore; changed {
		took := time.Since(start)
		mem.ResizeMS = float64(took.Microseconds()) / 1e3
		a.m.resizeSeconds.Observe(took.Seconds())
	}
	mem.Limit, mem.Sized = cur, cur < in.sz.base
	mem.CacheGiven = in.sz.extra
	if err := in.fn.ResetPeak(); err != nil {
		a.log.Debug("sizing: cannot reset the function's peak", "instance", in.req.ID, "err", err)
	}
	if mem.Sized {
		a.m.sized.WithLabelValues("predicted").Inc()
		a.m.cacheGiven.Add(float64(mem.CacheGiven))
	} else {
		a.m.sized.WithLabelValues("booked").Inc()
	}
	return mem
}

// cacheShare is what the cache gets on top of its budget while the
// function's limit is limit: the booked memory above it; with
// cache.shared, where the budget already lives inside the booked memory,
// only what that leaves above the budget.
func (in *Instance) cacheShare(booked, limit int64) int64 {
	given := booked - limit
	if in.spec.Cache.Shared {
		given -= int64(in.spec.Cache.Budget)
	}
	return max(given, 0)
}

// unsize gives the function the whole sandbox again, and the cache its
// own budget: before running an invocation again at the booked size.
func (in *Instance) unsize(ctx context.Context) {
	if in.fn == nil {
		return
	}
	in.setCacheExtra(ctx, 0)
	in.returnLoan()
	if err := in.fn.SetLimit(in.box.Limit()); err != nil {
		in.agent.log.Warn("sizing: cannot give the function the sandbox's limit", "instance", in.req.ID, "err", err)
	}
}

// setCacheExtra gives the cache n bytes on top of its budget, telling the
// memory daemon and the cachelet.
func (in *Instance) setCacheExtra(ctx context.Context, n int64) {
	if n == in.sz.extra {
		return
	}
	budget := int64(in.spec.Cache.Budget) + n
	ctl := in.control()
	if ctl == nil {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, memoryRequestTimeout)
	res, err := ctl.SetBudget(rctx, budget)
	cancel()
	if err != nil {
		in.agent.log.Warn("sizing: cannot set the cache's budget", "instance", in.req.ID, "budget", budget, "err", err)
		if n > in.sz.extra {
			return // the cache keeps what it has; the function's limit stays safe
		}
	}
	in.sz.extra = n
	if err == nil {
		budget = res.Budget
	}
	in.mu.Lock()
	d := in.mem
	in.mu.Unlock()
	if d != nil {
		d.setExtra(n, budget)
	}
}

// returnLoan gives the slack pool back what the sandbox borrowed, once
// the sandbox's limit can go back to its own.
func (in *Instance) returnLoan() {
	if in.sz.lent == 0 {
		return
	}
	if lim, err := in.fn.Limit(); err == nil && lim > in.sz.base {
		if in.fn.SetLimit(in.sz.base) != nil {
			return
		}
	}
	if err := in.box.SetLimit(in.sz.base); err != nil {
		return // the function still holds it; the next invocation tries again
	}
	in.agent.slack.give(in.sz.lent)
	in.agent.m.slackFree.Set(float64(in.agent.slack.Free()))
	in.sz.lent = 0
}

// watch lends the running function memory from the slack pool when it
// nears its limit, until stop is closed; it returns what it lent during
// this invocation. Only sized invocations are watched.
func (in *Instance) watch(stop <-chan struct{}, booked int64) (lent <-chan int64) {
	out := make(chan int64, 1)
	go func() {
		var total int64
		defer func() { out <- total }()
		t := time.NewTicker(sizingSample)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			usage, err1 := in.fn.Usage()
			limit, err2 := in.fn.Limit()
			if err1 != nil || err2 != nil {
				return
			}
			if float64(usage) < sizingNear*float64(limit) || limit >= booked {
				continue
			}
			n := in.agent.slack.take(min(max(booked/4, sizingStep), booked-limit))
			if n == 0 {
				continue
			}
			if err := in.box.SetLimit(in.box.Limit() + n); err != nil {
				in.agent.slack.give(n)
				continue
			}
			if err := in.fn.SetLimit(limit + n); err != nil {
				_ = in.box.SetLimit(in.box.Limit() - n)
				in.agent.slack.give(n)
				continue
			}
			in.sz.lent += n
			total += n
			in.agent.m.slackRaises.Inc()
			in.agent.m.slackFree.Set(float64(in.agent.slack.Free()))
			in.agent.log.Info("sizing: lent the function memory from the slack pool", "instance", in.req.ID,
				"usage", bytesize.Format(usage), "limit_from", bytesize.Format(limit), "limit_to", bytesize.Format(limit+n))
		}
	}()
	return out
}

// oomKilled says whether the function's cgroup or the sandbox counted
// more OOM kills than before.
func (in *Instance) oomKills() uint64 {
	n, _ := in.box.OOMKills()
	if in.fn != nil {
		f, _ := in.fn.OOMKills()
		n += f
	}
	return n
}

// peak is the function's peak since size reset it; 0 unknown.
func (in *Instance) peak() int64 {
	if in.fn == nil {
		return 0
	}
	p, err := in.fn.Peak()
	if err != nil {
		return 0
	}
	return p
}
