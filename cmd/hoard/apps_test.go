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

// TestAppsAdmission: `hoard apps --admission` prints each function's
// decision, and "all" for an application admitting every read.
func TestAppsAdmission(t *testing.T) {
	const token = "0123456789abcdef-apps"
	srv := httptest.NewServer(api.RequireToken(token, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/apps":
			api.WriteJSON(w, http.StatusOK, []api.AppInfo{{Name: "img", Functions: []string{"resize", "thumb"}}, {Name: "etl", Functions: []string{"load"}}})
		case "/v1/apps/img/stats":
			api.WriteJSON(w, http.StatusOK, map[string]api.FuncStats{
				"resize": {Admission: &api.Admission{Admit: false, Share: 0.04, Samples: 20, Reason: "data 4% of run time <= 50%: reads not cached"}},
				"thumb":  {Admission: &api.Admission{Admit: true, Share: -1, Samples: 0, Reason: "learning (0 of 5 invocations)"}},
			})
		case "/v1/apps/etl/stats":
			api.WriteJSON(w, http.StatusOK, map[string]api.FuncStats{})
		default:
			http.NotFound(w, r)
		}
	})))
	t.Cleanup(srv.Close)
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"apps", "--admission", "--controller", srv.URL, "--token", token}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("output:\n%s", out.String())
	}
	for i, want := range []string{"img resize no 4% 20 data", "img thumb yes - 0 learning", "etl load all - -"} {
		if got := strings.Join(strings.Fields(lines[i+1]), " "); !strings.HasPrefix(got, want) {
			t.Errorf("row %d %q, want it to begin %q", i+1, got, want)
		}
	}
}
