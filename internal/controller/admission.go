package controller

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hoard-io/hoard/internal/admission"
	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/appspec"
)

// Admission by predicted benefit (OFC §5.2, package admission): for an
// application with cache.admission: benefit, each function's recent
// invocations say whether extracting and loading its data is more than
// half of its run time; when it is not, its invocations run with their
// cachelet keeping none of their misses (api.InvokeRequest.NoCache). The
// agents measure each invocation's time with data (api.IOTimes): as
// served, and as the store alone would have served its reads.

// benefit says whether a's functions are admitted by benefit; the caller
// holds c.mu.
func (a *app) benefit() bool { return a.spec.Cache.Admission == appspec.AdmitBenefit }

// noCache says whether function's invocations now run without keeping
// their misses.
func (c *Controller) noCache(a *app, function string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !a.benefit() {
		return false
	}
	d := a.admission[function]
	return d != nil && !d.Decide().Admit
}

// observeAdmission learns from a finished invocation's times. A failed
// invocation, one whose times are unknown, or the first on a new instance
// (its runtime warming up: Python's first boto3 call alone takes tenths
// of a second) teaches nothing.
func (c *Controller) observeAdmission(a *app, r *api.Invocation) {
	if r.NotAdmitted > 0 {
		c.m.notAdmitted.WithLabelValues(a.rec.Name, r.Function).Add(float64(r.NotAdmitted))
	}
	if !r.OK || r.IO == nil || r.Cold {
		return
	}
	ms := func(x float64) time.Duration { return time.Duration(x * float64(time.Millisecond)) }
	s := admission.Sample{Run: ms(r.ExecMS), Served: ms(r.IO.ServedMS), Store: ms(r.IO.StoreMS)}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !a.benefit() {
		return
	}
	if a.admission == nil {
		a.admission = map[string]*admission.Decider{}
	}
	d := a.admission[r.Function]
	if d == nil {
		d = &admission.Decider{}
		a.admission[r.Function] = d
	}
	was := d.Decide()
	if err := d.Observe(s); err != nil {
		c.log.Warn("admission: invocation times refused", "app", a.rec.Name, "function", r.Function, "err", err)
		return
	}
	now := d.Decide()
	admitting := 0.0
	if now.Admit {
		admitting = 1
	}
	c.m.admitting.WithLabelValues(a.rec.Name, r.Function).Set(admitting)
	c.m.dataShare.WithLabelValues(a.rec.Name, r.Function).Set(max(now.Share, 0))
	if now.Admit != was.Admit {
		c.m.admissionChanges.WithLabelValues(a.rec.Name, r.Function, admitLabel(now.Admit)).Inc()
		a.event(c.clk.Now(), "admission", "function %s: %s", r.Function, now.Reason)
	}
}

func admitLabel(admit bool) string {
	if admit {
		return "cache"
	}
	return "no_cache"
}

// admissionInfo is function's admission as `hoard apps` shows it; nil
// unless a admits by benefit. The caller holds c.mu.
func (a *app) admissionInfo(function string) *api.Admission {
	if !a.benefit() {
		return nil
	}
	var dec admission.Decision
	if d := a.admission[function]; d != nil {
		dec = d.Decide()
	} else {
		dec = (&admission.Decider{}).Decide()
	}
	return &api.Admission{Admit: dec.Admit, Share: dec.Share, Samples: dec.Samples, Benefit: dec.Benefit, Reason: dec.Reason}
}

// admissionMetrics are the admission's series.
type admissionMetrics struct {
	admitting        *prometheus.GaugeVec
	dataShare        *prometheus.GaugeVec
	admissionChanges *prometheus.CounterVec
	notAdmitted      *prometheus.CounterVec
}

func newAdmissionMetrics() admissionMetrics {
	return admissionMetrics{
		admitting: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "hoard_admission_admitting",
			Help: "1 while a function's misses are cached, 0 while they are not (cache.admission: benefit)."}, []string{"app", "function"}),
		dataShare: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "hoard_admission_data_share",
			Help: "A function's estimated share of run time spent extracting and loading data, over its recent invocations (caching when above 0.5)."}, []string{"app", "function"}),
		admissionChanges: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hoard_admission_changes_total",
			Help: "Changes of a function's admission decision, by the decision taken (cache, no_cache)."}, []string{"app", "function", "decision"}),
		notAdmitted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hoard_admission_reads_not_admitted_total",
			Help: "A function's misses served from the store without keeping a copy, its inputs not being worth caching."}, []string{"app", "function"}),
	}
}
