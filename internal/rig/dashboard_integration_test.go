//go:build integration

package rig

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/appspec"
)

// dashboardSpec is the dashboard test's own application, deployed and
// invoked through the controller's HTTP API as a user's would be.
const dashboardSpec = `
name: dash
memory: 96MiB
timeout: 20s
keep_alive: 1h
max_instances: 2
buckets: {data: read-only}
cache: {budget: 16MiB}
functions:
  count: {handler: words.count}
`

const dashboardFns = `
import boto3

s3 = boto3.client("s3")

def count(event, context):
    body = s3.get_object(Bucket=event["bucket"], Key=event["key"])["Body"].read()
    return {"words": len(body.split()), "bytes": len(body)}
`

// deployOverAPI packs spec and its code and deploys them through the
// controller's HTTP API.
func deployOverAPI(t *testing.T, client *api.ControllerClient, spec, fileName, code string) *api.AppInfo {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, appspec.FileName), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, fileName), []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	pkg, err := appspec.PackBlocks(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	info, err := client.Deploy(ctx, pkg.Data)
	if err != nil {
		t.Fatalf("deploy over the API: %v", err)
	}
	return info
}

// TestDashboard drives the controller's dashboard in headless Chromium:
// the page loads with no error in its console, shows the test's own
// application (deployed and invoked through the controller's API) with
// hits after a workload, and updates when a new invocation lands. The
// screenshot goes to $HOARD_DASHBOARD_SCREENSHOT when set (the README's),
// else to the test's directory.
func TestDashboard(t *testing.T) {
	chromium := chromiumPath(t)
	e := start(t)
	client := api.NewControllerClient(e.p.ControllerURL, e.cfg.ControllerToken, nil)
	if info := deployOverAPI(t, client, dashboardSpec, "words.py", dashboardFns); info.Name != "dash" {
		t.Fatalf("deployed %q, want dash", info.Name)
	}
	e.put(t, "data", "in/a", strings.Repeat("word ", 13<<10))
	count := func() {
		t.Helper()
		ev, _ := json.Marshal(map[string]any{"bucket": "data", "key": "in/a"})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		rec, err := client.Invoke(ctx, "dash", "count", ev)
		if err != nil || !rec.OK {
			t.Fatalf("dash/count over the API: %+v, %v", rec, err)
		}
		var out struct{ Words, Bytes int }
		if err := json.Unmarshal(rec.Result, &out); err != nil || out.Words != 13<<10 || out.Bytes != 5*13<<10 {
			t.Fatalf("dash/count answered %s (%v), want 13312 words in 66560 bytes", rec.Result, err)
		}
	}
	for range 3 {
		count()
	}
	login, err := client.DashboardLogin(context.Background())
	if err != nil {
		t.Fatal(err)
	}

	alloc, cancel := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1280, 1000),
		chromedp.UserDataDir(t.TempDir()), chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true))...)
	defer cancel()
	ctx, cancel := chromedp.NewContext(alloc)
	defer cancel()
	ctx, cancel = context.WithTimeout(ctx, 90*time.Second)
	defer cancel()

	var mu sync.Mutex
	var consoleErrors []string
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleException {
				mu.Lock()
				consoleErrors = append(consoleErrors, string(m.Type)+": "+m.Text+" "+m.URL)
				mu.Unlock()
			}
		}
	}()

	attr := func(name string) string {
		t.Helper()
		res, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS("body"), name))
		if err != nil {
			t.Fatalf("reading body's %s: %v", name, err)
		}
		return res.Value
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !cond(); {
			if time.Now().After(deadline) {
				t.Fatalf("the page never showed %s (updates %s, apps %q, hits %s, invocations %s)",
					what, attr("data-updates"), attr("data-apps"), attr("data-hits"), attr("data-invocations"))
			}
			if err := chromedp.Do(ctx, chromedp.Sleep(200*time.Millisecond)); err != nil {
				t.Fatal(err)
			}
		}
	}
	num := func(name string) int {
		n, _ := strconv.Atoi(attr(name))
		return n
	}

	if err := chromedp.Do(ctx, chromedp.Navigate(e.p.ControllerURL+login.Path), chromedp.WaitVisible(chromedp.CSS("#apps .card"))); err != nil {
		t.Fatal(err)
	}
	waitFor("the application with hits", func() bool {
		return attr("data-loaded") == "1" && strings.Contains(attr("data-apps"), "dash") && num("data-hits") > 0
	})
	ratio, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#apps .card[data-app="dash"] .hit-ratio`)))
	if err != nil || !strings.HasSuffix(ratio, "%") || ratio == "0.0%" {
		t.Errorf("dash's hit ratio shows %q (%v)", ratio, err)
	}
	nodes, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#nodes")))
	if err != nil || !strings.Contains(nodes, "dash") {
		t.Errorf("the nodes section does not list dash's instances: %q (%v)", nodes, err)
	}

	// New invocations land while the page polls: its counts follow, and
	// the chart has rates to draw.
	for range 3 {
		before, updates := num("data-invocations"), num("data-updates")
		count()
		waitFor(fmt.Sprintf("more than %d invocations", before), func() bool { return num("data-invocations") > before })
		waitFor("another update", func() bool { return num("data-updates") > updates+1 })
	}
	if paths, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#chart path").length`)); err != nil || paths == 0 {
		t.Errorf("the chart draws %d series (%v)", paths, err)
	}

	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100) /* 100: PNG */)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := png.Decode(bytes.NewReader(shot)); err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	path := os.Getenv("HOARD_DASHBOARD_SCREENSHOT")
	if path == "" {
		path = filepath.Join(t.TempDir(), "dashboard.png")
	}
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(shot))

	if n := num("data-errors"); n != 0 {
		t.Errorf("the page counted %d errors", n)
	}

	// The cachelet's own page, next to its /metrics.
	list := e.p.Agent.Instances()
	if len(list) == 0 || list[0].MetricsURL == "" {
		t.Fatalf("the agent's instances: %+v", list)
	}
	page := strings.TrimSuffix(list[0].MetricsURL, "/metrics") + "/dashboard/"
	if err := chromedp.Do(ctx, chromedp.Navigate(page), chromedp.WaitVisible(chromedp.CSS("#cache .card"))); err != nil {
		t.Fatal(err)
	}
	waitFor("the cachelet's reads", func() bool { return attr("data-loaded") == "1" && num("data-reads") > 0 && num("data-hits") > 0 })
	who, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#who")))
	if err != nil || !strings.Contains(who, list[0].ID) {
		t.Errorf("the cachelet page names %q, want %s (%v)", who, list[0].ID, err)
	}
	if n := num("data-errors"); n != 0 {
		t.Errorf("the cachelet page counted %d errors", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(consoleErrors) > 0 {
		t.Errorf("console errors: %q", consoleErrors)
	}
}

// chromiumPath finds Chromium (installed by `make chromium`).
func chromiumPath(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("chromium is not installed: run `make chromium`")
	return ""
}
