package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hoard-io/hoard/internal/api"
)

// TestAppsMemory: `hoard apps --memory` prints each function's model,
// and a dash row for a function not yet observed.
func TestAppsMemory(t *testing.T) {
	const token = "0123456789abcdef-apps"
	srv := httptest.NewServer(api.RequireToken(token, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/apps":
			api.WriteJSON(w, http.StatusOK, []api.AppInfo{{Name: "img", Functions: []string{"resize", "thumb"}}})
		case "/v1/apps/img/stats":
			api.WriteJSON(w, http.StatusOK, map[string]api.FuncStats{"resize": {Invocations: 150, Model: &api.ModelInfo{
				Observed: 150, Mature: true, Exact: 0.82, ExactOrOver: 0.93, Predicted: 50,
				PredictedBytes: 50 * 64 << 20, PeakBytes: 50 * 40 << 20, CacheGivenBytes: 50 * 192 << 20, UnderPredicted: 2, Retries: 1}}})
		default:
			http.NotFound(w, r)
		}
	})))
	t.Cleanup(srv.Close)
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"apps", "--memory", "--controller", srv.URL, "--token", token}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("output:\n%s", out.String())
	}
	if f := strings.Fields(lines[1]); strings.Join(f, " ") != "img resize 150 true 82% 93% 50 64MiB 40MiB 9600MiB 2 1" {
		t.Errorf("resize row %q", lines[1])
	}
	if f := strings.Fields(lines[2]); len(f) < 4 || f[1] != "thumb" || f[2] != "0" || f[3] != "-" {
		t.Errorf("thumb row %q", lines[2])
	}
}
