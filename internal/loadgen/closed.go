package loadgen

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/hoard-io/hoard/internal/clock"
)

// Closed-loop load: a fixed number of workers, each sending its next
// request as soon as its last one is answered (one keep-alive connection
// each, for an HTTP client), the way throughput is measured against a
// server. Unlike Runner, nothing is scheduled: the offered load is
// whatever the server answers.

// Op does one operation (a request and its whole answer). Each worker
// calls its own Op, from one goroutine, back to back; it reports failures
// as errors.
type Op func(ctx context.Context) error

// ClosedConfig configures RunClosed.
type ClosedConfig struct {
	// Workers is the number of concurrent workers (connections); at
	// least 1.
	Workers int
	// Warmup runs before the timed window: its operations are not counted.
	// Default 0.
	Warmup time.Duration
	// Duration is the timed window; required.
	Duration time.Duration
	// Clock tells the time; default the real one. Latencies are
	// differences of its Now, so a real clock's monotonic reading.
	Clock clock.Clock
	// Window, when set, is called as the timed window opens (true) and
	// as it closes (false), from a goroutine of the run's, so that what
	// the caller reads at the two calls (a server's CPU time, say)
	// brackets the window. RunClosed returns after the second call; a
	// run that stops early (an error, ctx ending) may skip either.
	Window func(open bool)
}

// ClosedResult is what a closed-loop run measured over its timed window.
type ClosedResult struct {
	Workers int
	// Ops counts the operations that ended inside the timed window.
	Ops     int
	Elapsed time.Duration
	// Rate is Ops per second of Elapsed.
	Rate float64
	// Latency percentiles (nearest rank) of the counted operations.
	P50, P99, Max time.Duration
}

// ErrBadClosedConfig: a ClosedConfig that cannot run.
var ErrBadClosedConfig = errors.New("loadgen: closed-loop config")

// maxLatencySample is the longest latency a sample records (uint32
// nanoseconds); longer ones count as this.
const maxLatencySample = math.MaxUint32

// RunClosed runs cfg.Workers workers, worker i calling ops[i] back to
// back through the warm-up and the timed window, and summarises the
// operations that ended inside the window. The first error of any Op
// stops the run and is returned (with the worker's index); ctx ending
// stops it too. Every worker has ended when it returns.
func RunClosed(ctx context.Context, cfg ClosedConfig, ops []Op) (ClosedResult, error) {
	if cfg.Workers < 1 || cfg.Duration <= 0 || cfg.Warmup < 0 || len(ops) != cfg.Workers {
		return ClosedResult{}, fmt.Errorf("%w: %d workers, %d ops, warm-up %v, duration %v", ErrBadClosedConfig,
			cfg.Workers, len(ops), cfg.Warmup, cfg.Duration)
	}
	clk := clock.Or(cfg.Clock)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := clk.Now()
	from, until := start.Add(cfg.Warmup), start.Add(cfg.Warmup+cfg.Duration)

	// The window's calls are timers set before any worker starts (a fake
	// clock runs them as an operation advances it); the close is set by
	// the open, so it never comes first. A call runs under wmu, and none
	// after the run ended.
	window := make(chan struct{})
	var (
		wmu   sync.Mutex
		ended bool
		timer = func() bool { return false }
	)
	if cfg.Window != nil {
		timer = clk.AfterFunc(cfg.Warmup, func() {
			wmu.Lock()
			defer wmu.Unlock()
			if ended {
				return
			}
			cfg.Window(true)
			timer = clk.AfterFunc(until.Sub(clk.Now()), func() {
				wmu.Lock()
				defer wmu.Unlock()
				if !ended {
					cfg.Window(false)
					close(window)
				}
			})
		})
	} else {
		close(window)
	}
	endWindow := func() {
		wmu.Lock()
		ended = true
		timer()
		wmu.Unlock()
	}

	samples := make([][]uint32, cfg.Workers)
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	for i, op := range ops {
		wg.Go(func() {
			// Samples are kept per worker, preallocated, so the loop
			// allocates nothing of its own while it is timed.
			own := make([]uint32, 0, 4096)
			for ctx.Err() == nil {
				t0 := clk.Now()
				if t0.After(until) {
					break
				}
				err := op(ctx)
				t1 := clk.Now()
				if err != nil {
					if ctx.Err() == nil {
						mu.Lock()
						if first == nil {
							first = fmt.Errorf("worker %d: %w", i, err)
						}
						mu.Unlock()
						cancel()
					}
					break
				}
				if !t1.After(from) || t1.After(until) { // (from, until]
					continue
				}
				own = append(own, uint32(min(t1.Sub(t0), maxLatencySample)))
			}
			samples[i] = own
		})
	}
	wg.Wait()
	if first == nil && ctx.Err() == nil {
		<-window // the workers stop after the window closes: due now
	}
	endWindow()
	if first != nil {
		return ClosedResult{}, first
	}
	if err := ctx.Err(); err != nil && clk.Now().Before(until) {
		return ClosedResult{}, err
	}
	var all []uint32
	for _, s := range samples {
		all = append(all, s...)
	}
	return summarizeClosed(cfg.Workers, cfg.Duration, all), nil
}

// summarizeClosed turns a window's latencies into a ClosedResult.
func summarizeClosed(workers int, window time.Duration, lat []uint32) ClosedResult {
	r := ClosedResult{Workers: workers, Ops: len(lat), Elapsed: window}
	if window > 0 {
		r.Rate = float64(len(lat)) / window.Seconds()
	}
	if len(lat) == 0 {
		return r
	}
	slices.Sort(lat)
	rank := func(q float64) time.Duration {
		i := int(math.Ceil(q*float64(len(lat)))) - 1
		return time.Duration(lat[max(i, 0)])
	}
	r.P50, r.P99, r.Max = rank(0.50), rank(0.99), time.Duration(lat[len(lat)-1])
	return r
}
