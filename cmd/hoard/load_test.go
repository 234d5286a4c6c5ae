package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/loadgen"
)

func TestLoadFlags(t *testing.T) {
	dir := t.TempDir()
	event := filepath.Join(dir, "event.json")
	if err := os.WriteFile(event, []byte(`{"from": "file"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args []string
		err  string // "" for none
		want func(o *loadOptions) bool
	}{
		{[]string{"--app", "a", "--function", "f", "--every", "1s", "--count", "3"}, "", func(o *loadOptions) bool {
			return o.target == loadgen.Target{App: "a", Function: "f"} && o.every == time.Second && o.count == 3 &&
				o.speed == 1 && o.concurrency == defaultLoadConcurrency && string(o.event) == "{}"
		}},
		{[]string{"--app", "a", "--pipeline", "p", "--poisson", "250ms", "--duration", "1m", "--seed", "9", "--data", `{"k": 1}`}, "", func(o *loadOptions) bool {
			return o.target == loadgen.Target{App: "a", Function: "p", Pipeline: true} && o.poisson == 250*time.Millisecond &&
				o.duration == time.Minute && o.seed == 9 && string(o.event) == `{"k": 1}`
		}},
		{[]string{"--trace", "t.csv", "--speed", "60", "--concurrency", "0", "--data", "@" + event, "--json", "out.json"}, "", func(o *loadOptions) bool {
			return o.trace == "t.csv" && o.speed == 60 && o.concurrency == 0 && string(o.event) == `{"from": "file"}` && o.jsonPath == "out.json"
		}},
		{[]string{"--app", "a", "--function", "f", "--count", "3"}, "say when to send", nil},
		{[]string{"--app", "a", "--function", "f", "--every", "1s", "--poisson", "1s", "--count", "3"}, "exclude each other", nil},
		{[]string{"--app", "a", "--function", "f", "--every", "1s", "--trace", "t.csv"}, "exclude each other", nil},
		{[]string{"--app", "a", "--function", "f", "--every", "0s", "--count", "3"}, "--every must be positive", nil},
		{[]string{"--app", "a", "--function", "f", "--poisson", "-1s", "--count", "3"}, "--poisson must be positive", nil},
		{[]string{"--app", "a", "--function", "f", "--every", "1s"}, "need --duration or --count", nil},
		{[]string{"--function", "f", "--every", "1s", "--count", "1"}, "--app is required", nil},
		{[]string{"--app", "a", "--every", "1s", "--count", "1"}, "--function or --pipeline is required", nil},
		{[]string{"--app", "a", "--function", "f", "--pipeline", "p", "--every", "1s", "--count", "1"}, "--function and --pipeline exclude each other", nil},
		{[]string{"--trace", "t.csv", "--app", "a"}, "the trace names what to invoke", nil},
		{[]string{"--trace", ""}, "--trace needs a file", nil},
		{[]string{"--trace", "t.csv", "--speed", "0"}, "--speed must be a positive number", nil},
		{[]string{"--trace", "t.csv", "--speed", "-Inf"}, "--speed must be a positive number", nil},
		{[]string{"--trace", "t.csv", "--count", "-1"}, "--count must not be negative", nil},
		{[]string{"--trace", "t.csv", "--duration", "-1s"}, "--duration must not be negative", nil},
		{[]string{"--trace", "t.csv", "--concurrency", "-2"}, "--concurrency must not be negative", nil},
		{[]string{"--trace", "t.csv", "--data", "{nope"}, "--data is not valid JSON", nil},
		{[]string{"--trace", "t.csv", "extra"}, `unexpected argument "extra"`, nil},
		{[]string{"--trace", "t.csv", "--every", "soon"}, "invalid value", nil},
	}
	for _, tt := range tests {
		o, err := parseLoadFlags(tt.args, io.Discard)
		if tt.err == "" {
			if err != nil {
				t.Errorf("%v: %v", tt.args, err)
			} else if !tt.want(o) {
				t.Errorf("%v: options %+v", tt.args, o)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.err) || !errors.Is(err, errUsage) {
			t.Errorf("%v: error %v, want a usage error saying %q", tt.args, err, tt.err)
		}
	}
	// A missing --data file is not a usage error.
	if _, err := parseLoadFlags([]string{"--trace", "t.csv", "--data", "@" + filepath.Join(dir, "none")}, io.Discard); err == nil || errors.Is(err, errUsage) {
		t.Errorf("missing data file: %v", err)
	}
}

// loadController imitates the controller's invoke and pipeline endpoints:
// it checks the token, answers the first invocation of each function as
// cold, fails function "bad" with a ValueError and knows no function
// "missing".
type loadController struct {
	mu     sync.Mutex
	calls  map[string]int
	events []string
}

const loadToken = "0123456789abcdef-load"

func (f *loadController) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+loadToken {
		http.Error(w, `{"error": "unauthorized"}`, http.StatusUnauthorized)
		return
	}
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.calls[r.URL.Path]++
	n := f.calls[r.URL.Path]
	f.events = append(f.events, string(body))
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case "/v1/apps/shop/functions/missing/invoke":
		w.WriteHeader(http.StatusNotFound)
		json.NewEncoder(w).Encode(map[string]string{"error": `application shop has no function "missing"`})
	case "/v1/apps/shop/pipelines/orders/run":
		json.NewEncoder(w).Encode(api.PipelineRun{App: "shop", Pipeline: "orders", OK: true,
			Stages: map[string]*api.Invocation{"a": {OK: true, Cold: n == 1}, "b": {OK: true}}})
	default:
		if !strings.HasPrefix(r.URL.Path, "/v1/apps/shop/functions/") {
			http.NotFound(w, r)
			return
		}
		fn := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/v1/apps/shop/functions/"), "/invoke")
		rec := api.Invocation{App: "shop", Function: fn, Cold: n == 1, OK: true, Result: json.RawMessage(`{}`), TotalMS: 1}
		if fn == "bad" {
			rec.OK, rec.Result, rec.Error = false, nil, &api.ErrorInfo{Type: "ValueError", Message: "no"}
		}
		json.NewEncoder(w).Encode(rec)
	}
}

func startLoadController(t *testing.T) (*loadController, string) {
	f := &loadController{calls: map[string]int{}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv.URL
}

func TestLoadAgainstController(t *testing.T) {
	f, url := startLoadController(t)
	jsonOut := filepath.Join(t.TempDir(), "load.json")
	var out, errOut bytes.Buffer
	// 20 invocations 1 s apart, at speed 100: 10 ms apart.
	code := run(context.Background(), []string{"load", "--controller", url, "--token", loadToken,
		"--app", "shop", "--function", "cart", "--every", "1s", "--count", "20", "--speed", "100",
		"--data", `{"n": 1}`, "--json", jsonOut}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, out.String(), errOut.String())
	}
	if n := f.calls["/v1/apps/shop/functions/cart/invoke"]; n != 20 {
		t.Errorf("the controller got %d invocations, want 20", n)
	}
	for _, ev := range f.events {
		if ev != `{"n": 1}` {
			t.Errorf("event %q", ev)
		}
	}
	// app function invocations errors cold ...
	row := strings.Fields(loadLine(t, out.String(), "cart"))
	if len(row) < 5 || row[0] != "shop" || row[2] != "20" || row[3] != "0" || row[4] != "1" {
		t.Errorf("summary row %q\n%s", row, out.String())
	}
	if !strings.Contains(out.String(), "20 invocations in") {
		t.Errorf("summary:\n%s", out.String())
	}

	var rep struct {
		Settings loadSettings
		loadgen.Report
	}
	b, err := os.ReadFile(jsonOut)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), loadToken) {
		t.Error("the JSON output holds the token")
	}
	s := rep.Total
	if s.Invocations != 20 || s.Sent != 20 || s.Errors() != 0 || s.Cold != 1 || len(rep.Results) != 20 || len(rep.Targets) != 1 {
		t.Errorf("JSON summary %+v", s)
	}
	if s.IntendedRate != 100 || rep.Settings.Speed != 100 || rep.Settings.Count != 20 || rep.Settings.Target.Function != "cart" {
		t.Errorf("intended rate %v, settings %+v", s.IntendedRate, rep.Settings)
	}
	if rep.Results[19].Scheduled != 190*time.Millisecond || !rep.Results[0].Cold || rep.Results[1].Cold {
		t.Errorf("results %+v", rep.Results)
	}
}

func TestLoadTraceErrorsAndExitStatus(t *testing.T) {
	f, url := startLoadController(t)
	trace := filepath.Join(t.TempDir(), "trace.csv")
	os.WriteFile(trace, []byte(`offset_seconds,app,function,event
0,shop,cart
0.5,shop,bad,{"x": 1}
1,shop,pipeline:orders
{"offset": 1.5, "app": "shop", "function": "cart"}
2,shop,bad
`), 0o644)
	args := []string{"load", "--controller", url, "--token", loadToken, "--trace", trace, "--speed", "50"}
	var out, errOut bytes.Buffer
	// Function errors are reported, not failed on.
	if code := run(context.Background(), args, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s%s", code, out.String(), errOut.String())
	}
	if f.calls["/v1/apps/shop/functions/cart/invoke"] != 2 || f.calls["/v1/apps/shop/functions/bad/invoke"] != 2 ||
		f.calls["/v1/apps/shop/pipelines/orders/run"] != 1 {
		t.Errorf("calls %v", f.calls)
	}
	summary := out.String()
	for _, want := range [][]string{
		{"shop", "bad", "2", "2", "1"},
		{"shop", "cart", "2", "0", "1"},
		{"shop", "orders", "(pipeline)", "1", "0", "1"},
		{"total", "5", "2", "3"},
	} {
		row := strings.Fields(loadLine(t, summary, want[:2]...))
		if len(row) < len(want) || strings.Join(row[:len(want)], " ") != strings.Join(want, " ") {
			t.Errorf("row %q, want it to start %q\n%s", row, want, summary)
		}
	}
	if !strings.Contains(summary, "errors of shop/bad: 2 ValueError") {
		t.Errorf("no error types in\n%s", summary)
	}

	// An invocation the controller refuses fails the run.
	out.Reset()
	errOut.Reset()
	code := run(context.Background(), []string{"load", "--controller", url, "--token", loadToken,
		"--app", "shop", "--function", "missing", "--every", "10ms", "--count", "3"}, &out, &errOut)
	if code != 1 || !strings.Contains(errOut.String(), "3 of 3 invocations could not be sent or were refused") ||
		!strings.Contains(out.String(), "errors of shop/missing: 3 http 404") {
		t.Errorf("refused: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	// So does a wrong token.
	out.Reset()
	errOut.Reset()
	code = run(context.Background(), []string{"load", "--controller", url, "--token", "wrong-token-0123456789",
		"--app", "shop", "--function", "cart", "--every", "10ms", "--count", "2"}, &out, &errOut)
	if code != 1 || !strings.Contains(out.String(), "2 http 401") {
		t.Errorf("wrong token: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	// And a controller that is not there.
	out.Reset()
	errOut.Reset()
	code = run(context.Background(), []string{"load", "--controller", "http://127.0.0.1:1", "--token", loadToken,
		"--app", "shop", "--function", "cart", "--every", "10ms", "--count", "2"}, &out, &errOut)
	if code != 1 || !strings.Contains(out.String(), "2 transport") {
		t.Errorf("no controller: exit %d\n%s%s", code, out.String(), errOut.String())
	}

	// Usage errors exit 2; a bad trace names its line and exits 1.
	bad := filepath.Join(t.TempDir(), "bad.csv")
	os.WriteFile(bad, []byte("0,shop,cart\nlater,shop,cart\n"), 0o644)
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"load", "--app", "shop", "--every", "1s"}, 2, "--function or --pipeline is required"},
		{[]string{"load", "--trace", bad, "--controller", url, "--token", loadToken}, 1, bad + `:2: bad offset "later"`},
		{[]string{"load", "--trace", filepath.Join(t.TempDir(), "none.csv")}, 1, "no such file"},
	} {
		out.Reset()
		errOut.Reset()
		if code := run(context.Background(), tt.args, &out, &errOut); code != tt.code || !strings.Contains(errOut.String(), tt.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tt.args, code, errOut.String(), tt.code, tt.want)
		}
	}
}

func TestLoadInterrupted(t *testing.T) {
	_, url := startLoadController(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out, errOut bytes.Buffer
	code := run(ctx, []string{"load", "--controller", url, "--token", loadToken,
		"--app", "shop", "--function", "cart", "--every", "1h", "--count", "2"}, &out, &errOut)
	if code != 1 || !strings.Contains(errOut.String(), "interrupted after 0 invocations") {
		t.Errorf("exit %d\n%s%s", code, out.String(), errOut.String())
	}
}

func TestLoadProgressLine(t *testing.T) {
	got := loadProgressLine(loadgen.Progress{Sent: 10, Done: 7, Errors: 1, InFlight: 3}, 1234*time.Millisecond)
	if want := "1.2s elapsed: 10 sent, 7 done, 1 errors, 3 in flight"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
	got = loadProgressLine(loadgen.Progress{Sent: 10, Done: 7, InFlight: 3, Delayed: 2}, time.Minute)
	if !strings.HasSuffix(got, ", 2 sent late (concurrency cap)") {
		t.Errorf("%q", got)
	}
}

// loadLine returns the first line of s with the given fields in a row.
func loadLine(t *testing.T, s string, want ...string) string {
	t.Helper()
	for line := range strings.Lines(s) {
		fields := strings.Fields(line)
		for i := 0; i+len(want) <= len(fields); i++ {
			if slices.Equal(fields[i:i+len(want)], want) {
				return strings.TrimSpace(line)
			}
		}
	}
	t.Errorf("no line with %q in\n%s", want, s)
	return ""
}
