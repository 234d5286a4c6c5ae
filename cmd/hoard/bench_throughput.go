package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/hoard-io/hoard/internal/bench"
)

func runBenchThroughput(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench throughput", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: hoard bench throughput [flags]\n\n"+
			"Measures ops/s, p50 and p99 of GETs and PUTs of one size over N keep-alive connections\n"+
			"(a closed loop) against hoard local hits, hoard strong on one hot key and on a key per\n"+
			"connection, MinIO direct, Redis and a bare Go HTTP server answering the same bytes, all\n"+
			"started by the benchmark on loopback, and prints each target's ratio to MinIO direct and\n"+
			"to the bare server, in the benchmark's process (bare-http) and as a process of its own as\n"+
			"hoard serve is (bare-http-proc). Redis is left out (and the output says so) when\n"+
			"redis-server is missing.\n\nflags:")
		fs.PrintDefaults()
	}
	var (
		conns, size, targets, ops, jsonPath, hoardBin, minioBin, redisBin, tmp, logLevel string
		quick                                                                            bool
		cfg                                                                              bench.ThroughputConfig
	)
	fs.StringVar(&conns, "connections", "", "comma-separated connection counts, 1 to 256 (default 1,4,16,64,256; 1,16 with --quick)")
	fs.StringVar(&size, "size", "4KiB", "object size")
	fs.DurationVar(&cfg.Duration, "duration", 0, "timed window of each point (default 2s; 300ms with --quick)")
	fs.DurationVar(&cfg.Warmup, "warmup", 0, "untimed warm-up before each point (default a quarter of --duration)")
	fs.StringVar(&targets, "targets", strings.Join(bench.ThroughputTargets(), ","), "comma-separated targets")
	fs.StringVar(&ops, "ops", "get,put", "operations: get, put")
	fs.BoolVar(&quick, "quick", false, "short run: two connection counts, short points")
	fs.StringVar(&jsonPath, "json", "", "also write every point (and the machine) as JSON to this file")
	fs.StringVar(&hoardBin, "hoard", "", "the hoard binary run as `hoard serve` (default: $HOARD_BIN, else this binary)")
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
	var err error
	if conns != "" {
		if cfg.Connections, err = parseConnections(conns); err != nil {
			return fmt.Errorf("%w: --connections: %v", errUsage, err)
		}
	}
	if cfg.Size, err = parseBytes(size); err != nil || cfg.Size <= 0 {
		return fmt.Errorf("%w: --size %q: want a positive size such as 4KiB", errUsage, size)
	}
	if cfg.Targets, err = parseList(targets, bench.ThroughputTargets()); err != nil {
		return fmt.Errorf("%w: --targets: %v", errUsage, err)
	}
	if cfg.Ops, err = parseList(ops, []string{bench.OpGet, bench.OpPut}); err != nil {
		return fmt.Errorf("%w: --ops: %v", errUsage, err)
	}
	if !isFlagSet(fs, "targets") {
		cfg.Targets = nil // all, Redis only where it is installed
	}
	cfg.Quick, cfg.MinIOBinary, cfg.RedisBinary, cfg.TempDir, cfg.Progress = quick, minioBin, redisBin, tmp, stderr
	cfg.HoardBinary = hoardBinary(hoardBin)
	if self, err := os.Executable(); err == nil {
		cfg.BareBinary = self // the baseline does not change with --hoard
	}
	if cfg.Log, err = newLogger(stderr, logLevel, false); err != nil {
		return err
	}
	rep, err := bench.RunThroughput(ctx, cfg)
	if err != nil {
		return err
	}
	return printReport(rep, jsonPath, stdout, stderr)
}

// hoardBinary is the binary run as `hoard serve`: flag, $HOARD_BIN, else
// this one.
func hoardBinary(flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	if b := os.Getenv("HOARD_BIN"); b != "" {
		return b
	}
	self, err := os.Executable()
	if err != nil {
		return ""
	}
	return self
}

// parseConnections reads "1,4,16".
func parseConnections(s string) ([]int, error) {
	var out []int
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		n, err := strconv.Atoi(part)
		if err != nil || n < 1 || n > bench.MaxConnections {
			return nil, fmt.Errorf("%q: want 1 to %d", part, bench.MaxConnections)
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("none given")
	}
	slices.Sort(out)
	return out, nil
}

// parseList reads a comma-separated list of names out of known.
func parseList(s string, known []string) ([]string, error) {
	var out []string
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if !slices.Contains(known, part) {
			return nil, fmt.Errorf("unknown %q (known: %s)", part, strings.Join(known, ", "))
		}
		if !slices.Contains(out, part) {
			out = append(out, part)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("none given")
	}
	return out, nil
}

// isFlagSet reports whether name was given on the command line.
func isFlagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// runBenchBareServer is `hoard bench bare-server`: the throughput
// benchmark's bare HTTP server as a process of its own. It prints
// "serving on URL" once it listens and serves until its standard input
// ends (the benchmark holds it open) or it is interrupted.
func runBenchBareServer(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench bare-server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: hoard bench bare-server [flags]\n\n"+
			"Serves `hoard bench throughput`'s object from a bare Go net/http server on a loopback\n"+
			"port (every GET answered with its bytes, every PUT's body read), prints \"serving on URL\"\n"+
			"and serves until standard input ends. The throughput benchmark runs it as its\n"+
			"bare-http-proc target.\n\nflags:")
		fs.PrintDefaults()
	}
	size := fs.String("size", "4KiB", "object size, up to 64 MiB")
	if err := usageErr(fs.Parse(args)); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	n, err := parseBytes(*size)
	if err != nil || n <= 0 || n > 64<<20 {
		return fmt.Errorf("%w: --size %q: want 1 byte to 64 MiB", errUsage, *size)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	return bench.ServeBare(ctx, n, stdout)
}
