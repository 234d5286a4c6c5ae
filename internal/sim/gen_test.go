package sim

import (
	"math"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"
)

func TestGeneratorIsSeeded(t *testing.T) {
	take := func(seed uint64) []Event {
		g, err := NewGenerator(GenConfig{Seed: seed, Apps: 50, MaxEvents: 2000})
		if err != nil {
			t.Fatal(err)
		}
		ev, err := drain(t, g)
		if err != nil {
			t.Fatal(err)
		}
		return ev
	}
	a, b, c := take(1), take(1), take(2)
	if len(a) != 2000 || !reflect.DeepEqual(a, b) {
		t.Fatalf("seed 1 gave %d and %d events, equal %v", len(a), len(b), reflect.DeepEqual(a, b))
	}
	if reflect.DeepEqual(a, c) {
		t.Fatal("seeds 1 and 2 gave the same workload")
	}
}

// The generated workload's statistics are the published ones, within
// stated tolerances (sampling error at these sizes is well inside them).
func TestGeneratorStatistics(t *testing.T) {
	const apps = 4000
	g, err := NewGenerator(GenConfig{Seed: 7, Apps: apps, Duration: 24 * time.Hour, MaxEvents: 300_000})
	if err != nil {
		t.Fatal(err)
	}
	var reads, accesses int
	var last time.Time
	invocations := map[string][]time.Time{}
	for {
		e, err := g.Next()
		if err != nil {
			break
		}
		if e.Time.Before(last) {
			t.Fatalf("event at %s after one at %s", e.Time, last)
		}
		last = e.Time
		switch e.Kind {
		case Invoke:
			if len(invocations[e.App]) < 50 {
				invocations[e.App] = append(invocations[e.App], e.Time)
			}
		case Read:
			reads++
			fallthrough
		case Write:
			accesses++
		}
	}
	within := func(what string, got, want, tol float64) {
		t.Helper()
		t.Logf("%s: %.4f (published %.4f)", what, got, want)
		if math.Abs(got-want) > tol {
			t.Errorf("%s: %.4f, want %.4f ± %.4f", what, got, want, tol)
		}
	}
	within("read share", float64(reads)/float64(accesses), ReadShare, 0.01)

	// Blob sizes at the published quantiles (each distinct blob has one
	// size, so sample them directly too).
	var blobSizes []float64
	for i := range uint64(200_000) {
		blobSizes = append(blobSizes, float64(BlobSize(7, "app", i)))
	}
	for _, q := range BlobSizeQuantiles[1 : len(BlobSizeQuantiles)-1] {
		within("blobs at most "+fmtFloat(q.Value)+" bytes", shareAtMost(blobSizes, q.Value), q.Q, 0.005)
	}
	if m := slices.Max(blobSizes); m > 1.78*(1<<30) {
		t.Errorf("largest blob %v bytes, beyond the trace's largest", m)
	}

	// Applications: frequencies, blob use and regularity.
	var hourly, minute, once, single, periodicApps, lowCoV int
	for _, a := range g.apps {
		if a.gap > time.Hour {
			hourly++
		}
		if a.gap >= time.Minute {
			minute++
		}
		switch a.use {
		case useOnce:
			once++
		case useSingle:
			single++
		}
	}
	within("apps invoked less than hourly", float64(hourly)/apps, shareHourly, 0.03)
	within("apps invoked at most once a minute", float64(minute)/apps, shareMinute, 0.03)
	within("apps reading each blob once", float64(once)/apps, shareReadOnce, 0.03)
	within("apps touching a single blob", float64(single)/apps, shareSingle, 0.02)
	// Measured regularity of the applications seen at least 20 times.
	var measured int
	for _, ts := range invocations {
		if len(ts) < 20 {
			continue
		}
		measured++
		var gaps []float64
		for i := 1; i < len(ts); i++ {
			gaps = append(gaps, ts[i].Sub(ts[i-1]).Seconds())
		}
		cov := stddev(gaps) / mean(gaps)
		if cov < 1e-9 {
			periodicApps++
		}
		if cov < 1 {
			lowCoV++
		}
	}
	t.Logf("%d events, %d applications invoked 20 times or more", accesses, measured)
	if measured < 300 {
		t.Fatalf("only %d applications invoked 20 times", measured)
	}
	within("strictly periodic apps", float64(periodicApps)/float64(measured), sharePeriodic, 0.04)
	within("apps with inter-arrival CoV below 1", float64(lowCoV)/float64(measured), sharePeriodic+shareRegular, 0.08)
}

func shareAtMost(xs []float64, v float64) float64 {
	n := 0
	for _, x := range xs {
		if x <= v {
			n++
		}
	}
	return float64(n) / float64(len(xs))
}

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

func stddev(xs []float64) float64 {
	m, s := mean(xs), 0.0
	for _, x := range xs {
		s += (x - m) * (x - m)
	}
	return math.Sqrt(s / float64(len(xs)))
}

func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
