package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/hoard-io/hoard/internal/bytesize"
	"github.com/hoard-io/hoard/internal/controller"
)

// runLogs prints an application's recent invocations with their logs.
func runLogs(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("logs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	client := clientFlags(fs)
	function := fs.String("function", "", "only this function")
	n := fs.Int("n", 10, "how many invocations")
	onlyErrors := fs.Bool("errors", false, "only failed invocations")
	if err := usageErr(fs.Parse(reorder(args, map[string]bool{"errors": true}))); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("%w: hoard logs [flags] APP", errUsage)
	}
	c, err := client()
	if err != nil {
		return err
	}
	q := fmt.Sprintf("/v1/apps/%s/logs?n=%d&function=%s", fs.Arg(0), *n, *function)
	if *onlyErrors {
		q += "&errors=1"
	}
	var recs []controller.Invocation
	if err := c.call(ctx, http.MethodGet, q, "", nil, &recs); err != nil {
		return err
	}
	for _, r := range recs {
		status := "ok"
		if !r.OK {
			status = r.Error.Type + ": " + r.Error.Message
		}
		start := "warm"
		if r.Cold {
			start = "cold"
		}
		var reads []string
		for k, v := range r.Reads {
			reads = append(reads, fmt.Sprintf("%s %d (%s)", k, v.Count, bytesize.Human(v.Bytes)))
		}
		sort.Strings(reads)
		fmt.Fprintf(stdout, "=== %s %s/%s on %s, %s, %s start, %.1f ms, reads: %s\n%s", r.Start.Local().Format(time.RFC3339), r.App, r.Function,
			r.Instance, status, start, r.TotalMS, strings.Join(reads, ", "), r.Log)
		if r.Log != "" && !strings.HasSuffix(r.Log, "\n") {
			fmt.Fprintln(stdout)
		}
	}
	return nil
}
