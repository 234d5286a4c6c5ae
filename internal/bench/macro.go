package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/hoard-io/hoard/internal/appspec"
	"github.com/hoard-io/hoard/internal/loadgen"
)

var refOFCMacro = Reference{Paper: "OFC", Figure: "§7.3 (macro benchmark, FaaSLoad)", Section: "§7.3", Citation: CiteOFC}

func macroExperiment() Experiment {
	return Experiment{
		Name:       "macro",
		Title:      "Multi-tenant macro run: four applications with and without hoard, Poisson arrivals",
		Reproduces: []Reference{refOFCMacro},
		Quick:      Options{Iterations: 30, Sizes: []int64{10}}, // Iterations: seconds of load
		Full:       Options{Iterations: 120, Sizes: []int64{10}},
		Run:        runMacroExperiment,
	}
}

// macroTenant is one application's workload in the macro run.
type macroTenant struct {
	example, function string
	event             map[string]any
}

var macroTenants = []macroTenant{
	{"image-processing", "thumbnail", map[string]any{"image": 0}},
	{"ml-inference", "infer_small", map[string]any{}},
	{"notebook", "cell", map[string]any{"cell": 2, "session": ""}},
	{"wordcount", "count", map[string]any{}},
}

// runMacroExperiment runs OFC's macro benchmark in the style of FaaSLoad,
// scaled down: eight tenants — the four examples, each deployed once with
// hoard's cache and once with a cache too small to hold its data
// ("vanilla", every read from the store) — invoked with exponential
// inter-arrival times (mean 1 minute in the paper, 2 s here) at once, the
// store behind the faast link. Per function: total execution time with
// hoard vs vanilla, hoard's hit ratio, failed invocations.
func runMacroExperiment(ctx context.Context, o Options) (*Result, error) {
	env := o.Env
	started := time.Now()
	scale := 0.1
	if len(o.Sizes) > 0 && o.Sizes[0] > 0 {
		scale = float64(o.Sizes[0]) / 100
	}
	seconds := max(o.Iterations, 10)
	say := func(format string, args ...any) { fmt.Fprintf(env.progress(), "macro: "+format+"\n", args...) }
	r, err := startRig(ctx, env, "faast")
	if err != nil {
		return nil, err
	}
	defer r.Close()

	type tenant struct {
		macroTenant
		app     string
		vanilla bool
	}
	var tenants []tenant
	for _, t := range macroTenants {
		for _, vanilla := range []bool{false, true} {
			name := t.example[:min(len(t.example), 12)] + "-hoard"
			if vanilla {
				name = t.example[:min(len(t.example), 12)] + "-vanilla"
			}
			app, err := r.deploy(ctx, t.example, func(s *appspec.Spec) {
				s.Name, s.KeepAlive = name, appspec.Duration(time.Hour)
				if vanilla {
					s.Cache.Budget, s.Cache.Shared = 1<<20, false
				}
			})
			if err != nil {
				return nil, err
			}
			tenants = append(tenants, tenant{t, app, vanilla})
		}
	}
	say("creating the data (scale %g)", scale)
	for _, t := range tenants {
		if t.vanilla {
			continue
		}
		if _, err := r.invoke(ctx, t.app, "prepare", map[string]any{"scale": scale}); err != nil {
			return nil, err
		}
	}
	for _, t := range tenants {
		if t.example == "notebook" {
			if _, err := r.invoke(ctx, t.app, "cell", map[string]any{"cell": 1, "session": t.app, "scale": scale}); err != nil {
				return nil, err
			}
		}
	}

	// One Poisson stream per tenant, merged in time order.
	var arrivals []loadgen.Arrival
	for i, t := range tenants {
		ev := map[string]any{"scale": scale}
		for k, v := range t.event {
			ev[k] = v
		}
		if _, ok := ev["session"]; ok {
			ev["session"] = t.app // each tenant its own notebook state
		}
		raw, _ := json.Marshal(ev)
		s := loadgen.Limit(loadgen.Poisson(loadgen.Target{App: t.app, Function: t.function}, 2*time.Second, uint64(i+1)), 0, time.Duration(seconds)*time.Second)
		for _, a := range loadgen.Collect(s, 100000) {
			a.Event = raw
			arrivals = append(arrivals, a)
		}
	}
	sort.SliceStable(arrivals, func(i, j int) bool { return arrivals[i].At < arrivals[j].At })
	type acc struct {
		exec        time.Duration
		n, failed   int
		hits, reads int64
	}
	var mu sync.Mutex
	stats := map[string]*acc{}
	runner := loadgen.Runner{Concurrency: 64, Invoker: loadgen.InvokerFunc(func(ctx context.Context, t loadgen.Target, event json.RawMessage) (loadgen.Outcome, error) {
		rec, err := r.p.Controller.Invoke(ctx, t.App, t.Function, event, "load")
		if err != nil {
			return loadgen.Outcome{}, err
		}
		mu.Lock()
		a := stats[t.App]
		if a == nil {
			a = &acc{}
			stats[t.App] = a
		}
		a.n++
		if !rec.OK {
			a.failed++
		}
		a.exec += time.Duration(rec.ExecMS * float64(time.Millisecond))
		for k, v := range rec.Reads {
			a.reads += v.Count
			if k == "local_hit" || k == "remote_hit" || k == "disk_hit" {
				a.hits += v.Count
			}
		}
		mu.Unlock()
		out := loadgen.Outcome{OK: rec.OK, Cold: rec.Cold}
		if rec.Error != nil {
			out.ErrorType, out.Error = rec.Error.Type, rec.Error.Message
		}
		return out, nil
	})}
	say("%d invocations over %d s across %d tenants", len(arrivals), seconds, len(tenants))
	rep, err := runner.Run(ctx, loadgen.Replay(arrivals))
	if err != nil {
		return nil, err
	}

	res := &Result{
		Experiment: "macro",
		Title:      "Multi-tenant macro run: four applications with and without hoard, Poisson arrivals",
		Reproduces: []Reference{refOFCMacro},
		Status:     StatusOK,
		Quick:      o.Quick,
		Machine:    DescribeMachine(),
		Method: fmt.Sprintf("Eight tenants run at once for %d s: the four examples (thumbnail, inference with the 5 MB model, the notebook's "+
			"sum, word count), each deployed with hoard's cache and with a 1 MiB cache that holds none of its data (vanilla), data at %g "+
			"of the papers' sizes, the store behind the faast link. Each tenant's invocations arrive with exponential inter-arrival times "+
			"of mean 2 s (OFC's FaaSLoad: 1 minute), from seeded streams, sent open loop by hoard load's runner.", seconds, scale),
		Settings: RunSettings{Link: r.link, Iterations: []Count{{What: "seconds of load", N: seconds}, {What: "invocations", N: len(arrivals)}},
			Other: []Setting{{"tenants", fmt.Sprint(len(tenants))}, {"mean inter-arrival", "2s"}, {"data scale", fmt.Sprint(scale)}}},
		Notes: []string{fmt.Sprintf("%d invocations, %d failed to be sent, %d function errors; p50 %s, p99 %s as callers saw them.",
			rep.Total.Invocations, rep.Total.SendErrors, rep.Total.FunctionErrors, rep.Total.P50.Round(time.Millisecond), rep.Total.P99.Round(time.Millisecond))},
	}
	var cats []string
	var hoardVals, vanVals []*float64
	failed := 0
	for _, t := range macroTenants {
		h, v := stats[t.example[:min(len(t.example), 12)]+"-hoard"], stats[t.example[:min(len(t.example), 12)]+"-vanilla"]
		if h == nil || v == nil || h.n == 0 || v.n == 0 {
			continue
		}
		failed += h.failed + v.failed
		perH, perV := h.exec.Seconds()*1e3/float64(h.n), v.exec.Seconds()*1e3/float64(v.n)
		label := t.example + "/" + t.function
		cats = append(cats, label)
		hoardVals, vanVals = append(hoardVals, F(perH)), append(vanVals, F(perV))
		hit := 0.0
		if h.reads > 0 {
			hit = float64(h.hits) / float64(h.reads)
		}
		res.Rows = append(res.Rows,
			Compare(label+": execution time per invocation, hoard / vanilla", "x", nil, F(perH/perV), LowerIsBetter, 0, "",
				fmt.Sprintf("%d hoard and %d vanilla invocations; %.0f vs %.0f ms on average.", h.n, v.n, perH, perV)),
			Compare(label+": hoard's hit ratio", "", nil, F(hit), HigherIsBetter, 0, "", ""))
	}
	res.Rows = append(res.Rows, Compare("failed invocations", "", F(0), F(float64(failed)), LowerIsBetter, 0,
		"OFC §7.3: no failed invocations", ""))
	res.Plots = []Plot{{Kind: PlotBar, ID: "exec-per-invocation", Title: "Execution time per invocation, all tenants at once", Unit: "ms", YLabel: "ms",
		Categories: cats, Series: []Series{{Label: "vanilla", Values: vanVals}, {Label: "hoard", Values: hoardVals}}}}
	res.Seconds = time.Since(started).Seconds()
	return res, nil
}
