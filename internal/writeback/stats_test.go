package writeback

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// gather returns the value of each hoard_writeback_* series in reg.
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	vals := make(map[string]float64)
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch {
			case m.GetGauge() != nil:
				vals[mf.GetName()] = m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				vals[mf.GetName()] = m.GetCounter().GetValue()
			}
		}
	}
	return vals
}

func TestStatsAndMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder("a")
		failedOnce := false
		sink := sinkFunc(func(ctx context.Context, w Write) error {
			switch string(w.Data) {
			case "flaky":
				if !failedOnce {
					failedOnce = true
					return errDown
				}
			case "bad":
				return errPerm
			}
			return rec.Persist(ctx, w)
		})
		reg := prometheus.NewPedanticRegistry()
		q := newQueue(t, Config{
			Sink:       sink,
			Workers:    1,
			Registerer: reg,
			Permanent:  func(err error) bool { return errors.Is(err, errPerm) },
		})
		if _, err := New(Config{Sink: sink, Registerer: reg}); err == nil {
			t.Error("a second queue registered the same metrics")
		}

		q.Enqueue(put("a", "a")) // holds the only worker
		synctest.Wait()
		time.Sleep(5 * time.Second)
		q.Enqueue(put("b", "b1"))
		q.Enqueue(put("b", "b2")) // supersedes b1
		q.Enqueue(put("c", "flaky"))
		q.Enqueue(put("d", "bad"))
		s := q.Stats()
		want := Stats{Depth: 4, OldestAge: 5 * time.Second, Superseded: 1}
		if s != want {
			t.Errorf("Stats = %+v, want %+v", s, want)
		}
		m := gather(t, reg)
		for name, v := range map[string]float64{
			"hoard_writeback_depth":            4,
			"hoard_writeback_oldest_seconds":   5,
			"hoard_writeback_superseded_total": 1,
			"hoard_writeback_persisted_total":  0,
		} {
			if m[name] != v {
				t.Errorf("%s = %v, want %v", name, m[name], v)
			}
		}

		rec.release("a")
		if err := q.Drain(context.Background()); err != nil {
			t.Fatal(err)
		}
		s = q.Stats()
		want = Stats{Persisted: 3, Retries: 1, Superseded: 1, Failed: 1}
		if s != want {
			t.Errorf("Stats = %+v, want %+v", s, want)
		}
		m = gather(t, reg)
		for name, v := range map[string]float64{
			"hoard_writeback_depth":            0,
			"hoard_writeback_oldest_seconds":   0,
			"hoard_writeback_persisted_total":  3,
			"hoard_writeback_retries_total":    1,
			"hoard_writeback_superseded_total": 1,
			"hoard_writeback_failed_total":     1,
		} {
			if got, ok := m[name]; !ok || got != v {
				t.Errorf("%s = %v (present %v), want %v", name, got, ok, v)
			}
		}
	})
}
