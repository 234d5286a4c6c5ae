package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// `hoard bench all` refuses bad invocations before running anything.
func TestBenchAllFlags(t *testing.T) {
	dir := t.TempDir()
	report := filepath.Join(dir, "report")
	tests := []struct {
		name    string
		args    []string
		code    int
		wantErr string
	}{
		{"help", []string{"bench", "all", "-h"}, 0, "experiments:"},
		{"no report", []string{"bench", "all", "--quick"}, 2, "--report DIR is required"},
		{"unknown experiment", []string{"bench", "all", "--report", report, "--only", "access,nope"}, 2, `unknown experiment "nope"`},
		{"empty only", []string{"bench", "all", "--report", report, "--only", ","}, 2, "--only: no experiments"},
		{"extra argument", []string{"bench", "all", "--report", report, "access"}, 2, `unexpected argument "access"`},
		{"bad flag", []string{"bench", "all", "--nope", "1KiB"}, 2, "flag provided but not defined"},
		{"bad sizes", []string{"bench", "all", "--report", report, "--render=false", "--sizes", "1KiB,big"}, 2, "--sizes"},
		{"bad nodes", []string{"bench", "all", "--report", report, "--render=false", "--nodes", "1,two"}, 2, "--nodes"},
		{"too many nodes", []string{"bench", "all", "--report", report, "--render=false", "--nodes", "65"}, 2, "1 to 64"},
		{"negative iterations", []string{"bench", "all", "--report", report, "--render=false", "--iterations", "-1"}, 2, "--iterations must not be negative"},
		{"no python", []string{"bench", "all", "--report", report, "--python", ""}, 2, "--render=false"},
		{"bad log level", []string{"bench", "all", "--report", report, "--render=false", "--log-level", "loud"}, 2, "bad log level"},
	}
	for _, tt := range tests {
		var out, errOut bytes.Buffer
		code := run(context.Background(), tt.args, &out, &errOut)
		if code != tt.code || !strings.Contains(out.String()+errOut.String(), tt.wantErr) {
			t.Errorf("%s: hoard %s: exit %d, want %d with %q\nstdout: %s\nstderr: %s",
				tt.name, strings.Join(tt.args, " "), code, tt.code, tt.wantErr, out.String(), errOut.String())
		}
	}
	if _, err := os.Stat(report); !os.IsNotExist(err) {
		t.Errorf("a refused invocation created the report directory (%v)", err)
	}
}

// `hoard bench access` refuses a store link it cannot shape before
// starting anything.
func TestBenchAccessStoreLinkFlag(t *testing.T) {
	for _, tt := range []struct{ link, want string }{
		{"nope", `unknown preset "nope"`},
		{"local", `preset "local" leaves the store link unshaped`},
	} {
		var out, errOut bytes.Buffer
		args := []string{"bench", "access", "--boto3=false", "--store-link", tt.link}
		if code := run(context.Background(), args, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), tt.want) {
			t.Errorf("hoard %s: exit %d, want 2 with %q\nstderr: %s", strings.Join(args, " "), code, tt.want, errOut.String())
		}
	}
}

func TestBenchAllHelpListsExperiments(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"bench", "all", "--help"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"access", "consistency", "quick: sizes 1 KiB", "quick: 200 iterations", "quick: sizes 32 MiB, 1 iterations, nodes 1 2 4"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("help lacks %q:\n%s", want, errOut.String())
		}
	}
	out.Reset()
	errOut.Reset()
	run(context.Background(), []string{"bench", "--help"}, &out, &errOut)
	if !strings.Contains(errOut.String(), "all ") {
		t.Errorf("hoard bench --help does not list all:\n%s", errOut.String())
	}
}

// `hoard bench changes` refuses bad flags before starting anything.
func TestBenchChangesFlags(t *testing.T) {
	for _, tt := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"--latency", "1500us"}, "whole number of milliseconds"},
		{[]string{"--latency", "0s"}, "whole number of milliseconds"},
		{[]string{"--writes", "0"}, "must be positive"},
		{[]string{"--reads", "-3"}, "must be positive"},
		{[]string{"--filler", "0s"}, "--filler must not be 0"},
		{[]string{"--feed", "pigeon"}, `--feed "pigeon": want listen or relay`},
		{[]string{"extra"}, `unexpected argument "extra"`},
	} {
		var out, errOut bytes.Buffer
		args := append([]string{"bench", "changes", "--minio", "/nonexistent/minio"}, tt.args...)
		if code := run(context.Background(), args, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), tt.wantErr) {
			t.Errorf("hoard %s: exit %d, want 2 with %q\nstderr: %s", strings.Join(args, " "), code, tt.wantErr, errOut.String())
		}
	}
}

// `hoard bench bare-server` refuses a size it cannot serve and stray
// arguments before listening.
func TestBenchBareServerFlags(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "bare-server", "--size", "0"}, "want 1 byte to 64 MiB"},
		{[]string{"bench", "bare-server", "--size", "65MiB"}, "want 1 byte to 64 MiB"},
		{[]string{"bench", "bare-server", "--size", "big"}, "--size"},
		{[]string{"bench", "bare-server", "8080"}, `unexpected argument "8080"`},
	} {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), tt.args, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), tt.want) || out.Len() != 0 {
			t.Errorf("hoard %s: exit %d, want 2 with %q\nstdout: %s\nstderr: %s", strings.Join(tt.args, " "), code, tt.want, out.String(), errOut.String())
		}
	}
}
