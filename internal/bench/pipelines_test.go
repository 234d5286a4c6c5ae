package bench

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
)

func TestScaledKey(t *testing.T) {
	// The examples' keys: key if scale == 1 else f"x{scale:g}/{key}".
	for scale, want := range map[float64]string{
		1:    "source/video.npy",
		0.25: "x0.25/source/video.npy",
		0.1:  "x0.1/source/video.npy",
		0.05: "x0.05/source/video.npy",
	} {
		if got := scaledKey("source/video.npy", scale); got != want {
			t.Errorf("scaledKey(%g) = %q, want %q", scale, got, want)
		}
	}
	if videoFrames(1) != 160 || videoFrames(0.25) != 40 || videoFrames(0.001) != 4 {
		t.Errorf("videoFrames: %d %d %d", videoFrames(1), videoFrames(0.25), videoFrames(0.001))
	}
	if imageSide(2048, 0.25) != 1024 || imageSide(1536, 1) != 1536 {
		t.Errorf("imageSide: %d %d", imageSide(2048, 0.25), imageSide(1536, 1))
	}
}

func TestSplitNote(t *testing.T) {
	// The full-size video (36.9 MB) is split by the bandwidth policy, the quick one (9.2 MB) is not.
	if n := splitNote(int64(videoFrames(1)) * 240 * 320 * 3); !strings.Contains(n, "36.86 MB video is at least the 16.0 MiB") {
		t.Errorf("full size: %q", n)
	}
	if n := splitNote(int64(videoFrames(0.25)) * 240 * 320 * 3); !strings.Contains(n, "9.22 MB video is under the 16.0 MiB") {
		t.Errorf("quick: %q", n)
	}
}

func TestParseGaugeSum(t *testing.T) {
	page := `# HELP hoard_writeback_depth Background writes queued and not yet settled.
# TYPE hoard_writeback_depth gauge
hoard_writeback_depth 2
hoard_writeback_depth{queue="owner"} 1.5
hoard_writeback_depth_max 40
hoard_writeback_oldest_seconds 0.25
`
	got, err := parseGaugeSum(strings.NewReader(page), "hoard_writeback_depth")
	if err != nil || got != 3.5 {
		t.Errorf("parseGaugeSum = %v, %v; want 3.5", got, err)
	}
	if got, err := parseGaugeSum(strings.NewReader("other 1\n"), "hoard_writeback_depth"); err != nil || got != 0 {
		t.Errorf("absent metric: %v, %v", got, err)
	}
	if _, err := parseGaugeSum(strings.NewReader("hoard_writeback_depth x\n"), "hoard_writeback_depth"); err == nil {
		t.Error("a bad value: no error")
	}
}

func TestMedianF(t *testing.T) {
	if m := medianF([]float64{3, 1, 2}); m != 2 {
		t.Errorf("odd: %v", m)
	}
	if m := medianF([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Errorf("even: %v", m)
	}
	if !math.IsNaN(medianF(nil)) {
		t.Error("none: not NaN")
	}
}

func TestOutputKeys(t *testing.T) {
	for raw, want := range map[string]string{
		`{"output": {"bucket": "videos", "key": "output/r.i420.npy"}, "frames": 8}`:           "output/r.i420.npy",
		`{"outputs": [{"key": "processed/a.jpg"}, {"key": "processed/b.jpg"}], "timing": {}}`: "processed/a.jpg,processed/b.jpg",
		`{"clips": ["tmp/r/clips/clip-000.npy"]}`:                                             "",
		`not json`: "",
	} {
		if got := strings.Join(outputKeys(json.RawMessage(raw)), ","); got != want {
			t.Errorf("outputKeys(%s) = %q, want %q", raw, got, want)
		}
	}
}

// fakeChainMeasure makes three runs per variant of a chain whose stages
// move base[variant][stage] ms each (0.9x, 1x and 1.1x of it: medians are
// base), 40% downloading and 60% uploading.
func fakeChainMeasure(c chainSpec, base map[string][]float64) *chainMeasure {
	m := &chainMeasure{Stages: map[string][]stageMeasure{}, Chain: map[string][]float64{}, Persist: map[string][]float64{}}
	for _, v := range chainVariants {
		m.Stages[v.ID] = make([]stageMeasure, len(c.Stages))
		for _, f := range []float64{0.9, 1, 1.1} {
			total := 0.0
			for i := range c.Stages {
				sm := &m.Stages[v.ID][i]
				b := base[v.ID][i] * f
				sm.Get, sm.Put, sm.Compute = append(sm.Get, 0.4*b), append(sm.Put, 0.6*b), append(sm.Compute, 5)
				sm.GetBytes, sm.PutBytes = 1<<20, 4096
				if !v.Direct {
					sm.Reads = map[string]int64{"local_hit": 3, "remote_miss": 1}
				}
				total += b
			}
			m.Chain[v.ID] = append(m.Chain[v.ID], total)
			m.Persist[v.ID] = append(m.Persist[v.ID], 12)
		}
	}
	return m
}

func TestPipelinesResult(t *testing.T) {
	image, video := pipelineChains[0], pipelineChains[1]
	ms := map[string]*chainMeasure{
		"image": fakeChainMeasure(image, map[string][]float64{
			"vanilla": {70, 30}, "owner": {20, 5}, "strong": {75, 30}, // chain 100 -> 25 (75%), 105 (-5%)
		}),
		"video": fakeChainMeasure(video, map[string][]float64{
			"vanilla": {400, 400, 200}, "owner": {300, 200, 40}, "strong": {420, 400, 200}, // 1000 -> 540 (46%), 1020 (-2%)
		}),
	}
	res := pipelinesResult(Options{Quick: true}, "faast (10ms, 90 MB/s)", 0.25, 3, ms, 20*time.Second)
	if err := res.Validate(); err != nil {
		t.Fatal(err)
	}
	want := []struct {
		metric      string
		paper, got  float64
		short       bool
		sourceCheck string
	}{
		{"image processing chain: data-transfer time reduction, hoard (owner)", 82.55, 75, false, "82.55%"},
		{"image processing chain: data-transfer time reduction, hoard (strong)", 82.55, -5, true, "82.55%"},
		{"video processing chain: data-transfer time reduction, hoard (owner)", 62.64, 46, true, "62.64%"},
		{"video processing chain: data-transfer time reduction, hoard (strong)", 62.64, -2, true, "62.64%"},
		{"video processing: best stage's data-transfer speedup, hoard (owner)", 3.84, 5, false, "3.84x"},
		{"video processing: best stage's data-transfer speedup, hoard (strong)", 3.84, 1, true, "3.84x"},
	}
	if len(res.Rows) != len(want) {
		t.Fatalf("%d rows, want %d: %+v", len(res.Rows), len(want), res.Rows)
	}
	for i, w := range want {
		r := res.Rows[i]
		if r.Metric != w.metric || r.Paper == nil || *r.Paper != w.paper || r.Hoard == nil || math.Abs(*r.Hoard-w.got) > 1e-9 ||
			r.Short != w.short || !strings.Contains(r.Source, w.sourceCheck) || !strings.Contains(r.Source, "CacheFlow §5") {
			t.Errorf("row %d: %+v (hoard %v), want %+v", i, r, deref(r.Hoard), w)
		}
	}
	if !strings.Contains(res.Rows[4].Note, "VM: merge") {
		t.Errorf("best stage: %q", res.Rows[4].Note)
	}

	if len(res.Tables) != 2 {
		t.Fatalf("%d tables", len(res.Tables))
	}
	perStage := res.Tables[0]
	if len(perStage.Rows) != 2+1+3+1 {
		t.Fatalf("per-stage table: %d rows", len(perStage.Rows))
	}
	for i, w := range [][]string{
		{"image processing", "IS: scale (thumbnail)", "70.0", "20.0", "71.4%", "75.0", "-7.1%", "5.0 / 5.0 / 5.0"},
		{"image processing", "whole chain", "100.0", "25.0", "75.0%", "105.0", "-5.0%", ""},
		{"video processing", "VT: transcode x4", "400.0", "200.0", "50.0%", "400.0", "0.0%", "5.0 / 5.0 / 5.0"},
	} {
		row := perStage.Rows[[]int{0, 2, 4}[i]]
		if strings.Join(row, "|") != strings.Join(w, "|") {
			t.Errorf("per-stage row %v, want %v", row, w)
		}
	}
	detail := res.Tables[1]
	if len(detail.Rows) != (2+3)*len(chainVariants) {
		t.Fatalf("detail table: %d rows", len(detail.Rows))
	}
	if got := strings.Join(detail.Rows[0], "|"); got != "image processing|IS: scale (thumbnail)|vanilla (boto3 to the store)|28.0|42.0|5.0|1.05 MB|4.1 KB|none (to the store)" {
		t.Errorf("detail row 0: %s", got)
	}
	if got := detail.Rows[1][8]; got != "local_hit 3, remote_miss 1" {
		t.Errorf("reads: %q", got)
	}

	ids := map[string]Plot{}
	for _, p := range res.Plots {
		ids[p.ID] = p
	}
	if p := ids["video-transfer"]; len(p.Categories) != 4 || len(p.Series) != 3 || *p.Series[1].Values[3] != 540 {
		t.Errorf("video plot: %+v", p)
	}
	if p := ids["chain-reduction"]; len(p.Categories) != 2 || len(p.Series) != 3 || *p.Series[0].Values[1] != 62.64 || *p.Series[1].Values[0] != 75 {
		t.Errorf("reduction plot: %+v", p)
	}
	if !strings.Contains(strings.Join(res.Notes, "\n"), "12.0 ms after its end") {
		t.Errorf("notes: %q", res.Notes)
	}

	var out strings.Builder
	if err := writePipelinesTables(&out, res); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"Data-transfer time per stage", "whole chain", "82.55 %", "75.00 %", "(short)"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("printed tables lack %q:\n%s", s, out.String())
		}
	}
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}
