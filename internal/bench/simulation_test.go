package bench

import (
	"context"
	"testing"
)

// TestSimulationExperiment runs the simulated experiment at a tiny scale:
// a valid Result with both figures' curves, a histogram point and the
// pre-warm line at least as good as no pre-warm with the same unload.
func TestSimulationExperiment(t *testing.T) {
	res, err := runSimulationExperiment(context.Background(), Options{Quick: true, Iterations: 30, Sizes: []int64{2}})
	if err != nil {
		t.Fatal(err)
	}
	if err := res.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(res.Plots) != 3 || len(res.Plots[0].Series) != len(simModes) || len(res.Plots[1].Series) != len(simModes) {
		t.Fatalf("plots: %+v", res.Plots)
	}
	curves := res.Plots[0].Series
	for i, s := range curves {
		if len(s.Y) != len(s.X) || len(s.Y) == 0 {
			t.Fatalf("%s: %d points", s.Label, len(s.Y))
		}
		for j := 1; j < len(s.Y); j++ {
			if s.Y[j] < s.Y[j-1]-1 {
				t.Errorf("%s: the improvement falls from %.1f%% to %.1f%% as the cache grows", curves[i].Label, s.Y[j-1], s.Y[j])
			}
		}
	}
	// simModes[0] pre-warms with the unload of simModes[2].
	last := len(curves[0].Y) - 1
	if curves[0].Y[last] < curves[2].Y[last] {
		t.Errorf("pre-warm %.1f%% < no pre-warm %.1f%% at the same unload", curves[0].Y[last], curves[2].Y[last])
	}
	ka := res.Plots[2].Series
	if len(ka) != 2 || len(ka[0].X) != len(simKeepAlives) || len(ka[1].X) != 1 {
		t.Fatalf("keep-alive plot: %+v", ka)
	}
	tables := map[string]Table{}
	for _, tb := range res.Tables {
		tables[tb.ID] = tb
	}
	if p := tables["prediction"]; len(p.Rows) != 1 || p.Rows[0][1] == "0" {
		t.Errorf("prediction table: %+v", p.Rows)
	}
	if x := tables["erasure"]; len(x.Rows) != 1 || x.Rows[0][0] == "0" {
		t.Errorf("erasure table: %+v", x.Rows)
	}
	if sc := tables["scaling"]; len(sc.Rows) != 3 {
		t.Errorf("scaling table: %+v", sc.Rows)
	}
	// The sweep: three rows (none, OFC's, from admission), the sweeps
	// dropping something, the first its own baseline.
	if sw := tables["sweep"]; len(sw.Rows) != 3 || sw.Rows[0][2] != "1.000" || sw.Rows[0][5] != "0" || sw.Rows[1][5] == "0" {
		t.Errorf("sweep table: %+v", sw.Rows)
	}
	for i := 1; i < len(ka[0].X); i++ {
		if ka[0].X[i] < ka[0].X[i-1] || ka[0].Y[i] > ka[0].Y[i-1] {
			t.Errorf("a longer fixed keep-alive should waste more and start colder less: %v, %v", ka[0].X, ka[0].Y)
		}
	}
}
