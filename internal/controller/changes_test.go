package controller

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/changerelay"
	"github.com/hoard-io/hoard/internal/store"
	"github.com/hoard-io/hoard/internal/store/memstore"
)

// storeEvent is a store's notification of bucket/key changed (name
// ObjectCreated:Put or ObjectRemoved:Delete).
func storeEvent(name, bucket, key, etag string) string {
	return `{"Records": [{"eventSource": "minio:s3", "eventName": "s3:` + name + `", "eventTime": "` + time.Now().UTC().Format(time.RFC3339Nano) +
		`", "s3": {"bucket": {"name": "` + bucket + `"}, "object": {"key": "` + key + `", "eTag": "` + etag + `"}}}]}`
}

func post(t *testing.T, url, token, body string) int {
	t.Helper()
	s, err := postEvent(url, token, body)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func postEvent(url, token, body string) (int, error) {
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/events", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// follow runs a relay client on bucket; its changes, readiness and end
// come back on channels.
type follow struct {
	ready   chan struct{}
	changes chan store.Change
	done    chan error
	cancel  context.CancelFunc
}

func startFollow(url, token, bucket string) *follow {
	f := &follow{ready: make(chan struct{}), changes: make(chan store.Change, 64), done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	cl := &changerelay.Client{URL: url, Token: token, CallTimeout: 5 * time.Second}
	go func() {
		f.done <- cl.Listen(ctx, bucket, 3*time.Second, func() { close(f.ready) }, func(c store.Change) { f.changes <- c })
	}()
	return f
}

func (f *follow) next(t *testing.T) store.Change {
	t.Helper()
	select {
	case c := <-f.changes:
		return c
	case err := <-f.done:
		t.Fatalf("stream ended: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no change within 10s")
	}
	return store.Change{}
}

// TestChangeRelay: the store's events reach the cachelets of the
// applications granted the bucket and no one else; a subscription is
// ready only once the store's notifications are confirmed by a probe,
// and cut when a probe does not come back in time. The store's webhook
// is played by a loop that posts the probe objects' events.
func TestChangeRelay(t *testing.T) {
	const storeTok = "store-events-0123456789"
	const admin = "admin-token-0123456789"
	ms := memstore.New()
	ctx := context.Background()
	for _, b := range []string{"abucket", "bbucket"} {
		if err := ms.CreateBucket(ctx, b, ""); err != nil {
			t.Fatal(err)
		}
	}
	c, _, _ := setupWith(t, Config{Store: ms, StoreEventsToken: storeTok,
		ChangeRelay: changerelay.Config{ProbeInterval: 50 * time.Millisecond, ProbeBound: 500 * time.Millisecond}})
	for _, s := range []string{specA, specB} {
		if _, err := c.Deploy(ctx, pkg(t, s)); err != nil {
			t.Fatal(err)
		}
	}
	credsA, _ := c.Credentials("a")
	credsB, _ := c.Credentials("b")
	srv := httptest.NewServer(c.Handler(admin, nil))
	t.Cleanup(srv.Close)

	// The webhook: each new probe version is posted, while deliver is on.
	var deliver atomic.Bool
	deliver.Store(true)
	hookCtx, stopHook := context.WithCancel(ctx)
	t.Cleanup(stopHook)
	go func() {
		last := map[string]string{}
		for hookCtx.Err() == nil {
			for _, b := range []string{"abucket", "bbucket"} {
				info, err := ms.Stat(hookCtx, b, changerelay.ProbeKey)
				if err == nil && info.ETag != last[b] && deliver.Load() {
					last[b] = info.ETag
					_, _ = postEvent(srv.URL, storeTok, storeEvent("ObjectCreated:Put", b, changerelay.ProbeKey, info.ETag))
				}
			}
			time.Sleep(10 * time.Millisecond) // the webhook's pace, not a synchronization
		}
	}()

	a := startFollow(srv.URL, credsA.PlatformToken, "abucket")
	b := startFollow(srv.URL, credsB.PlatformToken, "bbucket")
	t.Cleanup(a.cancel)
	t.Cleanup(b.cancel)
	for _, f := range []*follow{a, b} {
		select {
		case <-f.ready:
		case err := <-f.done:
			t.Fatalf("stream ended before ready: %v", err)
		case <-time.After(10 * time.Second):
			t.Fatal("not ready within 10s")
		}
	}

	t.Run("attackers", func(t *testing.T) {
		for _, tc := range []struct {
			name, token, bucket string
			want                int
		}{
			{"no token", "", "abucket", 401},
			{"wrong token", "not-a-token-0123456789", "abucket", 401},
			{"another application's token", credsB.PlatformToken, "abucket", 403},
			{"a bucket not granted", credsA.PlatformToken, "elsewhere", 403},
			{"the store's token", storeTok, "abucket", 403},
			{"the admin token", admin, "abucket", 403},
			{"no bucket", credsA.PlatformToken, "", 400},
		} {
			req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/changes?bucket="+tc.bucket, nil)
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("%s: %d, want %d", tc.name, resp.StatusCode, tc.want)
			}
		}
		// Through the client: B's token on A's bucket is AccessDenied.
		cl := &changerelay.Client{URL: srv.URL, Token: credsB.PlatformToken}
		err := cl.Listen(ctx, "abucket", 3*time.Second, nil, func(store.Change) { t.Error("B was told of A's bucket") })
		var api *store.APIError
		if !errors.As(err, &api) || api.Code != "AccessDenied" {
			t.Errorf("B following A's bucket: %v, want AccessDenied", err)
		}
	})

	t.Run("each bucket's changes to its application only", func(t *testing.T) {
		if s := post(t, srv.URL, storeTok, storeEvent("ObjectCreated:Put", "abucket", "k1", "e1")); s != 200 {
			t.Fatalf("store event: %d", s)
		}
		if s := post(t, srv.URL, storeTok, storeEvent("ObjectRemoved:Delete", "bbucket", "k2", "")); s != 200 {
			t.Fatalf("store event: %d", s)
		}
		if ch := a.next(t); ch.Bucket != "abucket" || ch.Key != "k1" || ch.ETag != "e1" || ch.Removed || ch.Time.IsZero() {
			t.Errorf("A got %+v, want abucket/k1 e1", ch)
		}
		// B's first change is its own bucket's: A's never reached it.
		if ch := b.next(t); ch.Bucket != "bbucket" || ch.Key != "k2" || !ch.Removed {
			t.Errorf("B got %+v, want bbucket/k2 removed", ch)
		}
		// An application's own event (a write through hoard) is not
		// relayed; nor are probes.
		if s := post(t, srv.URL, credsA.PlatformToken, event("a", "abucket", "own")); s != 200 {
			t.Fatalf("own event: %d", s)
		}
		post(t, srv.URL, storeTok, storeEvent("ObjectCreated:Put", "abucket", ".hoard/changes/other", "p"))
		post(t, srv.URL, storeTok, storeEvent("ObjectCreated:Put", "abucket", "k3", "e3"))
		if ch := a.next(t); ch.Key != "k3" {
			t.Errorf("A got %+v, want k3 (its own event and probes are not relayed)", ch)
		}
	})

	t.Run("a bucket no longer granted", func(t *testing.T) {
		spec := "name: b\nbuckets: {bother: read-write}\nfunctions: {f: {handler: m.h}}\n"
		if _, err := c.Deploy(ctx, pkg(t, spec)); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-b.done:
			if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "no longer granted") {
				t.Errorf("B's stream of bbucket ended with %v, want revoked", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("B still follows a bucket its new spec does not grant")
		}
		cl := &changerelay.Client{URL: srv.URL, Token: credsB.PlatformToken}
		var api *store.APIError
		if err := cl.Listen(ctx, "bbucket", 3*time.Second, nil, func(store.Change) {}); !errors.As(err, &api) {
			t.Errorf("B subscribing again to bbucket: %v, want AccessDenied", err)
		}
	})

	t.Run("a webhook that stops is noticed", func(t *testing.T) {
		deliver.Store(false)
		start := time.Now()
		select {
		case err := <-a.done:
			if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "late") {
				t.Errorf("stream ended with %v, want the probe's lateness", err)
			}
			t.Logf("cut %s after the webhook stopped (bound: interval 50ms + 500ms)", time.Since(start).Round(time.Millisecond))
		case <-time.After(10 * time.Second):
			t.Fatal("the stream outlived a silent webhook by 10s")
		}
		// A new subscription is not ready while the webhook is silent.
		again := startFollow(srv.URL, credsA.PlatformToken, "abucket")
		defer again.cancel()
		select {
		case <-again.ready:
			t.Fatal("ready without the store's notifications")
		case err := <-again.done:
			if !errors.Is(err, store.ErrUnavailable) {
				t.Errorf("second stream ended with %v", err)
			}
		}
	})
}
