package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// runApps lists the deployed applications.
func runApps(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("apps", flag.ContinueOnError)
	fs.SetOutput(stderr)
	client := clientFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := usageErr(fs.Parse(args)); err != nil {
		return err
	}
	c, err := client(nil)
	if err != nil {
		return err
	}
	apps, err := c.Apps(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		out, _ := json.MarshalIndent(apps, "", "  ")
		fmt.Fprintln(stdout, string(out))
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "APP\tVERSION\tFUNCTIONS\tPIPELINES\tTRIGGERS\tINSTANCES\tINVOCATIONS\tDEPLOYED")
	for _, a := range apps {
		busy := 0
		for _, in := range a.Instances {
			if in.State == "busy" {
				busy++
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%d (%d busy)\t%d\t%s\n", a.Name, a.Version, strings.Join(a.Functions, ","),
			strings.Join(a.Pipelines, ","), a.Triggers, len(a.Instances), busy, a.Invocations, a.DeployedAt.Local().Format(time.DateTime))
	}
	return tw.Flush()
}
