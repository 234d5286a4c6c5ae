package s3api

import (
	"maps"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hoard-io/hoard/internal/s3auth"
)

type serverMetrics struct {
	requests     *prometheus.CounterVec   // hoard_s3_requests_total{op,status}
	seconds      *prometheus.HistogramVec // hoard_s3_request_seconds{op}
	authFailures *prometheus.CounterVec   // hoard_s3_auth_failures_total{code}
	// ok holds, by operation, the series a 200 answer counts in, looked
	// up once: a copy-on-write map, read with one atomic load (as many
	// operations as the router names; written the first time each ends
	// in 200).
	ok atomic.Pointer[map[string]okSeries]
}

type okSeries struct {
	requests prometheus.Counter
	seconds  prometheus.Observer
}

func newServerMetrics(reg prometheus.Registerer) *serverMetrics {
	m := &serverMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hoard_s3_requests_total",
			Help: "S3 requests by operation and HTTP status.",
		}, []string{"op", "status"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "hoard_s3_request_seconds",
			Help:    "S3 request duration by operation, to the last byte.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 20),
		}, []string{"op"}),
		authFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hoard_s3_auth_failures_total",
			Help: "Requests refused by authentication, by S3 error code.",
		}, []string{"code"}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.seconds, m.authFailures)
	}
	return m
}

// registerMemoMetrics exports the verifier's memo of verified requests.
func registerMemoMetrics(reg prometheus.Registerer, v *s3auth.Verifier) {
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "hoard_s3_sigv4_memo_hits_total",
			Help: "SigV4 requests answered from the memo of verified requests.",
		}, func() float64 { return float64(v.MemoStats().Hits) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "hoard_s3_sigv4_memo_misses_total",
			Help: "SigV4 requests the memo could have answered, verified afresh.",
		}, func() float64 { return float64(v.MemoStats().Misses) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "hoard_s3_sigv4_memo_entries",
			Help: "Entries held in the memo of verified requests.",
		}, func() float64 { return float64(v.MemoStats().Entries) }),
	)
}

func (m *serverMetrics) observe(op string, status int, d time.Duration) {
	if op == "" {
		op = "Unknown"
	}
	if len(op) > 12 && op[:12] == "Unsupported:" {
		op = "Unsupported" // keep label cardinality bounded
	}
	if status == 0 {
		status = 200
	}
	if status == 200 {
		if o, ok := m.okSeries(op); ok {
			o.observe(d)
			return
		}
	}
	m.requests.WithLabelValues(op, strconv.Itoa(status)).Inc()
	m.seconds.WithLabelValues(op).Observe(d.Seconds())
}

func (o okSeries) observe(d time.Duration) {
	o.requests.Inc()
	o.seconds.Observe(d.Seconds())
}

// maxOKSeries bounds the operations whose series are kept looked up;
// past it (an operation named after a method no client should send), the
// series are looked up per request.
const maxOKSeries = 64

// okSeries returns op's series for 200 answers, adding them to the map
// the first time; false when the map is full.
func (m *serverMetrics) okSeries(op string) (okSeries, bool) {
	for {
		cur := m.ok.Load()
		if cur != nil {
			if o, ok := (*cur)[op]; ok {
				return o, true
			}
			if len(*cur) >= maxOKSeries {
				return okSeries{}, false
			}
		}
		o := okSeries{requests: m.requests.WithLabelValues(op, "200"), seconds: m.seconds.WithLabelValues(op)}
		next := make(map[string]okSeries, 1)
		if cur != nil {
			maps.Copy(next, *cur)
		}
		next[op] = o
		if m.ok.CompareAndSwap(cur, &next) {
			return o, true
		}
	}
}
