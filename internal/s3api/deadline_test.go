package s3api

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/cachelet"
	"github.com/hoard-io/hoard/internal/s3auth"
	s3store "github.com/hoard-io/hoard/internal/store/s3"
)

// TestHungStore503: a store that accepts requests and never answers
// (as one stopped with SIGSTOP) gives clients 503 ServiceUnavailable
// with Retry-After, for reads and writes, within the client's deadline:
// the store's own deadlines end each call.
func TestHungStore503(t *testing.T) {
	release := make(chan struct{})
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	st, err := s3store.New(s3store.Config{
		Endpoint: hung.URL, AccessKey: "ak", SecretKey: "secretkey",
		CallTimeout: 200 * time.Millisecond, IdleTimeout: 300 * time.Millisecond,
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := cachelet.New(cachelet.Config{Cache: cache.Config{Budget: 16 << 20}}, st, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ver, err := s3auth.New(s3auth.Config{Region: testRegion}, creds{})
	if err != nil {
		t.Fatal(err)
	}
	api, err := New(Config{Region: testRegion}, cl, ver, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(func() {
		srv.Close()
		cl.Close()
		close(release)
		_ = st.Close()
		hung.Close()
	})
	for _, tc := range []struct {
		method, target string
		body           []byte
	}{
		{http.MethodGet, "/bkt/key", nil},
		{http.MethodHead, "/bkt/key", nil},
		{http.MethodPut, "/bkt/key", []byte("never stored")},
		// Passed through to the store as they are.
		{http.MethodGet, "/bkt?versioning", nil},
		{http.MethodHead, "/bkt/key?versionId=1", nil},
		{http.MethodPut, "/bkt/key?tagging", []byte("<Tagging><TagSet/></Tagging>")},
		{http.MethodDelete, "/bkt/key?versionId=1", nil},
	} {
		t.Run(tc.method+tc.target, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, tc.method, srv.URL+tc.target, bytes.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
			sign(t, req, "UNSIGNED-PAYLOAD")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("no answer within the client's deadline: %v", err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
				t.Errorf("status %d, Retry-After %q; want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
			}
			if tc.method != http.MethodHead {
				if code := errorCodeOf(t, resp); code != "ServiceUnavailable" {
					t.Errorf("code %s, want ServiceUnavailable", code)
				}
			}
		})
	}
}
