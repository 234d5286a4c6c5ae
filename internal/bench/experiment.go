package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"slices"
	"strings"
	"time"
)

// Experiment is one entry of `hoard bench all`: a benchmark that
// reproduces a paper's figure and returns a Result. A new experiment plugs
// in by adding one entry to Experiments.
type Experiment struct {
	Name  string // [a-z0-9-]+, used by --only and in file names
	Title string
	// Reproduces names the papers' figures set next to hoard's.
	Reproduces []Reference
	// Quick and Full are the options of a --quick run and of a full one;
	// RunAll adds the environment (Options.Env) to them.
	Quick, Full Options
	// Run runs the experiment and returns its Result. An error makes
	// RunAll record the experiment as failed, keeping the Result when
	// there is one (a run that measured, then found a fault).
	Run func(ctx context.Context, o Options) (*Result, error)
}

// Options is how one experiment runs: its scale (from Experiment.Quick
// or Experiment.Full) and the environment shared by every experiment.
type Options struct {
	// Quick is set for a --quick run.
	Quick bool
	// Sizes are the object sizes to read, for experiments that read
	// objects; nil leaves the experiment's default.
	Sizes []int64
	// Iterations is the experiment's repetition count (increments,
	// invocations); 0 leaves the experiment's default.
	Iterations int
	// Nodes are the node counts, for experiments that scale over the
	// several-nodes rig (tree-scale); nil leaves the experiment's
	// default.
	Nodes []int
	// Env is the environment, set by RunAll.
	Env Env
}

// Env is what every experiment may need from its surroundings.
type Env struct {
	// MinIOBinary, RedisBinary: "" finds them (RedisBinary: an experiment
	// that cannot find Redis leaves it out and says so).
	MinIOBinary, RedisBinary string
	// HoardBinary is the hoard binary, for experiments that run `hoard
	// serve` processes; "" means $HOARD_BIN.
	HoardBinary string
	// Python is an interpreter with the project's packages (boto3);
	// "" leaves out what needs it.
	Python string
	// ModuleRoot is the repository root (python/ scripts live under it).
	ModuleRoot string
	// TempDir is where scratch directories are made; "" the system's.
	TempDir string
	// Sizes and Iterations, when set, replace every experiment's own
	// (hoard bench all --sizes, --iterations): e.g. one size of the full
	// run alone.
	Sizes      []int64
	Iterations int
	// Nodes, when set, replaces the node counts of the experiments that
	// scale over nodes (hoard bench all --nodes).
	Nodes []int
	// Progress receives progress lines; nil discards.
	Progress io.Writer
	// Table receives each experiment's printed table, as its own command
	// prints it; nil discards.
	Table io.Writer
	// Log receives the servers' logs; nil discards.
	Log *slog.Logger
}

func (e Env) progress() io.Writer {
	if e.Progress == nil {
		return io.Discard
	}
	return e.Progress
}

func (e Env) table() io.Writer {
	if e.Table == nil {
		return io.Discard
	}
	return e.Table
}

// Experiments is the registry of `hoard bench all`, in the order they run.
func Experiments() []Experiment {
	return []Experiment{
		accessExperiment(),
		consistencyExperiment(),
		prewarmExperiment(),
		functionsExperiment(),
		cacheSizeExperiment(),
		bandwidthExperiment(),
		erasureExperiment(),
		erasureAvailabilityExperiment(),
		erasureRegistryExperiment(),
		erasureNodesExperiment(),
		erasureRigExperiment(),
		macroExperiment(),
		pipelinesExperiment(),
		throughputExperiment(),
		rangesExperiment(),
		simulationExperiment(),
		diskExperiment(),
		diskFunctionsExperiment(),
		writesExperiment(),
		changesExperiment(),
		changesRelayExperiment(),
		predictionExperiment(),
		localityExperiment(),
		memMacroExperiment(),
		memNodesExperiment(),
		treeScaleExperiment(),
		treeFailureExperiment(),
	}
}

// ExperimentNames lists the registry's names.
func ExperimentNames() []string {
	var out []string
	for _, e := range Experiments() {
		out = append(out, e.Name)
	}
	return out
}

// ErrUnknownExperiment is returned by SelectExperiments for a name that is
// not in the registry.
var ErrUnknownExperiment = errors.New("unknown experiment")

// SelectExperiments returns the registry's experiments named in names, in
// the registry's order; no names selects all of them.
func SelectExperiments(names []string) ([]Experiment, error) {
	all := Experiments()
	if len(names) == 0 {
		return all, nil
	}
	for _, n := range names {
		if !slices.ContainsFunc(all, func(e Experiment) bool { return e.Name == n }) {
			return nil, fmt.Errorf("%w %q (known: %s)", ErrUnknownExperiment, n, strings.Join(ExperimentNames(), ", "))
		}
	}
	var out []Experiment
	for _, e := range all {
		if slices.Contains(names, e.Name) {
			out = append(out, e)
		}
	}
	return out, nil
}

// RunAll runs exps one after another and collects their Results. An
// experiment that fails (an error, a panic, an invalid Result) is
// recorded as failed and the others still run; once ctx is done the rest
// are recorded as failed without running.
func RunAll(ctx context.Context, exps []Experiment, quick bool, env Env) *Results {
	out := &Results{
		Schema:    ResultSchema,
		Command:   "hoard bench all",
		Quick:     quick,
		StartedAt: time.Now().UTC().Truncate(time.Second),
		Machine:   DescribeMachine(),
	}
	began := time.Now()
	for _, e := range exps {
		o := e.Full
		if quick {
			o = e.Quick
			o.Quick = true
		}
		if len(env.Sizes) > 0 {
			o.Sizes = env.Sizes
		}
		if env.Iterations > 0 {
			o.Iterations = env.Iterations
		}
		if len(env.Nodes) > 0 {
			o.Nodes = env.Nodes
		}
		o.Env = env
		fmt.Fprintf(env.progress(), "== %s: %s\n", e.Name, e.Title)
		res := runOne(ctx, e, o)
		if res.Status == StatusOK {
			fmt.Fprintf(env.progress(), "== %s: ok (%.1fs)\n", e.Name, res.Seconds)
		} else {
			fmt.Fprintf(env.progress(), "== %s: FAILED (%.1fs): %s\n", e.Name, res.Seconds, res.Error)
		}
		out.Experiments = append(out.Experiments, *res)
		// The run's machine names the servers its experiments used.
		m := &out.Machine
		m.MinIOVersion = cmp.Or(m.MinIOVersion, res.Machine.MinIOVersion)
		m.RedisVersion = cmp.Or(m.RedisVersion, res.Machine.RedisVersion)
		m.Python = cmp.Or(m.Python, res.Machine.Python)
	}
	out.Seconds = time.Since(began).Seconds()
	return out
}

// runOne runs one experiment and always returns a Result.
func runOne(ctx context.Context, e Experiment, o Options) (res *Result) {
	began := time.Now()
	failed := func(err error) *Result {
		return &Result{
			Experiment: e.Name, Title: e.Title, Reproduces: e.Reproduces, Quick: o.Quick,
			Status: StatusFailed, Error: err.Error(), StartedAt: began.UTC().Truncate(time.Second),
			Seconds: time.Since(began).Seconds(), Machine: DescribeMachine(),
			Settings: RunSettings{Link: LinkLoopback},
		}
	}
	if err := ctx.Err(); err != nil {
		return failed(fmt.Errorf("not run: %w", err))
	}
	defer func() {
		if p := recover(); p != nil {
			res = failed(fmt.Errorf("panic: %v\n%s", p, debug.Stack()))
		}
	}()
	r, err := e.Run(ctx, o)
	if r == nil {
		if err == nil {
			err = errors.New("no result")
		}
		return failed(err)
	}
	// The registry's names win: the report files plots under them.
	r.Experiment, r.Title, r.Quick = e.Name, e.Title, o.Quick
	if len(r.Reproduces) == 0 {
		r.Reproduces = e.Reproduces
	}
	// An error with a Result fails the experiment and keeps what it
	// measured.
	r.Status, r.Error = StatusOK, ""
	if err != nil {
		r.Status, r.Error = StatusFailed, err.Error()
	}
	r.StartedAt, r.Seconds = began.UTC().Truncate(time.Second), time.Since(began).Seconds()
	if r.Settings.Link == "" {
		r.Settings.Link = LinkLoopback
	}
	if err := r.Validate(); err != nil {
		return failed(err)
	}
	return r
}
