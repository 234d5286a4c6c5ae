package bench

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
)

func TestProcMemory(t *testing.T) {
	rss, err := procMemory(os.Getpid(), "VmRSS")
	if err != nil || rss <= 0 {
		t.Fatalf("VmRSS of this process: %d, %v", rss, err)
	}
	hwm, err := procMemory(os.Getpid(), "VmHWM")
	if err != nil || hwm < rss {
		t.Fatalf("VmHWM %d below VmRSS %d (%v)", hwm, rss, err)
	}
	if _, err := procMemory(os.Getpid(), "NoSuchField"); err == nil {
		t.Error("a missing field read as a size")
	}
}

func TestMemoryConfigDefaults(t *testing.T) {
	var c MemoryConfig
	if err := c.defaults(); err == nil {
		t.Error("no hoard binary accepted")
	}
	c = MemoryConfig{HoardBinary: "hoard"}
	if err := c.defaults(); err != nil || c.Budget != 64<<20 || c.Readers != 12 || c.Writers != 2 ||
		c.WorkingSet != 4*c.Budget || len(c.Variants) != 3 || c.Variants[0].Name != "unbounded" {
		t.Fatalf("defaults %+v, %v", c, err)
	}
	c = MemoryConfig{HoardBinary: "hoard", MinSize: 8 << 20, MaxSize: 1 << 20}
	if err := c.defaults(); err == nil {
		t.Error("sizes the wrong way round accepted")
	}
}

func TestScrape(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("# HELP x y\nhoard_cache_pool_reused_total 42\nreads{outcome=\"hit\"} 3\ngo_gc_duration_seconds_count 7\n"))
	}))
	defer srv.Close()
	m, err := scrape(context.Background(), srv.URL)
	if err != nil || m["hoard_cache_pool_reused_total"] != 42 || m["go_gc_duration_seconds_count"] != 7 || len(m) != 2 {
		t.Fatalf("scraped %v, %v", m, err)
	}
}

// The go test -bench view of `hoard bench memory`, shorter: the serve
// process's peak RSS per variant, in MiB, and the ratio of hoard's to the
// unbounded baseline's. It runs the hoard binary ($HOARD_BIN, or bin/hoard
// at the module root) and MinIO.
func BenchmarkMemory(b *testing.B) {
	bin := benchHoardBinary(b)
	for range b.N {
		rep, err := RunMemory(b.Context(), MemoryConfig{HoardBinary: bin, Ops: 300})
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range rep.Runs {
			b.ReportMetric(float64(r.MaxRSS)/(1<<20), r.Variant.Name+"-maxRSS-MiB")
		}
		first, last := rep.Runs[0], rep.Runs[len(rep.Runs)-1]
		b.ReportMetric(float64(last.MaxRSS)/float64(first.MaxRSS), "hoard/unbounded")
		b.ReportMetric(float64(last.Over(rep.Budget))/(1<<20), "hoard-over-budget-MiB")
	}
}
