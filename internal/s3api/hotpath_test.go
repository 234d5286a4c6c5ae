package s3api

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestParseQueryMatchesURLParseQuery(t *testing.T) {
	raws := []string{"", "a", "a=1&b=2&a=3", "a=%2F&b=+", "a=%zz&b=1", "a;b=1&c=2", "&&a=1&", "=1", "a==1",
		"X-Amz-Credential=AK%2F20260101%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Expires=3600"}
	alphabet := []string{"a", "b", "=", "&", ";", "%", "%2F", "%4", "+", "~", "/"}
	rng := rand.New(rand.NewPCG(5, 6))
	for range 5000 {
		var b strings.Builder
		for range rng.IntN(10) {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		raws = append(raws, b.String())
	}
	for _, raw := range raws {
		got, gerr := parseQuery(raw)
		want, werr := url.ParseQuery(raw)
		if (gerr == nil) != (werr == nil) || !reflect.DeepEqual(got, want) {
			t.Fatalf("parseQuery(%q) = %v, %v; url.ParseQuery: %v, %v", raw, got, gerr, want, werr)
		}
	}
}

func TestHTTPDateMatchesFormat(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	ts := []time.Time{time.Unix(0, 0), time.Unix(-1, 500), time.Unix(1700000000, 999999999)}
	for range 2000 {
		ts = append(ts, time.Unix(rng.Int64N(1<<34)-1<<33, rng.Int64N(1e9)).In(time.FixedZone("x", 3600)))
	}
	for i := range 200 { // the same seconds again, from the cache
		ts = append(ts, ts[i])
	}
	for _, tm := range ts {
		if got, want := httpDate(tm), tm.UTC().Format(http.TimeFormat); got != want {
			t.Fatalf("httpDate(%v) = %q, want %q", tm, got, want)
		}
	}
}

func TestObserveCountsEveryOperation(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newServerMetrics(reg)
	for i := range maxOKSeries + 10 { // past the looked-up series too
		op := fmt.Sprintf("Op%d", i)
		m.observe(op, 200, time.Millisecond)
		m.observe(op, 200, time.Millisecond)
		m.observe(op, 404, time.Millisecond)
	}
	for _, i := range []int{0, maxOKSeries - 1, maxOKSeries + 9} {
		op := fmt.Sprintf("Op%d", i)
		if got := testutil.ToFloat64(m.requests.WithLabelValues(op, "200")); got != 2 {
			t.Errorf("%s 200: %v, want 2", op, got)
		}
		if got := testutil.ToFloat64(m.requests.WithLabelValues(op, "404")); got != 1 {
			t.Errorf("%s 404: %v, want 1", op, got)
		}
	}
	if n := len(*m.ok.Load()); n != maxOKSeries {
		t.Errorf("%d series kept, want %d", n, maxOKSeries)
	}
	if got := testutil.CollectAndCount(m.seconds); got != maxOKSeries+10 {
		t.Errorf("%d duration series, want %d", got, maxOKSeries+10)
	}
}

// TestMemoMetrics checks the verifier's memo is exported: a GET signed
// once and sent three times is two misses (it is kept the second time
// it verifies) and one hit.
func TestMemoMetrics(t *testing.T) {
	api, _ := newLocalHitFront(t, 16)
	reg := prometheus.NewRegistry()
	registerMemoMetrics(reg, api.auth)
	req, err := http.NewRequest(http.MethodGet, "http://127.0.0.1:9000/bkt/k", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
	sign(t, req, "UNSIGNED-PAYLOAD")
	for range 3 {
		w := &discardWriter{h: http.Header{}}
		r := *req
		api.ServeHTTP(w, &r)
	}
	want := `
# HELP hoard_s3_sigv4_memo_hits_total SigV4 requests answered from the memo of verified requests.
# TYPE hoard_s3_sigv4_memo_hits_total counter
hoard_s3_sigv4_memo_hits_total 1
# HELP hoard_s3_sigv4_memo_misses_total SigV4 requests the memo could have answered, verified afresh.
# TYPE hoard_s3_sigv4_memo_misses_total counter
hoard_s3_sigv4_memo_misses_total 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "hoard_s3_sigv4_memo_hits_total", "hoard_s3_sigv4_memo_misses_total"); err != nil {
		t.Fatal(err)
	}
}
