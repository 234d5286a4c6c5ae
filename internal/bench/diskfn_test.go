package bench

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/api"
)

// diskFnFixture is a case as a healthy run shapes it: the memory-only
// application misses every chunk, the disk-tier one hits the disk, both
// reloads are cold.
func diskFnFixture() diskFnCase {
	miss := map[string]api.ReadCount{"local_miss": {Count: 10, Bytes: 350e6, Nanos: int64(7 * time.Second)}, "local_hit": {Count: 1, Bytes: 100, Nanos: 1000}}
	hit := map[string]api.ReadCount{"disk_hit": {Count: 10, Bytes: 350e6, Nanos: int64(time.Second)}, "local_hit": {Count: 1, Bytes: 100, Nanos: 1000}}
	s := func(exec time.Duration, reads map[string]api.ReadCount, cold bool) diskFnSample {
		return diskFnSample{Total: exec + 10*time.Millisecond, Exec: exec, Cold: cold, Reads: reads}
	}
	return diskFnCase{
		Name: "notebook sum", Data: 350e6, Budget: 112 << 20, Objects: 10, Largest: 35e6,
		Memory:       []diskFnSample{s(8*time.Second, miss, false), s(7*time.Second, miss, false), s(9*time.Second, miss, false)},
		Disk:         []diskFnSample{s(2*time.Second, hit, false), s(3*time.Second, hit, false), s(2500*time.Millisecond, hit, false)},
		MemoryReload: s(9*time.Second, miss, true),
		DiskReload:   s(4*time.Second, hit, true),
	}
}

func TestDiskFunctionsResult(t *testing.T) {
	c := diskFnFixture()
	res := diskFunctionsResult(Options{Quick: true}, "faast (test)", 0.1, 3, []diskFnCase{c}, time.Minute)
	if err := res.Validate(); err != nil {
		t.Fatal(err)
	}
	rows := map[string]Comparison{}
	for _, r := range res.Rows {
		rows[r.Metric] = r
	}
	val := func(metric string) float64 {
		t.Helper()
		r, ok := rows[metric]
		if !ok || r.Hoard == nil {
			t.Fatalf("no figure for %q (rows %v)", metric, res.Rows)
		}
		return *r.Hoard
	}
	// Medians: memory-only 8 s, disk tier 2.5 s.
	if got := val("notebook sum: function time saved by the disk tier (warm, median)"); math.Abs(got-68.75) > 1e-9 {
		t.Errorf("saved %v%%, want 68.75", got)
	}
	if r := rows["notebook sum: function time saved by the disk tier (warm, median)"]; r.Paper == nil || *r.Paper != 62.64 || r.Short {
		t.Errorf("saved row: paper %v short %v; want CacheFlow's 62.64, not short", r.Paper, r.Short)
	}
	if got := val("notebook sum: disk tier / memory-only (warm, median)"); math.Abs(got-2.5/8) > 1e-9 {
		t.Errorf("ratio %v, want %v", got, 2.5/8)
	}
	// Throughput as served: 350 MB per second from disk, per 7 s from the store.
	if got := val("notebook sum: disk hits / store reads, MB/s as served"); math.Abs(got-7) > 1e-9 {
		t.Errorf("throughput ratio %v, want 7", got)
	}
	if r := rows["notebook sum: disk hits / store reads, MB/s as served"]; r.Paper == nil || math.Abs(*r.Paper-573.0/85) > 1e-9 {
		t.Errorf("throughput row's paper figure %v, want 573/85", r.Paper)
	}
	if got := val("notebook sum: reloaded instance, warm from disk / cold (total)"); math.Abs(got-4.01/9.01) > 1e-9 {
		t.Errorf("reload ratio %v, want %v", got, 4.01/9.01)
	}
	if got := val("notebook sum: reloaded, disk tier (warm from disk): function"); got != 4000 {
		t.Errorf("reloaded disk-tier function %v ms, want 4000", got)
	}
	if len(res.Tables) != 1 || len(res.Tables[0].Rows) != 4 {
		t.Fatalf("tables %+v: want one of four rows", res.Tables)
	}
	warm := res.Tables[0].Rows[1]
	if warm[1] != "disk tier, warm" || warm[2] != "3" || warm[4] != "2.500s" || warm[5] != "disk_hit 30, local_hit 3" || warm[6] != "350" || warm[7] != "-" {
		t.Errorf("disk tier's warm row %q", warm)
	}
	if len(res.Plots) != 2 || len(res.Plots[0].Categories) != 1 || *res.Plots[0].Series[1].Values[0] != 2500 {
		t.Errorf("plots %+v", res.Plots)
	}
	if !strings.Contains(res.Rows[0].Note, "0.1 of the full sizes") {
		t.Errorf("a scaled run's note does not say so: %q", res.Rows[0].Note)
	}
}

func TestCheckDiskFunctions(t *testing.T) {
	if err := checkDiskFunctions([]diskFnCase{diskFnFixture()}); err != nil {
		t.Fatalf("a healthy run: %v", err)
	}
	for name, tc := range map[string]struct {
		edit func(*diskFnCase)
		want string
	}{
		"no disk hit warm": {func(c *diskFnCase) { c.Disk = c.Memory }, "served 0.0 MB of its 3 warm rounds from disk, want at least 232.6 MB a round"},
		"too few disk hits warm": {func(c *diskFnCase) {
			for i := range c.Disk { // three chunks of ten a round from disk
				c.Disk[i].Reads = map[string]api.ReadCount{"disk_hit": {Count: 3, Bytes: 105e6}, "local_miss": {Count: 7, Bytes: 245e6}}
			}
		}, "served 315.0 MB of its 3 warm rounds from disk"},
		"no disk hit on reload":    {func(c *diskFnCase) { c.DiskReload = c.MemoryReload }, "reloaded instance with the disk tier served 0.0 MB from disk"},
		"memory-only hit the disk": {func(c *diskFnCase) { c.MemoryReload = c.DiskReload }, "memory-only application served 10 disk hits"},
		"budget held the working set": {func(c *diskFnCase) {
			c.Memory = []diskFnSample{{Reads: map[string]api.ReadCount{"local_hit": {Count: 11}}}}
		}, "missed nothing"},
		"reload on a loaded instance": {func(c *diskFnCase) { c.DiskReload.Cold = false }, "ran on a loaded instance"},
	} {
		c := diskFnFixture()
		tc.edit(&c)
		err := checkDiskFunctions([]diskFnCase{c})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one saying %q", name, err, tc.want)
		}
	}
}

func TestScaledBudget(t *testing.T) {
	for _, tc := range []struct {
		full  int64
		scale float64
		want  int64
	}{{112 << 20, 1, 112 << 20}, {112 << 20, 0.1, 11 << 20}, {72 << 20, 0.1, 7 << 20}, {72 << 20, 0.001, 1 << 20}} {
		if got := scaledBudget(tc.full, tc.scale); got != tc.want {
			t.Errorf("scaledBudget(%d, %g) = %d, want %d", tc.full, tc.scale, got, tc.want)
		}
	}
	// Every object of the quick and the full runs fits the cache's
	// largest (half the budget), and the working set exceeds the budget.
	for _, scale := range []float64{0.1, 0.4, 1} {
		nb, ml := scaledBudget(diskFnNotebookBudget, scale), scaledBudget(diskFnMLBudget, scale)
		if chunk := int64(35e6*scale) + 128; chunk > nb/2 || 10*chunk <= nb {
			t.Errorf("scale %g: a %d-byte chunk against a %d-byte notebook budget", scale, chunk, nb)
		}
		model := int64(35e6*scale*diskFnModelVersions[0]) + 128
		var set int64
		for _, v := range diskFnModelVersions {
			set += int64(35e6 * scale * v)
		}
		if model > ml/2 || set <= ml {
			t.Errorf("scale %g: models of %d bytes, %d together, against a %d-byte budget", scale, model, set, ml)
		}
	}
}
