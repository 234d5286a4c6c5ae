package prewarm

import (
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/media"
)

var t0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

func TestMergeAndSelect(t *testing.T) {
	records := []Record{
		{App: "ml", UnloadedAt: t0.Add(-30 * time.Minute), Objects: []Object{
			{Bucket: "m", Key: "model", ETag: "v1", Size: 100, LM: 1, Last: t0.Add(-40 * time.Minute),
				Media: &media.Features{Format: "png", Width: 2, Height: 2}},
			{Bucket: "m", Key: "input-1", Size: 5, RM: 1, Last: t0.Add(-40 * time.Minute)},
			{Bucket: "m", Key: "labels", Size: 1, LM: 1, LH: 3, MeanGapMS: 100, Last: t0.Add(-40 * time.Minute)},
		}},
		{App: "ml", UnloadedAt: t0.Add(-10 * time.Minute), Objects: []Object{
			// Read once per load, each time a miss: only the merged history
			// shows it is needed every time.
			{Bucket: "m", Key: "model", ETag: "v2", Size: 120, LM: 1, Last: t0.Add(-20 * time.Minute)},
			{Bucket: "m", Key: "input-2", Size: 5, LM: 1, Last: t0.Add(-20 * time.Minute)},
			{Bucket: "m", Key: "out-1", Size: 7, Out: 1, Last: t0.Add(-20 * time.Minute)},
		}},
		// Outside the window.
		{App: "ml", UnloadedAt: t0.Add(-3 * time.Hour), Objects: []Object{{Bucket: "m", Key: "old", LH: 50, Last: t0.Add(-3 * time.Hour)}}},
	}
	merged := Merge(records, t0, time.Hour)
	got := map[string]Object{}
	for _, o := range merged {
		got[o.Key] = o
	}
	if len(merged) != 5 || got["old"].Key != "" {
		t.Fatalf("merged %d objects: %+v", len(merged), merged)
	}
	if m := got["model"]; m.LM != 2 || m.ETag != "v2" || m.Size != 120 || m.Media != nil {
		t.Errorf("model merged as %+v; want 2 misses, the newest version (without the older one's media)", m)
	}
	sel, err := Select(merged, Config{})
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]string{}
	for _, s := range sel {
		reasons[s.Key] = s.Reason
	}
	want := map[string]string{"labels": "hit-rate", "model": "reads"}
	if len(reasons) != len(want) || reasons["labels"] != want["labels"] || reasons["model"] != want["model"] {
		t.Errorf("selected %v; want %v", reasons, want)
	}
	if sel[0].Key != "labels" { // 4 reads before model's 2
		t.Errorf("order: %s first", sel[0].Key)
	}
	// A byte bound keeps the most read that fit.
	sel, _ = Select(merged, Config{MaxBytes: 50})
	if len(sel) != 1 || sel[0].Key != "labels" {
		t.Errorf("with MaxBytes 50: %+v", sel)
	}
}

func TestWindow(t *testing.T) {
	c := Config{}
	for gap, want := range map[time.Duration]time.Duration{
		0:                   time.Hour,
		time.Minute:         time.Hour,
		time.Hour:           10 * time.Hour,
		48 * time.Hour:      7 * 24 * time.Hour,
		30 * time.Minute:    5 * time.Hour,
		90 * time.Second:    time.Hour,
		3 * 24 * time.Hour:  7 * 24 * time.Hour,
		12 * time.Hour:      5 * 24 * time.Hour,
		100 * time.Minute:   1000 * time.Minute,
		6 * time.Minute:     time.Hour,
		7 * time.Minute:     70 * time.Minute,
		-1 * time.Minute:    time.Hour,
		1000 * time.Hour:    7 * 24 * time.Hour,
		1 * time.Nanosecond: time.Hour,
	} {
		if got := c.Window(gap); got != want {
			t.Errorf("Window(%s) = %s; want %s", gap, got, want)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []Config{{HitRate: 2}, {MinReads: -1}, {MinWindow: 2 * time.Hour, MaxWindow: time.Hour}, {MaxBytes: -1}} {
		if _, err := Select(nil, c); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}
