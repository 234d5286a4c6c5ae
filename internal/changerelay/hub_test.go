package changerelay

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/store"
)

// echoProber is a store whose webhook delivers each probe's notification
// to hub at once (before the write returns), while on.
type echoProber struct {
	hub *Hub
	off atomic.Bool
}

func (p *echoProber) Put(ctx context.Context, bucket, key string, r io.Reader, size int64, opts store.PutOptions) (store.PutResult, error) {
	body, _ := io.ReadAll(r)
	res := md5hex(body)
	if !p.off.Load() {
		p.hub.Publish([]store.Change{{Bucket: bucket, Key: key, ETag: res}})
	}
	return store.PutResult{ETag: res}, nil
}

func newHub(t *testing.T, cfg Config) (*Hub, *echoProber) {
	t.Helper()
	p := &echoProber{}
	cfg.Prober = p
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p.hub = h
	t.Cleanup(h.Close)
	return h, p
}

// A subscriber that falls Buffer lines behind is cut, never skipped
// past: its stream ends, and with it the cachelet's trust.
func TestSlowSubscriberCut(t *testing.T) {
	h, _ := newHub(t, Config{Buffer: 2, ProbeInterval: time.Hour})
	s, err := h.Subscribe("a", "b1")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Unsubscribe(s)
	for i := range 3 {
		h.Publish([]store.Change{{Bucket: "b1", Key: "k" + string(rune('0'+i))}})
	}
	select {
	case <-s.cut:
		if !strings.Contains(s.why, "behind") {
			t.Errorf("cut: %s", s.why)
		}
	default:
		t.Fatal("a subscriber 3 lines behind a buffer of 2 was not cut")
	}
}

// The bounds on subscriptions: per application and in all.
func TestSubscriptionBounds(t *testing.T) {
	h, _ := newHub(t, Config{MaxSubscribers: 3, MaxPerApp: 2, ProbeInterval: time.Hour})
	for _, app := range []string{"a", "a", "b"} {
		if _, err := h.Subscribe(app, "x"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.Subscribe("c", "x"); !errors.Is(err, ErrTooMany) {
		t.Errorf("a 4th subscription of 3: %v", err)
	}
	h2, _ := newHub(t, Config{MaxPerApp: 2, ProbeInterval: time.Hour})
	h2.Subscribe("a", "x")
	h2.Subscribe("a", "y")
	if _, err := h2.Subscribe("a", "z"); !errors.Is(err, ErrTooMany) {
		t.Errorf("a 3rd subscription of one application, 2 allowed: %v", err)
	}
	if _, err := h2.Subscribe("b", "z"); err != nil {
		t.Errorf("another application: %v", err)
	}
}

// Through HTTP: ready once a probe written after the subscription is
// back, then changes of the bucket only, then cut when probes stop
// coming back.
func TestStream(t *testing.T) {
	h, p := newHub(t, Config{ProbeInterval: 20 * time.Millisecond, ProbeBound: 200 * time.Millisecond})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, err := h.Subscribe("a", r.URL.Query().Get("bucket"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		defer h.Unsubscribe(s)
		h.Serve(w, r, s, time.Second)
	}))
	t.Cleanup(srv.Close)
	srv.URL += "/relay" // the client appends /v1/changes
	ready := make(chan struct{})
	got := make(chan store.Change, 8)
	done := make(chan error, 1)
	cl := &Client{URL: srv.URL, Token: "t"}
	go func() {
		done <- cl.Listen(context.Background(), "b1", 3*time.Second, func() { close(ready) }, func(c store.Change) { got <- c })
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatal(err)
	case <-time.After(10 * time.Second):
		t.Fatal("not ready")
	}
	h.Publish([]store.Change{{Bucket: "b2", Key: "other"}, {Bucket: "b1", Key: ProbeKey}, {Bucket: "b1", Key: "k", ETag: "e"}})
	if c := <-got; c.Bucket != "b1" || c.Key != "k" || c.ETag != "e" {
		t.Errorf("got %+v, want b1/k", c)
	}
	p.off.Store(true)
	select {
	case err := <-done:
		if !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("not cut after the probes stopped coming back")
	}
}
