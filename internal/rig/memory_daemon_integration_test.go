//go:build integration

package rig

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/agent"
	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/appspec"
	"github.com/hoard-io/hoard/internal/cacheconfig"
	"github.com/hoard-io/hoard/internal/store"
)

// memSpec and memFns are TestMemoryDaemon's application: the cache shares
// the 384 MiB booked memory (Faa$T's setting), up to 256 MiB of it.
const memSpec = `
name: mem
memory: 384MiB
timeout: 60s
keep_alive: 1h
max_instances: 1
buckets: {data: read-only}
cache: {shared: true, budget: 256MiB}
functions:
  fill: {handler: fns.fill}
  grow: {handler: fns.grow}
`

const memFns = `
import time
import boto3

s3 = boto3.client("s3")

def fill(event, context):
    n = 0
    for k in event["keys"]:
        n += len(s3.get_object(Bucket=event["bucket"], Key=k)["Body"].read())
    return n

def grow(event, context):
    # As a function loading data does: step by step, every page touched.
    target, step = event["target"], event["step"]
    held, total = [], 0
    while total < target:
        n = min(step, target - total)
        b = bytearray(n)
        for i in range(0, n, 4096):
            b[i] = 1
        held.append(b)
        total += n
        print("holding", total >> 20, "MiB", flush=True)
        time.sleep(event["pause"])
    return total
`

// TestMemoryDaemon reproduces Faa$T's Table 5 situation (§6.5): an
// application whose cache shares its memory has filled the cache, then a
// function allocates an array that, with the function's and the
// cachelet's own memory, comes to 96% of the instance's memory. With the
// memory daemon the cache gives the memory back and the allocation
// succeeds; without it the function is killed for running out of memory.
func TestMemoryDaemon(t *testing.T) {
	const (
		objects = 12
		objSize = 16 << 20
	)
	run := func(t *testing.T, daemon bool) {
		if !daemon {
			t.Setenv(agent.MemoryDaemonEnv, "off")
		}
		e := start(t)
		c := e.p.Controller
		dir := t.TempDir()
		for name, body := range map[string]string{appspec.FileName: memSpec, "fns.py": memFns} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		pkg, err := appspec.Pack(dir)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Deploy(context.Background(), pkg.Data); err != nil {
			t.Fatal(err)
		}
		data := bytes.Repeat([]byte("hoard memory daemon "), objSize/20+1)[:objSize]
		var keys []string
		for i := range objects {
			k := fmt.Sprintf("mem/%02d", i)
			if _, err := e.st.Put(context.Background(), "data", k, bytes.NewReader(data), objSize, store.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			keys = append(keys, k)
		}
		instance := func() api.InstanceInfo {
			t.Helper()
			ins := e.p.Agent.Instances()
			if len(ins) != 1 {
				t.Fatalf("%d instances, want 1", len(ins))
			}
			return ins[0]
		}

		// Loaded, nothing cached: the worker's and the cachelet's own
		// memory.
		if _, err := c.Preload(context.Background(), "mem", false); err != nil {
			t.Fatal(err)
		}
		empty := instance()
		limit := empty.MemoryLimit
		if limit != 384<<20+cacheconfig.DefaultMemoryOverhead || !empty.Enforced {
			t.Fatalf("memory limit %d (enforced %v); want 384 MiB + the cachelet's overhead, enforced (cache.shared)", limit, empty.Enforced)
		}
		if (empty.MemoryDaemon != nil) != daemon {
			t.Fatalf("memory daemon %+v; want one: %v", empty.MemoryDaemon, daemon)
		}

		// Fill the cache: 192 MiB of the 256 MiB budget.
		if rec := invoke(t, c, "mem", "fill", map[string]any{"bucket": "data", "keys": keys}); !rec.OK {
			t.Fatalf("fill: %+v\n%s", rec.Error, rec.Log)
		}
		// What the cache does not hold is the baseline: the worker (with
		// what reading left in its heap) and the cachelet's own memory.
		// Measured over a few samples, the largest kept.
		time.Sleep(500 * time.Millisecond)
		var filled api.InstanceInfo
		var baseline int64
		for range 5 {
			in := instance()
			if b := in.MemoryWorkingSet - in.Cache.CacheBytes; b > baseline {
				baseline, filled = b, in
			}
			time.Sleep(100 * time.Millisecond)
		}
		cached := filled.Cache.CacheBytes
		if cached < objects*objSize*3/4 {
			t.Fatalf("the cache holds %d MiB after the fill; want most of the %d MiB read", cached>>20, objects*objSize>>20)
		}
		if d := filled.MemoryDaemon; d != nil && d.Shrinks != 0 {
			t.Fatalf("the daemon shrank the cache while it filled: %+v", d)
		}
		// The function allocates what brings function + cachelet to 96%
		// of the limit if the cache were empty.
		target := (limit*96/100 - baseline) &^ (1<<20 - 1)
		t.Logf("limit %d MiB; working set %.1f MiB empty, %.1f MiB filled (usage %.1f MiB); cache %.1f MiB; baseline (working set - cache) %.1f MiB; "+
			"the function allocates %d MiB: %.1f%% of the limit with the baseline, %.1f%% with the cache too",
			limit>>20, mb(empty.MemoryWorkingSet), mb(filled.MemoryWorkingSet), mb(filled.MemoryUsage), mb(cached), mb(baseline),
			target>>20, pct(baseline+target, limit), pct(baseline+target+cached, limit))

		rec := invoke(t, c, "mem", "grow", map[string]any{"target": target, "step": 16 << 20, "pause": 0.1})
		after := instance()
		t.Logf("daemon %v: ok %v error %+v in %.0f ms; cache %.1f -> %.1f MiB; OOM kills %d; daemon %+v",
			daemon, rec.OK, rec.Error, rec.ExecMS, mb(cached), mb(after.Cache.CacheBytes), after.OOMKills, after.MemoryDaemon)
		if !daemon {
			if rec.OK || rec.Error == nil || rec.Error.Type != "OutOfMemory" || after.OOMKills == 0 {
				t.Fatalf("without the daemon: ok %v error %+v, %d OOM kills; want OutOfMemory\n%s", rec.OK, rec.Error, after.OOMKills, rec.Log)
			}
			if after.Cache.CacheBytes != cached {
				t.Errorf("without the daemon the cache went from %d to %d bytes", cached, after.Cache.CacheBytes)
			}
			return
		}
		if !rec.OK {
			t.Fatalf("with the daemon the allocation failed: %+v\n%s", rec.Error, rec.Log)
		}
		var got int64
		json.Unmarshal(rec.Result, &got)
		d := after.MemoryDaemon
		t.Logf("with the daemon: %d shrinks freed %.1f MiB; peak working set %.1f MiB (%.1f%% of the limit)",
			d.Shrinks, mb(d.FreedBytes), mb(d.PeakUsage), pct(d.PeakUsage, limit))
		if got != target || after.OOMKills != 0 {
			t.Errorf("allocated %d of %d bytes, %d OOM kills", got, target, after.OOMKills)
		}
		if d.Shrinks == 0 || d.FreedBytes < cached/2 || d.CacheBudget >= d.ConfiguredBudget || after.Cache.CacheBytes > cached/2 || d.PeakUsage > limit {
			t.Errorf("the cache did not give its memory: cache %d -> %d bytes, daemon %+v", cached, after.Cache.CacheBytes, d)
		}
		// The cachelet's metrics agree, and its Go soft memory limit
		// followed the budget.
		m := scrape(t, after.MetricsURL)
		if over := m["go_gc_gomemlimit_bytes"] - m["hoard_cache_budget_bytes"]; m["hoard_cachelet_budget_evicted_bytes_total"] != float64(d.FreedBytes) ||
			over <= 0 || over > cacheconfig.DefaultMemoryOverhead {
			t.Errorf("cachelet metrics: evicted for the budget %v, budget %v, Go memory limit %v; want %d evicted, the limit at most the overhead over the budget",
				m["hoard_cachelet_budget_evicted_bytes_total"], m["hoard_cache_budget_bytes"], m["go_gc_gomemlimit_bytes"], d.FreedBytes)
		}
		// The function is done: the budget grows back, step by step.
		eventually(t, "the budget back to the spec's", 30*time.Second, func() bool {
			d := instance().MemoryDaemon
			return d.CacheBudget == d.ConfiguredBudget && d.Raises > 0
		})
		t.Logf("budget back: %+v", instance().MemoryDaemon)
	}
	t.Run("with the memory daemon", func(t *testing.T) { run(t, true) })
	t.Run("without the memory daemon", func(t *testing.T) { run(t, false) })
}

func mb(n int64) float64         { return float64(n) / (1 << 20) }
func pct(n, limit int64) float64 { return 100 * float64(n) / float64(limit) }
