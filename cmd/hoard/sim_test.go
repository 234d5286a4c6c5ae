package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hoard-io/hoard/internal/sim"
)

func TestSimCommand(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "log.csv")
	if err := os.WriteFile(log, []byte("time,op,key,size\n0,GET,a,10\n1,GET,a,10\n2,PUT,b,5\n3,GET,b,5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.csv")
	if err := os.WriteFile(bad, []byte("time,op,key,size\n0,GET,a,ten\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	records := filepath.Join(dir, "records.json")
	if err := os.WriteFile(records, []byte(`{"version":1,"app":"fn","unloaded_at":"2025-01-01T01:00:00Z","objects":[{"bucket":"b","key":"k","size":9,"lh":3,"lm":1,"mean_gap_ms":1000,"last":"2025-01-01T00:10:00Z"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args    []string
		code    int
		wantOut string
	}{
		{[]string{"sim", "--trace", log, "--format", "access-log", "--cache-sizes", "1KiB"}, 0, "owner-lru   1KiB      3     0.6667"},
		{[]string{"sim", "--generate", "--events", "2000", "--cache-sizes", "1MB", "--policies", "lru,size-aware,ttl:1m"}, 0, "histogram:10m"},
		{[]string{"sim", "--trace", "../../internal/sim/testdata/blob-trace-head.csv", "--keep-alive", ""}, 0, "9 events"},
		{[]string{"sim", "--generate", "--events", "20000", "--cache-sizes", "4MiB", "--prewarm", "--keep-alive", "fixed:1m"}, 0, "pre-warmed"},
		{[]string{"sim", "--generate", "--lifecycle", "--keep-alive", ""}, 2, "lifecycle follows a keep-alive policy"},
		{[]string{"sim", "--generate", "--parallel", "0"}, 2, "--parallel must be at least 1"},
		{[]string{"sim", "--trace", records, "--format", "hoard-records", "--cache-sizes", "1KiB"}, 0, "owner-lru   1KiB      4     0.7500"},
		{[]string{"sim", "--trace", log, "--format", "access-log", "--cache-sizes", "1KiB", "--votes", "1s"}, 0, "0/2/1"},
		{[]string{"sim", "--generate", "--events", "20000", "--cache-sizes", "1MiB", "--keep-alive", "fixed:1m", "--predict"}, 0, "memory prediction: "},
		{[]string{"sim", "--generate", "--events", "5000", "--cache-sizes", "1MiB", "--instances", "6", "--erasure", "4+2", "--erasure-threshold", "1MB", "--loss-rate", "1"}, 0, "erasure coding 4+2 from"},
		{[]string{"sim", "--generate", "--instances", "3", "--erasure", "4+2"}, 2, "needs at least 6 instances"},
		{[]string{"sim", "--generate", "--instances", "6", "--erasure", "4"}, 2, "--erasure"},
		{[]string{"sim", "--generate", "--instances", "6", "--erasure", "4+2", "--loss-rate", "-1"}, 2, "loss rate"},
		{[]string{"sim", "--generate", "--predict", "--slack-pool", "-5MiB"}, 2, "--slack-pool"},
		{[]string{"sim", "--generate", "--events", "20000", "--cache-sizes", "64KiB", "--instances", "2", "--scale", "--max-instances", "4"}, 0, "instances added"},
		{[]string{"sim", "--generate", "--instances", "8", "--scale", "--max-instances", "4"}, 2, "max instances 4"},
		{[]string{"sim"}, 2, "one of --trace FILE and --generate"},
		{[]string{"sim", "--generate", "--cache-sizes", "lots"}, 2, `bad size "lots"`},
		{[]string{"sim", "--generate", "--policies", "fifo"}, 2, "fifo"},
		{[]string{"sim", "--generate", "--keep-alive", "forever"}, 2, "unknown keep-alive policy"},
		{[]string{"sim", "--trace", log, "--format", "parquet"}, 2, "unknown --format"},
		{[]string{"sim", "--trace", filepath.Join(dir, "missing.csv")}, 1, "no such file"},
		{[]string{"sim", "--trace", bad, "--format", "access-log"}, 1, `line 2: size: "ten" is not a byte count`},
		{[]string{"sim", "--trace", log, "--format", "blob"}, 1, `no "timestamp" column`},
	}
	for _, tt := range tests {
		var out, errOut bytes.Buffer
		code := run(context.Background(), tt.args, &out, &errOut)
		all := out.String() + errOut.String()
		if code != tt.code || !strings.Contains(all, tt.wantOut) {
			t.Errorf("hoard %s: exit %d, want %d; output:\n%s\nwant it to contain %q", strings.Join(tt.args, " "), code, tt.code, all, tt.wantOut)
		}
	}
}

func TestSimJSON(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"sim", "--generate", "--events", "1000", "--seed", "3", "--cache-sizes", "4MiB,1GiB", "--json", "-"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var r sim.Report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("%v in %s", err, out.String())
	}
	if r.Events != 1000 || len(r.Caches) != 2 || len(r.KeepAlives) != 2 || r.Caches[1].CacheBytes != 1<<30 {
		t.Fatalf("report: %+v", r)
	}
	if r.Caches[1].HitRatio < r.Caches[0].HitRatio {
		t.Errorf("hit ratio fell with a larger LRU cache: %v < %v", r.Caches[1].HitRatio, r.Caches[0].HitRatio)
	}
}

// The cache configurations replayed side by side report what one replay
// of them all does.
func TestSimParallel(t *testing.T) {
	report := func(parallel string) []byte {
		var out, errOut bytes.Buffer
		args := []string{"sim", "--generate", "--events", "20000", "--seed", "4", "--policies", "lru,size-aware", "--prewarm", "--parallel", parallel, "--json", "-"}
		if code := run(context.Background(), args, &out, &errOut); code != 0 {
			t.Fatalf("--parallel %s: exit %d: %s", parallel, code, errOut.String())
		}
		return out.Bytes()
	}
	if one, five := report("1"), report("5"); !bytes.Equal(one, five) {
		t.Fatalf("--parallel 5 reports\n%s\n--parallel 1\n%s", five, one)
	}
}
