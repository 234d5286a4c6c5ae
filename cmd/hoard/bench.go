package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hoard-io/hoard/internal/bench"
	"github.com/hoard-io/hoard/internal/cachelet"
	"github.com/hoard-io/hoard/internal/hostnet"
	"github.com/hoard-io/hoard/internal/netshape"
)

// benchmarks are the subcommands of `hoard bench`.
var benchmarks = []struct {
	name, summary string
	run           func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}{
	{"access", "GET latency and throughput against MinIO, Redis and loopback TCP", runBenchAccess},
	{"changes", "writers outside hoard: the notification delay under owner with --store-changes (--feed listen or relay), and its hits against strong behind a 20 ms store link", runBenchChanges},
	{"consistency", "Faa$T Table 6: five cachelets count to 1,000 under each consistency setting", runBenchConsistency},
	{"durable", "a cachelet SIGKILLed every 10 s under a write load: acknowledged writes lost with and without durable writes", runBenchDurable},
	{"disk", "the disk tier: a working set above the memory budget, store behind a shaped link; memory-only vs disk tier vs a reloaded instance", runBenchDisk},
	{"memory", "peak RSS of hoard serve against its budget under concurrent readers and writers", runBenchMemory},
	{"ranges", "random 1-8 MiB ranges of large objects behind a shaped store link: hoard cold and warm against the store", runBenchRanges},
	{"writes", "write-back: PUT p50/p99 at 4 KiB, 1 MiB, 16 MiB under strong, background persistence and durable writes", runBenchWrites},
	{"throughput", "ops/s of GETs and PUTs against connections: hoard, MinIO, Redis, a bare HTTP server", runBenchThroughput},
	{"all", "run every experiment and write a report (results.json, index.html, report.md)", runBenchAll},
	{"bare-server", "serve throughput's object from a bare Go HTTP server on loopback until stdin ends (the bare-http-proc target)", runBenchBareServer},
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintln(stderr, "usage: hoard bench <benchmark> [flags]\n\nbenchmarks:")
		for _, b := range benchmarks {
			fmt.Fprintf(stderr, "  %-12s %s\n", b.name, b.summary)
		}
		if len(args) == 0 {
			return fmt.Errorf("%w: which benchmark?", errUsage)
		}
		return flag.ErrHelp
	}
	for _, b := range benchmarks {
		if b.name == args[0] {
			return b.run(ctx, args[1:], stdout, stderr)
		}
	}
	return fmt.Errorf("%w: unknown benchmark %q (try `hoard bench -h`)", errUsage, args[0])
}

func runBenchAccess(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench access", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: hoard bench access [flags]\n\n"+
			"Measures GET p50, p99 and MB/s of hoard (cold miss, warm hit under version-check,\n"+
			"warm hit under local reads, remote hit and remote miss through a second cachelet\n"+
			"of one application) against MinIO direct (a GET, and a conditional GET answered\n"+
			"304: store-304), the same through a bare TCP forwarder (store-fwd, store-304-fwd:\n"+
			"the least one more hop adds) and through a bare HTTP proxy (store-http,\n"+
			"store-304-http: the least an HTTP proxy in Go adds), Redis and a loopback TCP\n"+
			"copy, all started by the benchmark on loopback.\n\nflags:")
		fs.PrintDefaults()
	}
	root := findModuleRoot()
	defPython := ""
	if root != "" {
		if p := filepath.Join(root, ".venv", "bin", "python"); isFile(p) {
			defPython = p
		}
	}
	var (
		sizes, targets, jsonPath, minioBin, redisBin, python, script, tmp, logLevel, link string
		quick, boto3, sequential                                                          bool
	)
	fs.StringVar(&sizes, "sizes", "", "comma-separated object sizes (default 1KiB,4KiB,64KiB,1MiB,16MiB,256MiB; without 256MiB with --quick)")
	fs.BoolVar(&quick, "quick", false, "short run: fewer iterations, no 256 MiB unless --sizes asks")
	fs.StringVar(&targets, "targets", strings.Join(bench.AllTargets(), ","), "comma-separated targets to measure")
	fs.StringVar(&jsonPath, "json", "", "also write every figure (raw samples, machine info) as JSON to this file")
	fs.BoolVar(&boto3, "boto3", defPython != "", "also measure through boto3 (store and warm); default on when .venv/bin/python exists")
	fs.StringVar(&python, "python", defPython, "Python interpreter with boto3, for --boto3")
	fs.StringVar(&script, "boto3-script", "", "the boto3 script (default <module root>/python/hoard_bench/access_boto3.py)")
	fs.BoolVar(&sequential, "sequential", false, "measure the targets of a size one after another (default: in rotation, one request of each in turn, so that a change in the machine's load falls on all alike)")
	fs.StringVar(&link, "store-link", "", "put MinIO behind this shaped link (a preset: "+strings.Join(netshape.PresetNames(), ", ")+"), for the store targets and hoard alike; default loopback")
	minioFlag(fs, &minioBin)
	redisFlag(fs, &redisBin)
	tmpFlag(fs, &tmp)
	serversLogFlag(fs, &logLevel)
	if err := usageErr(fs.Parse(args)); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	cfg := bench.AccessConfig{
		Quick: quick, Boto3: boto3, Python: python, Boto3Script: script,
		MinIOBinary: minioBin, RedisBinary: redisBin, TempDir: tmp, Progress: stderr, StoreLink: link, Sequential: sequential,
	}
	var err error
	if sizes != "" {
		if cfg.Sizes, err = parseSizes(sizes); err != nil {
			return fmt.Errorf("%w: --sizes: %v", errUsage, err)
		}
	}
	if cfg.Targets, err = parseTargets(targets); err != nil {
		return fmt.Errorf("%w: --targets: %v", errUsage, err)
	}
	if link != "" {
		p, err := netshape.LookupPreset(link)
		if err != nil {
			return fmt.Errorf("%w: --store-link: %v", errUsage, err)
		}
		if !p.Store.Shaped() {
			return fmt.Errorf("%w: --store-link: preset %q leaves the store link unshaped", errUsage, link)
		}
	}
	if boto3 {
		if python == "" {
			return fmt.Errorf("%w: --boto3 needs --python (no .venv/bin/python found; run `make venv`)", errUsage)
		}
		if cfg.Boto3Script == "" && root != "" {
			cfg.Boto3Script = filepath.Join(root, "python", "hoard_bench", "access_boto3.py")
		}
		if !isFile(cfg.Boto3Script) {
			return fmt.Errorf("%w: boto3 script %q not found (set --boto3-script)", errUsage, cfg.Boto3Script)
		}
		if !slices.Contains(cfg.Targets, bench.TargetWarm) {
			// boto3-warm reads the version-checked instance; it is
			// started anyway, but say what is compared.
			fmt.Fprintln(stderr, "note: boto3-warm is measured even though warm is not among --targets")
		}
	}
	if cfg.Log, err = newLogger(stderr, logLevel, false); err != nil {
		return err
	}
	rep, err := bench.RunAccess(ctx, cfg)
	if err != nil {
		return err
	}
	if err := printReport(rep, jsonPath, stdout, stderr); err != nil {
		return err
	}
	return nil
}

func runBenchConsistency(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench consistency", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: hoard bench consistency [flags]\n\n"+
			"Faa$T's Table 6: five cachelets of one application (in-process, over MinIO and an\n"+
			"embedded etcd) increment one counter object round-robin through S3 clients, under\n"+
			"each consistency setting; prints end-to-end time, per-request latency and lost\n"+
			"increments next to the paper's row. Exits non-zero when a strongly consistent\n"+
			"setting (strong, owner) loses an increment.\n\nflags:")
		fs.PrintDefaults()
	}
	var names []string
	for _, c := range cachelet.Consistencies() {
		names = append(names, c.Name)
	}
	var (
		increments                                  int
		quick                                       bool
		gap                                         time.Duration
		settings, jsonPath, minioBin, tmp, logLevel string
	)
	fs.IntVar(&increments, "increments", 0, fmt.Sprintf("increments per setting (default %d; %d with --quick)", bench.DefaultIncrements, bench.QuickIncrements))
	fs.BoolVar(&quick, "quick", false, fmt.Sprintf("short run: %d increments per setting", bench.QuickIncrements))
	fs.DurationVar(&gap, "gap", 0, "pause after each increment (a function's work between requests); counted in e2e, not per-request")
	fs.StringVar(&settings, "settings", strings.Join(names, ","), "comma-separated consistency settings to run")
	fs.StringVar(&jsonPath, "json", "", "also write every figure (raw samples, machine info) as JSON to this file")
	minioFlag(fs, &minioBin)
	tmpFlag(fs, &tmp)
	serversLogFlag(fs, &logLevel)
	if err := usageErr(fs.Parse(args)); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	if increments < 0 {
		return fmt.Errorf("%w: --increments must be positive", errUsage)
	}
	if gap < 0 {
		return fmt.Errorf("%w: --gap must not be negative", errUsage)
	}
	cfg := bench.ConsistencyConfig{Increments: increments, Quick: quick, Gap: gap, MinIOBinary: minioBin, TempDir: tmp, Progress: stderr}
	for part := range strings.SplitSeq(settings, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if !slices.Contains(names, part) {
			return fmt.Errorf("%w: --settings: unknown setting %q (known: %s)", errUsage, part, strings.Join(names, ", "))
		}
		if !slices.Contains(cfg.Settings, part) {
			cfg.Settings = append(cfg.Settings, part)
		}
	}
	if len(cfg.Settings) == 0 {
		return fmt.Errorf("%w: --settings: no settings", errUsage)
	}
	var err error
	if cfg.Log, err = newLogger(stderr, logLevel, false); err != nil {
		return err
	}
	rep, err := bench.RunConsistency(ctx, cfg)
	if err != nil {
		return err
	}
	if err := printReport(rep, jsonPath, stdout, stderr); err != nil {
		return err
	}
	if l := rep.StrongLosses(); len(l) > 0 {
		return fmt.Errorf("bench consistency: a strongly consistent setting lost increments: %s", strings.Join(l, "; "))
	}
	return nil
}

// parseSizes reads "1KiB,4KiB,256MiB".
func parseSizes(s string) ([]int64, error) {
	var out []int64
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		n, err := parseBytes(part)
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			return nil, fmt.Errorf("size %q must be positive", part)
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no sizes")
	}
	slices.Sort(out)
	return out, nil
}

// parseTargets reads "store,warm,redis" and checks each name.
func parseTargets(s string) ([]string, error) {
	var out []string
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if !slices.Contains(bench.AllTargets(), part) {
			return nil, fmt.Errorf("unknown target %q (known: %s)", part, strings.Join(bench.AllTargets(), ", "))
		}
		if !slices.Contains(out, part) {
			out = append(out, part)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no targets")
	}
	return out, nil
}

// findModuleRoot walks up from the working directory to the directory
// holding go.mod, or returns "".
func findModuleRoot() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if isFile(filepath.Join(dir, "go.mod")) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// benchReport is what every benchmark hands back.
type benchReport interface {
	WriteTable(io.Writer) error
	WriteJSONFile(path string) error
}

// printReport prints a report's table, and writes its JSON when asked.
func printReport(rep benchReport, jsonPath string, stdout, stderr io.Writer) error {
	fmt.Fprintln(stdout)
	if err := rep.WriteTable(stdout); err != nil {
		return err
	}
	if jsonPath != "" {
		if err := rep.WriteJSONFile(jsonPath); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "wrote %s\n", jsonPath)
	}
	return nil
}

func runBenchAll(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench all", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: hoard bench all [--quick] [--only a,b] --report DIR [flags]\n\n"+
			"Runs every registered experiment, writes DIR/results.json, then renders\n"+
			"DIR/index.html, DIR/report.md and DIR/plots/*.png with python -m hoard_bench.report\n"+
			"(the project venv's Python). An experiment that fails is reported as failed and\n"+
			"the others still run; the exit status is 1 then.\n\nexperiments:")
		for _, e := range bench.Experiments() {
			fmt.Fprintf(stderr, "  %-12s %s\n  %-12s quick: %s; full: %s\n", e.Name, e.Title, "", describeOptions(e.Quick), describeOptions(e.Full))
		}
		fmt.Fprintln(stderr, "\nflags:")
		fs.PrintDefaults()
	}
	root := findRepoRoot()
	defPython := ""
	if root != "" {
		if p := filepath.Join(root, ".venv", "bin", "python"); isFile(p) {
			defPython = p
		}
	}
	var (
		quick, render                                                      bool
		only, dir, python, minioBin, redisBin, tmp, logLevel, sizes, nodes string
		iterations                                                         int
	)
	fs.BoolVar(&quick, "quick", false, "short run: small sizes and few iterations (minutes on a small machine)")
	fs.StringVar(&only, "only", "", "comma-separated experiments to run (default: all of them)")
	fs.StringVar(&sizes, "sizes", "", "comma-separated object sizes replacing the experiments' own, for those that read objects (e.g. --only erasure --sizes 1GB)")
	fs.StringVar(&nodes, "nodes", "", "comma-separated node counts replacing the experiments' own, for those that scale over nodes (e.g. --only tree-scale --nodes 1,64)")
	fs.IntVar(&iterations, "iterations", 0, "repetitions replacing the experiments' own (default: theirs)")
	fs.StringVar(&dir, "report", "", "directory to write the report into (required; created if missing)")
	fs.BoolVar(&render, "render", true, "render index.html and report.md from results.json (needs --python)")
	fs.StringVar(&python, "python", defPython, "Python interpreter with matplotlib and boto3 (the repository's .venv)")
	minioFlag(fs, &minioBin)
	fs.StringVar(&redisBin, "redis-server", "", "redis-server binary (default: $PATH, /usr/bin/redis-server; left out with a note when missing)")
	fs.StringVar(&tmp, "tmp", "", "directory for the runs' scratch data (default: the system temp dir)")
	fs.StringVar(&logLevel, "log-level", "error", "log level of the servers started for the runs")
	if err := usageErr(fs.Parse(args)); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	if dir == "" {
		return fmt.Errorf("%w: --report DIR is required", errUsage)
	}
	var names []string
	for part := range strings.SplitSeq(only, ",") {
		if part = strings.TrimSpace(part); part != "" && !slices.Contains(names, part) {
			names = append(names, part)
		}
	}
	if only != "" && len(names) == 0 {
		return fmt.Errorf("%w: --only: no experiments", errUsage)
	}
	exps, err := bench.SelectExperiments(names)
	if err != nil {
		return fmt.Errorf("%w: --only: %v", errUsage, err)
	}
	if render {
		if python == "" {
			return fmt.Errorf("%w: rendering the report needs --python (no .venv/bin/python found; run `make venv`), or pass --render=false", errUsage)
		}
		if root == "" || !isFile(filepath.Join(root, "python", "hoard_bench", "report.py")) {
			return fmt.Errorf("%w: cannot find python/hoard_bench/report.py: run hoard bench all inside the repository, or pass --render=false", errUsage)
		}
	}
	var sizeList []int64
	if sizes != "" {
		if sizeList, err = parseSizes(sizes); err != nil {
			return fmt.Errorf("%w: --sizes: %v", errUsage, err)
		}
	}
	var nodeList []int
	if nodes != "" {
		if nodeList, err = parseNodeCounts(nodes); err != nil {
			return fmt.Errorf("%w: --nodes: %v", errUsage, err)
		}
	}
	if iterations < 0 {
		return fmt.Errorf("%w: --iterations must not be negative", errUsage)
	}
	log, err := newLogger(stderr, logLevel, false)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	env := bench.Env{
		MinIOBinary: minioBin, RedisBinary: redisBin, Python: python, ModuleRoot: root, HoardBinary: hoardBinary(""),
		TempDir: tmp, Progress: stderr, Table: stdout, Log: log, Sizes: sizeList, Iterations: iterations,
		Nodes: nodeList,
	}
	res := bench.RunAll(ctx, exps, quick, env)
	resultsPath := filepath.Join(dir, "results.json")
	if err := res.WriteJSONFile(resultsPath); err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	writeAllSummary(stdout, res)
	fmt.Fprintf(stderr, "wrote %s\n", resultsPath)
	if render {
		// Render even after an interrupt: what was measured is kept.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(rctx, python, "-m", "hoard_bench.report", resultsPath, dir)
		cmd.Env = append(os.Environ(), "PYTHONPATH="+joinPath(filepath.Join(root, "python"), os.Getenv("PYTHONPATH")), "MPLBACKEND=Agg")
		cmd.Stdout, cmd.Stderr = stderr, stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("rendering the report (%s -m hoard_bench.report): %w", python, err)
		}
		fmt.Fprintf(stderr, "wrote %s and %s\n", filepath.Join(dir, "index.html"), filepath.Join(dir, "report.md"))
	}
	if f := res.Failed(); len(f) > 0 {
		return fmt.Errorf("%d of %d experiments failed: %s", len(f), len(res.Experiments), strings.Join(f, ", "))
	}
	return ctx.Err()
}

// parseNodeCounts parses --nodes: distinct counts of 1 to
// hostnet.MaxNodes, ascending.
func parseNodeCounts(s string) ([]int, error) {
	var out []int
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		n, err := strconv.Atoi(part)
		if err != nil || n < 1 || n > hostnet.MaxNodes {
			return nil, fmt.Errorf("%q is not a node count of 1 to %d", part, hostnet.MaxNodes)
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}

// describeOptions says what an experiment's quick or full run does.
func describeOptions(o bench.Options) string {
	var parts []string
	if len(o.Sizes) > 0 {
		var s []string
		for _, n := range o.Sizes {
			s = append(s, bench.FormatSize(n))
		}
		parts = append(parts, "sizes "+strings.Join(s, ", "))
	}
	if o.Iterations > 0 {
		parts = append(parts, fmt.Sprintf("%d iterations", o.Iterations))
	}
	if len(o.Nodes) > 0 {
		parts = append(parts, fmt.Sprintf("nodes %s", strings.Trim(fmt.Sprint(o.Nodes), "[]")))
	}
	if len(parts) == 0 {
		return "defaults"
	}
	return strings.Join(parts, ", ")
}

// writeAllSummary prints one line per experiment.
func writeAllSummary(w io.Writer, res *bench.Results) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "experiment\tstatus\ttime\tpaper rows\tshort\tplots")
	for _, e := range res.Experiments {
		short := 0
		for _, r := range e.Rows {
			if r.Short {
				short++
			}
		}
		status := e.Status
		if e.Error != "" {
			msg, _, _ := strings.Cut(e.Error, "\n")
			status += ": " + msg
		}
		fmt.Fprintf(tw, "%s\t%s\t%.1fs\t%d\t%d\t%d\n", e.Experiment, status, e.Seconds, len(e.Rows), short, len(e.Plots))
	}
	tw.Flush()
	fmt.Fprintf(w, "total %.1fs\n", res.Seconds)
}

// findRepoRoot is the module root above the working directory, or else
// above the running binary (bin/hoard run from elsewhere), or "".
func findRepoRoot() string {
	if root := findModuleRoot(); root != "" {
		return root
	}
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	if exe, err = filepath.EvalSymlinks(exe); err != nil {
		return ""
	}
	for dir := filepath.Dir(exe); ; {
		if isFile(filepath.Join(dir, "go.mod")) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// joinPath prepends dir to a PATH-like list.
func joinPath(dir, list string) string {
	if list == "" {
		return dir
	}
	return dir + string(os.PathListSeparator) + list
}

// The flags every experiment that starts its own servers shares.

func minioFlag(fs *flag.FlagSet, p *string) {
	fs.StringVar(p, "minio", "", "MinIO binary (default: $HOARD_MINIO_BIN, .tools/bin/minio, $PATH)")
}

func redisFlag(fs *flag.FlagSet, p *string) {
	fs.StringVar(p, "redis-server", "", "redis-server binary (default: $PATH, /usr/bin/redis-server)")
}

func tmpFlag(fs *flag.FlagSet, p *string) {
	fs.StringVar(p, "tmp", "", "directory for the run's scratch data (default: the system temp dir)")
}

func serversLogFlag(fs *flag.FlagSet, p *string) {
	fs.StringVar(p, "log-level", "error", "log level of the servers started for the run")
}
