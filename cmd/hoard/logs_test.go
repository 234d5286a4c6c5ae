package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestLastLines(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"a\nb\nc\n", 2, "b\nc\n"},
		{"a\nb\nc", 2, "b\nc"},
		{"a\nb\nc\n", 3, "a\nb\nc\n"},
		{"a\nb\nc\n", 10, "a\nb\nc\n"},
		{"a\nb\nc\n", 1, "c\n"},
		{"", 5, ""},
	} {
		if got := tc.in[lastLines([]byte(tc.in), tc.n):]; got != tc.want {
			t.Errorf("last %d lines of %q = %q; want %q", tc.n, tc.in, got, tc.want)
		}
	}
}

// TestComponentLogs: each component's records go to its file, routed by
// the component a logger is given; only errors reach the terminal; and
// hoard logs --component prints them back.
func TestComponentLogs(t *testing.T) {
	state := t.TempDir()
	dir := filepath.Join(state, logsDir)
	var terminal bytes.Buffer
	logs, err := newComponentLogs(dir, slog.LevelInfo, &terminal)
	if err != nil {
		t.Fatal(err)
	}
	plat := logs.router(platformLogs, "controller")
	plat.With("component", "controller").Info("controller up")
	plat.With("component", "sandbox").Info("sandboxes: none")
	plat.With("component", "agent").With("instance", "x").Error("instance died")
	plat.Info("unnamed")
	plat.With("component", "agent").Debug("too fine")
	logs.logger("cachelet-0").With("component", "s3api").Info("serving")
	logs.logger("etcd").Warn("slow")
	logs.Quiet()
	logs.logger("etcd").Error("closed under its feet")
	if err := logs.Close(); err != nil {
		t.Fatal(err)
	}
	read := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(dir, name+".log"))
		return string(b)
	}
	for _, tc := range []struct{ file, has, hasNot string }{
		{"controller", "controller up", "sandboxes"},
		{"controller", "unnamed", "instance died"},
		{"agent", "sandboxes: none", "too fine"},
		{"agent", "instance died", "controller up"},
		{"cachelet-0", "component=s3api", "slow"},
		{"etcd", "slow", "serving"},
		{"etcd", "closed under its feet", "serving"},
	} {
		got := read(tc.file)
		if !strings.Contains(got, tc.has) || strings.Contains(got, tc.hasNot) {
			t.Errorf("%s.log = %q; want %q and not %q", tc.file, got, tc.has, tc.hasNot)
		}
	}
	if got := terminal.String(); !strings.Contains(got, "instance died") || !strings.Contains(got, "log=agent") || strings.Count(got, "\n") != 1 {
		t.Errorf("the terminal got %q; want only the error", got)
	}

	os.MkdirAll(filepath.Join(dir, "instances"), 0o700)
	os.WriteFile(filepath.Join(dir, "instances", "app-1.log"), []byte("worker says hi\n"), 0o600)
	for _, tc := range []struct {
		args       []string
		code       int
		has, hasNo string
	}{
		{[]string{"--component", "controller"}, 0, "controller up", "==>"},
		{[]string{"--component", "agent", "-n", "1"}, 0, "instance died", "sandboxes"},
		{[]string{"--component", "cachelet"}, 0, "==> " + filepath.Join(dir, "instances", "app-1.log"), ""},
		{[]string{"--component", "cachelet"}, 0, "component=s3api", ""},
		{[]string{"--component", "app-1"}, 0, "worker says hi", "==>"},
		{[]string{"--component", "minio"}, 1, "there are: agent, cachelet-0, controller, etcd, instance", ""},
		{[]string{"--component", "../x"}, 2, "bad component", ""},
		{[]string{"--component", "agent", "app"}, 2, "no application", ""},
		{[]string{"-f", "app"}, 2, "--component", ""},
	} {
		var out, errOut bytes.Buffer
		code := run(context.Background(), append([]string{"logs", "--dir", state}, tc.args...), &out, &errOut)
		all := out.String() + errOut.String()
		if code != tc.code || !strings.Contains(all, tc.has) || (tc.hasNo != "" && strings.Contains(all, tc.hasNo)) {
			t.Errorf("hoard logs %v: exit %d, output %q; want exit %d with %q and not %q", tc.args, code, all, tc.code, tc.has, tc.hasNo)
		}
	}
}

// lockedBuffer is a bytes.Buffer for one writer and one reader at once;
// grew signals each write.
type lockedBuffer struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	grew chan struct{}
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.buf.Write(p)
	select {
	case b.grew <- struct{}{}:
	default:
	}
	return n, err
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestComponentLogFollow: -f prints what is appended to a component's
// file, and the files of the component that appear later, until the
// context ends.
func TestComponentLogFollow(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.log")
	os.WriteFile(path, []byte("one\ntwo\n"), 0o600)
	out := &lockedBuffer{grew: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- printComponentLog(ctx, dir, "agent", 1, true, out) }()
	waitOutput := func(want string) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for !strings.Contains(out.String(), want) {
			select {
			case <-out.grew:
			case <-deadline:
				t.Fatalf("output %q never had %q", out.String(), want)
			}
		}
	}
	waitOutput("two\n")
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("three\n")
	f.Close()
	waitOutput("three\n")
	os.WriteFile(filepath.Join(dir, "agent-2.log"), []byte("second file\n"), 0o600)
	waitOutput("==> " + filepath.Join(dir, "agent-2.log") + " <==\nsecond file\n")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := out.String(); strings.HasPrefix(got, "one\n") {
		t.Errorf("-n 1 printed %q", got)
	}
}
