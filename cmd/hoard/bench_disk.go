package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/hoard-io/hoard/internal/bench"
)

func runBenchDisk(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench disk", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: hoard bench disk [flags]\n\n"+
			"Reads a working set larger than the memory budget through one cachelet, with\n"+
			"MinIO behind a shaped link, in one run: the store read directly (the baseline),\n"+
			"a memory-only cachelet, one with the disk tier, and one started again over that\n"+
			"disk tier (an instance reloaded on its node) against a cold one. Prints each\n"+
			"variant's read latencies, its ratio to the store, and CacheFlow's figures.\n\nflags:")
		fs.PrintDefaults()
	}
	var (
		cfg          bench.DiskConfig
		size, budget = byteSize(4 << 20), byteSize(0)
		jsonPath     string
	)
	fs.IntVar(&cfg.Objects, "objects", 24, "objects in the working set")
	fs.Var(&size, "size", "size of each object")
	fs.Var(&budget, "budget", "the memory tier's budget (default: a third of the working set)")
	fs.IntVar(&cfg.Passes, "passes", 2, "warm passes over the working set after the cold one")
	fs.StringVar(&cfg.Preset, "preset", "faast", "the store link's network preset: faast, ofc or local")
	fs.StringVar(&jsonPath, "json", "", "also write the report as JSON to this file")
	minioFlag(fs, &cfg.MinIOBinary)
	tmpFlag(fs, &cfg.TempDir)
	if err := usageErr(fs.Parse(args)); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	cfg.Size, cfg.Budget, cfg.Progress = int64(size), int64(budget), stderr
	rep, err := bench.RunDisk(ctx, cfg)
	if rep != nil {
		printDiskReport(stdout, rep)
		if jsonPath != "" {
			b, _ := json.MarshalIndent(rep, "", "  ")
			if werr := os.WriteFile(jsonPath, append(b, '\n'), 0o644); werr != nil && err == nil {
				err = werr
			}
		}
	}
	return err
}

func printDiskReport(w io.Writer, rep *bench.DiskReport) {
	fmt.Fprintf(w, "store link %s; %d objects of %s (%s), memory budget %s\n\n", rep.Link, rep.Objects,
		bench.FormatSize(rep.Size), bench.FormatSize(int64(rep.Objects)*rep.Size), bench.FormatSize(rep.Budget))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "variant\treads\tp50\tp99\tmean\tMB/s\tmean vs store\tserved as\t")
	var store float64
	for i, v := range rep.Variants {
		if i == 0 {
			store = float64(v.Reads.Mean)
		}
		ratio := "-"
		if store > 0 && v.Reads.Mean > 0 {
			ratio = fmt.Sprintf("%.2fx faster", store/float64(v.Reads.Mean))
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%v\t\n", v.Name, v.Reads.N, bench.FormatDuration(v.Reads.P50),
			bench.FormatDuration(v.Reads.P99), bench.FormatDuration(v.Reads.Mean), bench.FormatMBps(v.Reads.MBps), ratio, v.Outcomes)
	}
	tw.Flush()
	fmt.Fprintf(w, "\n%s\n", rep.CacheFlow)
}
