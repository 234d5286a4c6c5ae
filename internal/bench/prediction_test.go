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
	if len(res.Rows) != 8 || len(res.Tables) != 2 || len(res.Tables[0].Rows) != 12 || len(res.Tables[1].Rows) != 3 {
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

// TestMediaFeaturesHelpPrediction: a function whose memory follows its
// input's pixels is predicted better with the input's media features
// than with its size alone, on the same invocations.
func TestMediaFeaturesHelpPrediction(t *testing.T) {
	_, scores, err := mediaComparison(500)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{500, 1000} {
		s := scores[n]
		if s[1].exact < s[0].exact+0.1 || s[1].eo <= s[0].eo || s[1].exact < 0.7 {
			t.Errorf("after %d: exact %.2f with media against %.2f without; exact or over %.2f, %.2f", n, s[1].exact, s[0].exact, s[1].eo, s[0].eo)
		}
	}
}
