package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// runInvoke invokes a function (or runs a pipeline) and prints its result.
func runInvoke(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("invoke", flag.ContinueOnError)
	fs.SetOutput(stderr)
	client := clientFlags(fs)
	data := fs.String("data", "{}", "the event as JSON, or @FILE")
	pipeline := fs.Bool("pipeline", false, "FUNCTION names a pipeline: run it")
	showLog := fs.Bool("log", false, "print the function's log to stderr")
	if err := usageErr(fs.Parse(reorder(args, map[string]bool{"pipeline": true, "log": true}))); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		return fmt.Errorf("%w: hoard invoke [flags] APP FUNCTION (or --pipeline APP PIPELINE)", errUsage)
	}
	event := []byte(*data)
	if strings.HasPrefix(*data, "@") {
		b, err := os.ReadFile((*data)[1:])
		if err != nil {
			return err
		}
		event = b
	}
	if !json.Valid(event) {
		return fmt.Errorf("%w: --data is not valid JSON", errUsage)
	}
	c, err := client(nil)
	if err != nil {
		return err
	}
	app, name := fs.Arg(0), fs.Arg(1)
	if *pipeline {
		run, err := c.RunPipeline(ctx, app, name, event)
		if err != nil {
			return err
		}
		out, _ := json.MarshalIndent(run, "", "  ")
		fmt.Fprintln(stdout, string(out))
		if !run.OK {
			return fmt.Errorf("pipeline %s failed: %s", name, run.Error)
		}
		return nil
	}
	rec, err := c.Invoke(ctx, app, name, event)
	if err != nil {
		return err
	}
	if *showLog || !rec.OK {
		fmt.Fprint(stderr, rec.Log)
	}
	start := "warm"
	if rec.Cold {
		start = "cold"
	}
	fmt.Fprintf(stderr, "request %s on %s: %s start, %.1f ms (function %.1f ms)\n", rec.RequestID, rec.Instance, start, rec.TotalMS, rec.ExecMS)
	if !rec.OK {
		if rec.Error.Traceback != "" {
			fmt.Fprint(stderr, rec.Error.Traceback)
		}
		return fmt.Errorf("%s: %s", rec.Error.Type, rec.Error.Message)
	}
	fmt.Fprintln(stdout, string(rec.Result))
	return nil
}
