package writelog

import "github.com/prometheus/client_golang/prometheus"

// metrics are the hoard_writelog_* series.
type metrics struct {
	full prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, l *Log) *metrics {
	m := &metrics{full: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "hoard_writelog_full_waits_total",
		Help: "Appends that waited for room because the records not yet in the store held the log's bound.",
	})}
	if reg == nil {
		return m
	}
	gauge := func(name, help string, f func(Stats) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return f(l.Stats()) })
	}
	counter := func(name, help string, f func(Stats) float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return f(l.Stats()) })
	}
	for _, c := range []prometheus.Collector{
		m.full,
		gauge("hoard_writelog_live_records", "Writes in the durable log not yet in the store.", func(s Stats) float64 { return float64(s.LiveRecords) }),
		gauge("hoard_writelog_live_bytes", "Bytes of the writes in the durable log not yet in the store.", func(s Stats) float64 { return float64(s.LiveBytes) }),
		gauge("hoard_writelog_segments", "Segment files of the durable log on disk.", func(s Stats) float64 { return float64(s.Segments) }),
		counter("hoard_writelog_appends_total", "Writes appended to the durable log and fsynced.", func(s Stats) float64 { return float64(s.Appends) }),
		counter("hoard_writelog_fsyncs_total", "Batches written to the durable log, each with one fsync (group commit).", func(s Stats) float64 { return float64(s.Syncs) }),
		counter("hoard_writelog_torn_total", "Torn frames dropped at the log's end on open (writes never acknowledged).", func(s Stats) float64 { return float64(s.Torn) }),
		counter("hoard_writelog_corrupt_total", "Damaged frames found on open (the rest of their segment is lost).", func(s Stats) float64 { return float64(s.Corrupt) }),
	} {
		if err := reg.Register(c); err != nil {
			if _, dup := err.(prometheus.AlreadyRegisteredError); !dup {
				l.cfg.Logger.Warn("writelog: metric not registered", "err", err)
			}
		}
	}
	return m
}
