package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/hoard-io/hoard/internal/appspec"
	"github.com/hoard-io/hoard/internal/hostnet"
	"github.com/hoard-io/hoard/internal/loadgen"
	"github.com/hoard-io/hoard/internal/predict"
	"github.com/hoard-io/hoard/internal/rig"
	"github.com/hoard-io/hoard/internal/sandbox"
)

func memMacroExperiment() Experiment {
	return Experiment{
		Name:       "memmacro",
		Title:      "Opportunistic memory: four tenants with memory prediction on and off, Poisson arrivals",
		Reproduces: []Reference{refOFCMacro},
		Quick:      Options{Iterations: 30, Sizes: []int64{10}}, // Iterations: seconds of load
		Full:       Options{Iterations: 120, Sizes: []int64{10}},
		Run: func(ctx context.Context, o Options) (*Result, error) {
			return runMemMacro(ctx, o, memOneNode())
		},
	}
}

func memNodesExperiment() Experiment {
	return Experiment{
		Name:       "memnodes",
		Title:      "Opportunistic memory on the several-nodes rig: eight tenants on four nodes with memory prediction on and off",
		Reproduces: []Reference{refOFCMacro},
		Quick:      Options{Iterations: 30, Sizes: []int64{10}}, // Iterations: seconds of load
		Full:       Options{Iterations: 120, Sizes: []int64{10}},
		Run: func(ctx context.Context, o Options) (*Result, error) {
			if err := hostnet.Available(ctx); err != nil {
				return nil, fmt.Errorf("the several-nodes rig: %w", err)
			}
			return runMemMacro(ctx, o, memNodes(memNodesCount))
		},
	}
}

// memTenant is one tenant of a memory macro run: an example's function
// deployed as app; prepare says whether it creates the example's data
// (tenants of one example share it).
type memTenant struct {
	macroTenant
	app     string
	prepare bool
}

// memSetup is where a memory macro run runs: a platform per arm and the
// tenants deployed on it.
type memSetup struct {
	experiment, title string
	// where is the method's account of the platform.
	where   string
	tenants []memTenant
	// start starts a fresh platform for one arm (prediction off or on)
	// and says the sandboxes' mode.
	start func(ctx context.Context, env Env, off bool) (*benchRig, string, error)
}

// memOneNode is the run on one node: the four examples as four tenants.
func memOneNode() memSetup {
	var tenants []memTenant
	for _, t := range macroTenants {
		tenants = append(tenants, memTenant{t, t.example[:min(len(t.example), 12)] + "-mem", true})
	}
	return memSetup{
		experiment: "memmacro", title: memMacroExperiment().Title, tenants: tenants,
		where: "on one node, the store behind the faast link",
		start: func(ctx context.Context, env Env, off bool) (*benchRig, string, error) {
			r, err := startRig(ctx, env, "faast", func(c *rig.Config) {
				c.Prediction = predict.Config{MinInvocations: memMacroMature, RetrainEvery: 5}
				c.DisablePrediction = off
			})
			if err != nil {
				return nil, "", err
			}
			return r, r.p.Agent.SandboxMode(), nil
		},
	}
}

// memNodesCount is the nodes of the several-nodes run.
const memNodesCount = 4

// memNodes is the run on the several-nodes rig: each example as two
// tenants (eight, as OFC's macro run), on nodes agents.
func memNodes(nodes int) memSetup {
	var tenants []memTenant
	for i := 1; i <= 2; i++ {
		for _, t := range macroTenants {
			tenants = append(tenants, memTenant{t, fmt.Sprintf("%s-m%d", t.example[:min(len(t.example), 10)], i), i == 1})
		}
	}
	return memSetup{
		experiment: "memnodes", title: memNodesExperiment().Title, tenants: tenants,
		where: fmt.Sprintf("on %d nodes of the several-nodes rig (each a network namespace with its own agent behind a 400 Mbit/s link; "+
			"the store behind one shared 160 Mbit/s link with 2 ms each way)", nodes),
		start: func(ctx context.Context, env Env, off bool) (*benchRig, string, error) {
			n, dir, err := startTreeRig(ctx, env, nodes, "hmm", nil, func(c *rig.NodesConfig) {
				c.Prediction = predict.Config{MinInvocations: memMacroMature, RetrainEvery: 5}
				c.DisablePrediction = off
			})
			if err != nil {
				return nil, "", err
			}
			r := &benchRig{p: n.Platform, tmp: dir, root: env.ModuleRoot,
				link:   fmt.Sprintf("%d nodes at 400 Mbit/s; store 160 Mbit/s shared, 2 ms each way", nodes),
				closes: []func(){func() { os.RemoveAll(dir) }, n.Close}}
			host, err := sandbox.NewManager("hoard-probe", nil)
			if err != nil {
				r.Close()
				return nil, "", err
			}
			return r, host.Mode(), nil
		},
	}
}

// memMacroWarm is how many invocations each tenant gets, one at a time,
// before the load, so that its model can mature (at memMacroMature
// invocations here, not 100, to keep the run short).
const (
	memMacroWarm   = 30
	memMacroMature = 20
)

// memArm is one platform's run: prediction on or off.
type memArm struct {
	name string
	off  bool
	// per tenant (app name)
	n, failed, sized, retries map[string]int
	exec                      map[string]time.Duration
	hits, reads               map[string]int64
	cacheGBs                  map[string]float64 // memory given to the cache × execution time
	resizes                   []float64          // ms, the resizes that changed something
	booked, peak              map[string]int64   // sums over invocations
	link                      string
}

func runMemMacro(ctx context.Context, o Options, setup memSetup) (*Result, error) {
	env := o.Env
	started := time.Now()
	scale := 0.1
	if len(o.Sizes) > 0 && o.Sizes[0] > 0 {
		scale = float64(o.Sizes[0]) / 100
	}
	seconds := max(o.Iterations, 10)
	say := func(format string, args ...any) {
		fmt.Fprintf(env.progress(), setup.experiment+": "+format+"\n", args...)
	}
	arms := []*memArm{{name: "prediction on"}, {name: "prediction off", off: true}}
	mode := ""
	for _, arm := range arms {
		arm.n, arm.failed, arm.sized, arm.retries = map[string]int{}, map[string]int{}, map[string]int{}, map[string]int{}
		arm.exec, arm.hits, arm.reads, arm.cacheGBs = map[string]time.Duration{}, map[string]int64{}, map[string]int64{}, map[string]float64{}
		arm.booked, arm.peak = map[string]int64{}, map[string]int64{}
		r, m, err := setup.start(ctx, env, arm.off)
		if err != nil {
			return nil, err
		}
		mode = m
		err = func() error {
			defer r.Close()
			arm.link = r.link
			apps := map[string]macroTenant{}
			for _, t := range setup.tenants {
				app, err := r.deploy(ctx, t.example, func(s *appspec.Spec) {
					s.Name, s.KeepAlive = t.app, appspec.Duration(time.Hour)
				})
				if err != nil {
					return err
				}
				apps[app] = t.macroTenant
			}
			for _, t := range setup.tenants {
				if t.prepare {
					if _, err := r.invoke(ctx, t.app, "prepare", map[string]any{"scale": scale}); err != nil {
						return err
					}
				}
				if t.example == "notebook" {
					if _, err := r.invoke(ctx, t.app, "cell", map[string]any{"cell": 1, "session": t.app, "scale": scale}); err != nil {
						return err
					}
				}
			}
			event := func(app string) json.RawMessage {
				ev := map[string]any{"scale": scale}
				for k, v := range apps[app].event {
					ev[k] = v
				}
				if _, ok := ev["session"]; ok {
					ev["session"] = app
				}
				raw, _ := json.Marshal(ev)
				return raw
			}
			record := func(app string, recOK bool, exec float64, reads map[string]int64, mem *memSample) {
				arm.n[app]++
				if !recOK {
					arm.failed[app]++
				}
				arm.exec[app] += time.Duration(exec * float64(time.Millisecond))
				for k, v := range reads {
					arm.reads[app] += v
					if k == "local_hit" || k == "remote_hit" {
						arm.hits[app] += v
					}
				}
				if mem != nil {
					arm.booked[app] += mem.booked
					arm.peak[app] += mem.peak
					if mem.sized {
						arm.sized[app]++
						arm.cacheGBs[app] += float64(mem.given) / 1e9 * exec / 1e3
					}
					if mem.retried {
						arm.retries[app]++
					}
					if mem.resizeMS > 0 {
						arm.resizes = append(arm.resizes, mem.resizeMS)
					}
				}
			}
			say("%s: %d invocations per tenant to learn from", arm.name, memMacroWarm)
			for _, t := range setup.tenants {
				app := t.app
				for range memMacroWarm {
					rec, err := r.p.Controller.Invoke(ctx, app, t.function, event(app), "bench")
					if err != nil {
						return err
					}
					if !rec.OK {
						return fmt.Errorf("%s/%s: %+v\n%s", app, t.function, rec.Error, rec.Log)
					}
				}
			}
			var arrivals []loadgen.Arrival
			names := make([]string, 0, len(apps))
			for app := range apps {
				names = append(names, app)
			}
			slices.Sort(names) // the same seed for a tenant in both runs
			for i, app := range names {
				t := apps[app]
				s := loadgen.Limit(loadgen.Poisson(loadgen.Target{App: app, Function: t.function}, 2*time.Second, uint64(i+1)), 0, time.Duration(seconds)*time.Second)
				for _, a := range loadgen.Collect(s, 100000) {
					a.Event = event(app)
					arrivals = append(arrivals, a)
				}
			}
			sort.SliceStable(arrivals, func(i, j int) bool { return arrivals[i].At < arrivals[j].At })
			var mu sync.Mutex
			runner := loadgen.Runner{Concurrency: 64, Invoker: loadgen.InvokerFunc(func(ctx context.Context, t loadgen.Target, ev json.RawMessage) (loadgen.Outcome, error) {
				rec, err := r.p.Controller.Invoke(ctx, t.App, t.Function, ev, "load")
				if err != nil {
					return loadgen.Outcome{}, err
				}
				reads := map[string]int64{}
				for k, v := range rec.Reads {
					reads[k] = v.Count
				}
				var ms *memSample
				if m := rec.Memory; m != nil {
					ms = &memSample{booked: m.Booked, peak: m.Peak, given: m.CacheGiven, sized: m.Sized, retried: m.Retried, resizeMS: m.ResizeMS}
				}
				mu.Lock()
				record(t.App, rec.OK, rec.ExecMS, reads, ms)
				mu.Unlock()
				out := loadgen.Outcome{OK: rec.OK, Cold: rec.Cold}
				if rec.Error != nil {
					out.ErrorType, out.Error = rec.Error.Type, rec.Error.Message
				}
				return out, nil
			})}
			say("%s: %d invocations over %d s across %d tenants", arm.name, len(arrivals), seconds, len(apps))
			_, err := runner.Run(ctx, loadgen.Replay(arrivals))
			return err
		}()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", arm.name, err)
		}
	}
	on, off := arms[0], arms[1]
	res := &Result{Experiment: setup.experiment, Title: setup.title, Reproduces: []Reference{refOFCMacro},
		Status: StatusOK, Quick: o.Quick, StartedAt: started, Machine: DescribeMachine(),
		Method: fmt.Sprintf("The four examples (thumbnail, inference with the 5 MB model, the notebook's sum, word count) as %d tenants, "+
			"their specs as they are (booking 256 MiB to 1 GiB for functions that use far less), each invoked %d times one at a time to "+
			"learn from (models mature after %d invocations here, 100 by default), then with exponential inter-arrival times of mean 2 s "+
			"for %d s, %s, sandboxes in mode %s. The same on a second platform with prediction off.",
			len(setup.tenants), memMacroWarm, memMacroMature, seconds, setup.where, mode),
		Settings: RunSettings{Link: on.link, Iterations: []Count{{What: "seconds of load", N: seconds}},
			Other: []Setting{{Name: "tenants", Value: fmt.Sprint(len(setup.tenants))}, {Name: "sandboxes", Value: mode}, {Name: "data scale", Value: fmt.Sprint(scale)}}},
	}
	table := Table{ID: "tenants", Title: "Per tenant, prediction on / off",
		Columns: []string{"tenant", "invocations", "sized", "mean booked", "mean peak", "cache given (GB·s)", "hit ratio", "exec per invocation (ms)", "failed", "retries"}}
	var totFailed, totRetries, totSized, totN int
	var totGBs float64
	var execOn, execOff time.Duration
	var nOn, nOff int
	var hitsOn, readsOn, hitsOff, readsOff int64
	apps := make([]string, 0, len(on.n))
	for app := range on.n {
		apps = append(apps, app)
	}
	slices.Sort(apps)
	for _, app := range apps {
		totFailed += on.failed[app] + off.failed[app]
		totRetries += on.retries[app]
		totSized += on.sized[app]
		totN += on.n[app]
		totGBs += on.cacheGBs[app]
		execOn += on.exec[app]
		execOff += off.exec[app]
		nOn += on.n[app]
		nOff += off.n[app]
		hitsOn, readsOn, hitsOff, readsOff = hitsOn+on.hits[app], readsOn+on.reads[app], hitsOff+off.hits[app], readsOff+off.reads[app]
		mean := func(sum int64, n int) string {
			if n == 0 {
				return "-"
			}
			return fmt.Sprintf("%d MiB", sum/int64(n)>>20)
		}
		ratio := func(h, r int64) string {
			if r == 0 {
				return "-"
			}
			return fmt.Sprintf("%.0f%%", 100*float64(h)/float64(r))
		}
		per := func(d time.Duration, n int) string {
			if n == 0 {
				return "-"
			}
			return fmt.Sprintf("%.0f", d.Seconds()*1e3/float64(n))
		}
		table.Rows = append(table.Rows, []string{app, fmt.Sprintf("%d / %d", on.n[app], off.n[app]), fmt.Sprint(on.sized[app]),
			mean(on.booked[app], on.n[app]), mean(on.peak[app], on.n[app]), fmt.Sprintf("%.2f", on.cacheGBs[app]),
			ratio(on.hits[app], on.reads[app]) + " / " + ratio(off.hits[app], off.reads[app]),
			per(on.exec[app], on.n[app]) + " / " + per(off.exec[app], off.n[app]),
			fmt.Sprintf("%d / %d", on.failed[app], off.failed[app]), fmt.Sprint(on.retries[app])})
	}
	res.Tables = []Table{table}
	hr := func(h, r int64) float64 {
		if r == 0 {
			return 0
		}
		return float64(h) / float64(r)
	}
	slices.Sort(on.resizes)
	resize := 0.0
	if len(on.resizes) > 0 {
		resize = on.resizes[len(on.resizes)/2]
	}
	res.Rows = append(res.Rows,
		Compare("failed invocations, prediction on (and off)", "", F(0), F(float64(totFailed)), LowerIsBetter, 0, "OFC §7.3: no failed invocations",
			fmt.Sprintf("%d invocations with prediction on, %d sized by a mature model, %d retried at the booked size", totN, totSized, totRetries)),
		Compare("memory turned into cache", "GB·s", nil, F(totGBs), HigherIsBetter, 0, "", "booked memory above the prediction given to the cache, × the invocations' execution time"),
		Compare("hit ratio, prediction on / off", "x", nil, F(hr(hitsOn, readsOn)/max(hr(hitsOff, readsOff), 1e-9)), HigherIsBetter, 0, "",
			fmt.Sprintf("%.0f%% against %.0f%%, same run", 100*hr(hitsOn, readsOn), 100*hr(hitsOff, readsOff))),
		Compare("execution time per invocation, prediction on / off", "x", nil, F((execOn.Seconds()/float64(max(nOn, 1)))/(execOff.Seconds()/float64(max(nOff, 1)))), LowerIsBetter, 0, "",
			fmt.Sprintf("%.0f ms against %.0f ms", execOn.Seconds()*1e3/float64(max(nOn, 1)), execOff.Seconds()*1e3/float64(max(nOff, 1)))),
		Compare("resizing a sandbox, median", "ms", nil, F(resize), LowerIsBetter, 0, "OFC §7.2.1: 0.4 to 2.2 ms to scale its cache",
			fmt.Sprintf("%d resizes that changed something", len(on.resizes))),
	)
	res.Seconds = time.Since(started).Seconds()
	return res, nil
}

type memSample struct {
	booked, peak, given int64
	sized, retried      bool
	resizeMS            float64
}
