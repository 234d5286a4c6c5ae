//go:build integration

package rig

import (
	"bytes"
	"context"
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
)

// TestDashboard drives the controller's dashboard in headless Chromium:
// the page loads with no error in its console, shows the deployed
// application with hits after a workload, and updates when a new
// invocation lands. The screenshot goes to $HOARD_DASHBOARD_SCREENSHOT
// when set (the README's), else to the test's directory.
func TestDashboard(t *testing.T) {
	chromium := chromiumPath(t)
	e := start(t)
	e.deploy(t, testSpec)
	e.put(t, "data", "in/a", strings.Repeat("a", 64<<10))
	for range 3 {
		if rec := invoke(t, e.p.Controller, "t1", "read", map[string]any{"bucket": "data", "keys": []string{"in/a"}}); !rec.OK {
			t.Fatalf("read: %+v", rec)
		}
	}
	client := api.NewControllerClient(e.p.ControllerURL, e.cfg.ControllerToken, nil)
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
		return attr("data-loaded") == "1" && strings.Contains(attr("data-apps"), "t1") && num("data-hits") > 0
	})
	ratio, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#apps .card[data-app="t1"] .hit-ratio`)))
	if err != nil || !strings.HasSuffix(ratio, "%") || ratio == "0.0%" {
		t.Errorf("t1's hit ratio shows %q (%v)", ratio, err)
	}
	nodes, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#nodes")))
	if err != nil || !strings.Contains(nodes, "t1") {
		t.Errorf("the nodes section does not list t1's instances: %q (%v)", nodes, err)
	}

	// New invocations land while the page polls: its counts follow, and
	// the chart has rates to draw.
	for range 3 {
		before, updates := num("data-invocations"), num("data-updates")
		invoke(t, e.p.Controller, "t1", "read", map[string]any{"bucket": "data", "keys": []string{"in/a"}})
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
