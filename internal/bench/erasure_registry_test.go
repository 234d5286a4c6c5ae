package bench

import (
	"math"
	"slices"
	"testing"
	"time"
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

// The availability and registry reports carry plots of their tables, and
// their results validate as results.json entries.
func TestErasurePlots(t *testing.T) {
	runs := []availRun{
		{interval: 3 * time.Second, reads: 100, hits: 100, computed: 0.01},
		{interval: 3 * time.Second, backups: true, reads: 100, hits: 90, lost: 2, computed: 0.02},
		{interval: 500 * time.Millisecond, reads: 100, hits: 50, lost: 9, computed: 0.5},
		{interval: 500 * time.Millisecond, backups: true, reads: 100, hits: 60, lost: 8, computed: 0.4},
	}
	res := availabilityResult(Options{}, 10, runs, time.Second)
	if err := res.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(res.Plots) != 2 {
		t.Fatalf("%d plots", len(res.Plots))
	}
	hit, lost := res.Plots[0], res.Plots[1]
	if !slices.Equal(hit.Categories, []string{"3s", "500ms"}) || *hit.Series[1].Values[0] != 90 || *hit.Series[0].Values[1] != 50 {
		t.Fatalf("hit-ratio plot %+v", hit)
	}
	if len(lost.Series) != 4 || *lost.Series[2].Values[1] != 8 || *lost.Series[1].Values[1] != 0.5*availObjects {
		t.Fatalf("objects-lost plot %+v", lost)
	}

	reg := registryResult(Options{}, 100, newRegistryTrace(100, 10), 1<<30, []registryRun{
		{target: "redis", reads: 10, hits: 5, seconds: 1, instances: 1, capByte: 1 << 30},
		{target: "hoard", reads: 10, hits: 4, seconds: 1, instances: 12, capByte: 1 << 30},
	}, time.Second)
	if err := reg.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(reg.Plots) != 2 || *reg.Plots[0].Series[0].Values[1] != 40 || len(reg.Plots[1].Categories) != 3 {
		t.Fatalf("registry plots %+v", reg.Plots)
	}
}
