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

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/bytesize"
)

// runApps lists the deployed applications.
func runApps(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("apps", flag.ContinueOnError)
	fs.SetOutput(stderr)
	client := clientFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	memory := fs.Bool("memory", false, "print each function's memory model: maturity, accuracy, predicted against used memory, memory given to the cache, retries")
	admit := fs.Bool("admission", false, "print each function's admission by predicted benefit: whether its misses are cached, and the share of its run time spent extracting and loading data (cache.admission: benefit)")
	trees := fs.Bool("trees", false, "print each application's function tree: the agents hosting its deployed version, each under its parent (FaaSNet's balanced binary tree)")
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
	if *memory {
		return printModels(ctx, c, apps, *asJSON, stdout)
	}
	if *admit {
		return printAdmission(ctx, c, apps, *asJSON, stdout)
	}
	if *asJSON {
		out, _ := json.MarshalIndent(apps, "", "  ")
		fmt.Fprintln(stdout, string(out))
		return nil
	}
	if *trees {
		printTrees(stdout, apps)
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

// eachFunction calls add with every function of apps and its statistics
// from the controller.
func eachFunction(ctx context.Context, c *api.ControllerClient, apps []api.AppInfo, add func(app, fn string, st api.FuncStats)) error {
	for _, a := range apps {
		st, err := c.Stats(ctx, a.Name)
		if err != nil {
			return err
		}
		for _, fn := range a.Functions {
			add(a.Name, fn, st[fn])
		}
	}
	return nil
}

// printedJSON prints rows as indented JSON, unless err.
func printedJSON(rows any, err error, stdout io.Writer) error {
	if err != nil {
		return err
	}
	out, _ := json.MarshalIndent(rows, "", "  ")
	fmt.Fprintln(stdout, string(out))
	return nil
}

// printModels prints the functions' memory models (OFC's opportunistic
// memory): what `hoard apps --memory` shows.
func printModels(ctx context.Context, c *api.ControllerClient, apps []api.AppInfo, asJSON bool, stdout io.Writer) error {
	type row struct {
		App      string         `json:"app"`
		Function string         `json:"function"`
		Model    *api.ModelInfo `json:"model"`
	}
	var rows []row
	err := eachFunction(ctx, c, apps, func(app, fn string, st api.FuncStats) { rows = append(rows, row{app, fn, st.Model}) })
	if err != nil || asJSON {
		return printedJSON(rows, err, stdout)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "APP\tFUNCTION\tOBSERVED\tMATURE\tEXACT\tEXACT-OR-OVER\tSIZED\tPREDICTED (MEAN)\tUSED (MEAN)\tCACHE GIVEN\tUNDER\tRETRIES")
	for _, r := range rows {
		m := r.Model
		if m == nil {
			fmt.Fprintf(tw, "%s\t%s\t0\t-\t-\t-\t-\t-\t-\t-\t-\t-\n", r.App, r.Function)
			continue
		}
		mean := func(n int64) string {
			if m.Predicted == 0 {
				return "-"
			}
			return bytesize.Format(n / m.Predicted)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%v\t%.0f%%\t%.0f%%\t%d\t%s\t%s\t%s\t%d\t%d\n", r.App, r.Function, m.Observed, m.Mature,
			100*m.Exact, 100*m.ExactOrOver, m.Predicted, mean(m.PredictedBytes), mean(m.PeakBytes), bytesize.Format(m.CacheGivenBytes), m.UnderPredicted, m.Retries)
	}
	return tw.Flush()
}

// printAdmission prints each function's admission by predicted benefit:
// what `hoard apps --admission` shows. An application admitting every
// read shows "all".
func printAdmission(ctx context.Context, c *api.ControllerClient, apps []api.AppInfo, asJSON bool, stdout io.Writer) error {
	type row struct {
		App       string         `json:"app"`
		Function  string         `json:"function"`
		Admission *api.Admission `json:"admission"`
	}
	var rows []row
	err := eachFunction(ctx, c, apps, func(app, fn string, st api.FuncStats) { rows = append(rows, row{app, fn, st.Admission}) })
	if err != nil || asJSON {
		return printedJSON(rows, err, stdout)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "APP\tFUNCTION\tCACHED\tDATA SHARE\tSAMPLES\tWHY")
	for _, r := range rows {
		d := r.Admission
		if d == nil {
			fmt.Fprintf(tw, "%s\t%s\tall\t-\t-\tcache.admission is all\n", r.App, r.Function)
			continue
		}
		share := "-"
		if d.Share >= 0 {
			share = fmt.Sprintf("%.0f%%", 100*d.Share)
		}
		cached := "yes"
		if !d.Admit {
			cached = "no"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", r.App, r.Function, cached, share, d.Samples, d.Reason)
	}
	return tw.Flush()
}

// printTrees writes each application's function tree, one agent a line,
// indented under its parent.
func printTrees(w io.Writer, apps []api.AppInfo) {
	for _, a := range apps {
		if a.Tree == nil {
			fmt.Fprintf(w, "%s: no tree (no instance of version %d)\n", a.Name, a.Version)
			continue
		}
		t := a.Tree
		fmt.Fprintf(w, "%s (version %d, package %.12s): %d agents, height %d, %s\n", a.Name, a.Version, t.Rev, len(t.Nodes), t.Height, t.Shape)
		children := map[string][]string{}
		for _, n := range t.Nodes {
			children[n.ID] = n.Children
		}
		var walk func(id, indent string)
		walk = func(id, indent string) {
			fmt.Fprintf(w, "%s%s\n", indent, id)
			for _, c := range children[id] {
				walk(c, indent+"  ")
			}
		}
		walk(t.Root, "  ")
	}
}
