package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// runDown stops a `hoard up` serving from --dir: SIGTERM, then waits for
// it to shut down cleanly (SIGKILL after --timeout).
func runDown(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("down", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", ".hoard", "state directory of the `hoard up` to stop")
	timeout := fs.Duration("timeout", 60*time.Second, "how long to wait for a clean shutdown before killing")
	if err := usageErr(fs.Parse(args)); err != nil {
		return err
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}
	pid, ok := runningPID(abs)
	if !ok {
		fmt.Fprintf(stdout, "hoard is not running from %s\n", abs)
		_ = os.Remove(filepath.Join(abs, envFile))
		return sweepNodes(ctx, abs, stdout)
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return fmt.Errorf("signal pid %d: %w", pid, err)
	}
	deadline := time.Now().Add(*timeout)
	for alive(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			for alive(pid) && time.Since(deadline) < 10*time.Second {
				time.Sleep(100 * time.Millisecond)
			}
			return errors.Join(fmt.Errorf("pid %d did not stop within %s; killed it", pid, *timeout), sweepNodes(ctx, abs, stdout))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	_ = os.Remove(filepath.Join(abs, envFile))
	fmt.Fprintf(stdout, "hoard stopped (pid %d)\n", pid)
	return sweepNodes(ctx, abs, stdout)
}
