package notify

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/hoard-io/hoard/internal/media"
)

// receiver is an httptest server recording what it is sent; status, when
// set, picks each answer.
type receiver struct {
	*httptest.Server
	mu     sync.Mutex
	bodies [][]byte
	heads  []http.Header
	status func(attempt int) int
	hook   func() // runs before each answer, outside the lock
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.bodies = append(r.bodies, body)
		r.heads = append(r.heads, req.Header.Clone())
		attempt, status := len(r.bodies), r.status
		hook := r.hook
		r.mu.Unlock()
		if hook != nil {
			hook()
		}
		code := http.StatusNoContent
		if status != nil {
			code = status(attempt)
		}
		w.WriteHeader(code)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) received() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]byte(nil), r.bodies...)
}

func newNotifier(t *testing.T, cfg Config) *Notifier {
	t.Helper()
	if cfg.App == "" {
		cfg.App, cfg.Cachelet = "thumbs", "thumbs-1"
	}
	if cfg.Backoff == 0 {
		cfg.Backoff = time.Millisecond
	}
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = n.Close(ctx)
	})
	return n
}

func (n *Notifier) count(result string) float64 {
	var m dto.Metric
	if err := n.events.WithLabelValues(result).Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

func closeWithin(t *testing.T, n *Notifier, d time.Duration) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return n.Close(ctx)
}

func testEvent(key string) Event {
	return Event{
		Name: ObjectCreatedPut, Time: time.Date(2026, 3, 1, 12, 30, 45, 123456789, time.UTC),
		Region: "us-east-1", Bucket: "images", Key: key, Size: 1234, ETag: `"0123abcd"`,
		Principal: "AKIDEXAMPLE", SourceIP: "127.0.0.1", RequestID: "REQ123",
	}
}

// An event arrives as S3's event notification JSON, with the sender, the
// bearer token, and the key encoded as AWS encodes it.
func TestEventArrives(t *testing.T) {
	r := newReceiver(t)
	n := newNotifier(t, Config{URL: r.URL + "/v1/events", Token: "s3cr3t"})
	ev := testEvent("incoming/my photo+1.jpg")
	ev.Media = &media.Features{Format: "jpeg", Width: 640, Height: 480}
	n.Notify(ev)
	if err := closeWithin(t, n, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	got := r.received()
	if len(got) != 1 {
		t.Fatalf("%d posts, want 1", len(got))
	}
	if h := r.heads[0]; h.Get("Authorization") != "Bearer s3cr3t" || h.Get("Content-Type") != "application/json" {
		t.Fatalf("headers %v", h)
	}
	var doc map[string]any
	if err := json.Unmarshal(got[0], &doc); err != nil {
		t.Fatal(err)
	}
	var m Message
	if err := json.Unmarshal(got[0], &m); err != nil {
		t.Fatal(err)
	}
	if len(m.Records) != 1 {
		t.Fatalf("%d records", len(m.Records))
	}
	rec := m.Records[0]
	seq := rec.S3.Object.Sequencer
	rec.S3.Object.Sequencer = ""
	want := Record{
		EventVersion: "2.1", EventSource: "hoard:cachelet", AWSRegion: "us-east-1",
		EventTime: "2026-03-01T12:30:45.123456789Z", EventName: "ObjectCreated:Put",
		UserIdentity:      UserIdentity{PrincipalID: "AKIDEXAMPLE"},
		RequestParameters: RequestParameters{SourceIPAddress: "127.0.0.1"},
		ResponseElements:  ResponseElements{RequestID: "REQ123"},
		S3: S3Entity{SchemaVersion: "1.0", ConfigurationID: "hoard",
			Bucket: BucketEntity{Name: "images", ARN: "arn:aws:s3:::images"},
			Object: ObjectEntity{Key: "incoming/my+photo%2B1.jpg", Size: 1234, ETag: "0123abcd"}},
	}
	if rec != want {
		t.Fatalf("record\n got %+v\nwant %+v", rec, want)
	}
	if len(seq) != 16 {
		t.Fatalf("sequencer %q, want 16 hex digits", seq)
	}
	if m.Hoard.App != "thumbs" || m.Hoard.Cachelet != "thumbs-1" || m.Hoard.Media == nil || *m.Hoard.Media != *ev.Media {
		t.Fatalf("origin %+v", m.Hoard)
	}
	// The wire names, as AWS spells them.
	s3 := doc["Records"].([]any)[0].(map[string]any)["s3"].(map[string]any)
	obj := s3["object"].(map[string]any)
	if obj["eTag"] != "0123abcd" || obj["key"] != "incoming/my+photo%2B1.jpg" || s3["bucket"].(map[string]any)["arn"] != "arn:aws:s3:::images" {
		t.Fatalf("wire document %s", got[0])
	}
	if n.count("sent") != 1 || n.count("failed") != 0 || n.count("dropped") != 0 {
		t.Fatalf("counts sent %v failed %v dropped %v", n.count("sent"), n.count("failed"), n.count("dropped"))
	}
}

func TestEncodeKey(t *testing.T) {
	for _, tt := range []struct{ key, want string }{
		{"a.jpg", "a.jpg"},
		{"dir/sub/a b.jpg", "dir/sub/a+b.jpg"},
		{"a+b=c&d", "a%2Bb%3Dc%26d"},
		{"ünï/cødé", "%C3%BCn%C3%AF/c%C3%B8d%C3%A9"},
		{"dir/", "dir/"},
	} {
		got := EncodeKey(tt.key)
		if got != tt.want {
			t.Errorf("EncodeKey(%q) = %q, want %q", tt.key, got, tt.want)
		}
		if back, err := url.QueryUnescape(got); err != nil || back != tt.key {
			t.Errorf("QueryUnescape(%q) = %q, %v; want %q", got, back, err, tt.key)
		}
	}
}

// Events go out in order, with increasing sequencers.
func TestOrderAndSequencers(t *testing.T) {
	r := newReceiver(t)
	n := newNotifier(t, Config{URL: r.URL})
	same := time.Now()
	for _, k := range []string{"a", "b", "c", "d"} {
		ev := testEvent(k)
		ev.Time = same // the clock need not move between events
		n.Notify(ev)
	}
	if err := closeWithin(t, n, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	prev := ""
	for i, body := range r.received() {
		var m Message
		if err := json.Unmarshal(body, &m); err != nil {
			t.Fatal(err)
		}
		o := m.Records[0].S3.Object
		if want := string(rune('a' + i)); o.Key != want {
			t.Fatalf("event %d is %q, want %q", i, o.Key, want)
		}
		if o.Sequencer <= prev {
			t.Fatalf("sequencer %q after %q", o.Sequencer, prev)
		}
		prev = o.Sequencer
	}
}

// A 5xx is retried until the receiver takes the event; it arrives once.
func TestRetriesOn5xx(t *testing.T) {
	r := newReceiver(t)
	r.status = func(attempt int) int {
		if attempt <= 2 {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	}
	n := newNotifier(t, Config{URL: r.URL})
	n.Notify(testEvent("k"))
	if err := closeWithin(t, n, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if got := len(r.received()); got != 3 {
		t.Fatalf("%d attempts, want 3", got)
	}
	if n.count("sent") != 1 || n.count("failed") != 0 {
		t.Fatalf("sent %v failed %v", n.count("sent"), n.count("failed"))
	}
}

// Retries are bounded in time; a 4xx is not retried; an unreachable
// receiver is retried like a 5xx. Each gives up with "failed".
func TestGivesUp(t *testing.T) {
	r := newReceiver(t)
	r.status = func(int) int { return http.StatusServiceUnavailable }
	// Long enough for a retry after a first post slowed by a busy
	// machine (the race detector), short next to the 30 s default.
	n := newNotifier(t, Config{URL: r.URL, RetryFor: 500 * time.Millisecond})
	start := time.Now()
	n.Notify(testEvent("k"))
	if err := closeWithin(t, n, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("retried for %v past a 500 ms limit", d)
	}
	if got := len(r.received()); got < 2 {
		t.Fatalf("%d attempts, want retries", got)
	}
	if n.count("failed") != 1 || n.count("sent") != 0 {
		t.Fatalf("sent %v failed %v", n.count("sent"), n.count("failed"))
	}

	r2 := newReceiver(t)
	r2.status = func(int) int { return http.StatusUnauthorized }
	n2 := newNotifier(t, Config{URL: r2.URL})
	n2.Notify(testEvent("k"))
	if err := closeWithin(t, n2, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if got := len(r2.received()); got != 1 || n2.count("failed") != 1 {
		t.Fatalf("a 401: %d attempts, failed %v; want 1 attempt, failed", got, n2.count("failed"))
	}

	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	n3 := newNotifier(t, Config{URL: down.URL, RetryFor: 50 * time.Millisecond})
	n3.Notify(testEvent("k"))
	if err := closeWithin(t, n3, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if n3.count("failed") != 1 {
		t.Fatalf("an unreachable receiver: failed %v", n3.count("failed"))
	}
}

// When the queue is full, new events are dropped and counted; those
// queued still go out.
func TestFullQueueDrops(t *testing.T) {
	r := newReceiver(t)
	arrived, release := make(chan struct{}, 100), make(chan struct{})
	r.hook = func() { arrived <- struct{}{}; <-release }
	n := newNotifier(t, Config{URL: r.URL, QueueSize: 2})
	n.Notify(testEvent("first"))
	<-arrived // the sender holds "first"; the queue is empty
	for i := range 10 {
		n.Notify(testEvent(string(rune('a' + i))))
	}
	if got := n.count("dropped"); got != 8 {
		t.Fatalf("dropped %v, want 8 (queue of 2)", got)
	}
	close(release)
	if err := closeWithin(t, n, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if n.count("sent") != 3 || len(r.received()) != 3 {
		t.Fatalf("sent %v, received %d; want 3", n.count("sent"), len(r.received()))
	}
}

// Close drains the queue before it returns, and later events are dropped.
func TestCloseDrains(t *testing.T) {
	r := newReceiver(t)
	r.hook = func() { time.Sleep(5 * time.Millisecond) }
	n := newNotifier(t, Config{URL: r.URL})
	for i := range 20 {
		n.Notify(testEvent(string(rune('a' + i))))
	}
	if err := closeWithin(t, n, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if got := len(r.received()); got != 20 || n.count("sent") != 20 {
		t.Fatalf("after Close: %d received, sent %v; want 20", got, n.count("sent"))
	}
	n.Notify(testEvent("late"))
	if n.count("dropped") != 1 {
		t.Fatalf("an event after Close: dropped %v, want 1", n.count("dropped"))
	}
	if err := closeWithin(t, n, time.Second); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// A Close whose deadline passes gives up on what is left, says so, and
// counts it dropped.
func TestCloseDeadline(t *testing.T) {
	r := newReceiver(t)
	release := make(chan struct{})
	defer close(release)
	r.hook = func() { <-release }
	n := newNotifier(t, Config{URL: r.URL})
	for i := range 3 {
		n.Notify(testEvent(string(rune('a' + i))))
	}
	if err := closeWithin(t, n, 100*time.Millisecond); err == nil {
		t.Fatal("Close past its deadline reported no loss")
	}
	if n.count("dropped") != 3 || n.count("sent") != 0 {
		t.Fatalf("dropped %v sent %v; want 3 dropped", n.count("dropped"), n.count("sent"))
	}
}

func TestConfig(t *testing.T) {
	for _, u := range []string{"", "ftp://x", "http://", "::"} {
		if _, err := New(Config{URL: u}); err == nil {
			t.Errorf("URL %q accepted", u)
		}
	}
}
