package agent

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	starts       *prometheus.CounterVec
	startSeconds prometheus.Histogram
	failures     *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		starts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hoard_agent_instance_starts_total", Help: "Instances loaded, by result (ok, error).",
		}, []string{"result"}),
		startSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "hoard_agent_instance_start_seconds", Help: "Time to load an instance: code, sandbox, cachelet joined, worker ready.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 10),
		}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hoard_agent_worker_failures_total", Help: "Invocations whose worker was lost, by cause (timeout, oom, crash).",
		}, []string{"cause"}),
	}
	if reg != nil {
		reg.MustRegister(m.starts, m.startSeconds, m.failures)
	}
	return m
}
