package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/loadgen"
)

// defaultLoadConcurrency bounds the invocations in flight unless
// --concurrency says otherwise: far above what a local platform runs at
// once, low enough to keep a runaway schedule from opening thousands of
// connections.
const defaultLoadConcurrency = 256

// loadOptions is what `hoard load` was asked to do.
type loadOptions struct {
	target      loadgen.Target // without --trace
	event       json.RawMessage
	every       time.Duration
	poisson     time.Duration
	trace       string
	duration    time.Duration
	count       int
	speed       float64
	concurrency int
	seed        uint64
	jsonPath    string
	client      func(*http.Client) (*api.ControllerClient, error)
}

// loadSettings records the options in --json's output (the token left
// out).
type loadSettings struct {
	Target      *loadgen.Target `json:"target,omitempty"`
	Every       time.Duration   `json:"every_ns,omitempty"`
	Poisson     time.Duration   `json:"poisson_mean_ns,omitempty"`
	Seed        uint64          `json:"seed,omitempty"`
	Trace       string          `json:"trace,omitempty"`
	Duration    time.Duration   `json:"duration_ns,omitempty"`
	Count       int             `json:"count,omitempty"`
	Speed       float64         `json:"speed"`
	Concurrency int             `json:"concurrency"`
}

func (o *loadOptions) settings() loadSettings {
	s := loadSettings{Every: o.every, Poisson: o.poisson, Trace: o.trace, Duration: o.duration,
		Count: o.count, Speed: o.speed, Concurrency: o.concurrency}
	if o.trace == "" {
		t := o.target
		s.Target = &t
	}
	if o.poisson > 0 {
		s.Seed = o.seed
	}
	return s
}

// parseLoadFlags reads `hoard load`'s flags; every mistake in them is a
// usage error.
func parseLoadFlags(args []string, stderr io.Writer) (*loadOptions, error) {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: hoard load [flags] --app APP (--function FN | --pipeline P) (--every D | --poisson D) (--duration D | --count N)\n"+
			"       hoard load [flags] --trace FILE [--speed X] [--duration D] [--count N]\n\n"+
			"Sends invocations to the controller on a schedule, open loop (an invocation is sent\n"+
			"when its time comes, whether or not earlier ones have been answered), and prints\n"+
			"their latencies per application and function. A trace file has one invocation per\n"+
			"line: offset_seconds,app,function[,event-json] (pipeline:NAME for a pipeline), or\n"+
			`{"offset": 1.5, "app": "a", "function": "f", "event": {...}}.`+"\n\n"+
			"Exit status 1 when an invocation could not be sent or was refused by the controller;\n"+
			"the functions' own errors are reported, not failed on.\n\nflags:")
		fs.PrintDefaults()
	}
	o := &loadOptions{client: clientFlags(fs)}
	var data, pipeline string
	fs.StringVar(&o.target.App, "app", "", "the application to invoke")
	fs.StringVar(&o.target.Function, "function", "", "the function to invoke")
	fs.StringVar(&pipeline, "pipeline", "", "the pipeline to run (instead of --function)")
	fs.StringVar(&data, "data", "{}", "the event as JSON, or @FILE (with --trace: for rows without one)")
	fs.DurationVar(&o.every, "every", 0, "send one invocation every `D`")
	fs.DurationVar(&o.poisson, "poisson", 0, "send invocations as a Poisson process: exponential gaps with mean `D`")
	fs.StringVar(&o.trace, "trace", "", "replay the invocations of a trace `FILE` (CSV or JSON lines)")
	fs.DurationVar(&o.duration, "duration", 0, "stop sending after `D` on the clock (after --speed)")
	fs.IntVar(&o.count, "count", 0, "stop after `N` invocations")
	fs.Float64Var(&o.speed, "speed", 1, "time-scale factor: offsets are divided by `X` (60 replays an hour in a minute)")
	fs.IntVar(&o.concurrency, "concurrency", defaultLoadConcurrency, "most invocations in flight (0: no cap); an arrival finding the cap reached is sent late")
	fs.Uint64Var(&o.seed, "seed", 1, "the Poisson process's seed: the same seed sends at the same offsets")
	fs.StringVar(&o.jsonPath, "json", "", "also write the summary and every invocation's record as JSON to `FILE`")
	if err := usageErr(fs.Parse(args)); err != nil {
		return nil, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	bad := func(format string, a ...any) (*loadOptions, error) {
		return nil, fmt.Errorf("%w: "+format, append([]any{errUsage}, a...)...)
	}
	if fs.NArg() > 0 {
		return bad("unexpected argument %q", fs.Arg(0))
	}
	n := 0
	for _, f := range []string{"every", "poisson", "trace"} {
		if set[f] {
			n++
		}
	}
	switch {
	case n == 0:
		return bad("say when to send: --every D, --poisson D or --trace FILE")
	case n > 1:
		return bad("--every, --poisson and --trace exclude each other")
	}
	switch {
	case set["every"] && o.every <= 0:
		return bad("--every must be positive")
	case set["poisson"] && o.poisson <= 0:
		return bad("--poisson must be positive")
	case set["trace"] && o.trace == "":
		return bad("--trace needs a file")
	case o.duration < 0:
		return bad("--duration must not be negative")
	case o.count < 0:
		return bad("--count must not be negative")
	case !(o.speed > 0) || math.IsInf(o.speed, 0):
		return bad("--speed must be a positive number")
	case o.concurrency < 0:
		return bad("--concurrency must not be negative")
	}
	if o.trace != "" {
		if set["app"] || set["function"] || set["pipeline"] {
			return bad("the trace names what to invoke: no --app, --function or --pipeline with --trace")
		}
	} else {
		switch {
		case o.target.App == "":
			return bad("--app is required (with --function or --pipeline), or --trace")
		case o.target.Function != "" && pipeline != "":
			return bad("--function and --pipeline exclude each other")
		case o.target.Function == "" && pipeline == "":
			return bad("--function or --pipeline is required")
		case o.duration == 0 && o.count == 0:
			return bad("--every and --poisson need --duration or --count to end")
		}
		if pipeline != "" {
			o.target.Function, o.target.Pipeline = pipeline, true
		}
	}
	o.event = json.RawMessage(data)
	if strings.HasPrefix(data, "@") {
		b, err := os.ReadFile(data[1:])
		if err != nil {
			return nil, err
		}
		o.event = b
	}
	if !json.Valid(o.event) {
		return bad("--data is not valid JSON")
	}
	return o, nil
}

// schedule builds the arrivals: the process, scaled by --speed, then
// bounded by --count and --duration.
func (o *loadOptions) schedule() (loadgen.Schedule, error) {
	var s loadgen.Schedule
	switch {
	case o.every > 0:
		s = loadgen.Periodic(o.target, o.every)
	case o.poisson > 0:
		s = loadgen.Poisson(o.target, o.poisson, o.seed)
	default:
		f, err := os.Open(o.trace)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		arrivals, err := loadgen.ParseTrace(f, o.trace)
		if err != nil {
			return nil, err
		}
		s = loadgen.Replay(arrivals)
	}
	return loadgen.Limit(loadgen.Scale(s, o.speed), o.count, o.duration), nil
}

// runLoad is `hoard load`, the load injector: it sends invocations on a
// schedule and prints their latencies.
func runLoad(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseLoadFlags(args, stderr)
	if err != nil {
		return err
	}
	sched, err := o.schedule()
	if err != nil {
		return err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = o.concurrency // keep a connection per invocation in flight
	if o.concurrency == 0 {
		tr.MaxIdleConnsPerHost = defaultLoadConcurrency
	}
	defer tr.CloseIdleConnections()
	c, err := o.client(&http.Client{Transport: tr})
	if err != nil {
		return err
	}

	r := &loadgen.Runner{Invoker: controllerInvoker{c}, Event: o.event, Concurrency: o.concurrency}
	started := time.Now()
	stop := showLoadProgress(stderr, r, started)
	rep, runErr := r.Run(ctx, sched)
	stop()

	printLoadSummary(stdout, rep, o.concurrency)
	if o.jsonPath != "" {
		out, _ := json.MarshalIndent(struct {
			Started  time.Time    `json:"started"`
			Settings loadSettings `json:"settings"`
			*loadgen.Report
		}{started, o.settings(), rep}, "", "  ")
		if err := os.WriteFile(o.jsonPath, append(out, '\n'), 0o644); err != nil {
			return err
		}
	}
	if runErr != nil {
		return fmt.Errorf("interrupted after %d invocations: %w", rep.Total.Invocations, runErr)
	}
	if n := rep.Total.SendErrors; n > 0 {
		return fmt.Errorf("%d of %d invocations could not be sent or were refused", n, rep.Total.Invocations)
	}
	return nil
}

// controllerInvoker sends invocations to the controller's API.
type controllerInvoker struct{ c *api.ControllerClient }

func (v controllerInvoker) Invoke(ctx context.Context, t loadgen.Target, event json.RawMessage) (loadgen.Outcome, error) {
	if t.Pipeline {
		run, err := v.c.RunPipeline(ctx, t.App, t.Function, event)
		if err != nil {
			return loadgen.Outcome{}, sendFailure(err)
		}
		return pipelineOutcome(run), nil
	}
	rec, err := v.c.Invoke(ctx, t.App, t.Function, event)
	if err != nil {
		return loadgen.Outcome{}, sendFailure(err)
	}
	out := loadgen.Outcome{OK: rec.OK, Cold: rec.Cold}
	if !rec.OK && rec.Error != nil {
		out.ErrorType, out.Error = rec.Error.Type, rec.Error.Message
	}
	return out, nil
}

// pipelineOutcome is a run's outcome: cold when any stage was, and the
// error type of the first failed stage (by name) that ran.
func pipelineOutcome(run *api.PipelineRun) loadgen.Outcome {
	out := loadgen.Outcome{OK: run.OK, Error: run.Error}
	names := make([]string, 0, len(run.Stages))
	for name := range run.Stages {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		st := run.Stages[name]
		if st == nil {
			continue
		}
		out.Cold = out.Cold || st.Cold
		if !run.OK && st.Error != nil && (out.ErrorType == "" || out.ErrorType == "NotRun") {
			out.ErrorType = st.Error.Type
		}
	}
	return out
}

// loadSendError is an invocation that was not sent, or was refused; its
// type names which in the summary.
type loadSendError struct {
	kind string
	err  error
}

func (e *loadSendError) Error() string     { return e.err.Error() }
func (e *loadSendError) Unwrap() error     { return e.err }
func (e *loadSendError) ErrorType() string { return e.kind }

// sendFailure types an error of the controller's client: "transport" when no
// answer came, "http NNN" for an error status, "bad answer" for an answer
// that was not what the API returns.
func sendFailure(err error) error {
	var ue *url.Error
	var ae *api.Error
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	kind := "refused"
	switch {
	case errors.As(err, &ae):
		kind = "http " + strconv.Itoa(ae.Status)
	case errors.As(err, &ue):
		kind = "transport"
	case errors.As(err, &syn), errors.As(err, &typ):
		kind = "bad answer"
	}
	return &loadSendError{kind, err}
}

// showLoadProgress reports a run's progress on w until the returned function
// is called: a line updated in place on a terminal, every 10 seconds
// otherwise.
func showLoadProgress(w io.Writer, r *loadgen.Runner, started time.Time) (stop func()) {
	tty := loadIsTerminal(w)
	every := 10 * time.Second
	if tty {
		every = 250 * time.Millisecond
	}
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				if tty {
					fmt.Fprintf(w, "\r\x1b[K%s\n", loadProgressLine(r.Progress(), time.Since(started)))
				}
				return
			case <-t.C:
				if tty {
					fmt.Fprintf(w, "\r\x1b[K%s", loadProgressLine(r.Progress(), time.Since(started)))
				} else {
					fmt.Fprintln(w, loadProgressLine(r.Progress(), time.Since(started)))
				}
			}
		}
	}()
	return func() {
		close(done)
		<-exited
	}
}

func loadProgressLine(p loadgen.Progress, elapsed time.Duration) string {
	s := fmt.Sprintf("%s elapsed: %d sent, %d done, %d errors, %d in flight", elapsed.Round(100*time.Millisecond), p.Sent, p.Done, p.Errors, p.InFlight)
	if p.Delayed > 0 {
		s += fmt.Sprintf(", %d sent late (concurrency cap)", p.Delayed)
	}
	return s
}

// loadIsTerminal reports whether w is a terminal (a character device).
func loadIsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// printLoadSummary prints a table of the invocations per target (and
// their total when there are several), then the errors by type and how
// late invocations were sent.
func printLoadSummary(w io.Writer, rep *loadgen.Report, concurrency int) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "app\tfunction\tinvocations\terrors\tcold\tp50 ms\tp99 ms\tmax ms\trate/s (intended)\t")
	row := func(app, name string, s loadgen.Summary) {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t\n", app, name, s.Invocations, s.Errors(), s.Cold,
			loadMS(s.P50, s.Sent), loadMS(s.P99, s.Sent), loadMS(s.Max, s.Sent), loadRates(s))
	}
	for _, s := range rep.Targets {
		name := s.Function
		if s.Pipeline {
			name += " (pipeline)"
		}
		row(s.App, name, s)
	}
	if len(rep.Targets) > 1 {
		row("total", "", rep.Total)
	}
	tw.Flush()

	for _, s := range rep.Targets {
		if len(s.ErrorTypes) == 0 {
			continue
		}
		types := make([]string, 0, len(s.ErrorTypes))
		for t := range s.ErrorTypes {
			types = append(types, t)
		}
		sort.Strings(types)
		for i, t := range types {
			types[i] = fmt.Sprintf("%d %s", s.ErrorTypes[t], t)
		}
		fmt.Fprintf(w, "errors of %s: %s\n", s.Target, strings.Join(types, ", "))
	}
	t := rep.Total
	fmt.Fprintf(w, "%d invocations in %s; sent late by p50 %s ms, p99 %s ms, max %s ms", t.Invocations,
		rep.Elapsed.Round(time.Millisecond), loadMS(t.LatenessP50, t.Invocations), loadMS(t.LatenessP99, t.Invocations), loadMS(t.LatenessMax, t.Invocations))
	if t.Delayed > 0 {
		fmt.Fprintf(w, "; %d waited for one of the %d in flight to end (--concurrency)", t.Delayed, concurrency)
	}
	fmt.Fprintln(w)
}

// loadMS formats a duration in milliseconds, or "-" when it was measured over
// no samples.
func loadMS(d time.Duration, n int) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond))
}

func loadRates(s loadgen.Summary) string {
	if s.Invocations < 2 {
		return "-"
	}
	return fmt.Sprintf("%.2f (%.2f)", s.AchievedRate, s.IntendedRate)
}
