package bench

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestRegistry(t *testing.T) {
	seen := map[string]bool{}
	for _, e := range Experiments() {
		if !validID(e.Name) || seen[e.Name] {
			t.Errorf("experiment name %q: invalid or repeated", e.Name)
		}
		seen[e.Name] = true
		if e.Title == "" || e.Run == nil || len(e.Reproduces) == 0 {
			t.Errorf("%s: needs a title, a Run and the figures it reproduces", e.Name)
		}
		for _, r := range e.Reproduces {
			if r.Paper == "" || r.Figure == "" || r.Citation == "" {
				t.Errorf("%s: incomplete reference %+v", e.Name, r)
			}
		}
		if e.Quick.Quick || e.Full.Quick {
			t.Errorf("%s: RunAll sets Options.Quick, the registry does not", e.Name)
		}
	}
	for _, want := range []string{"access", "consistency", "pipelines"} {
		if !seen[want] {
			t.Errorf("%s is not registered", want)
		}
	}
}

func TestSelectExperiments(t *testing.T) {
	all, err := SelectExperiments(nil)
	if err != nil || len(all) != len(Experiments()) {
		t.Fatalf("no names: %d experiments, %v", len(all), err)
	}
	// The registry's order, whatever the order asked.
	got, err := SelectExperiments([]string{"consistency", "access"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Name != "access" || got[1].Name != "consistency" {
		t.Errorf("selected %v", names(got))
	}
	_, err = SelectExperiments([]string{"access", "nope"})
	if !errors.Is(err, ErrUnknownExperiment) || !strings.Contains(err.Error(), `"nope"`) || !strings.Contains(err.Error(), "known: access") {
		t.Errorf("unknown name: %v", err)
	}
}

func names(es []Experiment) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Name)
	}
	return out
}

func TestRunAll(t *testing.T) {
	okResult := func() *Result {
		return &Result{Plots: []Plot{{Kind: PlotCurve, ID: "c", Series: []Series{{Label: "a", X: []float64{1}, Y: []float64{2}}}}}}
	}
	var gotQuick []Options
	exps := []Experiment{
		{Name: "ok", Title: "OK", Reproduces: []Reference{refOFCFig7}, Quick: Options{Iterations: 3}, Full: Options{Iterations: 30},
			Run: func(_ context.Context, o Options) (*Result, error) {
				gotQuick = append(gotQuick, o)
				return okResult(), nil
			}},
		{Name: "err", Title: "Err", Run: func(context.Context, Options) (*Result, error) { return nil, errors.New("no MinIO") }},
		{Name: "panics", Title: "Panics", Run: func(context.Context, Options) (*Result, error) { panic("boom") }},
		{Name: "kept", Title: "Kept", Run: func(context.Context, Options) (*Result, error) {
			return okResult(), errors.New("strong lost 2")
		}},
		{Name: "invalid", Title: "Invalid", Run: func(context.Context, Options) (*Result, error) {
			r := okResult()
			r.Plots[0].Kind = "pie"
			return r, nil
		}},
		{Name: "nil", Title: "Nil", Run: func(context.Context, Options) (*Result, error) { return nil, nil }},
	}
	var progress strings.Builder
	res := RunAll(context.Background(), exps, true, Env{Progress: &progress, MinIOBinary: "/x/minio"})
	if res.Schema != ResultSchema || !res.Quick || len(res.Experiments) != len(exps) {
		t.Fatalf("results header %+v", res)
	}
	want := map[string]struct{ status, err string }{
		"ok":      {StatusOK, ""},
		"err":     {StatusFailed, "no MinIO"},
		"panics":  {StatusFailed, "panic: boom"},
		"kept":    {StatusFailed, "strong lost 2"},
		"invalid": {StatusFailed, "unknown kind"},
		"nil":     {StatusFailed, "no result"},
	}
	for _, e := range res.Experiments {
		w := want[e.Experiment]
		if e.Status != w.status || !strings.Contains(e.Error, w.err) {
			t.Errorf("%s: status %q error %q, want %q with %q", e.Experiment, e.Status, e.Error, w.status, w.err)
		}
		if e.Title == "" || e.Settings.Link != LinkLoopback || e.StartedAt.IsZero() {
			t.Errorf("%s: registry fields not filled: %+v", e.Experiment, e)
		}
	}
	if kept := res.Experiments[3]; len(kept.Plots) != 1 {
		t.Error("a failure with a Result lost what it measured")
	}
	if ok := res.Experiments[0]; ok.Experiment != "ok" || !ok.Quick || !reflect.DeepEqual(ok.Reproduces, []Reference{refOFCFig7}) {
		t.Errorf("ok result %+v", ok)
	}
	if len(gotQuick) != 1 || gotQuick[0].Iterations != 3 || !gotQuick[0].Quick || gotQuick[0].Env.MinIOBinary != "/x/minio" {
		t.Errorf("the quick run got options %+v", gotQuick)
	}
	if f := res.Failed(); !reflect.DeepEqual(f, []string{"err", "panics", "kept", "invalid", "nil"}) {
		t.Errorf("Failed() = %v", f)
	}
	if !strings.Contains(progress.String(), "== err: FAILED") {
		t.Errorf("progress:\n%s", progress.String())
	}

	// A full run gets the full options.
	gotQuick = nil
	RunAll(context.Background(), exps[:1], false, Env{})
	if len(gotQuick) != 1 || gotQuick[0].Iterations != 30 || gotQuick[0].Quick {
		t.Errorf("the full run got options %+v", gotQuick)
	}

	// Sizes and iterations given to the run replace the experiment's.
	gotQuick = nil
	RunAll(context.Background(), exps[:1], false, Env{Sizes: []int64{1e9}, Iterations: 2})
	if len(gotQuick) != 1 || gotQuick[0].Iterations != 2 || !reflect.DeepEqual(gotQuick[0].Sizes, []int64{1e9}) {
		t.Errorf("the run with sizes and iterations got options %+v", gotQuick)
	}

	// Once cancelled, nothing more runs.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	gotQuick = nil
	res = RunAll(ctx, exps[:1], true, Env{})
	if len(gotQuick) != 0 || res.Experiments[0].Status != StatusFailed || !strings.Contains(res.Experiments[0].Error, "not run") {
		t.Errorf("cancelled run: ran %d, result %+v", len(gotQuick), res.Experiments[0])
	}
}
