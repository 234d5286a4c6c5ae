package changerelay

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/store"
)

// The client's reading of what a relay (or something posing as one)
// answers: refusals as store.Listener names them, a line cut short, a
// malformed or oversized line and a silent stream as a broken stream,
// never as changes; changes before the ready line are still acted on.
func TestClientAnswers(t *testing.T) {
	long := strings.Repeat("x", maxLine+10)
	for _, tc := range []struct {
		name   string
		status int
		body   string
		hang   bool
		check  func(error) bool
		ready  bool
		change int
	}{
		{name: "401", status: 401, body: "no", check: isAccessDenied},
		{name: "403", status: 403, body: "not yours", check: isAccessDenied},
		{name: "404: no relay", status: 404, check: func(err error) bool { return errors.Is(err, store.ErrListenUnsupported) }},
		{name: "503", status: 503, check: unavailable},
		{name: "cut short", status: 200, body: "{}\n{\"ready\":true}\n{\"changes\":[{\"key\":\"k\"", check: unavailable, ready: true},
		{name: "malformed", status: 200, body: "{}\nnot json\n", check: unavailable},
		{name: "too long", status: 200, body: "{}\n" + long + "\n", check: unavailable},
		{name: "error line", status: 200, body: "{\"changes\":[{\"key\":\"k\",\"etag\":\"\\\"e\\\"\"}]}\n{\"error\":\"late\"}\n", check: unavailable, change: 1},
		{name: "silent", status: 200, body: "{}\n{\"ready\":true}\n", hang: true, check: func(err error) bool {
			return errors.Is(err, store.ErrUnavailable) && strings.Contains(err.Error(), "silent")
		}, ready: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("Authorization") != "Bearer tok" || r.URL.Path != "/v1/changes" || r.URL.Query().Get("bucket") != "b" {
					t.Errorf("request %s %v", r.URL, r.Header)
				}
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
				if tc.hang {
					w.(http.Flusher).Flush()
					<-r.Context().Done()
				}
			}))
			defer srv.Close()
			ready, changes := false, 0
			cl := &Client{URL: srv.URL, Token: "tok", CallTimeout: 2 * time.Second}
			start := time.Now()
			err := cl.Listen(context.Background(), "b", 3*time.Second, func() { ready = true }, func(c store.Change) {
				if c.Bucket != "b" || c.Key != "k" || c.ETag != "e" {
					t.Errorf("change %+v", c)
				}
				changes++
			})
			if !tc.check(err) {
				t.Errorf("Listen: %v", err)
			}
			if ready != tc.ready || changes != tc.change {
				t.Errorf("ready %v, %d changes; want %v, %d", ready, changes, tc.ready, tc.change)
			}
			if tc.hang && time.Since(start) > 10*time.Second {
				t.Errorf("a silent stream held for %s (heartbeat 3s)", time.Since(start))
			}
		})
	}
}

func isAccessDenied(err error) bool {
	var api *store.APIError
	return errors.As(err, &api) && api.Code == "AccessDenied"
}

func unavailable(err error) bool { return errors.Is(err, store.ErrUnavailable) }
