package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/hoard-io/hoard/internal/appspec"
	"github.com/hoard-io/hoard/internal/bytesize"
)

// runDeploy packs an application directory and deploys it.
func runDeploy(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("deploy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	client := clientFlags(fs)
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
		pkg, err := appspec.PackBlocks(dir)
		if err != nil {
			return err
		}
		info, err := c.Deploy(ctx, pkg.Data)
		if err != nil {
			return fmt.Errorf("deploying %s: %w", dir, err)
		}
		fmt.Fprintf(stdout, "deployed %s version %d (%s, %s): functions %s", info.Name, info.Version, info.Rev[:12],
			bytesize.Format(int64(len(pkg.Data))), strings.Join(info.Functions, ", "))
		if len(info.Pipelines) > 0 {
			fmt.Fprintf(stdout, "; pipelines %s", strings.Join(info.Pipelines, ", "))
		}
		fmt.Fprintln(stdout)
	}
	return nil
}
