package bench

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// recordingGetter notes every request in a shared log.
type recordingGetter struct {
	name string
	log  *[]string
	size int64
	err  error
}

func (g recordingGetter) Get(context.Context, string) (int64, error) {
	*g.log = append(*g.log, g.name)
	return g.size, g.err
}

// measureRotated warms every target up first, tells each it is timed
// once all are warm, then takes one request of each per round, the first
// one target further on every round.
func TestMeasureRotated(t *testing.T) {
	var log []string
	var timed []string
	mk := func(name string) target {
		return target{name: name, getter: recordingGetter{name: name, log: &log, size: 10},
			onTimed: func() { timed = append(timed, name+"@"+string(rune('0'+len(log)))) }}
	}
	ts := []target{mk("a"), mk("b"), mk("c")}
	plan := Plan{Warmup: 2, Iterations: 4, MinIterations: 1, TimeCap: time.Hour}
	res, err := measureRotated(t.Context(), ts, "k", 10, plan)
	if err != nil {
		t.Fatal(err)
	}
	want := "a a b b c c a b c b c a c a b a b c"
	if got := strings.Join(log, " "); got != want {
		t.Errorf("requests %q, want %q", got, want)
	}
	// Every onTimed ran after all six warm-up requests.
	if want := []string{"a@6", "b@6", "c@6"}; !slices.Equal(timed, want) {
		t.Errorf("onTimed %v, want %v", timed, want)
	}
	for i, r := range res {
		if r.Name != ts[i].name || r.N != 4 || len(r.SamplesNS) != 4 {
			t.Errorf("result %d: %s with %d samples, want %s with 4", i, r.Name, r.N, ts[i].name)
		}
	}
}

// A target whose answer is short, or fails, fails the run, named.
func TestMeasureRotatedFails(t *testing.T) {
	var log []string
	ok := target{name: "ok", getter: recordingGetter{name: "ok", log: &log, size: 10}}
	short := target{name: "short", getter: recordingGetter{name: "short", log: &log, size: 9}}
	broken := target{name: "broken", getter: recordingGetter{name: "broken", log: &log, size: 10, err: errors.New("boom")}}
	plan := Plan{Warmup: 1, Iterations: 3, MinIterations: 1, TimeCap: time.Hour}
	if _, err := measureRotated(t.Context(), []target{ok, short}, "k", 10, plan); err == nil || !strings.Contains(err.Error(), "short warm-up: read 9 bytes, want 10") {
		t.Errorf("short answer: %v", err)
	}
	if _, err := measureRotated(t.Context(), []target{ok, broken}, "k", 10, plan); err == nil || !strings.Contains(err.Error(), "broken warm-up: boom") {
		t.Errorf("failing target: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := measureRotated(ctx, []target{ok}, "k", 10, Plan{Iterations: 3, MinIterations: 1, TimeCap: time.Hour}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}
