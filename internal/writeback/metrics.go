package writeback

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// registerMetrics registers q's series with reg. Names are part of the
// product's interface: dashboards and alerts read them.
func registerMetrics(reg prometheus.Registerer, q *Queue) error {
	gauge := func(name, help string, f func(Stats) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help},
			func() float64 { return f(q.Stats()) })
	}
	counter := func(name, help string, f func(Stats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(f(q.Stats())) })
	}
	cs := []prometheus.Collector{
		gauge("hoard_writeback_depth", "Background writes queued and not yet settled, including those being persisted or retried.",
			func(s Stats) float64 { return float64(s.Depth) }),
		gauge("hoard_writeback_oldest_seconds", "Age of the oldest unsettled background write; 0 when the queue is empty.",
			func(s Stats) float64 { return s.OldestAge.Seconds() }),
		counter("hoard_writeback_persisted_total", "Background writes persisted.",
			func(s Stats) uint64 { return s.Persisted }),
		counter("hoard_writeback_retries_total", "Failed background write attempts that were retried.",
			func(s Stats) uint64 { return s.Retries }),
		counter("hoard_writeback_superseded_total", "Queued background writes replaced by a later write of the same key before they started.",
			func(s Stats) uint64 { return s.Superseded }),
		counter("hoard_writeback_failed_total", "Background writes that failed permanently or were given up on at close.",
			func(s Stats) uint64 { return s.Failed }),
	}
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, r := range cs[:i] {
				reg.Unregister(r)
			}
			return fmt.Errorf("writeback: register metrics: %w", err)
		}
	}
	return nil
}
