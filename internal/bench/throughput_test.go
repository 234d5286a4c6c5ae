package bench

import (
	"errors"
	"strings"
	"testing"
)

// The report's ratios are each target over the baselines of its own row,
// and its Result holds a curve per operation and every point.
func TestThroughputReportRatiosAndResult(t *testing.T) {
	rep := &ThroughputReport{
		Settings: ThroughputSettings{Size: 4 << 10, Connections: []int{1, 64}, Ops: []string{OpGet},
			Targets: []string{TPBare, TPBareProc, TPMinIO, TPStrongHot}, Descriptions: map[string]string{}},
		Points: []ThroughputPoint{
			{Op: OpGet, Connections: 1, Target: TPBare, Rate: 10000},
			{Op: OpGet, Connections: 64, Target: TPBareProc, Rate: 30000},
			{Op: OpGet, Connections: 1, Target: TPMinIO, Rate: 1000},
			{Op: OpGet, Connections: 1, Target: TPStrongHot, Rate: 800},
			{Op: OpGet, Connections: 64, Target: TPBare, Rate: 50000},
			{Op: OpGet, Connections: 64, Target: TPMinIO, Rate: 6000},
			{Op: OpGet, Connections: 64, Target: TPStrongHot, Rate: 24000},
		},
	}
	rep.computeRatios()
	hot := rep.point(OpGet, 64, TPStrongHot)
	if hot.VsMinIO == nil || *hot.VsMinIO != 4 || hot.VsBare == nil || *hot.VsBare != 0.48 {
		t.Fatalf("ratios at 64: %v, %v; want 4, 0.48", hot.VsMinIO, hot.VsBare)
	}
	if hot.VsBareProc == nil || *hot.VsBareProc != 0.8 {
		t.Fatalf("ratio to the bare process at 64: %v, want 0.8", hot.VsBareProc)
	}
	if p := rep.point(OpGet, 1, TPStrongHot); *p.VsMinIO != 0.8 || p.VsBareProc != nil {
		t.Errorf("ratios at 1 = %v, %v; want 0.8 and none (no bare process point)", *p.VsMinIO, p.VsBareProc)
	}
	var b strings.Builder
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "24,000") || !strings.Contains(b.String(), "4.00x") || !strings.Contains(b.String(), "x bare-http-proc") || !strings.Contains(b.String(), "0.80x") {
		t.Errorf("table lacks the hot key's figures:\n%s", b.String())
	}
	res := rep.Result()
	res.Experiment = "throughput"
	if err := res.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(res.Plots) != 1 || len(res.Plots[0].Series) != 4 || len(res.Tables[0].Rows) != 7 {
		t.Fatalf("plots %+v, table rows %d", res.Plots, len(res.Tables[0].Rows))
	}
	if s := res.Plots[0].Series[3]; s.Label != TPStrongHot || s.X[1] != 64 || s.Y[1] != 24000 {
		t.Errorf("hot key series %+v", s)
	}
}

func TestThroughputConfigValidate(t *testing.T) {
	for _, cfg := range []ThroughputConfig{
		{Connections: []int{0}},
		{Connections: []int{257}},
		{Ops: []string{"delete"}},
		{Targets: []string{"memcached"}},
		{Size: -1},
	} {
		cfg.MinIOBinary, cfg.HoardBinary = "/bin/true", "/bin/true"
		if _, err := cfg.Validate(); err == nil {
			t.Errorf("%+v: no error", cfg)
		}
	}
	cfg := ThroughputConfig{Quick: true, MinIOBinary: "/bin/true", HoardBinary: "/bin/true", RedisBinary: "/bin/true"}
	if _, err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Connections) != 2 || cfg.Size != DefaultThroughputSize || len(cfg.Targets) != len(ThroughputTargets()) || len(cfg.Ops) != 2 {
		t.Errorf("defaults %+v", cfg)
	}
}

// The bare server's process runs BareBinary, by default the hoard binary;
// without either, the run is refused before anything starts.
func TestThroughputBareBinary(t *testing.T) {
	t.Setenv("HOARD_BIN", "")
	cfg := ThroughputConfig{Targets: []string{TPBareProc}, MinIOBinary: "/bin/true"}
	if _, err := cfg.Validate(); !errors.Is(err, ErrNoHoardBinary) {
		t.Fatalf("no binary: %v, want ErrNoHoardBinary", err)
	}
	cfg = ThroughputConfig{Targets: []string{TPBareProc}, MinIOBinary: "/bin/true", HoardBinary: "/x/hoard"}
	if _, err := cfg.Validate(); err != nil || cfg.BareBinary != "/x/hoard" {
		t.Fatalf("default: %q, %v; want the hoard binary", cfg.BareBinary, err)
	}
	cfg = ThroughputConfig{Targets: []string{TPBareProc}, MinIOBinary: "/bin/true", BareBinary: "/y/hoard"}
	if _, err := cfg.Validate(); err != nil || cfg.BareBinary != "/y/hoard" {
		t.Fatalf("set: %q, %v", cfg.BareBinary, err)
	}
}
