package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/appspec"
	"github.com/hoard-io/hoard/internal/rig"
)

// The disk-functions experiment asks `hoard bench disk`'s question of
// the examples' functions on the platform: with a memory budget below
// the working set, what the node's disk tier saves a whole function
// against the same function memory-only, and what an instance reloaded
// on the node gains from finding the data on disk.

func diskFunctionsExperiment() Experiment {
	return Experiment{
		Name:       "disk-functions",
		Title:      diskFnTitle,
		Reproduces: []Reference{refCacheFlow},
		Quick:      Options{Iterations: 2, Sizes: []int64{10}},
		Full:       Options{Iterations: 3, Sizes: []int64{100}},
		Run:        runDiskFunctionsExperiment,
	}
}

const diskFnTitle = "Disk tier under whole functions: the notebook and ML inference with a memory budget below the working set, and a reload warm from disk"

// At scale 1: the notebook's column is 10 chunks of 35 MB and its budget
// a third of it; ML inference reads four versions of detect's 35 MB model
// (diskFnModelVersions of its size, 119 MB) with a 72 MiB budget. Each
// object stays under the cache's largest (half the budget), so every one
// is cached, and evicted, whole.
const (
	diskFnNotebookBudget = 112 << 20
	diskFnMLBudget       = 72 << 20
	// diskFnNodeDisk is the node's disk tier per application.
	diskFnNodeDisk = 4 << 30
	// diskFnKeepAlive is the applications' keep-alive: short, so that the
	// reload does not wait long for the unload.
	diskFnKeepAlive = 3 * time.Second
)

// diskFnModelVersions are the model versions ML inference serves, as
// fractions of detect's model: the examples' models each outweigh the
// smaller ones together (239 > 97+35+5+5, 97 > 35+5+5, ...), so no set of
// distinct models is larger than a budget that holds its largest; versions
// of one model at sizes near each other are.
var diskFnModelVersions = []float64{1, 0.9, 0.8, 0.7}

// scaledBudget is a budget at a data scale, in whole MiB.
func scaledBudget(full int64, scale float64) int64 {
	return max(1, int64(math.Round(float64(full>>20)*scale))) << 20
}

// diskFnSample is one measured round: one invocation of the notebook's
// sum, or one of detect per model version; times and reads summed.
type diskFnSample struct {
	Total, Exec time.Duration
	// Cold: the round's first invocation loaded its instance.
	Cold  bool
	Reads map[string]api.ReadCount
}

// diskFnCase is one workload measured in both applications.
type diskFnCase struct {
	Name    string
	Data    int64 // the working set, bytes
	Budget  int64 // each application's memory budget
	Objects int   // objects in the working set
	Largest int64 // the largest of them, bytes
	// Disk and Memory are the timed warm rounds of the application with
	// the disk tier and of the memory-only one; DiskReload and
	// MemoryReload the first round after each was unloaded.
	Disk, Memory             []diskFnSample
	DiskReload, MemoryReload diskFnSample
}

func (s *diskFnSample) add(inv *invocation, first bool) {
	s.Total += inv.total
	s.Exec += inv.exec
	if first {
		s.Cold = inv.cold
	}
	if s.Reads == nil {
		s.Reads = map[string]api.ReadCount{}
	}
	for k, v := range inv.served {
		c := s.Reads[k]
		c.Count, c.Bytes, c.Nanos = c.Count+v.Count, c.Bytes+v.Bytes, c.Nanos+v.Nanos
		s.Reads[k] = c
	}
}

// diskFnRound runs one round: the function once per event, in order.
type diskFnRound func(ctx context.Context, app string) (diskFnSample, error)

func runDiskFunctionsExperiment(ctx context.Context, o Options) (*Result, error) {
	env := o.Env
	started := time.Now()
	scale := 1.0
	if len(o.Sizes) > 0 && o.Sizes[0] > 0 {
		scale = float64(o.Sizes[0]) / 100
	}
	iters := max(o.Iterations, 1)
	say := func(format string, args ...any) {
		fmt.Fprintf(env.progress(), "disk-functions: "+format+"\n", args...)
	}
	r, err := startRig(ctx, env, "faast", func(c *rig.Config) { c.DiskBudget = diskFnNodeDisk })
	if err != nil {
		return nil, err
	}
	defer r.Close()

	spec := func(name string, budget int64, disk bool) func(*appspec.Spec) {
		return func(s *appspec.Spec) {
			s.Name, s.KeepAlive, s.MaxInstances = name, appspec.Duration(diskFnKeepAlive), 1
			s.Cache.Budget, s.Cache.Shared, s.Cache.NoDisk = appspec.Size(budget), false, !disk
		}
	}
	nbBudget, mlBudget := scaledBudget(diskFnNotebookBudget, scale), scaledBudget(diskFnMLBudget, scale)
	apps := map[string]string{}
	for _, a := range []struct {
		key, example, name string
		budget             int64
		disk               bool
	}{
		{"nb-disk", "notebook", "nb-disk", nbBudget, true},
		{"nb-mem", "notebook", "nb-mem", nbBudget, false},
		{"ml-disk", "ml-inference", "ml-disk", mlBudget, true},
		{"ml-mem", "ml-inference", "ml-mem", mlBudget, false},
	} {
		name, err := r.deploy(ctx, a.example, spec(a.name, a.budget, a.disk))
		if err != nil {
			return nil, err
		}
		apps[a.key] = name
	}

	// The data, written through the memory-only applications (their
	// warm-up rounds then start from what every later round sees).
	say("creating the data (scale %g) through the platform", scale)
	if _, err := r.invoke(ctx, apps["nb-mem"], "prepare", map[string]any{"scale": scale}); err != nil {
		return nil, err
	}
	versions := make([]float64, len(diskFnModelVersions))
	for i, v := range diskFnModelVersions {
		versions[i] = math.Round(v*scale*1000) / 1000
		if _, err := r.invoke(ctx, apps["ml-mem"], "prepare", map[string]any{"scale": versions[i], "models": []string{"detect"}, "images": 1}); err != nil {
			return nil, err
		}
	}

	round := func(fn string, events []map[string]any) diskFnRound {
		return func(ctx context.Context, app string) (diskFnSample, error) {
			var s diskFnSample
			for i, ev := range events {
				inv, err := r.invoke(ctx, app, fn, ev)
				if err != nil {
					return s, err
				}
				s.add(inv, i == 0)
			}
			return s, nil
		}
	}
	var mlEvents []map[string]any
	for _, v := range versions {
		mlEvents = append(mlEvents, map[string]any{"scale": v})
	}
	nbRound := func(ctx context.Context, app string) (diskFnSample, error) {
		return round("cell", []map[string]any{{"cell": 2, "session": app, "scale": scale}})(ctx, app)
	}
	cases := []*diskFnCase{
		{Name: "notebook sum", Data: 10 * int64(35e6*scale), Budget: nbBudget, Objects: 10, Largest: int64(35e6 * scale)},
		{Name: "ML inference", Data: int64(35e6 * (versions[0] + versions[1] + versions[2] + versions[3])), Budget: mlBudget, Objects: len(versions),
			Largest: int64(35e6 * versions[0])},
	}
	runs := []struct {
		c          *diskFnCase
		disk, mem  string
		run        diskFnRound
		beforeEach func(app string) error
	}{
		{cases[0], apps["nb-disk"], apps["nb-mem"], nbRound, func(app string) error {
			_, err := r.invoke(ctx, app, "cell", map[string]any{"cell": 1, "session": app, "scale": scale})
			return err
		}},
		{cases[1], apps["ml-disk"], apps["ml-mem"], round("detect", mlEvents), nil},
	}
	// Warm: the memory-only application, then the one with the disk tier;
	// a warm-up round each (it loads the instance and, with the disk
	// tier, puts what memory evicts on disk), then the timed rounds.
	for _, w := range runs {
		for _, a := range []struct {
			app  string
			into *[]diskFnSample
		}{{w.mem, &w.c.Memory}, {w.disk, &w.c.Disk}} {
			if w.beforeEach != nil {
				if err := w.beforeEach(a.app); err != nil {
					return nil, err
				}
			}
			if _, err := w.run(ctx, a.app); err != nil {
				return nil, err
			}
			for range iters {
				s, err := w.run(ctx, a.app)
				if err != nil {
					return nil, err
				}
				*a.into = append(*a.into, s)
			}
			say("%-14s %-8s median exec %-8s reads %s", w.c.Name, a.app, median(execs(*a.into)).Round(time.Millisecond), outcomes((*a.into)[len(*a.into)-1].Reads))
		}
	}
	// Reload: every application unloaded (its keep-alive past), then one
	// round each on a fresh instance.
	for _, w := range runs {
		for _, a := range []struct {
			app  string
			into *diskFnSample
		}{{w.mem, &w.c.MemoryReload}, {w.disk, &w.c.DiskReload}} {
			if err := waitUnloaded(ctx, r, a.app); err != nil {
				return nil, err
			}
			s, err := w.run(ctx, a.app)
			if err != nil {
				return nil, err
			}
			*a.into = s
			say("%-14s %-8s reloaded: total %-8s exec %-8s cold %v reads %s", w.c.Name, a.app, s.Total.Round(time.Millisecond),
				s.Exec.Round(time.Millisecond), s.Cold, outcomes(s.Reads))
		}
	}
	var cs []diskFnCase
	for _, c := range cases {
		cs = append(cs, *c)
	}
	res := diskFunctionsResult(o, r.link, scale, iters, cs, time.Since(started))
	return res, checkDiskFunctions(cs)
}

// waitUnloaded waits until the application has no instance, at most a
// minute past its keep-alive.
func waitUnloaded(ctx context.Context, r *benchRig, app string) error {
	deadline := time.Now().Add(diskFnKeepAlive + time.Minute)
	for {
		loaded := 0
		for _, a := range r.p.Controller.Apps() {
			if a.Name == app {
				loaded += len(a.Instances)
			}
		}
		for _, in := range r.p.Agent.Instances() {
			if in.App == app {
				loaded++
			}
		}
		if loaded == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s was not unloaded after its keep-alive", app)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// checkDiskFunctions says what in the rounds would make the figures
// wrong: a disk-tier application whose rounds did not take from disk what
// memory cannot hold (a broken tier would show as a figure), a
// memory-only one that served disk hits (no_disk ignored) or missed
// nothing (the budget held the working set: not the experiment), a
// reload that found its instance loaded.
func checkDiskFunctions(cases []diskFnCase) error {
	var errs []error
	for _, c := range cases {
		// What the budget cannot hold, per round, must come from disk.
		want := max(c.Data-c.Budget, 1)
		disk, mem := sumReads(c.Disk...), sumReads(c.Memory...)
		if got := disk["disk_hit"].Bytes; got < int64(len(c.Disk))*want {
			errs = append(errs, fmt.Errorf("%s: the application with the disk tier served %.1f MB of its %d warm rounds from disk, want at least %.1f MB a round (%s)",
				c.Name, float64(got)/1e6, len(c.Disk), float64(want)/1e6, outcomes(disk)))
		}
		if got := c.DiskReload.Reads["disk_hit"].Bytes; got < want {
			errs = append(errs, fmt.Errorf("%s: the reloaded instance with the disk tier served %.1f MB from disk, want at least %.1f MB (%s)",
				c.Name, float64(got)/1e6, float64(want)/1e6, outcomes(c.DiskReload.Reads)))
		}
		if n := mem["disk_hit"].Count + c.MemoryReload.Reads["disk_hit"].Count; n > 0 {
			errs = append(errs, fmt.Errorf("%s: the memory-only application served %d disk hits", c.Name, n))
		}
		if mem["local_miss"].Count == 0 {
			errs = append(errs, fmt.Errorf("%s: the memory-only application missed nothing: its budget held the working set (%s)", c.Name, outcomes(mem)))
		}
		if !c.DiskReload.Cold || !c.MemoryReload.Cold {
			errs = append(errs, fmt.Errorf("%s: a reload round ran on a loaded instance", c.Name))
		}
	}
	return errors.Join(errs...)
}

func (s *diskFnSample) addReads(reads map[string]api.ReadCount) {
	s.add(&invocation{served: reads}, false)
}

func execs(ss []diskFnSample) []time.Duration {
	out := make([]time.Duration, len(ss))
	for i, s := range ss {
		out[i] = s.Exec
	}
	return out
}

func totals(ss []diskFnSample) []time.Duration {
	out := make([]time.Duration, len(ss))
	for i, s := range ss {
		out[i] = s.Total
	}
	return out
}
