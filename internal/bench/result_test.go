package bench

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

// fullResults covers every plot kind, a workload and a failed experiment.
func fullResults() *Results {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ok := Result{
		Experiment: "access", Title: "Access types", Status: StatusOK, Quick: true,
		Reproduces: []Reference{refOFCFig7, refFaasTFig9},
		StartedAt:  start, Seconds: 12.5, Machine: Machine{NumCPU: 2, GoVersion: "go1.26"},
		Method: "GETs on loopback",
		Settings: RunSettings{
			ObjectSizes: []int64{1 << 10, 16 << 20}, Link: LinkLoopback,
			Iterations: []Count{{"1 KiB (per target)", 1000}}, Other: []Setting{{"boto3", "true"}},
		},
		Rows: []Comparison{
			Compare("RH/LH p50 at 1 KiB", "x", F(1.1276), F(1.3), LowerIsBetter, 0.02, "OFC §7.2.1", "peer hop"),
			Compare("store/LH p50", "x", F(5.625), nil, HigherIsBetter, 0.05, "OFC §7.2.1", ""),
		},
		Plots: []Plot{
			{Kind: PlotCDF, ID: "cdf-1-kib", Title: "CDF", Unit: "ms", XLog: true, Series: []Series{
				CDFSeries("LH", []int64{3e5, 1e5, 2e5}, time.Millisecond),
			}},
			{Kind: PlotBar, ID: "p50", Title: "p50", Unit: "ms", YLog: true, Categories: []string{"1 KiB", "16 MiB"}, Series: []Series{
				{Label: "LH", Values: []*float64{F(0.5), nil}, Errors: []*float64{F(0.1), nil}},
			}},
			{Kind: PlotCurve, ID: "throughput", Title: "MB/s", XLog: true, Series: []Series{
				{Label: "LH", X: []float64{1024, 16 << 20}, Y: []float64{2, 3000}},
			}},
		},
		Workloads: []CostWorkload{{Name: "read", WarmSeconds: 0.004, ColdSeconds: 0.011, MemoryBytes: DefaultFunctionMemory,
			CacheBytes: 16 << 20, StoreGetsWarm: 1, StoreGetsCold: 1, KeepAliveSeconds: 600}},
		Notes: []string{"a note"},
		Tables: []Table{{ID: "per-size", Title: "Per size", Columns: []string{"size", "p50 ms"},
			Rows: [][]string{{"1 KiB", "0.5"}, {"16 MiB", "4.3"}}, Caption: "medians"}},
	}
	failed := Result{
		Experiment: "consistency", Title: "Consistency", Status: StatusFailed, Error: "bench: MinIO did not start",
		StartedAt: start, Settings: RunSettings{Link: LinkLoopback},
	}
	return &Results{Schema: ResultSchema, Command: "hoard bench all", Quick: true, StartedAt: start, Seconds: 13,
		Experiments: []Result{ok, failed}}
}

func TestResultsJSONRoundTrip(t *testing.T) {
	in := fullResults()
	for _, e := range in.Experiments {
		if err := e.Validate(); err != nil {
			t.Fatalf("fixture invalid: %v", err)
		}
	}
	var buf bytes.Buffer
	if err := in.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	out, err := ReadResults(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip differs:\n in: %+v\nout: %+v", in, out)
	}
	if f := out.Failed(); !reflect.DeepEqual(f, []string{"consistency"}) {
		t.Errorf("Failed() = %v", f)
	}

	// The names the report reads.
	var raw map[string]any
	if err := json.Unmarshal(buf.Bytes(), &raw); err != nil {
		t.Fatal(err)
	}
	exp := raw["experiments"].([]any)[0].(map[string]any)
	for _, k := range []string{"experiment", "title", "reproduces", "status", "settings", "rows", "plots", "workloads", "machine", "duration_s"} {
		if _, ok := exp[k]; !ok {
			t.Errorf("experiment JSON lacks %q", k)
		}
	}
	row := exp["rows"].([]any)[1].(map[string]any)
	if row["hoard"] != nil || row["ratio"] != nil || row["paper"] == nil {
		t.Errorf("a missing figure must be null: %v", row)
	}
	bar := exp["plots"].([]any)[1].(map[string]any)["series"].([]any)[0].(map[string]any)
	if vals := bar["values"].([]any); vals[1] != nil {
		t.Errorf("a missing bar must be null: %v", vals)
	}
	if !strings.Contains(buf.String(), `"error": "bench: MinIO did not start"`) {
		t.Error("the failed experiment's error is not in the JSON")
	}
}

func TestReadResultsSchema(t *testing.T) {
	if _, err := ReadResults(strings.NewReader(`{"schema": 99}`)); err == nil || !strings.Contains(err.Error(), "schema 99") {
		t.Errorf("ReadResults of schema 99: %v", err)
	}
	if _, err := ReadResults(strings.NewReader(`{`)); err == nil {
		t.Error("ReadResults of bad JSON: no error")
	}
}

func TestValidate(t *testing.T) {
	base := func() Result { return fullResults().Experiments[0] }
	tests := []struct {
		name   string
		change func(*Result)
		want   string
	}{
		{"no name", func(r *Result) { r.Experiment = "" }, "without an experiment name"},
		{"failed without error", func(r *Result) { r.Status, r.Error = StatusFailed, "" }, "without an error"},
		{"bad status", func(r *Result) { r.Status = "meh" }, "unknown status"},
		{"bad id", func(r *Result) { r.Plots[0].ID = "CDF 1" }, "plot id"},
		{"duplicate id", func(r *Result) { r.Plots[1].ID = r.Plots[0].ID }, "twice"},
		{"bad kind", func(r *Result) { r.Plots[0].Kind = "pie" }, "unknown kind"},
		{"short bars", func(r *Result) { r.Plots[1].Series[0].Values = r.Plots[1].Series[0].Values[:1] }, "does not fit"},
		{"bad errors", func(r *Result) { r.Plots[1].Series[0].Errors = r.Plots[1].Series[0].Errors[:1] }, "does not fit"},
		{"empty cdf", func(r *Result) { r.Plots[0].Series[0].Samples = nil }, "does not fit"},
		{"uneven curve", func(r *Result) { r.Plots[2].Series[0].Y = r.Plots[2].Series[0].Y[:1] }, "does not fit"},
		{"bad table id", func(r *Result) { r.Tables[0].ID = "Per size" }, "table id"},
		{"duplicate table id", func(r *Result) { r.Tables = append(r.Tables, r.Tables[0]) }, "twice"},
		{"table without columns", func(r *Result) { r.Tables[0].Columns = nil }, "no columns"},
		{"ragged table", func(r *Result) { r.Tables[0].Rows[1] = r.Tables[0].Rows[1][:1] }, "row 1 has 1 cells for 2 columns"},
	}
	for _, tt := range tests {
		r := base()
		tt.change(&r)
		if err := r.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Validate = %v, want %q", tt.name, err, tt.want)
		}
	}
}

func TestCompare(t *testing.T) {
	c := Compare("m", "x", F(2), F(3), LowerIsBetter, 0.1, "s", "n")
	approx(t, "ratio", c.Ratio, 1.5)
	if !c.Short {
		t.Error("3 against 2, lower better: not short")
	}
	if c := Compare("m", "x", F(2), F(2.1), LowerIsBetter, 0.1, "", ""); c.Short {
		t.Error("within tolerance counted short")
	}
	if c := Compare("m", "x", F(2), F(1), HigherIsBetter, 0, "", ""); !c.Short {
		t.Error("1 against 2, higher better: not short")
	}
	if c := Compare("m", "x", F(0), F(5), LowerIsBetter, 0, "", ""); c.Ratio != nil || !c.Short {
		t.Errorf("paper 0: ratio %v (want nil), short %v (want true)", c.Ratio, c.Short)
	}
	if c := Compare("m", "x", nil, F(5), LowerIsBetter, 0, "", ""); c.Ratio != nil || c.Short {
		t.Error("no paper figure: a ratio or a shortfall")
	}
	if c := Compare("m", "x", F(1), F(5), "", 0, "", ""); c.Short {
		t.Error("no direction: short")
	}
	if F(math.NaN()) != nil || F(math.Inf(1)) != nil {
		t.Error("F lets NaN or Inf through")
	}
}

func TestCDFSeries(t *testing.T) {
	small := CDFSeries("a", []int64{3e6, 1e6, 2e6}, time.Millisecond)
	if !reflect.DeepEqual(small.Samples, []float64{1, 2, 3}) || small.N != 3 {
		t.Errorf("small series = %+v", small)
	}
	var many []int64
	for i := range 5000 {
		many = append(many, int64(5000-i))
	}
	s := CDFSeries("b", many, time.Nanosecond)
	if s.N != 5000 || len(s.Samples) != maxCDFPoints {
		t.Fatalf("thinned series: n=%d, %d samples", s.N, len(s.Samples))
	}
	if s.Samples[0] != 1 || s.Samples[len(s.Samples)-1] != 5000 {
		t.Errorf("thinned series keeps min and max: %v .. %v", s.Samples[0], s.Samples[len(s.Samples)-1])
	}
	for i := 1; i < len(s.Samples); i++ {
		if s.Samples[i] < s.Samples[i-1] {
			t.Fatal("thinned series not ascending")
		}
	}
}

func TestAccessResult(t *testing.T) {
	r := testReport() // 4 KiB and 256 MiB; no remote targets
	r.Sizes[0].Target(TargetCold).SamplesNS = []int64{1e5, 2e5}
	res := r.Result()
	if err := res.Validate(); err != nil {
		t.Fatal(err)
	}
	if res.Experiment != "access" || len(res.Reproduces) != 3 || res.Settings.Link != LinkLoopback {
		t.Errorf("result header %+v", res)
	}
	kinds := map[string]int{}
	for _, p := range res.Plots {
		kinds[p.Kind]++
	}
	if kinds[PlotCDF] != 1 || kinds[PlotBar] != 1 || kinds[PlotCurve] != 1 {
		t.Errorf("plots by kind %v, want one CDF (the size with samples), one bar chart, one curve", kinds)
	}
	byMetric := map[string]Comparison{}
	for _, c := range res.Rows {
		if c.Source == "" || c.Unit == "" {
			t.Errorf("row %q without source or unit", c.Metric)
		}
		byMetric[c.Metric] = c
	}
	// OFC's 16 kB row is read at 4 KiB, the nearer measured size: store
	// 500µs / warm 100µs = 5x against the paper's 180/32.
	c, ok := byMetric["store/LH p50 (x faster than the store) at 4 KiB"]
	if !ok {
		t.Fatalf("no store/LH row at 4 KiB; rows: %v", keys(byMetric))
	}
	approx(t, "hoard store/LH", c.Hoard, 5)
	approx(t, "paper store/LH", c.Paper, 180.0/32)
	if !c.Short || !strings.Contains(c.Note, "Short:") {
		t.Errorf("5x against 5.6x is short and says why: %+v", c)
	}
	// AlexNet's 239 MB is read at 256 MiB: store 200ms / warm 100ms = 2x.
	c = byMetric["store/LH p50 (x faster than the store) at 256 MiB"]
	approx(t, "hoard store/LH at 256 MiB", c.Hoard, 2)
	// No remote targets: the RH rows have a paper figure and no hoard one.
	c = byMetric["RH/LH p50 at 4 KiB"]
	if c.Hoard != nil || c.Paper == nil || c.Short {
		t.Errorf("RH/LH without remote targets: %+v", c)
	}
	if len(res.Workloads) != 1 || res.Workloads[0].CacheBytes != 256<<20 || res.Workloads[0].WarmSeconds != 0.1 || res.Workloads[0].ColdSeconds != 0.26 {
		t.Errorf("workload %+v, want the 256 MiB object, warm 100ms, cold 260ms", res.Workloads)
	}
	if !strings.Contains(strings.Join(res.Notes, "\n"), "hoard's own target") {
		t.Error("the checks are not among the notes")
	}
	// The cold 4 KiB check carries both floors; the 256 MiB one, with no
	// forwarder measured there, carries none.
	for _, n := range res.Notes {
		switch {
		case strings.Contains(n, "cold <= 10%") && strings.Contains(n, "at 4 KiB"):
			if !strings.Contains(n, "through a bare TCP forwarder 1.08x, through a bare HTTP proxy 1.20x") {
				t.Errorf("cold 4 KiB note without its floors: %s", n)
			}
		case strings.Contains(n, "cold <= 10%") && strings.Contains(n, "at 256 MiB"):
			if strings.Contains(n, "forwarder") {
				t.Errorf("cold 256 MiB note with floors never measured: %s", n)
			}
		}
	}
}

func keys(m map[string]Comparison) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestConsistencyResult(t *testing.T) {
	r := consistencyReport() // strong, owner, local; 200 increments; local lost 160
	r.Rows[0].SamplesNS = []int64{2e7, 3e7}
	res := r.Result()
	if err := res.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 9 {
		t.Fatalf("%d rows, want 3 per setting", len(res.Rows))
	}
	lost := res.Rows[2] // local
	if lost.Metric != "lost increments per 1,000, local" {
		t.Fatalf("row 2 is %q", lost.Metric)
	}
	approx(t, "local lost, scaled to 1,000", lost.Hoard, 800)
	approx(t, "paper local lost", lost.Paper, 800)
	if lost.Short || lost.Better != "" {
		t.Errorf("a weak setting's losses are by design: %+v", lost)
	}
	if strong := res.Rows[0]; strong.Better != LowerIsBetter || strong.Short || strong.Ratio != nil {
		t.Errorf("strong row %+v", strong)
	}
	if len(res.Plots) != 3 || res.Plots[0].Series[1].Label != "hoard" {
		t.Errorf("plots %+v", res.Plots)
	}
	if w := res.Workloads; len(w) != 1 || w[0].WarmSeconds != 0.02 || w[0].StorePuts != 1 {
		t.Errorf("workload %+v", w)
	}
	// A strong loss shows as a short row.
	r.Rows[1].Lost = 2
	if res := r.Result(); !res.Rows[1].Short {
		t.Error("owner losing increments is not short")
	}
}
