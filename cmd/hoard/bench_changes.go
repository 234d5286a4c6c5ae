package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/hoard-io/hoard/internal/bench"
)

func runBenchChanges(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench changes", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: hoard bench changes [flags]\n\n"+
			"Writers outside hoard (ADR 28), with MinIO behind a shaped link: a cachelet under\n"+
			"owner following the store's change notifications and one under strong, in one\n"+
			"run. Prints their hit latencies side by side, then the delay between a write\n"+
			"straight to MinIO and the first owner read that returns it (p50/p99), and how\n"+
			"many strong reads returned the older version (want 0).\n\nflags:")
		fs.PrintDefaults()
	}
	var (
		cfg      bench.ChangesConfig
		size     = byteSize(4 << 10)
		jsonPath string
	)
	fs.DurationVar(&cfg.Latency, "latency", 10*time.Millisecond, "the store link's one-way delay (whole milliseconds)")
	fs.IntVar(&cfg.Writes, "writes", 50, "writes straight to the store whose delay is timed")
	fs.IntVar(&cfg.Reads, "reads", 300, "hits timed through each cachelet")
	fs.Var(&size, "size", "size of the object")
	fs.StringVar(&cfg.Feed, "feed", bench.FeedListen, "how the owner cachelet follows the store's changes: listen (MinIO's listen API) or relay (MinIO's webhook to a change relay, followed over GET /v1/changes; no filler)")
	fs.DurationVar(&cfg.FillerInterval, "filler", 10*time.Millisecond, "pause between filler writes to other keys that push out a store's buffered change stream (negative: none)")
	fs.StringVar(&jsonPath, "json", "", "also write the report as JSON to this file")
	minioFlag(fs, &cfg.MinIOBinary)
	tmpFlag(fs, &cfg.TempDir)
	if err := usageErr(fs.Parse(args)); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	if cfg.Latency <= 0 || cfg.Latency%time.Millisecond != 0 {
		return fmt.Errorf("%w: --latency must be a positive whole number of milliseconds", errUsage)
	}
	if cfg.Writes <= 0 || cfg.Reads <= 0 || size <= 0 {
		return fmt.Errorf("%w: --writes, --reads and --size must be positive", errUsage)
	}
	if cfg.Feed != bench.FeedListen && cfg.Feed != bench.FeedRelay {
		return fmt.Errorf("%w: --feed %q: want listen or relay", errUsage, cfg.Feed)
	}
	if cfg.FillerInterval == 0 {
		return fmt.Errorf("%w: --filler must not be 0 (negative turns the filler off)", errUsage)
	}
	cfg.Size, cfg.Progress = int64(size), stderr
	rep, err := bench.RunChanges(ctx, cfg)
	if rep != nil {
		res := rep.Result()
		for _, t := range res.Tables {
			for _, row := range t.Rows {
				fmt.Fprintf(stdout, "%-32s n=%-4s p50 %-9s p99 %-9s max %-9s %s\n", row[0], row[1], row[2], row[3], row[4], row[5])
			}
		}
		if rep.Owner.N > 0 && rep.Strong.N > 0 {
			fmt.Fprintf(stdout, "\nhit p50 owner+changes / strong: %.3f (issue 16's trace replay: local 2.7 ms / strong 24.7 ms = %.3f)\n",
				float64(rep.Owner.P50)/float64(rep.Strong.P50), 2.7/24.7)
		}
		fmt.Fprintf(stdout, "strong reads of the older version after an outside write: %d\nlink %s; feed %s; filler: %s\n", rep.StrongStale, rep.Link, rep.Feed, rep.Filler)
		for _, n := range res.Notes {
			fmt.Fprintln(stdout, n)
		}
		if jsonPath != "" {
			b, _ := json.MarshalIndent(rep, "", "  ")
			if werr := os.WriteFile(jsonPath, append(b, '\n'), 0o644); werr != nil && err == nil {
				err = werr
			}
		}
	}
	if err == nil && rep.StrongStale > 0 {
		err = fmt.Errorf("strong served the older version %d times after an outside write", rep.StrongStale)
	}
	return err
}
