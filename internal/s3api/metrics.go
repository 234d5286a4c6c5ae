package s3api

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

type serverMetrics struct {
	requests     *prometheus.CounterVec   // hoard_s3_requests_total{op,status}
	seconds      *prometheus.HistogramVec // hoard_s3_request_seconds{op}
	authFailures *prometheus.CounterVec   // hoard_s3_auth_failures_total{code}
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
	m.requests.WithLabelValues(op, strconv.Itoa(status)).Inc()
	m.seconds.WithLabelValues(op).Observe(d.Seconds())
}
