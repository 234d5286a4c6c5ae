package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/bytesize"
)

// runLogs prints an application's recent invocations with their logs
// (hoard logs APP), or the log of one of `hoard up`'s components (hoard
// logs --component NAME), from the files under DIR/logs.
func runLogs(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("logs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	client := clientFlags(fs)
	function := fs.String("function", "", "only this function")
	n := fs.Int("n", 10, "how many invocations; with --component, how many of the last lines (0: all)")
	onlyErrors := fs.Bool("errors", false, "only failed invocations")
	component := fs.String("component", "", "print this component's log from DIR/logs instead: controller, agent, cachelet, instance, minio, etcd (or one file's name, e.g. cachelet-0)")
	follow := fs.Bool("f", false, "with --component: keep printing what is appended, until interrupted")
	if err := usageErr(fs.Parse(reorder(args, map[string]bool{"errors": true, "f": true}))); err != nil {
		return err
	}
	if *component != "" {
		if fs.NArg() != 0 {
			return fmt.Errorf("%w: hoard logs --component NAME takes no application", errUsage)
		}
		return printComponentLog(ctx, filepath.Join(fs.Lookup("dir").Value.String(), logsDir), *component, *n, *follow, stdout)
	}
	if *follow {
		return fmt.Errorf("%w: -f follows a component's log (--component)", errUsage)
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("%w: hoard logs [flags] APP, or hoard logs --component NAME [-n N] [-f]", errUsage)
	}
	c, err := client(nil)
	if err != nil {
		return err
	}
	recs, err := c.Logs(ctx, fs.Arg(0), api.LogsQuery{Function: *function, N: *n, OnlyErrors: *onlyErrors})
	if err != nil {
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

var componentRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)*$`)

// componentFiles lists the log files of a component under dir: NAME.log,
// NAME-*.log (cachelet: cachelet-0.log, ...), and the platform
// instances' logs (instances/ID.log) for instance and cachelet, whose
// logs they hold with their worker's.
func componentFiles(dir, name string) ([]string, error) {
	if !componentRE.MatchString(name) {
		return nil, fmt.Errorf("%w: bad component %q", errUsage, name)
	}
	seen := map[string]bool{}
	var files []string
	add := func(pattern string) {
		m, _ := filepath.Glob(pattern)
		for _, f := range m {
			if st, err := os.Stat(f); err == nil && st.Mode().IsRegular() && !seen[f] {
				seen[f] = true
				files = append(files, f)
			}
		}
	}
	add(filepath.Join(dir, name+".log"))
	add(filepath.Join(dir, name+"-*.log"))
	add(filepath.Join(dir, "instances", name+".log"))
	if name == "cachelet" || name == "instance" {
		add(filepath.Join(dir, "instances", "*.log"))
	}
	if len(files) > 0 {
		return files, nil
	}
	var have []string
	m, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, f := range m {
		have = append(have, strings.TrimSuffix(filepath.Base(f), ".log"))
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "instances", "*.log")); len(m) > 0 {
		have = append(have, "instance")
	}
	if len(have) == 0 {
		return nil, fmt.Errorf("no logs in %s: is it the state directory of a `hoard up` (--dir)?", dir)
	}
	sort.Strings(have)
	return nil, fmt.Errorf("no log of %q in %s; there are: %s", name, dir, strings.Join(have, ", "))
}

// printComponentLog prints the last n lines (0: all) of each of a
// component's files, a "==> FILE <==" header before each when there are
// several, and with follow keeps printing what is appended (and new
// files of the component) until ctx ends.
func printComponentLog(ctx context.Context, dir, name string, n int, follow bool, stdout io.Writer) error {
	files, err := componentFiles(dir, name)
	if err != nil {
		return err
	}
	offsets := map[string]int64{}
	last := ""
	show := func(file string, data []byte) {
		if len(data) == 0 {
			return
		}
		if len(files) > 1 && last != file {
			fmt.Fprintf(stdout, "==> %s <==\n", file)
		}
		last = file
		stdout.Write(data)
	}
	for _, f := range files {
		data, size, err := tailLines(f, n)
		if err != nil {
			return err
		}
		offsets[f] = size
		show(f, data)
	}
	if !follow {
		return nil
	}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if now, err := componentFiles(dir, name); err == nil {
			files = now
		}
		for _, f := range files {
			data, size, err := readFrom(f, offsets[f])
			if err != nil {
				continue // rotated away, or not yet there
			}
			offsets[f] = size
			show(f, data)
		}
	}
}

// tailLines returns the last n lines of a file (all with n <= 0) and the
// file's size.
func tailLines(path string, n int) ([]byte, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	size := st.Size()
	for chunk := int64(64 << 10); ; chunk *= 4 {
		start := max(size-chunk, 0)
		if n <= 0 {
			start = 0
		}
		buf := make([]byte, size-start)
		if _, err := f.ReadAt(buf, start); err != nil && !errors.Is(err, io.EOF) {
			return nil, 0, err
		}
		if n <= 0 {
			return buf, size, nil
		}
		if i := lastLines(buf, n); i > 0 || start == 0 {
			return buf[i:], size, nil
		}
	}
}

// lastLines returns where the last n lines of buf begin; 0 when buf holds
// n lines or fewer.
func lastLines(buf []byte, n int) int {
	end := len(buf)
	if end > 0 && buf[end-1] == '\n' {
		end--
	}
	for ; n > 0; n-- {
		i := bytes.LastIndexByte(buf[:end], '\n')
		if i < 0 {
			return 0
		}
		end = i
	}
	return end + 1
}

// readFrom returns what a file holds from off on (from its start when it
// shrank: truncated) and its size.
func readFrom(path string, off int64) ([]byte, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, off, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, off, err
	}
	size := st.Size()
	if size < off {
		off = 0
	}
	buf := make([]byte, size-off)
	if _, err := f.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
		return nil, off, err
	}
	return buf, size, nil
}
