// Package scripttest runs the data-driven scripts that test hoard's pure
// cores (ring, keepalive, scaling, the cachelet's keystate): text files of
// steps, each "command args", optionally followed by "-> expected output".
// Blank lines and lines starting with '#' are kept as they are. A step
// with an expectation must print exactly that; one without must succeed.
// A failed step prints "error: ...". To record outputs, write
// "cmd args ->" and run the package's tests with -rewrite.
//
// It is for tests only: it imports testing and registers the -rewrite flag.
package scripttest

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected outputs in testdata/*.txt with the actual ones")

// Step runs one step of a script (its command line, trimmed) and returns
// what it prints.
type Step func(cmd string) (string, error)

// Run runs every file matching pattern (at least one must) as a subtest;
// newStep is called once per file, for a fresh state.
func Run(t *testing.T, pattern string, newStep func(t *testing.T) Step) {
	t.Helper()
	files, err := filepath.Glob(pattern)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no scripts match %s", pattern)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), filepath.Ext(file)), func(t *testing.T) {
			runFile(t, file, newStep(t))
		})
	}
}

func runFile(t *testing.T, file string, step Step) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	for i, line := range lines {
		cmd, want, hasWant := strings.Cut(line, "->")
		cmd = strings.TrimSpace(cmd)
		if cmd == "" || strings.HasPrefix(cmd, "#") {
			continue
		}
		got, err := step(cmd)
		if err != nil {
			got = "error: " + err.Error()
		}
		switch {
		case *rewrite && hasWant:
			lines[i] = cmd + " -> " + got
		case !hasWant && err != nil:
			t.Errorf("%s:%d: %s: %v", file, i+1, cmd, err)
		case hasWant && strings.TrimSpace(want) != got:
			t.Errorf("%s:%d: %s\n got: %s\nwant: %s", file, i+1, cmd, got, strings.TrimSpace(want))
		}
	}
	if *rewrite {
		if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
