package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/hoard-io/hoard/internal/appspec"
	"github.com/hoard-io/hoard/internal/bytesize"
	"github.com/hoard-io/hoard/internal/rig"
)

// findExamples returns the examples directory: the given one, else the
// examples/ of the hoard checkout the binary or the working directory
// belongs to; "" when there is none or "none" was given.
func findExamples(dir string) string {
	if dir == "none" {
		return ""
	}
	if dir != "" {
		return dir
	}
	var candidates []string
	if wd, err := os.Getwd(); err == nil {
		for d := wd; ; d = filepath.Dir(d) {
			candidates = append(candidates, filepath.Join(d, "examples"))
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	if exe, err := os.Executable(); err == nil {
		candidates = append(candidates, filepath.Join(filepath.Dir(exe), "..", "examples"))
	}
	for _, c := range candidates {
		if _, err := os.Stat(filepath.Join(filepath.Dir(c), "go.mod")); err != nil {
			continue // only a hoard checkout's examples
		}
		if st, err := os.Stat(c); err == nil && st.IsDir() {
			return c
		}
	}
	return ""
}

// exampleDirs lists the application directories under dir.
func exampleDirs(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(dir, e.Name(), appspec.FileName)); e.IsDir() && err == nil {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out, nil
}

// deployExamples deploys every application under the examples directory.
func deployExamples(ctx context.Context, p *rig.Platform, dir string, stdout io.Writer) error {
	dir = findExamples(dir)
	if dir == "" {
		return nil
	}
	dirs, err := exampleDirs(dir)
	if err != nil {
		return fmt.Errorf("examples: %w", err)
	}
	for _, d := range dirs {
		pkg, err := appspec.Pack(d)
		if err != nil {
			return fmt.Errorf("example %s: %w", d, err)
		}
		info, err := p.Controller.Deploy(ctx, pkg.Data)
		if err != nil {
			return fmt.Errorf("deploying example %s: %w", d, err)
		}
		fmt.Fprintf(stdout, "deployed example %s (version %d)\n", info.Name, info.Version)
	}
	return nil
}

// demoPlan is an example's demo.json: how to create its data and what
// workload to run.
type demoPlan struct {
	Prepare *demoStep  `json:"prepare"`
	Steps   []demoStep `json:"steps"`
}

type demoStep struct {
	Function    string          `json:"function,omitempty"`
	Pipeline    string          `json:"pipeline,omitempty"`
	Event       json.RawMessage `json:"event,omitempty"`
	Repeat      int             `json:"repeat,omitempty"`
	Concurrency int             `json:"concurrency,omitempty"`
}

// withScale sets "scale" in an object event.
func withScale(ev json.RawMessage, scale float64) json.RawMessage {
	m := map[string]any{}
	if len(ev) > 0 {
		if json.Unmarshal(ev, &m) != nil {
			return ev
		}
	}
	m["scale"] = scale
	out, _ := json.Marshal(m)
	return out
}

// runDemo prepares every example's data, runs its workload, and prints a
// report per function: invocations, cold starts, latency, reads by
// access type.
func runDemo(ctx context.Context, p *rig.Platform, scale float64, stdout io.Writer) error {
	dir := findExamples("")
	if dir == "" {
		return errors.New("no examples directory")
	}
	dirs, err := exampleDirs(dir)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, "\nThe demo: each example creates its data, then runs a short workload.")
	var apps []string
	for i, d := range dirs {
		raw, err := os.ReadFile(filepath.Join(d, "demo.json"))
		if err != nil {
			continue
		}
		var plan demoPlan
		if err := json.Unmarshal(raw, &plan); err != nil {
			return fmt.Errorf("%s/demo.json: %w", d, err)
		}
		pkg, err := appspec.Pack(d)
		if err != nil {
			return err
		}
		app := pkg.Spec.Name
		apps = append(apps, app)
		if plan.Prepare != nil {
			fmt.Fprintf(stdout, "[%d/%d] %s: creating its data (scale %g) ...", i+1, len(dirs), app, scale)
			t0 := time.Now()
			if err := demoRun(ctx, p, app, *plan.Prepare, scale); err != nil {
				fmt.Fprintln(stdout, " failed")
				return err
			}
			fmt.Fprintf(stdout, " done in %.1fs\n", time.Since(t0).Seconds())
		}
		for _, st := range plan.Steps {
			what := st.Function
			if st.Pipeline != "" {
				what = "pipeline " + st.Pipeline
			}
			fmt.Fprintf(stdout, "[%d/%d] %s: %s x%d ...", i+1, len(dirs), app, what, max(st.Repeat, 1))
			t0 := time.Now()
			if err := demoRun(ctx, p, app, st, scale); err != nil {
				fmt.Fprintln(stdout, " failed")
				return err
			}
			fmt.Fprintf(stdout, " done in %.1fs\n", time.Since(t0).Seconds())
		}
	}
	return printDemoReport(p, apps, stdout)
}

// demoRun runs one step Repeat times, Concurrency at a time.
func demoRun(ctx context.Context, p *rig.Platform, app string, st demoStep, scale float64) error {
	n, conc := max(st.Repeat, 1), max(st.Concurrency, 1)
	ev := withScale(st.Event, scale)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	sem := make(chan struct{}, conc)
	for range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			var err error
			if st.Pipeline != "" {
				run, e := p.Controller.RunPipeline(ctx, app, st.Pipeline, ev, "demo")
				if err = e; err == nil && !run.OK {
					err = errors.New(run.Error)
				}
			} else {
				rec, e := p.Controller.Invoke(ctx, app, st.Function, ev, "demo")
				if err = e; err == nil && !rec.OK {
					err = fmt.Errorf("%s: %s: %s\n%s", st.Function, rec.Error.Type, rec.Error.Message, rec.Log)
				}
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func printDemoReport(p *rig.Platform, apps []string, stdout io.Writer) error {
	fmt.Fprintln(stdout, "\nDemo report (latency as callers see it: queueing and cold starts included)")
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "app\tfunction\tinvocations\tcold starts\terrors\tp50 ms\tp99 ms\tLH\tRH\tLM\tRM\tpass-through\t")
	for _, app := range apps {
		stats, err := p.Controller.Stats(app)
		if err != nil {
			return err
		}
		names := make([]string, 0, len(stats))
		for n := range stats {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			s := stats[n]
			cell := func(k string) string {
				r := s.Reads[k]
				if r.Count == 0 {
					return "-"
				}
				return fmt.Sprintf("%d/%s", r.Count, bytesize.Human(r.Bytes))
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%.1f\t%.1f\t%s\t%s\t%s\t%s\t%s\t\n", app, n, s.Invocations, s.ColdStarts, s.Errors,
				s.P50MS, s.P99MS, cell("local_hit"), cell("remote_hit"), cell("local_miss"), cell("remote_miss"), cell("pass_through"))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "\nPlatform decisions (the latest per application):")
	for _, info := range p.Controller.Apps() {
		if info.KeepAlive != nil {
			fmt.Fprintf(stdout, "  %-16s keep-alive: %s (%s)\n", info.Name, info.KeepAlive.Mode, info.KeepAlive.Reason)
		}
		evs := info.Events
		if len(evs) > 3 {
			evs = evs[len(evs)-3:]
		}
		for _, e := range evs {
			fmt.Fprintf(stdout, "  %-16s %s %-9s %s\n", info.Name, e.Time.Local().Format("15:04:05"), e.Kind, e.Detail)
		}
	}
	fmt.Fprintln(stdout, "\n"+strings.TrimSpace(`
Reads are count/bytes per access type: LH local hit, RH remote hit (another
instance's cachelet had it), LM local miss (this cachelet owns the key and
fetched it from the store), RM remote miss (the owner fetched it).`))
	return nil
}
