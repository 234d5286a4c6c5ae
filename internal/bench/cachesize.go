package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/hoard-io/hoard/internal/appspec"
)

var refFaasTScaling = Reference{Paper: "Faa$T", Figure: "§4 (cache-size scaling)", Section: "§4", Citation: CiteFaasT}

func cacheSizeExperiment() Experiment {
	return Experiment{
		Name:       "cachesize",
		Title:      "Cache-size scaling: an application whose working set exceeds one instance's cache",
		Reproduces: []Reference{refFaasTScaling},
		Quick:      Options{Iterations: 40, Sizes: []int64{20}}, // Iterations: seconds of load
		Full:       Options{Iterations: 90, Sizes: []int64{20}},
		Run:        runCacheSizeExperiment,
	}
}

// runCacheSizeExperiment runs the notebook's sum over its column (at a
// scale that makes the column several times one instance's 32 MiB cache)
// back to back, with the scale controller voting every 5 s: the
// cache-size policy votes +1 while objects an instance owns are evicted
// more than once, and instances are added until each one's share of the
// column fits and the evictions stop.
func runCacheSizeExperiment(ctx context.Context, o Options) (*Result, error) {
	env := o.Env
	started := time.Now()
	scale := 0.2
	if len(o.Sizes) > 0 && o.Sizes[0] > 0 {
		scale = float64(o.Sizes[0]) / 100
	}
	seconds := max(o.Iterations, 10)
	say := func(format string, args ...any) { fmt.Fprintf(env.progress(), "cachesize: "+format+"\n", args...) }
	r, err := startRig(ctx, env, "faast")
	if err != nil {
		return nil, err
	}
	defer r.Close()
	const budget = 32 << 20
	// Room to grow past the column's size: consistent hashing spreads ten
	// chunks unevenly, so one instance's share can exceed column/N.
	const maxInstances = 6
	app, err := r.deploy(ctx, "notebook", func(s *appspec.Spec) {
		s.Name, s.KeepAlive, s.MaxInstances = "nb-cachesize", appspec.Duration(time.Hour), maxInstances
		s.Cache.Consistency, s.Cache.Budget, s.Cache.Shared = "strong", budget, false
	})
	if err != nil {
		return nil, err
	}
	column := int64(350e6 * scale)
	say("column of %d MB against a %d MiB cache per instance", column/1e6, budget>>20)
	if _, err := r.invoke(ctx, app, "prepare", map[string]any{"scale": scale}); err != nil {
		return nil, err
	}
	if _, err := r.invoke(ctx, app, "cell", map[string]any{"cell": 1, "session": "s", "scale": scale}); err != nil {
		return nil, err
	}
	var xs, instances, latency, hitRatio []float64
	begin := time.Now()
	for time.Since(begin) < time.Duration(seconds)*time.Second {
		inv, err := r.invoke(ctx, app, "cell", map[string]any{"cell": 2, "session": "s", "scale": scale})
		if err != nil {
			return nil, err
		}
		n := 0
		for _, a := range r.p.Controller.Apps() {
			if a.Name == app {
				n = len(a.Instances)
			}
		}
		var total, hits int64
		for k, v := range inv.reads {
			total += v
			if k == "local_hit" || k == "remote_hit" || k == "disk_hit" {
				hits += v
			}
		}
		t := time.Since(begin).Seconds()
		xs, instances = append(xs, t), append(instances, float64(n))
		latency = append(latency, float64(inv.exec.Microseconds())/1e3)
		if total > 0 {
			hitRatio = append(hitRatio, float64(hits)/float64(total))
		} else {
			hitRatio = append(hitRatio, 0)
		}
	}
	var events []string
	end := time.Now()
	lastScale := begin
	for _, a := range r.p.Controller.Apps() {
		if a.Name == app {
			for _, e := range a.Events {
				if e.Kind == "drop" {
					events = append(events, e.Time.Sub(begin).Round(time.Second).String()+": "+e.Detail)
				}
				if e.Kind == "scale" {
					events = append(events, e.Time.Sub(begin).Round(time.Second).String()+": "+e.Detail)
					lastScale = e.Time
				}
			}
		}
	}
	settled := end.Sub(lastScale).Seconds()
	final := 0.0
	if len(instances) > 0 {
		final = instances[len(instances)-1]
	}
	say("ended with %g instances; %d scale decisions", final, len(events))
	mean := func(v []float64) float64 {
		if len(v) == 0 {
			return 0
		}
		s := 0.0
		for _, x := range v {
			s += x
		}
		return s / float64(len(v))
	}
	firstLat, lastLat, lastHit := 0.0, 0.0, 0.0
	if k := len(latency); k >= 6 {
		firstLat, lastLat, lastHit = mean(latency[:3]), mean(latency[k-3:]), mean(hitRatio[k-3:])
	}
	res := &Result{
		Experiment: "cachesize",
		Title:      "Cache-size scaling: an application whose working set exceeds one instance's cache",
		Reproduces: []Reference{refFaasTScaling},
		Status:     StatusOK,
		Quick:      o.Quick,
		Machine:    DescribeMachine(),
		Seconds:    time.Since(started).Seconds(),
		Method: fmt.Sprintf("The notebook's sum over a %d MB column in 10 chunks runs back to back for %d s; each instance has a %d MiB cache, "+
			"max %d instances, the scale controller votes every 5 s. The cache-size policy votes +1 while an object an instance owns is "+
			"evicted more than once; the application grows until each instance's share of the column fits.", column/1e6, seconds, budget>>20, maxInstances),
		Settings: RunSettings{Link: r.link, Iterations: []Count{{What: "seconds of back-to-back invocations", N: seconds}},
			Other: []Setting{{"column", fmt.Sprintf("%d MB", column/1e6)}, {"cache per instance", fmt.Sprintf("%d MiB", budget>>20)}}},
		Rows: []Comparison{
			Compare("instances at the end", "", nil, F(final), "", 0, "", "The paper describes the policy, not a figure for it."),
			Compare("function time, first 3 invocations (mean)", "ms", nil, F(firstLat), LowerIsBetter, 0, "", ""),
			Compare("function time, last 3 invocations (mean)", "ms", nil, F(lastLat), LowerIsBetter, 0, "", ""),
			Compare("hit ratio of the last 3 invocations", "", nil, F(lastHit), HigherIsBetter, 0, "", ""),
			Compare("seconds from the last scale decision to the end", "s", nil, F(settled), HigherIsBetter, 0, "",
				"The cache-size policy votes +1 in every 5 s round with a repeat eviction: a long quiet tail means the evictions stopped."),
		},
		Plots: []Plot{
			{Kind: PlotCurve, ID: "instances", Title: "Instances over time", XLabel: "s", YLabel: "instances",
				Series: []Series{{Label: "instances", X: xs, Y: instances}}},
			{Kind: PlotCurve, ID: "latency", Title: "Function time over time", XLabel: "s", YLabel: "ms", Unit: "ms",
				Series: []Series{{Label: "sum over the column", X: xs, Y: latency}}},
		},
		Notes: events,
	}
	return res, nil
}
