package bench

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestServeBare: the bare server says where it listens, answers every
// GET with the run's object and every PUT by reading its body, and
// stops when its context ends.
func TestServeBare(t *testing.T) {
	if err := ServeBare(t.Context(), 0, io.Discard); err == nil {
		t.Fatal("size 0 accepted")
	}
	if err := ServeBare(t.Context(), maxThroughputSize+1, io.Discard); err == nil {
		t.Fatal("a size above 64 MiB accepted")
	}
	ctx, cancel := context.WithCancel(t.Context())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- ServeBare(ctx, 10_000, pw) }()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	url, ok := strings.CutPrefix(strings.TrimSpace(line), bareReadyPrefix)
	if !ok || !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Fatalf("ready line %q", line)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Equal(got, throughputData(10_000)) {
		t.Fatalf("GET: %s, %d bytes, not the run's object", resp.Status, len(got))
	}
	req, _ := http.NewRequest(http.MethodPut, url, bytes.NewReader(make([]byte, 50_000)))
	if resp, err = client.Do(req); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT: %v, %v", resp, err)
	}
	resp.Body.Close()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ServeBare did not return when its context ended")
	}
	if _, err := client.Get(url); err == nil {
		t.Fatal("still serving after ServeBare returned")
	}
}

// TestStartBareProcess: the child's ready line is read and its URL kept;
// closing the child's standard input ends it; a child that says anything
// else, or exits, is an error with what it wrote. Not parallel, and every
// script is written before the first runs: a fork while a script is open
// for writing could fail its exec with "text file busy".
func TestStartBareProcess(t *testing.T) {
	dir := t.TempDir()
	script := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// Stands in for `hoard bench bare-server`: checks its arguments,
	// says where it serves, and lives until its standard input ends.
	good := script("good", `[ "$1 $2 $3 $4" = "bench bare-server --size 4096" ] || { echo "bad args: $*" >&2; exit 2; }
echo "serving on http://127.0.0.1:1/throughput/hot"
cat >/dev/null`)
	bad := map[string]string{
		"wrong-line": script("wrong-line", `echo "listening somewhere"; cat >/dev/null`),
		"exits":      script("exits", `echo "no such flag" >&2; exit 2`),
	}
	p, err := startBareProcess(t.Context(), good, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if p.url != "http://127.0.0.1:1/throughput/hot" {
		t.Fatalf("url %q", p.url)
	}
	start := time.Now()
	p.Close()
	select {
	case <-p.exited:
	default:
		t.Fatal("the child still runs after Close")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Close took %v: the child did not end with its standard input", d)
	}

	for name, bin := range bad {
		if _, err := startBareProcess(t.Context(), bin, 4096); err == nil {
			t.Errorf("%s: no error", name)
		} else if name == "exits" && !strings.Contains(err.Error(), "no such flag") {
			t.Errorf("%s: %v lacks the child's stderr", name, err)
		}
	}
	if _, err := startBareProcess(t.Context(), filepath.Join(dir, "missing"), 4096); err == nil {
		t.Error("a missing binary started")
	}
}
