package cachelet

import (
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/clock"
)

// TestClock checks that the cachelet tells time by its Config.Clock: the
// access metadata's times and the mean gap between reads come from it.
func TestClock(t *testing.T) {
	clk := clock.NewFake(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	e := newEnv(t, func(cfg *Config) { cfg.Clock = clk })
	data := object("k", 1, 1000)
	e.storePut("k", data)
	e.mustRead("k", data, LocalMiss)
	clk.Advance(3 * time.Second)
	e.mustRead("k", data, LocalHit)
	md := e.c.AccessMetadata()
	if len(md) != 1 {
		t.Fatalf("access metadata has %d objects, want 1", len(md))
	}
	if want := clk.Now(); !md[0].Last.Equal(want) {
		t.Errorf("last access %v, want the fake clock's %v", md[0].Last, want)
	}
	if md[0].MeanGapMS != 3000 {
		t.Errorf("mean gap %v ms, want 3000 (the fake clock's)", md[0].MeanGapMS)
	}
}
