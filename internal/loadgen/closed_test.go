package loadgen

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/clock"
)

// One worker whose operations take 1 ms (and then 3 ms, every tenth) on a
// fake clock: the warm-up's are not counted, the window's are, exactly.
func TestRunClosedCountsTheWindow(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	var n atomic.Int64
	op := func(context.Context) error {
		d := time.Millisecond
		if n.Add(1)%10 == 0 {
			d = 3 * time.Millisecond
		}
		clk.Advance(d)
		return nil
	}
	res, err := RunClosed(t.Context(), ClosedConfig{Workers: 1, Warmup: 12 * time.Millisecond, Duration: 120 * time.Millisecond, Clock: clk}, []Op{op})
	if err != nil {
		t.Fatal(err)
	}
	// Every 10 operations take 12 ms: the warm-up is the first 10, the
	// window the next 100 (ending at 132 ms).
	if res.Ops != 100 {
		t.Errorf("Ops = %d, want 100", res.Ops)
	}
	if res.Rate != 100/0.120 {
		t.Errorf("Rate = %v, want %v", res.Rate, 100/0.120)
	}
	if res.P50 != time.Millisecond || res.P99 != 3*time.Millisecond || res.Max != 3*time.Millisecond {
		t.Errorf("p50 %v, p99 %v, max %v; want 1ms, 3ms, 3ms", res.P50, res.P99, res.Max)
	}
}

// The first failing operation stops every worker and is returned.
func TestRunClosedStopsOnError(t *testing.T) {
	boom := errors.New("boom")
	var calls atomic.Int64
	mk := func(fail bool) Op {
		return func(ctx context.Context) error {
			if calls.Add(1) > 50 && fail {
				return boom
			}
			return ctx.Err()
		}
	}
	_, err := RunClosed(t.Context(), ClosedConfig{Workers: 3, Duration: time.Hour}, []Op{mk(false), mk(true), mk(false)})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
}

func TestRunClosedConfig(t *testing.T) {
	op := func(context.Context) error { return nil }
	for _, cfg := range []ClosedConfig{
		{Workers: 0, Duration: time.Second},
		{Workers: 2, Duration: time.Second}, // one op for two workers
		{Workers: 1},
	} {
		if _, err := RunClosed(t.Context(), cfg, []Op{op}); !errors.Is(err, ErrBadClosedConfig) {
			t.Errorf("%+v: err = %v, want ErrBadClosedConfig", cfg, err)
		}
	}
}

// Window is called as the timed window opens and closes, in that order,
// before RunClosed returns, and not before the clock got there.
func TestRunClosedWindow(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	var n atomic.Int64
	op := func(context.Context) error {
		n.Add(1)
		clk.Advance(time.Millisecond)
		return nil
	}
	type call struct {
		open bool
		ops  int64
	}
	var calls []call
	res, err := RunClosed(t.Context(), ClosedConfig{Workers: 1, Warmup: 10 * time.Millisecond, Duration: 100 * time.Millisecond, Clock: clk,
		Window: func(open bool) { calls = append(calls, call{open, n.Load()}) }}, []Op{op})
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != 2 || !calls[0].open || calls[1].open {
		t.Fatalf("Window calls %+v, want open then close", calls)
	}
	if calls[0].ops < 10 || calls[1].ops < 110 {
		t.Errorf("Window opened after %d ops and closed after %d: want the clock at 10 ms and 110 ms first", calls[0].ops, calls[1].ops)
	}
	if res.Ops != 100 {
		t.Errorf("Ops = %d, want 100", res.Ops)
	}
}
