package disktier

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	spills       *prometheus.CounterVec
	reads        *prometheus.CounterVec
	removed      *prometheus.CounterVec
	errors       *prometheus.CounterVec
	cleanSeconds prometheus.Histogram
}

func newMetrics(t *Tier, reg prometheus.Registerer) *metrics {
	m := &metrics{
		spills: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hoard_disk_spills_total",
			Help: "Objects offered to the disk tier, by result: written, small (under the minimum size), unfit, known (on disk already), busy (queue or pending bytes full), degraded (memory-only after a disk failure), cancelled (invalidated while written), failed, closed.",
		}, []string{"result"}),
		reads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hoard_disk_reads_total",
			Help: "Lookups in the disk tier, by result: hit (verified), miss, corrupt (checksum or header failed: dropped, served from elsewhere), error.",
		}, []string{"result"}),
		removed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hoard_disk_removed_total",
			Help: "Files removed from the disk tier, by reason: budget, age, invalidated, corrupt.",
		}, []string{"reason"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hoard_disk_errors_total",
			Help: "Disk operations that failed, by op: write (degrades the tier to memory-only for a while), read, remove, scan.",
		}, []string{"op"}),
		cleanSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "hoard_disk_clean_seconds",
			Help:    "Time of the disk tier cleaner's rescans.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 8),
		}),
	}
	for _, r := range []string{"written", "small", "busy", "degraded", "failed"} {
		m.spills.WithLabelValues(r)
	}
	for _, r := range []string{"hit", "miss", "corrupt", "error"} {
		m.reads.WithLabelValues(r)
	}
	for _, r := range []string{"budget", "age", "invalidated", "corrupt"} {
		m.removed.WithLabelValues(r)
	}
	if reg == nil {
		return m
	}
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	reg.MustRegister(m.spills, m.reads, m.removed, m.errors, m.cleanSeconds,
		gauge("hoard_disk_bytes", "Bytes of the disk tier's files, as this process last saw the directory.", func() float64 { return float64(t.Stats().Bytes) }),
		gauge("hoard_disk_objects", "Files in the disk tier, as this process last saw the directory.", func() float64 { return float64(t.Stats().Objects) }),
		gauge("hoard_disk_budget_bytes", "The disk tier's byte budget.", func() float64 { return float64(t.cfg.Budget) }),
		gauge("hoard_disk_degraded", "1 while the disk tier is memory-only after a disk failure, else 0.", func() float64 {
			if t.Stats().Degraded {
				return 1
			}
			return 0
		}),
	)
	return m
}
