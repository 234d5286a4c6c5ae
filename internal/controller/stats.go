package controller

import (
	"sort"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hoard-io/hoard/internal/api"
)

// maxRecords is how many invocation records each application keeps
// (for `hoard logs`); maxSamples how many latencies per function its
// percentiles are computed over.
const (
	maxRecords = 1000
	maxSamples = 10000
)

// funcStats accumulates one function's invocations.
type funcStats struct {
	n, errors, cold int64
	samples         []float64 // total latency, ms; the most recent maxSamples
	next            int
	reads           map[string]api.ReadCount
}

// record keeps an invocation's record and updates the statistics and
// metrics.
func (c *Controller) record(a *app, r *api.Invocation) {
	result := "ok"
	if !r.OK {
		result = "error"
	}
	start := "warm"
	if r.Cold {
		start = "cold"
	}
	c.m.invocations.WithLabelValues(a.rec.Name, r.Function, start, result).Inc()
	c.m.seconds.WithLabelValues(a.rec.Name, r.Function).Observe(r.TotalMS / 1e3)
	for access, rc := range r.Reads {
		c.m.readBytes.WithLabelValues(a.rec.Name, r.Function, access).Add(float64(rc.Bytes))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	a.records = append(a.records, r)
	if len(a.records) > maxRecords {
		a.records = append(a.records[:0:0], a.records[len(a.records)-maxRecords:]...)
	}
	fs := a.fstats[r.Function]
	if fs == nil {
		fs = &funcStats{reads: map[string]api.ReadCount{}}
		a.fstats[r.Function] = fs
	}
	fs.n++
	if !r.OK {
		fs.errors++
	}
	if r.Cold {
		fs.cold++
	}
	if len(fs.samples) < maxSamples {
		fs.samples = append(fs.samples, r.TotalMS)
	} else {
		fs.samples[fs.next] = r.TotalMS
		fs.next = (fs.next + 1) % maxSamples
	}
	for access, rc := range r.Reads {
		t := fs.reads[access]
		t.Count += rc.Count
		t.Bytes += rc.Bytes
		fs.reads[access] = t
	}
}

// Stats summarises an application's invocations per function.
func (c *Controller) Stats(appName string) (map[string]api.FuncStats, error) {
	a, err := c.app(appName)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]api.FuncStats{}
	for name, fs := range a.fstats {
		s := append([]float64(nil), fs.samples...)
		sort.Float64s(s)
		reads := map[string]api.ReadCount{}
		for k, v := range fs.reads {
			reads[k] = v
		}
		out[name] = api.FuncStats{Invocations: fs.n, Errors: fs.errors, ColdStarts: fs.cold,
			P50MS: quantile(s, 0.50), P99MS: quantile(s, 0.99), Reads: reads, Model: c.modelInfo(a.rec.Name, name),
			Admission: a.admissionInfo(name)}
	}
	return out, nil
}

// quantile of sorted samples (nearest rank).
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// Logs returns an application's most recent invocations, newest last,
// optionally of one function or only failed ones.
func (c *Controller) Logs(appName, function string, n int, onlyErrors bool) ([]*api.Invocation, error) {
	a, err := c.app(appName)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*api.Invocation
	for i := len(a.records) - 1; i >= 0 && len(out) < n; i-- {
		r := a.records[i]
		if (function == "" || r.Function == function) && (!onlyErrors || !r.OK) {
			out = append(out, r)
		}
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, nil
}

type metrics struct {
	invocations      *prometheus.CounterVec
	seconds          *prometheus.HistogramVec
	readBytes        *prometheus.CounterVec
	coldStarts       *prometheus.CounterVec
	coldStartSeconds *prometheus.HistogramVec
	unloads          *prometheus.CounterVec
	triggers         *prometheus.CounterVec
	pipelines        *prometheus.CounterVec
	dropped          *prometheus.CounterVec
	prewarms         *prometheus.CounterVec
	prewarmObjects   *prometheus.CounterVec
	preloads         *prometheus.CounterVec
	votes            *prometheus.CounterVec
	decisions        *prometheus.CounterVec
	// memory prediction (memory.go)
	predictions  *prometheus.CounterVec
	oomRetries   *prometheus.CounterVec
	cacheGiven   *prometheus.CounterVec
	modelMature  *prometheus.GaugeVec
	trainSeconds prometheus.Histogram
	routes       *prometheus.CounterVec
	admissionMetrics
}

func newMetrics(reg prometheus.Registerer, c *Controller) *metrics {
	m := &metrics{
		invocations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hoard_invocations_total",
			Help: "Invocations by application, function, start (cold, warm) and result (ok, error)."}, []string{"app", "function", "start", "result"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "hoard_invocation_seconds",
			Help:    "api.Invocation latency as callers see it (queueing and cold starts included).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 18)}, []string{"app", "function"}),
		readBytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hoard_invocation_read_bytes_total",
			Help: "Bytes functions read through their cachelet, by access type (local_hit, local_miss, remote_hit, remote_miss, pass_through, disk_hit)."},
			[]string{"app", "function", "access"}),
		coldStarts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hoard_instance_starts_total",
			Help: "Instances started (cold starts), by result."}, []string{"app", "result"}),
		coldStartSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "hoard_instance_start_seconds",
			Help: "Time to start an instance.", Buckets: prometheus.ExponentialBuckets(0.05, 2, 10)}, []string{"app"}),
		unloads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hoard_instance_unloads_total",
			Help: "Instances unloaded by keep-alive or redeploys."}, []string{"app"}),
		triggers: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hoard_trigger_firings_total",
			Help: "Triggers fired, by kind (http, object) and source of the event (cachelet, store, http)."}, []string{"app", "kind", "source"}),
		pipelines: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hoard_pipeline_runs_total",
			Help: "Pipeline runs by result."}, []string{"app", "pipeline", "result"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hoard_pipeline_intermediate_dropped_total",
			Help: "Intermediate objects dropped from cachelets when pipeline runs ended."}, []string{"app"}),
		prewarms: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hoard_prewarms_total",
			Help: "Pre-warms started (an instance pre-loaded and filled from access history)."}, []string{"app"}),
		votes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hoard_scale_votes_total",
			Help: "Scale controller votes by policy (compute, cache, bandwidth, external) and direction (out, in, hold)."}, []string{"app", "policy", "direction"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hoard_scale_decisions_total",
			Help: "Scale decisions applied, by direction."}, []string{"app", "direction"}),
		preloads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hoard_preloads_total",
			Help: "Pre-loads scheduled by the keep-alive policy (hybrid histogram) ahead of an expected invocation."}, []string{"app"}),
		prewarmObjects: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hoard_prewarm_selected_objects_total",
			Help: "Objects selected for pre-warming."}, []string{"app"}),
		predictions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hoard_memory_predictions_total",
			Help: "Invocations by how their measured peak compares with the memory model's prediction: exact, over, under, or unsized (no mature prediction)."},
			[]string{"app", "function", "outcome"}),
		oomRetries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hoard_memory_oom_retries_total",
			Help: "Invocations killed for memory under their predicted size and run again at the booked size."}, []string{"app", "function"}),
		cacheGiven: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hoard_memory_cache_given_bytes_total",
			Help: "Booked memory above the predicted size given to caches, summed over invocations."}, []string{"app", "function"}),
		modelMature: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "hoard_memory_model_mature",
			Help: "1 when the function's memory model is mature (its predictions size invocations), else 0."}, []string{"app", "function"}),
		trainSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "hoard_memory_model_train_seconds",
			Help: "Time to retrain one function's memory model.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 12)}),
	}
	m.routes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hoard_route_decisions_total",
		Help: "Instances chosen for invocations, by reason: owner (idle, its cachelet owns the input), owner-node (idle, on the owner's node), warm (the most recently used idle one), started, queued."},
		[]string{"app", "reason"})
	m.admissionMetrics = newAdmissionMetrics()
	if reg != nil {
		reg.MustRegister(m.admitting, m.dataShare, m.admissionChanges, m.notAdmitted)
		reg.MustRegister(m.routes)
		reg.MustRegister(m.predictions, m.oomRetries, m.cacheGiven, m.modelMature, m.trainSeconds)
		reg.MustRegister(m.prewarms, m.prewarmObjects, m.preloads, m.votes, m.decisions)
		reg.MustRegister(m.invocations, m.seconds, m.readBytes, m.coldStarts, m.coldStartSeconds, m.unloads, m.triggers, m.pipelines, m.dropped,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "hoard_instances", Help: "Instances loaded, all applications."}, func() float64 {
				c.mu.Lock()
				defer c.mu.Unlock()
				n := 0
				for _, a := range c.apps {
					n += len(a.instances)
				}
				return float64(n)
			}),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "hoard_invocations_queued", Help: "Invocations waiting for an instance, all applications."}, func() float64 {
				c.mu.Lock()
				defer c.mu.Unlock()
				n := 0
				for _, a := range c.apps {
					n += len(a.waiters)
				}
				return float64(n)
			}))
	}
	return m
}
