package sim

import (
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/cache"
)

// The sweep on the simulated clock (every 60 s, 3 reads): an object read
// too rarely within a period leaves the cache (its next read misses), one
// read often enough stays, and a written object nobody read yet is not
// swept for its read count (marked unread, as the cachelet marks it). The
// bytes held are sampled on the clock.
func TestSweepOnTheSimulatedClock(t *testing.T) {
	rule := cache.SweepRule{MinReads: 3, Idle: 30 * time.Minute, MinAge: time.Minute}
	w := read(5, "written", 10)
	w.Kind = Write
	events := []Event{read(0, "hot", 10), read(1, "rare", 10), w}
	for s := 12; s < 60; s += 10 {
		events = append(events, read(s, "hot", 10)) // 5 hits
	}
	// Sweeps at 60 s (rare spared: 59 s old) and 120 s (rare swept).
	events = append(events, read(125, "hot", 10), read(130, "rare", 10), read(140, "written", 10), read(200, "end", 10))
	cfg := Config{CacheSizes: []int64{1000}, KeepAlives: []KeepAlive{}, HeldEvery: 10 * time.Second}
	off := run(t, cfg, events...).Caches[0]
	cfg.Sweep = &rule
	on := run(t, cfg, events...).Caches[0]
	if off.Outcomes["LH"].Count != 8 || on.Outcomes["LH"].Count != 7 {
		t.Errorf("hits: %d without the sweep, %d with it; want 8 and 7 (rare swept at 120 s, written kept)", off.Outcomes["LH"].Count, on.Outcomes["LH"].Count)
	}
	if off.Swept != 0 || on.Swept != 1 {
		t.Errorf("swept %d without the sweep, %d with it; want 0 and 1", off.Swept, on.Swept)
	}
	if on.MeanHeldBytes <= 0 || off.MeanHeldBytes <= on.MeanHeldBytes {
		t.Errorf("held: off %.1f, on %.1f bytes on average; want less with the sweep", off.MeanHeldBytes, on.MeanHeldBytes)
	}
	bad := cfg
	bad.Sweep = &cache.SweepRule{MinReads: 3}
	if _, err := Run(&SliceSource{Events: events}, bad); err == nil {
		t.Error("a sweep without a period accepted")
	}
}
