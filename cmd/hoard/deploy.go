package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/appspec"
	"github.com/hoard-io/hoard/internal/bytesize"
)

// runDeploy packs an application directory and deploys it.
func runDeploy(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("deploy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	client := clientFlags(fs)
	maxPackage := int64(appspec.DefaultMaxPackageBytes)
	fs.Func("max-package", "the largest package to send, compressed (the controller's own --max-package bounds what it takes; default 1GiB)", func(s string) error {
		n, err := parseBytes(s)
		if err == nil && n <= 0 {
			err = fmt.Errorf("%q: want a positive size", s)
		}
		maxPackage = n
		return err
	})
	if err := usageErr(fs.Parse(args)); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("%w: hoard deploy DIR [DIR...]", errUsage)
	}
	c, err := client(nil)
	if err != nil {
		return err
	}
	for _, dir := range fs.Args() {
		pkg, info, err := deployDir(ctx, c, dir, appspec.LimitsFor(maxPackage))
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "deployed %s version %d (%s, %s): functions %s", info.Name, info.Version, info.Rev[:12],
			bytesize.Format(pkg.Size), strings.Join(info.Functions, ", "))
		if len(info.Pipelines) > 0 {
			fmt.Fprintf(stdout, "; pipelines %s", strings.Join(info.Pipelines, ", "))
		}
		fmt.Fprintln(stdout)
	}
	return nil
}

// deployDir packs dir into a temporary file (mode 0600, removed at the
// end) and streams it to the controller, so that a large directory is
// never held in memory.
func deployDir(ctx context.Context, c *api.ControllerClient, dir string, lim appspec.Limits) (*appspec.Package, *api.AppInfo, error) {
	f, err := os.CreateTemp("", "hoard-deploy-*.blk")
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		f.Close()
		os.Remove(f.Name())
	}()
	pkg, err := appspec.PackBlocksTo(dir, f, lim)
	if err != nil {
		return nil, nil, err
	}
	info, err := c.DeployFrom(ctx, io.NewSectionReader(f, 0, pkg.Size), pkg.Size)
	if err != nil {
		return nil, nil, fmt.Errorf("deploying %s: %w", dir, err)
	}
	return pkg, info, nil
}
