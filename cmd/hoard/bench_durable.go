package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/hoard-io/hoard/internal/bench"
)

func runBenchDurable(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench durable", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: hoard bench durable [flags]\n\n"+
			"A `hoard serve` cachelet in front of MinIO takes a write and read load and is killed\n"+
			"(SIGKILL) every --kill-every, restarted on its disk directory each time; at the end\n"+
			"the store is compared with what was acknowledged. Runs with --durable-writes, then\n"+
			"without (background persistence), and prints what each lost.\n\nflags:")
		fs.PrintDefaults()
	}
	var cfg bench.DurableConfig
	var only string
	fs.StringVar(&cfg.HoardBinary, "hoard", "", "the hoard binary run as `hoard serve` (default $HOARD_BIN)")
	fs.StringVar(&cfg.Consistency, "consistency", "owner", "the cachelet's consistency setting (owner, owner-async, owner-local-read, local, local-async)")
	fs.DurationVar(&cfg.Duration, "duration", 5*time.Minute, "how long the load runs, per variant")
	fs.DurationVar(&cfg.KillEvery, "kill-every", 10*time.Second, "how long the cachelet serves between kills")
	fs.IntVar(&cfg.Keys, "keys", 48, "keys written (by keys/3 writers, each key's writes one at a time)")
	fs.StringVar(&only, "only", "", "durable or memory: run one variant")
	minioFlag(fs, &cfg.MinIOBinary)
	tmpFlag(fs, &cfg.TempDir)
	if err := usageErr(fs.Parse(args)); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	variants := []bool{true, false}
	switch only {
	case "":
	case "durable":
		variants = []bool{true}
	case "memory":
		variants = []bool{false}
	default:
		return fmt.Errorf("%w: --only %q: want durable or memory", errUsage, only)
	}
	cfg.Progress = stderr
	for _, d := range variants {
		c := cfg
		c.Durable = d
		rep, err := bench.RunDurable(ctx, c)
		if rep != nil {
			fmt.Fprintln(stdout, rep)
		}
		if err != nil {
			return err
		}
		// Losses without the log are what it measures; with it, or
		// wrong bytes in either, they are a fault.
		if rep.Wrong > 0 || (d && (rep.Missing > 0 || rep.Stale > 0)) {
			return fmt.Errorf("bench durable: %s", rep)
		}
	}
	return nil
}
