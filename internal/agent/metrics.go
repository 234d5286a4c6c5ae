package agent

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	starts       *prometheus.CounterVec
	startSeconds prometheus.Histogram
	failures     *prometheus.CounterVec
	// sizing (sizing.go)
	sized       *prometheus.CounterVec
	cacheGiven  prometheus.Counter
	slackRaises prometheus.Counter
	slackFree   prometheus.Gauge
	slackSize   prometheus.Gauge
	oomRetries  prometheus.Counter
	// resizeSeconds: the time of a resize before an invocation (the
	// function's cgroup and the cache's budget).
	resizeSeconds prometheus.Histogram
	// drains: attempts to drain a dead instance's durable log (durable.go).
	drains *prometheus.CounterVec
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
		sized: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hoard_agent_invocations_sized_total", Help: "Invocations by how the function's memory was sized: predicted (a mature model's size) or booked.",
		}, []string{"size"}),
		cacheGiven: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hoard_agent_cache_given_bytes_total", Help: "Booked memory above the predicted size given to instances' caches, summed over sized invocations.",
		}),
		slackRaises: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hoard_agent_slack_raises_total", Help: "Running invocations whose limit was raised from the node's slack pool as they neared it.",
		}),
		slackFree: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hoard_agent_slack_free_bytes", Help: "What the node's slack pool can lend now.",
		}),
		slackSize: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hoard_agent_slack_size_bytes", Help: "The node's slack pool's size, re-estimated from what sized invocations needed beyond their prediction.",
		}),
		oomRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hoard_agent_oom_retries_total", Help: "Invocations killed for memory under a predicted size and run again at the booked size.",
		}),
		resizeSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "hoard_agent_resize_seconds", Help: "Time to resize a function's cgroup and its instance's cache budget before an invocation, when they changed.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 14),
		}),
		drains: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hoard_agent_log_drains_total", Help: "Drains of a dead instance's durable log (durable_writes: on), by result: ok, failed (retried within bounds), adopted (a new instance took the log over before a retry).",
		}, []string{"result"}),
	}
	if reg != nil {
		reg.MustRegister(m.resizeSeconds, m.slackSize, m.drains)
		reg.MustRegister(m.starts, m.startSeconds, m.failures, m.sized, m.cacheGiven, m.slackRaises, m.slackFree, m.oomRetries)
	}
	return m
}
