// Command hoard is the data layer for serverless functions: an S3-speaking
// cache inside every application instance, in front of a real object store.
//
// Each subcommand lives in its own file.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/hoard-io/hoard/internal/sandbox"
)

// version is set at build time (-ldflags "-X main.version=...").
var version = "dev"

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"up", "start MinIO and a cachelet in front of it on loopback (the local default)", runUp},
		{"down", "stop what `hoard up --detach` started", runDown},
		{"serve", "run a cachelet in front of any S3 endpoint", runServe},
		{"bench", "run a benchmark, or all of them with a report (hoard bench -h)", runBench},
		{"deploy", "deploy an application directory (hoard.yaml) to the platform", runDeploy},
		{"invoke", "invoke a function or run a pipeline of an application", runInvoke},
		{"apps", "list the deployed applications and their instances", runApps},
		{"logs", "show an application's recent invocations with their logs", runLogs},
		{"dashboard", "print (or --open) a one-time login link to the controller's dashboard", runDashboard},
		{"sim", "replay a trace or a generated workload through hoard's policies, simulated (hoard sim -h)", runSim},
		{"load", "send invocations on a schedule (periodic, Poisson, a trace) and summarise their latencies", runLoad},
		{"pack", "pack a file or directory in the seekable block format; list or extract one", runPack},
		{"controller", "run the platform's controller", runController},
		{"agent", "run a node agent", runAgent},
		{"version", "print the version", func(_ context.Context, _ []string, out, _ io.Writer) error {
			_, err := fmt.Fprintln(out, "hoard", version)
			return err
		}},
	}
}

// errUsage marks errors caused by how the command was invoked (exit 2).
var errUsage = errors.New("usage")

func main() {
	// The jail's first process does nothing else (before signals are
	// caught or anything is started).
	if len(os.Args) > 1 && os.Args[1] == sandbox.InitCommand {
		os.Exit(runSandboxInit(os.Args[2:], os.Stderr))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, args[1:], stdout, stderr)
		switch {
		case err == nil, errors.Is(err, flag.ErrHelp):
			return 0
		case errors.Is(err, errUsage):
			fmt.Fprintf(stderr, "hoard %s: %v\n", c.name, err)
			return 2
		default:
			fmt.Fprintf(stderr, "hoard %s: %v\n", c.name, err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "hoard: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: hoard <command> [flags]\n\ncommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'hoard <command> -h' for a command's flags.")
}

// newLogger returns a structured logger at the named level.
func newLogger(w io.Writer, level string, json bool) (*slog.Logger, error) {
	lv, err := parseLogLevel(level)
	if err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: lv}
	if json {
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return slog.New(slog.NewTextHandler(w, opts)), nil
}

// parseLogLevel reads debug, info, warn or error.
func parseLogLevel(level string) (slog.Level, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return lv, fmt.Errorf("%w: bad log level %q", errUsage, level)
	}
	return lv, nil
}

// usageErr wraps a flag parsing error as a usage error.
func usageErr(err error) error {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return err
	}
	return fmt.Errorf("%w: %v", errUsage, err)
}
