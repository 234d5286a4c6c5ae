package bench

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func result(name string, p50 time.Duration, mbps float64) TargetResult {
	return TargetResult{Name: name, Summary: Summary{N: 100, P50: p50, P99: 2 * p50, MBps: mbps}}
}

func testReport() *Report {
	r := &Report{
		Benchmark: "access",
		Machine:   Machine{NumCPU: 2, MemoryBytes: 4 << 30, GoVersion: "go1.26", Kernel: "6.1"},
		Settings:  Settings{ColdMethod: ColdMethod},
		Sizes: []SizeResult{
			{Size: 4 << 10, Label: "4 KiB", Targets: []TargetResult{
				result(TargetStore, 500*time.Microsecond, 8),
				result(TargetStore304, 96*time.Microsecond, 0),
				result(TargetStoreFwd, 540*time.Microsecond, 7.5),
				result(TargetStore304Fwd, 120*time.Microsecond, 0),
				result(TargetStoreHTTP, 600*time.Microsecond, 6.75),
				result(TargetStore304HTTP, 125*time.Microsecond, 0),
				result(TargetCold, 540*time.Microsecond, 7.5),
				result(TargetWarm, 100*time.Microsecond, 40),
				result(TargetWarmLocal, 25*time.Microsecond, 160),
				result(TargetRedis, 20*time.Microsecond, 200),
				result(TargetTCP, 10*time.Microsecond, 400),
			}},
			{Size: 256 << 20, Label: "256 MiB", Targets: []TargetResult{
				result(TargetStore, 200*time.Millisecond, 1300),
				result(TargetCold, 260*time.Millisecond, 1000),
				result(TargetWarm, 100*time.Millisecond, 2600),
				result(TargetRedis, 250*time.Millisecond, 1000),
				// no warm-local, no tcp
			}},
		},
	}
	for i := range r.Sizes {
		r.Sizes[i].ComputeRatios()
	}
	r.EvaluateChecks()
	return r
}

func approx(t *testing.T, what string, got *float64, want float64) {
	t.Helper()
	if got == nil {
		t.Errorf("%s: nil, want %v", what, want)
		return
	}
	if d := *got - want; d > 1e-9 || d < -1e-9 {
		t.Errorf("%s = %v, want %v", what, *got, want)
	}
}

func TestComputeRatios(t *testing.T) {
	r := testReport()
	x := r.Sizes[0].Ratios
	approx(t, "warm/redis p50", x.WarmRedisP50, 5)
	approx(t, "store/warm p50", x.StoreWarmP50, 5)
	approx(t, "cold/store p50", x.ColdStoreP50, 1.08)
	approx(t, "warm/store-304 p50", x.WarmStore304P50, 100.0/96)
	approx(t, "warm/redis MB/s", x.WarmRedisMBps, 0.2)
	approx(t, "warm/tcp MB/s", x.WarmTCPMBps, 0.1)
	approx(t, "warm-local/redis p50", x.WarmLocalRedisP50, 1.25)
	approx(t, "store/warm-local p50", x.StoreWarmLocalP50, 20)
	approx(t, "store-fwd/store p50", x.FwdStoreP50, 1.08)
	approx(t, "store-304-fwd/store-304 p50", x.Fwd304Store304P50, 1.25)
	approx(t, "cold/store-fwd p50", x.ColdFwdP50, 1)
	approx(t, "warm/store-304-fwd p50", x.WarmFwd304P50, 100.0/120)
	approx(t, "store-http/store p50", x.HTTPStoreP50, 1.2)
	approx(t, "store-304-http/store-304 p50", x.HTTP304Store304P50, 125.0/96)
	approx(t, "cold/store-http p50", x.ColdHTTPP50, 0.9)
	approx(t, "warm/store-304-http p50", x.WarmHTTP304P50, 0.8)
	y := r.Sizes[1].Ratios
	if y.WarmTCPMBps != nil || y.WarmLocalRedisP50 != nil || y.FwdStoreP50 != nil || y.ColdFwdP50 != nil ||
		y.HTTPStoreP50 != nil || y.HTTP304Store304P50 != nil || y.ColdHTTPP50 != nil || y.WarmHTTP304P50 != nil {
		t.Error("ratios with a missing target should be nil")
	}
	approx(t, "256 MiB warm/redis MB/s", y.WarmRedisMBps, 2.6)
}

func TestEvaluateChecks(t *testing.T) {
	r := testReport()
	want := map[string]string{ // name prefix + size -> status
		"warm 4 KiB p50 within 1.5x of Redis|4 KiB":          "short",
		"warm 4 KiB p50 >= 5x faster than MinIO|4 KiB":       "pass", // exactly 5x
		"warm 4 KiB p50 within 5% of a conditional|4 KiB":    "pass", // 1.04x
		"warm 256 MiB throughput >= 2x Redis|256 MiB":        "pass",
		"warm 256 MiB throughput >= 60% of TCP|256 MiB":      "not measured",
		"cold <= 10% slower than MinIO direct|4 KiB":         "pass",
		"cold <= 10% slower than MinIO direct|256 MiB":       "short",
		"under owner, remote hit 4 KiB p50 within 15%|4 KiB": "not measured",
	}
	if len(r.Checks) != len(want) {
		t.Fatalf("%d checks, want %d: %+v", len(r.Checks), len(want), r.Checks)
	}
	for _, c := range r.Checks {
		found := false
		for k, status := range want {
			prefix, size, _ := strings.Cut(k, "|")
			if strings.HasPrefix(c.Name, prefix) && FormatSize(c.Size) == size {
				found = true
				if c.Status() != status {
					t.Errorf("%s at %s: %s, want %s", c.Name, size, c.Status(), status)
				}
			}
		}
		if !found {
			t.Errorf("unexpected check %q at %d", c.Name, c.Size)
		}
	}
	// warm-local is reported next to the 4 KiB checks but never decides them.
	if c := r.Checks[0]; c.Reference == nil || *c.Reference != 1.25 || c.Pass || c.Floor != nil {
		t.Errorf("first check: %+v", c)
	}
	// The forwarders' ratios are set next to the checks against the
	// store where they were measured, and decide nothing either.
	for _, c := range r.Checks {
		var want, wantHTTP *float64
		switch {
		case strings.HasPrefix(c.Name, "warm 4 KiB p50 within 5% of a conditional"):
			want, wantHTTP = r.Sizes[0].Ratios.Fwd304Store304P50, r.Sizes[0].Ratios.HTTP304Store304P50
		case strings.HasPrefix(c.Name, "cold") && c.Size == 4<<10:
			want, wantHTTP = r.Sizes[0].Ratios.FwdStoreP50, r.Sizes[0].Ratios.HTTPStoreP50
		}
		if (want == nil) != (c.Floor == nil) || (want != nil && *want != *c.Floor) {
			t.Errorf("%s at %s: floor %v, want %v", c.Name, FormatSize(c.Size), c.Floor, want)
		}
		if (wantHTTP == nil) != (c.HTTPFloor == nil) || (wantHTTP != nil && *wantHTTP != *c.HTTPFloor) {
			t.Errorf("%s at %s: http floor %v, want %v", c.Name, FormatSize(c.Size), c.HTTPFloor, wantHTTP)
		}
	}
}

func TestEvaluateChecksWithoutSizes(t *testing.T) {
	r := &Report{}
	r.EvaluateChecks()
	for _, c := range r.Checks {
		if c.Status() != "not measured" {
			t.Errorf("%s: %s", c.Name, c.Status())
		}
	}
	if len(r.Checks) != 6 {
		t.Errorf("%d checks, want the six fixed ones", len(r.Checks))
	}
}

func TestWriteTable(t *testing.T) {
	r := testReport()
	r.Notes = []string{"a note"}
	var b bytes.Buffer
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"2 CPUs, 4.0 GiB memory, go1.26, kernel 6.1",
		"cold: before every timed GET",
		"== 4 KiB ==",
		"== 256 MiB ==",
		"warm/redis p50 5.00x",
		"store/warm p50 5.00x faster than store",
		"cold/store p50 1.08x",
		"floor:      store-fwd/store p50 1.08x | store-304-fwd/store-304 p50 1.25x",
		"cold/store-fwd p50 1.00x | warm/store-304-fwd p50 0.83x",
		"http floor: store-http/store p50 1.20x | store-304-http/store-304 p50 1.30x",
		"cold/store-http p50 0.90x | warm/store-304-http p50 0.80x",
		"warm-local/redis p50 1.25x",
		"warm/tcp MB/s -", // 256 MiB has no tcp
		"note: a note",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	// One row per target, with aligned columns: p50 and p99 of the warm row.
	var warmRow string
	for line := range strings.SplitSeq(out, "\n") {
		if f := strings.Fields(line); len(f) == 5 && f[0] == "warm" {
			warmRow = line
			break
		}
	}
	if f := strings.Fields(warmRow); len(f) != 5 || f[1] != "100" || f[2] != "100.0µs" || f[3] != "200.0µs" || f[4] != "40.0" {
		t.Errorf("warm row %q", warmRow)
	}
	for _, line := range []string{"short", "pass", "not measured"} {
		if !strings.Contains(out, line) {
			t.Errorf("targets section lacks %q", line)
		}
	}
}

func TestWriteJSONRoundTrip(t *testing.T) {
	r := testReport()
	r.Sizes[0].Targets[0].SamplesNS = []int64{1, 2, 3}
	var b bytes.Buffer
	if err := r.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back.Machine.NumCPU != 2 || len(back.Sizes) != 2 || back.Sizes[0].Targets[0].P50 != 500*time.Microsecond {
		t.Errorf("round trip lost data: %+v", back)
	}
	if got := back.Sizes[0].Targets[0].SamplesNS; len(got) != 3 {
		t.Errorf("samples %v", got)
	}
	// Field names are part of the file's interface.
	for _, key := range []string{`"p50_ns"`, `"p99_ns"`, `"mb_per_s"`, `"nproc"`, `"samples_ns"`, `"warm_redis_p50"`, `"checks"`} {
		if !strings.Contains(b.String(), key) {
			t.Errorf("JSON lacks %s", key)
		}
	}
}

func TestBoto3Merge(t *testing.T) {
	out, err := parseBoto3([]byte(`{"python":"3.11.2","boto3":"1.43.64","results":{
		"boto3-warm":{"4096":{"warmup":2,"p50_ns":2000,"samples_ns":[3000,1000,2000]}},
		"boto3-store":{"4096":{"warmup":2,"p50_ns":5000,"samples_ns":[5000]},"999":{"samples_ns":[1]}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	r := &Report{Sizes: []SizeResult{{Size: 4096, Label: "4 KiB"}}}
	out.merge(r)
	s := r.Sizes[0]
	if len(s.Targets) != 2 || s.Targets[0].Name != TargetBoto3Store || s.Targets[1].Name != TargetBoto3Warm {
		t.Fatalf("targets %+v", s.Targets)
	}
	if w := s.Target(TargetBoto3Warm); w.P50 != 2000 || w.N != 3 || w.Bytes != 4096 {
		t.Errorf("boto3-warm %+v", w.Summary)
	}
	if r.Machine.Python != "3.11.2 boto3 1.43.64" {
		t.Errorf("python %q", r.Machine.Python)
	}
	if _, err := parseBoto3([]byte("Traceback")); err == nil {
		t.Error("garbage parsed")
	}
}
