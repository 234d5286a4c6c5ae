package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hoard-io/hoard/internal/bench"
	"github.com/hoard-io/hoard/internal/cachelet"
)

// benchmarks are the subcommands of `hoard bench`.
var benchmarks = []struct {
	name, summary string
	run           func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}{
	{"access", "GET latency and throughput against MinIO, Redis and loopback TCP", runBenchAccess},
	{"consistency", "Faa$T Table 6: five cachelets count to 1,000 under each consistency setting", runBenchConsistency},
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
			"of one application) against MinIO direct, Redis and a loopback TCP copy,\n"+
			"all started by the benchmark on loopback.\n\nflags:")
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
		sizes, targets, jsonPath, minioBin, redisBin, python, script, tmp, logLevel string
		quick, boto3                                                                bool
	)
	fs.StringVar(&sizes, "sizes", "", "comma-separated object sizes (default 1KiB,4KiB,64KiB,1MiB,16MiB,256MiB; without 256MiB with --quick)")
	fs.BoolVar(&quick, "quick", false, "short run: fewer iterations, no 256 MiB unless --sizes asks")
	fs.StringVar(&targets, "targets", strings.Join(bench.AllTargets, ","), "comma-separated targets to measure")
	fs.StringVar(&jsonPath, "json", "", "also write every figure (raw samples, machine info) as JSON to this file")
	fs.BoolVar(&boto3, "boto3", defPython != "", "also measure through boto3 (store and warm); default on when .venv/bin/python exists")
	fs.StringVar(&python, "python", defPython, "Python interpreter with boto3, for --boto3")
	fs.StringVar(&script, "boto3-script", "", "the boto3 script (default <module root>/python/hoard_bench/access_boto3.py)")
	fs.StringVar(&minioBin, "minio", "", "MinIO binary (default: $HOARD_MINIO_BIN, .tools/bin/minio, $PATH)")
	fs.StringVar(&redisBin, "redis-server", "", "redis-server binary (default: $PATH, /usr/bin/redis-server)")
	fs.StringVar(&tmp, "tmp", "", "directory for the run's scratch data (default: the system temp dir)")
	fs.StringVar(&logLevel, "log-level", "error", "log level of the servers started for the run")
	if err := usageErr(fs.Parse(args)); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	cfg := bench.AccessConfig{
		Quick: quick, Boto3: boto3, Python: python, Boto3Script: script,
		MinIOBinary: minioBin, RedisBinary: redisBin, TempDir: tmp, Progress: stderr,
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
	for _, c := range cachelet.Consistencies {
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
	fs.StringVar(&minioBin, "minio", "", "MinIO binary (default: $HOARD_MINIO_BIN, .tools/bin/minio, $PATH)")
	fs.StringVar(&tmp, "tmp", "", "directory for the run's scratch data (default: the system temp dir)")
	fs.StringVar(&logLevel, "log-level", "error", "log level of the servers started for the run")
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
		if !slices.Contains(bench.AllTargets, part) {
			return nil, fmt.Errorf("unknown target %q (known: %s)", part, strings.Join(bench.AllTargets, ", "))
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
