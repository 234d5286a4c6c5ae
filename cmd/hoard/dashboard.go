package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os/exec"
	"time"
)

// runDashboard prints a one-time login link to the controller's dashboard
// and, with --open, opens it in the desktop's browser.
func runDashboard(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("dashboard", flag.ContinueOnError)
	fs.SetOutput(stderr)
	client := clientFlags(fs)
	open := fs.Bool("open", false, "open the link with xdg-open (or open, on macOS) instead of only printing it")
	if err := usageErr(fs.Parse(args)); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("%w: hoard dashboard takes no arguments", errUsage)
	}
	c, err := client(nil)
	if err != nil {
		return err
	}
	login, err := c.DashboardLogin(ctx)
	if err != nil {
		return err
	}
	link := c.URL() + login.Path
	fmt.Fprintf(stdout, "%s\n", link)
	fmt.Fprintf(stderr, "a one-time link, valid until %s: it logs this browser in for 12 hours\n", login.Expires.Local().Format(time.TimeOnly))
	if *open {
		for _, opener := range []string{"xdg-open", "open"} {
			if path, err := exec.LookPath(opener); err == nil {
				return exec.CommandContext(ctx, path, link).Run()
			}
		}
		return fmt.Errorf("no xdg-open or open on this machine: open the link above by hand")
	}
	return nil
}
