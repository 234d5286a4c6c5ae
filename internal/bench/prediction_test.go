package bench

import (
	"context"
	"strings"
	"testing"
)

// TestPredictionExperiment: the experiment runs (it needs nothing outside
// the process), and the model it trains beats the same-run baseline.
func TestPredictionExperiment(t *testing.T) {
	res, err := runPredictionExperiment(context.Background(), Options{Iterations: 300, Quick: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 7 || len(res.Tables) != 1 || len(res.Tables[0].Rows) != 12 {
		t.Fatalf("%d rows, %d tables", len(res.Rows), len(res.Tables))
	}
	for _, r := range res.Rows[:6] {
		if r.Hoard == nil || r.Paper == nil {
			t.Fatalf("%s: no figure", r.Metric)
		}
		if strings.HasPrefix(r.Metric, "exact or over after 1000") && *r.Hoard < 85 {
			t.Errorf("%s: %.1f%%", r.Metric, *r.Hoard)
		}
		if strings.HasPrefix(r.Metric, "exact after 1000") && !strings.Contains(r.Note, "ratio to it") {
			t.Errorf("%s: no baseline in %q", r.Metric, r.Note)
		}
	}
}
