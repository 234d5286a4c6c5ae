package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/hoard-io/hoard/internal/bench"
	"github.com/hoard-io/hoard/internal/bytesize"
)

func runBenchMemory(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench memory", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: hoard bench memory [flags]\n\n"+
			"Runs `hoard serve` (this binary) in front of MinIO under concurrent readers and\n"+
			"writers of objects of a few MiB, a working set several times the cache's budget,\n"+
			"and prints the serve process's peak resident memory (VmHWM) next to the budget,\n"+
			"for hoard as configured and for a baseline without Go's memory limit, in the\n"+
			"same run.\n\nflags:")
		fs.PrintDefaults()
	}
	var (
		budget, minSize, maxSize = byteSize(64 << 20), byteSize(1 << 20), byteSize(8 << 20)
		readers, writers, ops    int
		minioBin, tmp, hoardBin  string
		seed                     uint64
	)
	fs.Var(&budget, "budget", "the cache's budget (--budget of hoard serve)")
	fs.IntVar(&readers, "readers", 12, "concurrent readers")
	fs.IntVar(&writers, "writers", 2, "concurrent writers")
	fs.Var(&minSize, "min-size", "smallest object")
	fs.Var(&maxSize, "max-size", "largest object")
	fs.IntVar(&ops, "ops", 600, "requests per variant, reads and writes in the proportion of readers to writers")
	fs.Uint64Var(&seed, "seed", 1, "seed of the objects' sizes and the clients' choices")
	fs.StringVar(&hoardBin, "hoard", "", "the hoard binary run as hoard serve (default: this one)")
	minioFlag(fs, &minioBin)
	tmpFlag(fs, &tmp)
	if err := usageErr(fs.Parse(args)); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	if hoardBin == "" {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		hoardBin = exe
	}
	rep, err := bench.RunMemory(ctx, bench.MemoryConfig{
		HoardBinary: hoardBin, MinIOBinary: minioBin, Budget: int64(budget),
		Readers: readers, Writers: writers, MinSize: int64(minSize), MaxSize: int64(maxSize),
		Ops: ops, Seed: seed, TempDir: tmp, Progress: stderr,
	})
	if rep != nil {
		printMemoryReport(stdout, rep)
	}
	return err
}

func printMemoryReport(w io.Writer, rep *bench.MemoryReport) {
	mib := func(n int64) string { return fmt.Sprintf("%.1f", float64(n)/(1<<20)) }
	fmt.Fprintf(w, "budget %s MiB; %d readers, %d writers; %d objects of %s-%s (%s MiB, %.1f× the budget); %d requests per variant\n\n",
		mib(rep.Budget), rep.Readers, rep.Writers, rep.Objects, bytesize.Format(rep.MinSize), bytesize.Format(rep.MaxSize),
		mib(rep.WorkingSet), float64(rep.WorkingSet)/float64(rep.Budget), rep.Ops)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "variant\tmax RSS MiB\tover budget MiB\tRSS/budget\tvs first\tidle RSS MiB\tanon MiB\tfile MiB\thits\tmisses\tpass\tpool reused\tGCs\tMB/s\t")
	var first int64
	for i, r := range rep.Runs {
		if i == 0 {
			first = r.MaxRSS
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t%.2f\t%s\t%s\t%s\t%d\t%d\t%d\t%d/%d\t%d\t%.0f\t\n", r.Variant.Name, mib(r.MaxRSS), mib(r.Over(rep.Budget)),
			float64(r.MaxRSS)/float64(rep.Budget), float64(r.MaxRSS)/float64(first), mib(r.StartRSS), mib(r.MaxAnon), mib(r.MaxFile),
			r.Served.LocalHit.Count, r.Served.LocalMiss.Count, r.Served.PassThrough.Count, r.PoolReused, r.PoolReused+r.PoolAllocated, r.GCs, float64(r.Bytes)/1e6/r.Seconds)
	}
	tw.Flush()
	fmt.Fprintln(w)
	for _, r := range rep.Runs {
		fmt.Fprintf(w, "%s: %s\n", r.Variant.Name, r.Variant.About)
	}
}
