package controller

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/hoard-io/hoard/internal/admission"
)

// TestAdmissionDecision: under cache.admission: benefit the controller
// learns a function's admission from its invocations' times, leaving out
// the first on a new instance and those without times, carries the
// decision to the agent with the next invocation, shows it in the stats,
// and learns again after a redeploy; under all it never refuses.
func TestAdmissionDecision(t *testing.T) {
	c, fa, _ := setup(t)
	ctx := context.Background()
	const benefit = "name: app\nmax_instances: 1\nkeep_alive: 1h\ncache: {admission: benefit}\nfunctions: {f: {handler: m.h}}\n"
	if _, err := c.Deploy(ctx, pkg(t, benefit)); err != nil {
		t.Fatal(err)
	}
	call := func(event string) {
		t.Helper()
		rec, err := c.Invoke(ctx, "app", "f", json.RawMessage(event), "test")
		if err != nil || !rec.OK {
			t.Fatalf("invoke: %+v %v", rec, err)
		}
		if rec.NoCache != fa.lastNoCache.Load() {
			t.Fatalf("the record says no_cache %v, the agent was told %v", rec.NoCache, fa.lastNoCache.Load())
		}
	}
	admit := func() bool {
		t.Helper()
		st, err := c.Stats("app")
		if err != nil || st["f"].Admission == nil {
			t.Fatalf("stats %+v %v", st, err)
		}
		return st["f"].Admission.Admit
	}
	compute := `{"run_ms": 1000, "io": {"served_ms": 10, "store_ms": 10}}`
	// The cold first invocation and ones without times teach nothing.
	call(compute)
	call(`{"run_ms": 1000}`)
	for i := range admission.DefaultMinSamples {
		if fa.lastNoCache.Load() || !admit() {
			t.Fatalf("refused after %d compute-bound invocations, while learning", i)
		}
		call(compute)
	}
	if admit() {
		t.Fatal("a compute-bound function is still cached")
	}
	call(compute)
	if !fa.lastNoCache.Load() {
		t.Fatal("the agent was not told to stop caching")
	}
	st, _ := c.Stats("app")
	if a := st["f"].Admission; a.Samples != admission.DefaultMinSamples+1 || a.Share > 0.02 {
		t.Fatalf("admission %+v", a)
	}
	// I/O-bound invocations (hits served fast, the store's cost high)
	// win the vote back.
	for range admission.DefaultMinSamples + 2 {
		call(`{"run_ms": 30, "io": {"served_ms": 5, "store_ms": 200}}`)
	}
	if !admit() {
		t.Fatal("an I/O-bound function is not cached")
	}
	// A redeploy learns again; an application admitting all has no
	// decision and never refuses.
	for range admission.DefaultMinSamples + 1 {
		call(compute)
	}
	if admit() {
		t.Fatal("compute-bound again, still cached")
	}
	if _, err := c.Deploy(ctx, pkg(t, benefit+"# v2\n")); err != nil {
		t.Fatal(err)
	}
	if st, _ := c.Stats("app"); st["f"].Admission == nil || !st["f"].Admission.Admit || st["f"].Admission.Samples != 0 {
		t.Fatalf("after a redeploy: %+v", st["f"].Admission)
	}
	if _, err := c.Deploy(ctx, pkg(t, "name: all\nmax_instances: 1\nkeep_alive: 1h\nfunctions: {f: {handler: m.h}}\n")); err != nil {
		t.Fatal(err)
	}
	for i := range admission.DefaultMinSamples + 2 {
		rec, err := c.Invoke(ctx, "all", "f", json.RawMessage(compute), "test")
		if err != nil || rec.NoCache {
			t.Fatalf("all, invocation %d: %+v %v", i, rec, err)
		}
	}
	if st, _ := c.Stats("all"); st["f"].Admission != nil {
		t.Fatalf("admission all has a decision: %+v", st["f"].Admission)
	}
	// A bad spec value is refused and changes nothing.
	version := func() int {
		for _, a := range c.Apps() {
			if a.Name == "app" {
				return a.Version
			}
		}
		return 0
	}
	before := version()
	if _, err := c.Deploy(ctx, pkg(t, "name: app\ncache: {admission: some}\nfunctions: {f: {handler: m.h}}\n")); err == nil {
		t.Fatal("admission: some was accepted")
	}
	if after := version(); after != before || before == 0 {
		t.Fatalf("a refused deploy moved the version from %d to %d", before, after)
	}
}
