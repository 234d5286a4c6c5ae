package instance

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/cachelet"
	"github.com/hoard-io/hoard/internal/notify"
	"github.com/hoard-io/hoard/internal/s3api"
	"github.com/hoard-io/hoard/internal/s3auth"
	"github.com/hoard-io/hoard/internal/store"
	"github.com/hoard-io/hoard/internal/store/memstore"
	s3store "github.com/hoard-io/hoard/internal/store/s3"
)

// memStoreEndpoint serves an in-memory store over S3 (hoard's own front
// over a cachelet that keeps nothing, over a memstore), so an instance can
// run against it with no store process. It returns the endpoint.
func memStoreEndpoint(t *testing.T, buckets ...string) string {
	t.Helper()
	st := memstore.New()
	for _, b := range buckets {
		if err := st.CreateBucket(t.Context(), b, ""); err != nil {
			t.Fatal(err)
		}
	}
	cl, err := cachelet.New(cachelet.Config{Cache: cache.Config{Budget: 1 << 20}}, st, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ver, err := s3auth.New(s3auth.Config{Region: "us-east-1"}, staticCreds{"sak", "ssk"})
	if err != nil {
		t.Fatal(err)
	}
	api, err := s3api.New(s3api.Config{Region: "us-east-1"}, cl, ver, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(func() { srv.Close(); cl.Close() })
	return srv.URL
}

// eventSink records the notifications posted to it.
type eventSink struct {
	*httptest.Server
	mu   sync.Mutex
	msgs []notify.Message
	auth []string
}

func newEventSink(t *testing.T) *eventSink {
	s := &eventSink{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m notify.Message
		if err := json.NewDecoder(r.Body).Decode(&m); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.msgs = append(s.msgs, m)
		s.auth = append(s.auth, r.Header.Get("Authorization"))
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *eventSink) messages() []notify.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]notify.Message(nil), s.msgs...)
}

// A PUT through the instance's S3 front posts one event with the ETag the
// client got; /stats counts the write and the reads.
func TestPutNotifiesAndStatsCount(t *testing.T) {
	sink := newEventSink(t)
	c := baseConfig()
	c.Store.Endpoint = memStoreEndpoint(t, "images")
	c.App, c.ID = "thumbs", "thumbs-7"
	c.NotifyURL, c.NotifyToken = sink.URL+"/events", "tok"
	in, err := Start(t.Context(), c, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close(context.Background())

	client, err := s3store.New(s3store.Config{Endpoint: in.Endpoint(), AccessKey: "ak", SecretKey: "sk", Region: "us-east-1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	data := []byte("a small picture")
	res, err := client.Put(t.Context(), "images", "incoming/cat 1.jpg", bytes.NewReader(data), int64(len(data)), store.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		body, _, _, err := client.Get(t.Context(), "images", "incoming/cat 1.jpg", store.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, body)
		body.Close()
	}

	// Close drains the notifier: the event is out when it returns.
	var stats cachelet.Counters
	getJSON(t, in.StatsURL(), &stats)
	if err := in.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	msgs := sink.messages()
	if len(msgs) != 1 || len(msgs[0].Records) != 1 {
		t.Fatalf("%d messages posted, want one with one record: %+v", len(msgs), msgs)
	}
	r := msgs[0].Records[0]
	if r.EventName != notify.ObjectCreatedPut || r.EventSource != "hoard:cachelet" || r.AWSRegion != "us-east-1" ||
		r.S3.Bucket.Name != "images" || r.S3.Object.Key != "incoming/cat+1.jpg" || r.S3.Object.Size != int64(len(data)) ||
		r.S3.Object.ETag != res.ETag || r.UserIdentity.PrincipalID != "ak" || r.RequestParameters.SourceIPAddress != "127.0.0.1" ||
		r.ResponseElements.RequestID == "" {
		t.Fatalf("record %+v; the client got ETag %s", r, res.ETag)
	}
	if _, err := time.Parse(time.RFC3339Nano, r.EventTime); err != nil {
		t.Fatalf("eventTime %q: %v", r.EventTime, err)
	}
	if msgs[0].Hoard != (notify.Origin{App: "thumbs", Cachelet: "thumbs-7"}) || sink.auth[0] != "Bearer tok" {
		t.Fatalf("origin %+v, authorization %q", msgs[0].Hoard, sink.auth[0])
	}

	want := cachelet.Counters{
		Reads:        cachelet.ReadCounters{LocalHit: cachelet.ReadCount{Count: 2, Bytes: 2 * int64(len(data))}},
		Writes:       1,
		CacheBytes:   int64(len(data)),
		CacheObjects: 1,
		BudgetBytes:  c.Cachelet.Cache.Budget,
	}
	// Times are real: present, then left out of the comparison.
	if stats.WriteNanos <= 0 || stats.Reads.LocalHit.Nanos <= 0 {
		t.Fatalf("/stats times: write %d ns, hits %d ns", stats.WriteNanos, stats.Reads.LocalHit.Nanos)
	}
	stats.WriteNanos, stats.Reads.LocalHit.Nanos = 0, 0
	if stats != want {
		t.Fatalf("/stats\n got %+v\nwant %+v", stats, want)
	}
}

// /stats answers with the snapshot's JSON shape, all five read kinds
// present from the start.
func TestStatsShape(t *testing.T) {
	c := baseConfig()
	c.Store.Endpoint = memStoreEndpoint(t)
	in, err := Start(t.Context(), c, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close(context.Background())
	if !strings.HasSuffix(in.StatsURL(), "/stats") || strings.TrimSuffix(in.StatsURL(), "/stats") != strings.TrimSuffix(in.MetricsURL(), "/metrics") {
		t.Fatalf("StatsURL %q beside MetricsURL %q", in.StatsURL(), in.MetricsURL())
	}
	var doc map[string]any
	getJSON(t, in.StatsURL(), &doc)
	reads, _ := doc["reads"].(map[string]any)
	for _, k := range []string{"local_hit", "local_miss", "remote_hit", "remote_miss", "pass_through", "disk_hit"} {
		r, ok := reads[k].(map[string]any)
		if !ok || r["count"] != 0.0 || r["bytes"] != 0.0 {
			t.Errorf("reads.%s = %v", k, reads[k])
		}
	}
	for _, k := range []string{"writes", "cache_bytes", "cache_objects", "budget_bytes"} {
		if _, ok := doc[k].(float64); !ok {
			t.Errorf("%s missing: %v", k, doc)
		}
	}
	if doc["budget_bytes"] != float64(c.Cachelet.Cache.Budget) {
		t.Errorf("budget_bytes %v", doc["budget_bytes"])
	}
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}
