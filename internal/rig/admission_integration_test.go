//go:build integration

package rig

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/admission"
	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/appspec"
	"github.com/hoard-io/hoard/internal/netshape"
	"github.com/hoard-io/hoard/internal/store"
)

const admissionSpec = `
name: adm
memory: 96MiB
timeout: 20s
keep_alive: 1h
max_instances: 1
buckets: {data: read-only}
cache: {budget: 32MiB, admission: benefit}
functions:
  io: {handler: fns.io}
  cpu: {handler: fns.cpu}
`

// io reads its inputs and does next to nothing with them; cpu reads one
// input and computes for a while.
const admissionFns = `
import time
import boto3

s3 = boto3.client("s3")

def io(event, context):
    return sum(len(s3.get_object(Bucket="data", Key=k)["Body"].read()) for k in event["keys"])

def cpu(event, context):
    n = len(s3.get_object(Bucket="data", Key=event["key"])["Body"].read())
    end = time.monotonic() + event["seconds"]
    x = 0
    while time.monotonic() < end:
        x += 1
    return n
`

// TestAdmission: with cache.admission: benefit, on one instance (one
// cachelet) behind a store 20 ms away, a function dominated by reading
// keeps being cached, hits and all, and a function dominated by compute
// stops being cached once its invocations show it: its reads come from
// the store and nothing is kept, while the other function's reads still
// hit. The decision shows in the controller's stats (hoard apps
// --admission), its events and metrics.
func TestAdmission(t *testing.T) {
	e := startShaped(t, netshape.Link{Latency: 20 * time.Millisecond})
	e.deployCode(t, admissionSpec, admissionFns)
	c := e.p.Controller
	body := strings.Repeat("x", 256<<10)
	var ioKeys []string
	for i := range 6 {
		ioKeys = append(ioKeys, fmt.Sprintf("io/%d", i))
	}
	for _, k := range ioKeys {
		e.put(t, "data", k, body)
	}
	for i := range admission.DefaultMinSamples + 2 {
		e.put(t, "data", fmt.Sprintf("cpu/%d", i), body)
	}

	// The first invocation on the new instance teaches nothing (its
	// runtime warms up); then, learning, both functions' reads are cached.
	if rec := invoke(t, c, "adm", "io", map[string]any{"keys": ioKeys}); !rec.OK || !rec.Cold {
		t.Fatalf("first io: ok %v, cold %v: %s", rec.OK, rec.Cold, rec.Log)
	}
	for i := range admission.DefaultMinSamples {
		rec := invoke(t, c, "adm", "io", map[string]any{"keys": ioKeys})
		if !rec.OK || rec.NoCache || rec.IO == nil {
			t.Fatalf("io %d: ok %v, no cache %v, io %+v: %s", i, rec.OK, rec.NoCache, rec.IO, rec.Log)
		}
		t.Logf("io %d: run %.1f ms, data served %.1f ms, from the store %.1f ms, reads %+v", i, rec.ExecMS, rec.IO.ServedMS, rec.IO.StoreMS, rec.Reads)
		rec = invoke(t, c, "adm", "cpu", map[string]any{"key": fmt.Sprintf("cpu/%d", i), "seconds": 0.3})
		if !rec.OK || rec.NoCache || rec.Reads["local_miss"].Count != 1 {
			t.Fatalf("cpu %d while learning: ok %v, no cache %v, reads %+v: %s", i, rec.OK, rec.NoCache, rec.Reads, rec.Log)
		}
		t.Logf("cpu %d: run %.1f ms, data served %.1f ms, from the store %.1f ms", i, rec.ExecMS, rec.IO.ServedMS, rec.IO.StoreMS)
	}
	st, err := c.Stats("adm")
	if err != nil {
		t.Fatal(err)
	}
	ioAdm, cpuAdm := st["io"].Admission, st["cpu"].Admission
	if ioAdm == nil || !ioAdm.Admit || ioAdm.Share <= admission.Threshold {
		t.Fatalf("io's admission %+v, want cached (data over half its run time)", ioAdm)
	}
	if cpuAdm == nil || cpuAdm.Admit || cpuAdm.Share > admission.Threshold {
		t.Fatalf("cpu's admission %+v, want not cached", cpuAdm)
	}
	t.Logf("io: %s; cpu: %s", ioAdm.Reason, cpuAdm.Reason)

	// cpu's new input is read from the store, twice: not kept.
	k := fmt.Sprintf("cpu/%d", admission.DefaultMinSamples)
	for i := range 2 {
		rec := invoke(t, c, "adm", "cpu", map[string]any{"key": k, "seconds": 0.3})
		if !rec.OK || !rec.NoCache || rec.Reads["pass_through"].Count != 1 || len(rec.Reads) != 1 || rec.NotAdmitted != 1 {
			t.Fatalf("cpu read %d not admitted: ok %v, no cache %v, reads %+v, want one pass-through", i, rec.OK, rec.NoCache, rec.Reads)
		}
	}
	// The cachelet counted both, and kept neither.
	for _, in := range e.p.Agent.Instances() {
		m := scrape(t, in.MetricsURL)
		if got := m["hoard_cachelet_reads_not_admitted_total"]; got != 2 {
			t.Errorf("instance %s: %v reads not admitted, want 2", in.ID, got)
		}
		if got := m["hoard_cachelet_admitting"]; got != 0 {
			t.Errorf("instance %s: admitting %v after cpu, want 0", in.ID, got)
		}
	}
	// io, on the same cachelet right after, still hits: the decision is
	// per function.
	rec := invoke(t, c, "adm", "io", map[string]any{"keys": ioKeys})
	if !rec.OK || rec.NoCache || rec.Reads["local_hit"].Count != int64(len(ioKeys)) {
		t.Fatalf("io after cpu: ok %v, no cache %v, reads %+v, want %d local hits", rec.OK, rec.NoCache, rec.Reads, len(ioKeys))
	}
	// Its hits did not turn its caching off: the estimate is the store's.
	if st, _ := c.Stats("adm"); !st["io"].Admission.Admit {
		t.Fatalf("io's admission after hits: %+v", st["io"].Admission)
	}

	var said bool
	for _, a := range c.Apps() {
		for _, ev := range a.Events {
			if ev.Kind == "admission" && strings.Contains(ev.Detail, "function cpu") {
				said = true
			}
		}
	}
	if !said {
		t.Error("no event says cpu's reads are no longer cached")
	}
	m := scrapeText(t, e.p.ControllerURL+"/metrics", e.cfg.ControllerToken)
	for _, want := range []string{`hoard_admission_admitting{app="adm",function="cpu"} 0`, `hoard_admission_admitting{app="adm",function="io"} 1`,
		`hoard_admission_changes_total{app="adm",decision="no_cache",function="cpu"} 1`,
		`hoard_admission_reads_not_admitted_total{app="adm",function="cpu"} 2`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s:\n%s", want, grepLines(m, "hoard_admission"))
		}
	}
}

// BenchmarkAdmission: the memory a compute-bound function's inputs take
// from an I/O-bound one. Two applications in the same run, one with
// cache.admission: all, the other benefit, each one instance with an
// 8 MiB cache under consistency local, behind a store 10 ms away at
// 100 MB/s: io reads the same six 1 MiB objects (its working set fits),
// cpu reads a new 1 MiB input each time and computes 0.1 s. Each round is
// one io and three cpu invocations; under all, cpu's inputs evict io's.
// Reported: io's run time p50 and hit ratio under each, and benefit ÷ all.
//
//	go test -tags integration -run '^$' -bench Admission -benchtime 30x ./internal/rig
func BenchmarkAdmission(b *testing.B) {
	e := startShaped(b, netshape.Link{Latency: 10 * time.Millisecond, Bandwidth: 100_000_000})
	c := e.p.Controller
	ctx := context.Background()
	body := strings.Repeat("x", 1<<20)
	put := func(key string) {
		if _, err := e.st.Put(ctx, "data", key, strings.NewReader(body), int64(len(body)), store.PutOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	var ioKeys []string
	for i := range 6 {
		ioKeys = append(ioKeys, fmt.Sprintf("bench-io/%d", i))
		put(ioKeys[i])
	}
	const warmRounds, cpuPerRound = 3, 3
	rounds := warmRounds + b.N
	for i := range rounds * cpuPerRound {
		put(fmt.Sprintf("bench-cpu/%d", i))
	}
	call := func(app, fn string, event any) *api.Invocation {
		ev, _ := json.Marshal(event)
		rec, err := c.Invoke(ctx, app, fn, ev, "bench")
		if err != nil || !rec.OK {
			b.Fatalf("%s/%s: %v %+v", app, fn, err, rec)
		}
		return rec
	}
	type result struct {
		p50       time.Duration
		hits, all int64
		notCached bool
	}
	var got [2]result
	for i, mode := range []string{appspec.AdmitAll, appspec.AdmitBenefit} {
		app := "adm-" + mode
		spec := strings.NewReplacer("name: adm", "name: "+app, "{budget: 32MiB, admission: benefit}",
			"{budget: 8MiB, consistency: local, admission: "+mode+"}").Replace(admissionSpec)
		e.deployCode(b, spec, admissionFns)
		var runs []time.Duration
		var r result
		for n := range rounds {
			rec := call(app, "io", map[string]any{"keys": ioKeys})
			if n >= warmRounds {
				runs = append(runs, time.Duration(rec.ExecMS*float64(time.Millisecond)))
				r.hits += rec.Reads["local_hit"].Count
				for _, rc := range rec.Reads {
					r.all += rc.Count
				}
			}
			for k := range cpuPerRound {
				rec := call(app, "cpu", map[string]any{"key": fmt.Sprintf("bench-cpu/%d", n*cpuPerRound+k), "seconds": 0.1})
				r.notCached = rec.NoCache
			}
		}
		r.p50 = median(runs)
		got[i] = r
		b.Logf("admission %s: io p50 %.1f ms, hits %d of %d reads; cpu not cached at the end: %v", mode,
			float64(r.p50.Microseconds())/1e3, r.hits, r.all, r.notCached)
	}
	if !got[1].notCached || got[0].notCached {
		b.Fatalf("cpu's admission: all %v, benefit %v; want cached, not cached", !got[0].notCached, !got[1].notCached)
	}
	b.ReportMetric(float64(got[0].p50.Microseconds())/1e3, "all-io-p50-ms")
	b.ReportMetric(float64(got[1].p50.Microseconds())/1e3, "benefit-io-p50-ms")
	b.ReportMetric(float64(got[1].p50)/float64(got[0].p50), "benefit/all")
	b.ReportMetric(float64(got[0].hits)/float64(max(got[0].all, 1)), "all-io-hit-ratio")
	b.ReportMetric(float64(got[1].hits)/float64(max(got[1].all, 1)), "benefit-io-hit-ratio")
}
