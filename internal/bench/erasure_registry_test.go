package bench

import (
	"math"
	"testing"
)

// The cost model at InfiniCache's scale, worked by hand from the prices:
// an invocation of a 1.5 GB function billed 100 ms costs 0.2e-6 +
// 0.1*1.5*0.00001667 = 2.7005e-6; 400 functions with 72 warm-ups and
// backups an hour and 10,000 reads of 12 shards make 148,800 of them.
func TestRegistryCost(t *testing.T) {
	c := costPerHour(600e9, 400, 10_000, 12, true)
	near := func(got, want float64) bool { return math.Abs(got-want) <= 1e-9*max(1, want) }
	if !near(c.ElastiCache, 10.368) || !near(c.PerUse, 148_800*2.7005e-6) || !near(c.Held, 400*1.5*3600*0.00001667) {
		t.Fatalf("cost %+v", c)
	}
	// Without backups: 60 invocations an hour per instance.
	if n := costPerHour(600e9, 400, 10_000, 12, false); !near(n.PerUse, 144_000*2.7005e-6) {
		t.Fatalf("without backups %+v", n)
	}
	// The trace is seeded, within its bounds and Zipf-skewed: the most
	// popular blob is read far more often than an even share.
	tr := newRegistryTrace(100, 2000)
	counts := map[int]int{}
	for _, i := range tr.reads {
		counts[i]++
	}
	for _, s := range tr.sizes {
		if s < regMinSize || s > regMaxSize {
			t.Fatalf("blob of %d bytes", s)
		}
	}
	if counts[0] < 5*2000/100 || newRegistryTrace(100, 2000).reads[17] != tr.reads[17] {
		t.Fatalf("blob 0 read %d times of 2000", counts[0])
	}
}
