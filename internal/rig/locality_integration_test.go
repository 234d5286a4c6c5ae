//go:build integration

package rig

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/hoard-io/hoard/internal/ring"
)

// TestRouteToData: with two warm instances idle, an invocation whose
// event names its input goes to the instance whose cachelet owns (and,
// having read it before, holds) the input, not to the most recently used
// one, reads it as a local hit, and the application's events say why.
func TestRouteToData(t *testing.T) {
	e := start(t)
	e.deploy(t, testSpec)
	c := e.p.Controller
	// Two instances: two invocations at once.
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			invoke(t, c, "t1", "read", map[string]any{"bucket": "data", "keys": []string{}, "hold": 1})
		}()
	}
	wg.Wait()
	var ids []string
	for _, a := range c.Apps() {
		if a.Name == "t1" {
			for _, in := range a.Instances {
				ids = append(ids, in.ID)
			}
		}
	}
	if len(ids) != 2 {
		t.Fatalf("instances %v, want 2", ids)
	}
	r, err := ring.New(ring.Config{}, ids)
	if err != nil {
		t.Fatal(err)
	}
	keyOf := func(owner string) string {
		for n := 0; ; n++ {
			if k := fmt.Sprintf("in/%d", n); r.Owner("data", k) == owner {
				return k
			}
		}
	}
	a, b := ids[0], ids[1]
	ka, kb := keyOf(a), keyOf(b)
	e.put(t, "data", ka, "owned by a")
	e.put(t, "data", kb, "owned by b")
	if rec := invoke(t, c, "t1", "upper", map[string]any{"bucket": "data", "key": kb}); rec.Instance != b || rec.Route != "owner" {
		t.Fatalf("first read of b's key: instance %s (route %s), want %s", rec.Instance, rec.Route, b)
	}
	if rec := invoke(t, c, "t1", "upper", map[string]any{"bucket": "data", "key": ka}); rec.Instance != a {
		t.Fatalf("a's key: instance %s (route %s), want %s", rec.Instance, rec.Route, a)
	}
	// a is now the most recently used; b holds kb, which it owns and read
	// last.
	rec := invoke(t, c, "t1", "upper", map[string]any{"bucket": "data", "key": kb})
	if !rec.OK || rec.Instance != b || rec.Route != "reader" || rec.Reads["local_hit"].Count != 1 {
		t.Fatalf("b's key again: ok %v, instance %s (route %s), reads %+v; want %s, a local hit", rec.OK, rec.Instance, rec.Route, rec.Reads, b)
	}
	// Without an input, the most recently used.
	if rec := invoke(t, c, "t1", "read", map[string]any{"bucket": "data", "keys": []string{}}); rec.Instance != b || rec.Route != "warm" {
		t.Errorf("no input: instance %s (route %s), want %s, warm", rec.Instance, rec.Route, b)
	}
	var said bool
	for _, app := range c.Apps() {
		for _, ev := range app.Events {
			if ev.Kind == "route" && strings.Contains(ev.Detail, "routed to "+b+", not "+a) && strings.Contains(ev.Detail, kb) {
				said = true
			}
		}
	}
	if !said {
		t.Error("no event says the invocation went to the data")
	}
	body := scrapeText(t, e.p.ControllerURL+"/metrics", e.cfg.ControllerToken)
	if !strings.Contains(body, `hoard_route_decisions_total{app="t1",reason="owner"} 2`) || !strings.Contains(body, `hoard_route_decisions_total{app="t1",reason="reader"} 1`) {
		t.Errorf("route metrics:\n%s", grepLines(body, "hoard_route_decisions_total"))
	}
}

func grepLines(body, prefix string) string {
	var out []string
	for line := range strings.Lines(body) {
		if strings.HasPrefix(line, prefix) {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return strings.Join(out, "\n")
}
