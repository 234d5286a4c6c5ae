package agent

import (
	"testing"

	"github.com/hoard-io/hoard/internal/appspec"
)

// TestSlackPool: loans never exceed what is free, and returns never grow
// the pool past its size.
func TestSlackPool(t *testing.T) {
	p := &slackPool{size: 100, free: 100}
	if n := p.take(60); n != 60 || p.Free() != 40 {
		t.Fatalf("take 60: lent %d, %d free", n, p.Free())
	}
	if n := p.take(60); n != 40 || p.Free() != 0 {
		t.Fatalf("take 60 of 40: lent %d, %d free", n, p.Free())
	}
	if n := p.take(10); n != 0 {
		t.Fatalf("an empty pool lent %d", n)
	}
	if n := p.take(-5); n != 0 || p.Free() != 0 {
		t.Fatalf("a negative loan: %d, %d free", n, p.Free())
	}
	p.give(70)
	p.give(70)
	if p.Free() != 100 {
		t.Fatalf("%d free after returns, want the pool's 100", p.Free())
	}
}

// TestSlackReestimated: the pool grows to twice what invocations needed
// beyond their prediction (the largest, with few samples; the 95th
// percentile after), within 1x to 8x the configured size, and a pool
// shrunk under its loans lends nothing until they come back.
func TestSlackReestimated(t *testing.T) {
	const mib = 1 << 20
	p := &slackPool{size: 100 * mib, free: 100 * mib, configured: 100 * mib}
	if got := p.observe(10 * mib); got != 100*mib {
		t.Fatalf("small overshoots: size %d MiB", got/mib)
	}
	if got := p.observe(80 * mib); got != 160*mib || p.Free() != 160*mib {
		t.Fatalf("an 80 MiB overshoot: size %d MiB, %d free", got/mib, p.Free()/mib)
	}
	if got := p.observe(2000 * mib); got != 800*mib {
		t.Fatalf("a huge overshoot: size %d MiB, want the 8x cap", got/mib)
	}
	lent := p.take(700 * mib)
	for range 300 { // the huge one ages out of the window
		p.observe(0)
	}
	if p.size != 100*mib || p.take(1) != 0 {
		t.Fatalf("back to %d MiB with %d MiB out: lent more", p.size/mib, lent/mib)
	}
	p.give(lent)
	if p.Free() != 100*mib {
		t.Fatalf("%d MiB free after the loans came back", p.Free()/mib)
	}
	// One outlier among many is above the 95th percentile.
	for i := range 100 {
		over := int64(0)
		if i == 50 {
			over = 400 * mib
		}
		p.observe(over)
	}
	if p.size != 100*mib {
		t.Errorf("one outlier in 100 moved the size to %d MiB", p.size/mib)
	}
}

// TestCacheShare: the cache gets the booked memory above the function's
// limit; a shared cache only what is left above its own budget.
func TestCacheShare(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		shared              bool
		budget, limit, want int64
	}{
		{false, 32 * mib, 48 * mib, 208 * mib},
		{false, 32 * mib, 300 * mib, 0},
		{true, 100 * mib, 48 * mib, 108 * mib},
		{true, 250 * mib, 48 * mib, 0},
	} {
		in := &Instance{spec: &appspec.Spec{}}
		in.spec.Cache.Shared, in.spec.Cache.Budget = tc.shared, appspec.Size(tc.budget)
		if got := in.cacheShare(256*mib, tc.limit); got != tc.want {
			t.Errorf("%+v: %d MiB, want %d", tc, got/mib, tc.want/mib)
		}
	}
}
