package loadgen

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func TestSummarizePercentiles(t *testing.T) {
	// Latencies 1..100 ms, shuffled, plus a failure to send (left out of
	// the percentiles) and two function errors (kept in).
	var results []Result
	for i := 1; i <= 100; i++ {
		results = append(results, Result{Target: fn, Scheduled: time.Duration(i) * 10 * time.Millisecond,
			Start:   time.Duration(i)*10*time.Millisecond + time.Duration(i)*time.Microsecond,
			Latency: time.Duration(i) * time.Millisecond, Sent: true, OK: true})
	}
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(results), func(i, j int) { results[i], results[j] = results[j], results[i] })
	results[0].OK, results[0].ErrorType = false, "Timeout"
	results[1].OK, results[1].ErrorType = false, "Timeout"
	results[2].Cold, results[3].Cold = true, true
	results = append(results, Result{Target: fn, Scheduled: 2 * time.Second, Start: 2 * time.Second, Latency: time.Hour, ErrorType: "send"})

	total, targets := Summarize(results)
	if len(targets) != 1 || targets[0].Target != fn {
		t.Fatalf("targets %+v", targets)
	}
	s := targets[0]
	if s.P50 != 50*time.Millisecond || s.P90 != 90*time.Millisecond || s.P99 != 99*time.Millisecond || s.Max != 100*time.Millisecond {
		t.Errorf("p50 %v p90 %v p99 %v max %v, want 50, 90, 99, 100 ms", s.P50, s.P90, s.P99, s.Max)
	}
	if s.Invocations != 101 || s.Sent != 100 || s.FunctionErrors != 2 || s.SendErrors != 1 || s.Errors() != 3 || s.Cold != 2 ||
		s.ErrorTypes["Timeout"] != 2 || s.ErrorTypes["send"] != 1 {
		t.Errorf("counts %+v", s)
	}
	// Lateness: i µs for the i-th, 0 for the last: 101 samples.
	if s.LatenessP50 != 50*time.Microsecond || s.LatenessP99 != 99*time.Microsecond || s.LatenessMax != 100*time.Microsecond {
		t.Errorf("lateness p50 %v p99 %v max %v", s.LatenessP50, s.LatenessP99, s.LatenessMax)
	}
	// 101 arrivals scheduled from 10 ms to 2 s: 100 gaps in 1.99 s; sent
	// from 10.001 ms.
	if want := 100 / 1.99; math.Abs(s.IntendedRate-want) > 1e-9 {
		t.Errorf("intended rate %v, want %v", s.IntendedRate, want)
	}
	if want := 100 / 1.989999; math.Abs(s.AchievedRate-want) > 1e-9 {
		t.Errorf("achieved rate %v, want %v", s.AchievedRate, want)
	}
	total.Target = fn
	if b1, b2 := mustJSON(t, total), mustJSON(t, s); b1 != b2 {
		t.Errorf("the total of one target differs from it:\n%s\n%s", b1, b2)
	}
}

func TestSummarizeSmall(t *testing.T) {
	// A single sample is every percentile; rates need two.
	total, _ := Summarize([]Result{{Target: fn, Latency: 7 * time.Millisecond, Sent: true, OK: true}})
	if total.P50 != 7*time.Millisecond || total.P99 != 7*time.Millisecond || total.Max != 7*time.Millisecond ||
		total.IntendedRate != 0 || total.AchievedRate != 0 || total.ErrorTypes != nil {
		t.Errorf("summary %+v", total)
	}
	total, targets := Summarize(nil)
	if total.Invocations != 0 || total.P99 != 0 || len(targets) != 0 {
		t.Errorf("summary of nothing: %+v %+v", total, targets)
	}
	// Two percentiles of 10 samples by nearest rank.
	var rs []Result
	for i := 1; i <= 10; i++ {
		rs = append(rs, Result{Target: fn, Latency: time.Duration(i), Sent: true, OK: true})
	}
	total, _ = Summarize(rs)
	if total.P50 != 5 || total.P90 != 9 || total.P99 != 10 {
		t.Errorf("p50 %d p90 %d p99 %d of 1..10, want 5, 9, 10", total.P50, total.P90, total.P99)
	}
}

func TestSummarizeOrdersTargets(t *testing.T) {
	ts := []Target{{"b", "x", false}, {"a", "y", false}, {"a", "x", true}, {"a", "x", false}}
	var rs []Result
	for _, tg := range ts {
		rs = append(rs, Result{Target: tg, Sent: true, OK: true})
	}
	_, targets := Summarize(rs)
	var got []string
	for _, s := range targets {
		got = append(got, s.Target.String())
	}
	if want := "a/x, a/x (pipeline), a/y, b/x"; strings.Join(got, ", ") != want {
		t.Errorf("order %s, want %s", strings.Join(got, ", "), want)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
