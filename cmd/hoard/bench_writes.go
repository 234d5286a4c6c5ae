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

func runBenchWrites(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench writes", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: hoard bench writes [flags]\n\n"+
			"Times PUTs through one cachelet in front of MinIO, one at a time, in one run: under\n"+
			"strong (the store's write is the baseline), under owner with background\n"+
			"persistence (held in memory), under owner with --durable-writes (appended and\n"+
			"fsynced to the log), and, in an application of two cachelets (embedded etcd) with each\n"+
			"PUT sent to its key's owner, under owner with --durable-writes=replicated (fsynced at\n"+
			"the owner and at the other member); with --shadow also under owner with\n"+
			"--durable-writes --durable-shadow (and a placeholder PUT to the store per write).\n"+
			"Prints p50 and p99 per size, each against strong, and OFC's figure.\n\nflags:")
		fs.PrintDefaults()
	}
	var (
		cfg      bench.WritesConfig
		sizes    string
		jsonPath string
	)
	fs.StringVar(&sizes, "sizes", "4KiB,1MiB,16MiB", "comma-separated object sizes")
	fs.IntVar(&cfg.Writes, "writes", 200, "PUTs per size and setting (fewer of large sizes: at most 64 MiB per size, at least 8)")
	fs.BoolVar(&cfg.FreshKeys, "fresh-keys", false, "every PUT writes a new key (by default the PUTs of a size take turns over 16 keys): durable writes then ask the store for the version each replaces")
	fs.BoolVar(&cfg.Shadow, "shadow", false, "also time durable writes with --durable-shadow (each write's empty placeholder put in the store before its acknowledgement), beside durable writes without")
	fs.StringVar(&cfg.Preset, "preset", "local", "the store link's network preset: local (loopback), faast or ofc")
	fs.StringVar(&jsonPath, "json", "", "also write the report as JSON to this file")
	minioFlag(fs, &cfg.MinIOBinary)
	tmpFlag(fs, &cfg.TempDir)
	if err := usageErr(fs.Parse(args)); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	var err error
	if cfg.Sizes, err = parseSizes(sizes); err != nil {
		return err
	}
	cfg.Progress = stderr
	rep, err := bench.RunWrites(ctx, cfg)
	if rep != nil {
		printWritesReport(stdout, rep)
		if jsonPath != "" {
			b, _ := json.MarshalIndent(rep, "", "  ")
			if werr := os.WriteFile(jsonPath, append(b, '\n'), 0o644); werr != nil && err == nil {
				err = werr
			}
		}
	}
	return err
}

func printWritesReport(w io.Writer, rep *bench.WritesReport) {
	fmt.Fprintf(w, "store link %s; PUTs one at a time through one cachelet (replicated: through the key's owner of two)\n\n", rep.Link)
	res := rep.Result()
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	for _, t := range res.Tables {
		for i, c := range t.Columns {
			if i > 0 {
				fmt.Fprint(tw, "\t")
			}
			fmt.Fprint(tw, c)
		}
		fmt.Fprintln(tw, "\t")
		for _, r := range t.Rows {
			for i, c := range r {
				if i > 0 {
					fmt.Fprint(tw, "\t")
				}
				fmt.Fprint(tw, c)
			}
			fmt.Fprintln(tw, "\t")
		}
	}
	tw.Flush()
	fmt.Fprintf(w, "\n%s\n", rep.OFC)
}
