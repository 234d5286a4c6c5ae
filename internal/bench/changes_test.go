package bench

import (
	"testing"
	"time"
)

// A changes report becomes rows that set owner against strong and flag a
// stale strong read.
func TestChangesResult(t *testing.T) {
	rep := &ChangesReport{
		Link: "10ms each way", Size: 4096,
		Delay:  Summarize([]time.Duration{200 * time.Millisecond, 300 * time.Millisecond}, 0),
		Owner:  Summarize([]time.Duration{time.Millisecond}, 4096),
		Strong: Summarize([]time.Duration{20 * time.Millisecond}, 4096),
	}
	res := rep.Result()
	if err := res.Validate(); err != nil {
		t.Fatal(err)
	}
	var ratio, stale *Comparison
	for i, r := range res.Rows {
		switch r.Metric {
		case "hit p50, owner + changes / strong":
			ratio = &res.Rows[i]
		case "strong reads of the older version after a write":
			stale = &res.Rows[i]
		}
	}
	if ratio == nil || *ratio.Hoard != 0.05 || ratio.Short {
		t.Errorf("owner/strong row = %+v, want 0.05 and not short of the trace replay's 0.109", ratio)
	}
	if stale == nil || stale.Short {
		t.Fatalf("strong stale row = %+v", stale)
	}
	rep.StrongStale = 2
	for _, r := range rep.Result().Rows {
		if r.Metric == stale.Metric && !r.Short {
			t.Errorf("2 stale strong reads not flagged short: %+v", r)
		}
	}
}
