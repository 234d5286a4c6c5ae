package agent

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/appspec"
	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/cachelet"
	"github.com/hoard-io/hoard/internal/control"
	"github.com/hoard-io/hoard/internal/store"
	"github.com/hoard-io/hoard/internal/store/memstore"
)

const mib = 1 << 20

// nextBudget: evict to 85% of the limit from 90% on, never below 0; grow
// back a step at a time below 70%, within the spec's budget and 85%.
func TestNextBudget(t *testing.T) {
	const limit = 400 * mib // high 360, target 340, low 280 MiB
	for _, tc := range []struct {
		name                                string
		usage, cache, budget, configured, w int64 // w: the budget wanted, all in MiB
	}{
		{"low, budget whole", 100, 50, 256, 256, 256},
		{"between the marks", 300, 100, 100, 256, 100},
		{"just under high", 359, 200, 256, 256, 256},
		{"at high: back to target", 360, 200, 256, 256, 180},
		{"well over", 390, 200, 256, 256, 150},
		{"counted from what the cache holds", 380, 200, 100, 256, 60},
		{"the cache cannot free enough: 0", 395, 30, 256, 256, 0},
		{"empty cache: 0", 370, 0, 256, 256, 0},
		{"already 0", 399, 0, 0, 256, 0},
		{"over the limit", 420, 100, 256, 256, 20},
		{"raise a step", 100, 50, 50, 256, 114},
		{"raise from 0", 200, 0, 0, 256, 64},
		{"raise capped by the room to target", 279, 0, 0, 256, 61},
		{"raise capped by the spec", 100, 200, 240, 256, 256},
		{"raise never lowers", 270, 10, 100, 256, 100},
		{"small budgets step by 1 MiB", 10, 0, 0, 2, 1},
	} {
		got := nextBudget(tc.usage*mib, limit, tc.cache*mib, tc.budget*mib, tc.configured*mib)
		if got != tc.w*mib {
			t.Errorf("%s: nextBudget(usage %d, cache %d, budget %d, configured %d MiB) = %.2f MiB, want %d",
				tc.name, tc.usage, tc.cache, tc.budget, tc.configured, float64(got)/mib, tc.w)
		}
	}
	if got := nextBudget(100, 0, 50, 70, 80); got != 70 {
		t.Errorf("no limit: %d, want the budget unchanged", got)
	}
	// A non-shared instance (booked 96 MiB + 32 MiB cache) whose function
	// stays within its booking leaves the cache alone.
	if got := nextBudget(110*mib, 128*mib, 32*mib, 32*mib, 32*mib); got != 32*mib {
		t.Errorf("non-shared within booking: %d MiB", got/mib)
	}
}

// daemonEnv is a memory daemon over a real cachelet (asked directly,
// as the control API's handler would) in a modelled sandbox: usage is the
// function's memory plus what the cache holds.
type daemonEnv struct {
	t   *testing.T
	cl  *cachelet.Cachelet
	ctl *directControl
	d   *memoryDaemon
	fn  atomic.Int64 // the function's memory
}

// directControl is a cachelet asked in-process, as the control handler
// does (internal/instance wires the real one; TestControlAPI there
// covers it).
type directControl struct {
	cl   *cachelet.Cachelet
	down atomic.Bool // the cachelet does not answer
}

func (c *directControl) Stats(context.Context) (control.Stats, error) {
	if c.down.Load() {
		return control.Stats{}, control.ErrUnavailable
	}
	n := c.cl.Counters()
	return control.Stats{CacheBytes: n.CacheBytes, BudgetBytes: n.BudgetBytes}, nil
}

func (c *directControl) SetBudget(_ context.Context, n int64) (control.BudgetResult, error) {
	if c.down.Load() {
		return control.BudgetResult{}, control.ErrUnavailable
	}
	freed := c.cl.SetBudget(n)
	s := c.cl.Stats()
	return control.BudgetResult{Budget: s.Budget, Freed: freed, CacheBytes: s.Bytes, ReservedBytes: s.Reserved}, nil
}

func newDaemonEnv(t *testing.T, limit, budget int64, objects int) *daemonEnv {
	t.Helper()
	st := memstore.New()
	ctx := t.Context()
	if err := st.CreateBucket(ctx, "bkt", ""); err != nil {
		t.Fatal(err)
	}
	cl, err := cachelet.New(cachelet.Config{Cache: cache.Config{Budget: budget, MaxObjectSize: 2 * mib}, ReadMode: cachelet.ReadLocal}, st, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	for i := range objects {
		k := fmt.Sprint("o", i)
		if _, err := st.Put(ctx, "bkt", k, bytes.NewReader(make([]byte, mib)), mib, store.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		obj, err := cl.Get(ctx, "bkt", k, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, obj.Body)
		obj.Body.Close()
	}
	for deadline := time.Now().Add(5 * time.Second); cl.Stats().Objects < objects; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("cache fills did not land: %+v", cl.Stats())
		}
	}
	e := &daemonEnv{t: t, cl: cl, ctl: &directControl{cl: cl}}
	in := &Instance{
		agent: &Agent{log: slog.New(slog.DiscardHandler)},
		req:   api.StartRequest{ID: "mem-1"},
		spec:  &appspec.Spec{Name: "mem", Cache: appspec.CacheSpec{Budget: appspec.Size(budget), Shared: true}},
	}
	e.d = &memoryDaemon{
		in:         in,
		usage:      func() (int64, error) { return e.fn.Load() + cl.Stats().Bytes, nil },
		limit:      func() int64 { return limit },
		client:     e.ctl,
		configured: budget, done: make(chan struct{}),
	}
	e.d.info = api.MemoryDaemonInfo{Running: true, Shared: true, ConfiguredBudget: budget, CacheBudget: budget}
	return e
}

func (e *daemonEnv) info() api.MemoryDaemonInfo {
	e.d.mu.Lock()
	defer e.d.mu.Unlock()
	return e.d.info
}

// check runs one sample with the function at fn MiB and checks the
// budget and what the cache holds after, in MiB.
func (e *daemonEnv) check(now time.Time, fn, budget, cached int64) {
	e.t.Helper()
	e.fn.Store(fn * mib)
	if !e.d.check(e.t.Context(), now) {
		e.t.Fatal("check says the sandbox is gone")
	}
	s := e.cl.Stats()
	if info := e.info(); info.CacheBudget != budget*mib || s.Budget != budget*mib || s.Bytes != cached*mib {
		e.t.Fatalf("function at %d MiB: budget %.1f MiB (cachelet: %.1f), cache %.1f MiB; want budget %d, cache %d",
			fn, float64(info.CacheBudget)/mib, float64(s.Budget)/mib, float64(s.Bytes)/mib, budget, cached)
	}
}

// The daemon's decisions applied to a real cachelet: it evicts as the
// function grows, to 0 at most, and grows the budget back in steps once
// usage has stayed low.
func TestMemoryDaemonCheck(t *testing.T) {
	// Limit 100 MiB: high 90, target 85, low 70. Cache: 50 objects of
	// 1 MiB in a budget of 60 MiB.
	e := newDaemonEnv(t, 100*mib, 60*mib, 50)
	now := time.Now()
	e.check(now, 10, 60, 50) // 60%: nothing to do
	e.check(now, 30, 60, 50) // 80%: between the marks
	e.check(now, 40, 45, 45) // 90%: back to 85
	e.check(now, 40, 45, 45) // 85%: done
	e.check(now, 80, 5, 5)   // 125%: the function grew fast
	e.check(now, 95, 0, 0)   // the cache gives all it has
	e.check(now, 99, 0, 0)   // nothing left to give
	if info := e.info(); info.Shrinks != 3 || info.FreedBytes != 50*mib || info.Raises != 0 || info.PeakUsage != 125*mib {
		t.Fatalf("after the shrinks: %+v", info)
	}

	// The function is done: the budget grows back a step (15 MiB) per
	// calm spell of 2 s, as far as 85% allows.
	e.check(now, 10, 0, 0)
	e.check(now.Add(time.Second), 10, 0, 0)
	e.check(now.Add(2*time.Second), 10, 15, 0)
	e.check(now.Add(3*time.Second), 10, 15, 0) // a new spell began at the raise
	e.check(now.Add(4*time.Second), 10, 30, 0)
	e.check(now.Add(5*time.Second), 75, 30, 0) // 75%: not calm
	e.check(now.Add(6*time.Second), 10, 30, 0) // calm again from here
	e.check(now.Add(8*time.Second), 10, 45, 0)
	e.check(now.Add(10*time.Second), 10, 60, 0)
	e.check(now.Add(12*time.Second), 10, 60, 0) // the spec's budget: done
	if info := e.info(); info.Raises != 4 || info.Errors != 0 {
		t.Fatalf("after the raises: %+v", info)
	}
	// The function holding 40 MiB leaves room for 45 MiB only.
	e.check(now.Add(13*time.Second), 95, 0, 0)
	e.check(now.Add(14*time.Second), 40, 0, 0) // 40%: calm from here
	e.check(now.Add(16*time.Second), 40, 15, 0)

	// A cachelet that does not answer costs an error, not a panic, and
	// the daemon goes on.
	e.ctl.down.Store(true)
	e.fn.Store(95 * mib)
	if !e.d.check(t.Context(), now.Add(20*time.Second)) || e.info().Errors != 1 {
		t.Fatalf("with the cachelet gone: %+v", e.info())
	}
}

// The daemon's goroutine samples on its own, shrinks the budget when the
// function grows, and stops when told.
func TestMemoryDaemonRun(t *testing.T) {
	e := newDaemonEnv(t, 100*mib, 60*mib, 40)
	e.fn.Store(70 * mib) // 110%
	ctx, cancel := context.WithCancel(t.Context())
	go e.d.run(ctx)
	deadline := time.Now().Add(5 * time.Second)
	for e.info().Shrinks == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the daemon did not shrink the cache in 5 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	select {
	case <-e.d.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the daemon did not stop")
	}
	if info := e.info(); info.Running || info.CacheBudget != 15*mib || e.cl.Stats().Bytes != 15*mib {
		t.Fatalf("after the run: %+v, cache %+v; want a budget of 15 MiB", info, e.cl.Stats())
	}
}
