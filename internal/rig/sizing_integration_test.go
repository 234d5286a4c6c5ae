//go:build integration

package rig

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/appspec"
	"github.com/hoard-io/hoard/internal/controller"
	"github.com/hoard-io/hoard/internal/netshape"
	"github.com/hoard-io/hoard/internal/predict"
)

// sizingSpec books 256 MiB for a function that uses a few tens; its
// cache has 32 MiB of its own.
const sizingSpec = `
name: sz
memory: 256MiB
timeout: 20s
keep_alive: 1h
max_instances: 1
buckets: {data: read-write}
cache: {budget: 32MiB}
functions:
  work: {handler: fns.work}
`

// sizingFns: work holds mb MiB, then (grow) adds grow MiB 2 MiB at a time,
// or (burst) burst MiB at once.
const sizingFns = `
import time

def work(event, context):
    held = [b"x" * (event["mb"] << 20)]
    for _ in range(event.get("grow", 0) // 2):
        held.append(b"g" * (2 << 20))
        time.sleep(0.02)
    if event.get("burst"):
        held.append(b"b" * (event["burst"] << 20))
    return {"held_mib": sum(len(h) for h in held) >> 20}
`

func deployFns(t *testing.T, e *env, spec, fns string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, appspec.FileName), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "fns.py"), []byte(fns), 0o644); err != nil {
		t.Fatal(err)
	}
	pkg, err := appspec.PackBlocks(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.p.Controller.Deploy(context.Background(), pkg.Data); err != nil {
		t.Fatal(err)
	}
}

// TestSizing drives OFC's opportunistic memory end to end through the
// controller, the agent and a real cgroup: a function's model matures
// (the threshold lowered to 20 invocations to stay quick), its sandbox
// shrinks to the prediction (every invocation carries the same arguments,
// so that the model can place each: an argument it never saw is a doubt,
// which gets the booked memory) and the cache's budget grows by the rest of
// the booked memory; an invocation that outgrows its prediction slowly is
// lent memory from the node's slack pool and succeeds; one that bursts
// past it is killed, run again at the booked size and succeeds, and the
// caller sees no failure.
func TestSizing(t *testing.T) {
	e := startShaped(t, netshape.Link{}, func(c *Config) {
		c.Prediction = predict.Config{MinInvocations: 20, RetrainEvery: 5}
	})
	if e.p.Agent.SandboxMode() != "cgroup1" {
		t.Logf("sandbox mode %s: functions are not sized apart from their instance there", e.p.Agent.SandboxMode())
	}
	deployFns(t, e, sizingSpec, sizingFns)
	const booked = 256 << 20
	c := e.p.Controller
	made := 0 // invocations so far
	var firstResizeMS float64
	rec := untilSized(t, c, 80, &made, &firstResizeMS)
	if e.p.Agent.SandboxMode() != "cgroup1" {
		return
	}
	m := rec.Memory
	t.Logf("mature after %d invocations: predicted %d MiB, peak %d MiB, cache given %d MiB; model %+v",
		modelOf(t, c).Observed, rec.Predicted>>20, m.Peak>>20, m.CacheGiven>>20, modelOf(t, c))
	if !m.Sized || m.Limit != rec.Predicted || m.Limit >= booked || m.CacheGiven != booked-m.Limit || m.Peak > m.Limit {
		t.Fatalf("a mature prediction did not shrink the sandbox: %+v (predicted %d)", m, rec.Predicted)
	}
	info := instanceInfo(t, e, rec.Instance)
	if want := int64(32<<20) + m.CacheGiven; info.Cache.BudgetBytes != want {
		t.Fatalf("the cache's budget is %d, want its own 32 MiB + %d given", info.Cache.BudgetBytes, m.CacheGiven)
	}
	// The first sized invocation resized; a later one at the same
	// prediction finds the limit already set and resizes nothing.
	if info.FunctionLimit != m.Limit || info.LastMemory == nil || info.LastMemory.Limit != m.Limit || firstResizeMS <= 0 {
		t.Fatalf("the agent shows function limit %d, last %+v; first resize %.3f ms", info.FunctionLimit, info.LastMemory, firstResizeMS)
	}
	t.Logf("resizing the function to its first prediction (and the cache's budget) took %.3f ms", firstResizeMS)

	// Slowly past the prediction: lent from the slack pool.
	rec = invoke(t, c, "sz", "work", map[string]any{"mb": 4, "kind": "a", "grow": 80, "burst": 0})
	made++
	if !rec.OK || rec.Memory == nil || !rec.Memory.Sized || rec.Memory.Raised == 0 || rec.Memory.Retried {
		t.Fatalf("growing past the prediction: ok %v, memory %+v, error %+v", rec.OK, rec.Memory, rec.Error)
	}
	t.Logf("grew past the prediction: %+v", rec.Memory)

	// The under-prediction is among the newest invocations the model is
	// judged on, and more than one interval short: it may have lost its
	// maturity. Ordinary invocations bring it back. (The under-prediction
	// retrains the model at once, in the background: wait for it.)
	eventually(t, "a retraining after the under-prediction", 10*time.Second, func() bool { return modelOf(t, c).TrainedOn >= made })
	untilSized(t, c, 40, &made, nil)

	// A burst past the prediction and the slack: killed, run again at
	// the booked size, and a success for the caller.
	rec = invoke(t, c, "sz", "work", map[string]any{"mb": 4, "kind": "a", "grow": 0, "burst": 200})
	var out struct {
		Held int `json:"held_mib"`
	}
	_ = json.Unmarshal(rec.Result, &out)
	if !rec.OK || rec.Error != nil || rec.Memory == nil || !rec.Memory.Retried || out.Held != 204 {
		t.Fatalf("a burst past the prediction: ok %v, result %s, memory %+v, error %+v", rec.OK, rec.Result, rec.Memory, rec.Error)
	}
	t.Logf("burst: %+v", rec.Memory)
	// The controller learns from an invocation after answering it.
	eventually(t, "the retry in the model's record", 10*time.Second, func() bool { return modelOf(t, c).Retries == 1 })
	if mi := modelOf(t, c); mi.UnderPredicted < 2 {
		t.Errorf("the model's record: %+v", mi)
	}
	body := scrapeText(t, e.p.ControllerURL+"/metrics", e.cfg.ControllerToken)
	for _, want := range []string{`hoard_memory_oom_retries_total{app="sz",function="work"} 1`, `hoard_memory_model_mature{app="sz",function="work"}`,
		`hoard_memory_predictions_total{app="sz",function="work",outcome="under"} 2`} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	// The maturity is in the application's events (and, the two
	// under-predictions among the newest held out, so may its loss).
	var matured bool
	for _, a := range c.Apps() {
		for _, ev := range a.Events {
			if ev.Kind == "model" {
				t.Logf("event: %s", ev.Detail)
				matured = matured || strings.Contains(ev.Detail, "work's memory model matured after")
			}
		}
	}
	if !matured {
		t.Error("no event says the model matured")
	}
}

// untilSized invokes work with ordinary arguments until one (of the
// smallest) is sized by a mature prediction, at most n times; resizeMS,
// when not nil, gets what resizing took on the first sized invocation
// (a later one at the same prediction finds the limit set).
func untilSized(t *testing.T, c *controller.Controller, n int, made *int, resizeMS *float64) *api.Invocation {
	t.Helper()
	first := true
	sizes := []int{4, 12, 20}
	for i := 0; i < n; i++ {
		rec := invoke(t, c, "sz", "work", map[string]any{"mb": sizes[i%3], "kind": "a", "grow": 0, "burst": 0})
		*made++
		if !rec.OK || rec.Memory == nil || rec.Memory.Peak == 0 {
			t.Fatalf("invocation %d: ok %v, memory %+v, error %+v", i, rec.OK, rec.Memory, rec.Error)
		}
		if rec.Memory.Sized && first {
			first = false
			if resizeMS != nil {
				*resizeMS = rec.Memory.ResizeMS
			}
		}
		if rec.Predicted > 0 && i%3 == 0 {
			return rec
		}
	}
	t.Fatalf("no mature prediction after %d invocations: %+v", n, modelOf(t, c))
	return nil
}

// scrapeText reads a metrics page behind a bearer token.
func scrapeText(t *testing.T, url, token string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func modelOf(t *testing.T, c *controller.Controller) api.ModelInfo {
	t.Helper()
	st, err := c.Stats("sz")
	if err != nil {
		t.Fatal(err)
	}
	if m := st["work"].Model; m != nil {
		return *m
	}
	return api.ModelInfo{}
}

func instanceInfo(t *testing.T, e *env, id string) api.InstanceInfo {
	t.Helper()
	for _, in := range e.p.Agent.Instances() {
		if in.ID == id {
			return in
		}
	}
	t.Fatalf("instance %s not found", id)
	return api.InstanceInfo{}
}
