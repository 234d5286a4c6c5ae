package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/hoard-io/hoard/internal/bench"
	"github.com/hoard-io/hoard/internal/cachelet"
)

func runBenchRanges(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench ranges", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: hoard bench ranges [flags]\n\n"+
			"Reads random ranges of large objects from MinIO behind a shaped link (a netshape\n"+
			"preset), straight from the store and through hoard, in one run: cold (each range\n"+
			"read from the store and through hoard one after the other), warm under strong and\n"+
			"under local, and cold without pages (as hoard read ranges before them). Prints p50,\n"+
			"p99 and time to first byte, each as a ratio to the store direct, and the store bytes\n"+
			"hoard asked for per requested byte. Every byte read is checked.\n\nflags:")
		fs.PrintDefaults()
	}
	var (
		cfg                                bench.RangesConfig
		minSize, maxSize, minR, maxR, page = byteSize(100 << 20), byteSize(160 << 20), byteSize(1 << 20), byteSize(8 << 20), byteSize(cachelet.DefaultPageSize)
		budget, maxObj                     = byteSize(512 << 20), byteSize(64 << 20)
		tmp, logLevel                      string
	)
	fs.IntVar(&cfg.Objects, "objects", 2, "objects uploaded")
	fs.Var(&minSize, "min-size", "smallest object")
	fs.Var(&maxSize, "max-size", "largest object (the issue's figure: 1GiB)")
	fs.IntVar(&cfg.Ranges, "ranges", 24, "ranges read per target")
	fs.Var(&minR, "min-range", "shortest range")
	fs.Var(&maxR, "max-range", "longest range")
	fs.Var(&page, "page-size", "hoard's page size")
	fs.Var(&budget, "budget", "hoard's cache budget")
	fs.Var(&maxObj, "max-object", "the largest object hoard keeps whole (smaller than the objects, so only pages keep them)")
	fs.BoolVar(&cfg.WholeToo, "whole-too", false, "also measure ranges without pages of objects small enough to keep whole (each cold read fetches its whole object: slow)")
	fs.StringVar(&cfg.Preset, "preset", "faast", "the store link's shaping (a netshape preset: faast, ofc, local)")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "seed of the objects and the ranges")
	minioFlag(fs, &cfg.MinIOBinary)
	tmpFlag(fs, &tmp)
	serversLogFlag(fs, &logLevel)
	if err := usageErr(fs.Parse(args)); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	cfg.MinSize, cfg.MaxSize, cfg.MinRange, cfg.MaxRange, cfg.PageSize = int64(minSize), int64(maxSize), int64(minR), int64(maxR), int64(page)
	cfg.Budget, cfg.MaxObject, cfg.TempDir, cfg.Progress = int64(budget), int64(maxObj), tmp, stderr
	var err error
	if cfg.Log, err = newLogger(stderr, logLevel, false); err != nil {
		return err
	}
	rep, err := bench.RunRanges(ctx, cfg)
	if rep != nil {
		printRangesReport(stdout, rep)
	}
	return err
}

func printRangesReport(w io.Writer, rep *bench.RangesReport) {
	c := rep.Config
	fmt.Fprintf(w, "%d ranges of %s-%s from %d objects of %s-%s; store link %s (preset %s); pages of %s\n\n",
		c.Ranges, bench.FormatSize(c.MinRange), bench.FormatSize(c.MaxRange), c.Objects, bench.FormatSize(c.MinSize), bench.FormatSize(c.MaxSize),
		rep.Link, c.Preset, bench.FormatSize(c.PageSize))
	var base *bench.RangesTarget
	for i := range rep.Targets {
		if rep.Targets[i].Name == bench.RangesDirect {
			base = &rep.Targets[i]
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\tp50\tp99\tfirst byte p50\tp50 ÷ direct\tfirst byte ÷ direct\tstore bytes ÷ requested\t")
	for _, t := range rep.Targets {
		ratio, fbRatio, bytesRatio := "-", "-", "-"
		if base != nil && base.Total.P50 > 0 {
			ratio = fmt.Sprintf("%.2f", float64(t.Total.P50)/float64(base.Total.P50))
			fbRatio = fmt.Sprintf("%.2f", float64(t.FirstByte.P50)/float64(base.FirstByte.P50))
		}
		if t.StoreBytes >= 0 && rep.RequestedBytes > 0 {
			bytesRatio = fmt.Sprintf("%.2f", float64(t.StoreBytes)/float64(rep.RequestedBytes))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", t.Name, bench.FormatDuration(t.Total.P50), bench.FormatDuration(t.Total.P99),
			bench.FormatDuration(t.FirstByte.P50), ratio, fbRatio, bytesRatio)
	}
	tw.Flush()
	fmt.Fprintln(w)
	for _, t := range rep.Targets {
		fmt.Fprintf(w, "%s: %s\n", t.Name, t.About)
	}
}
