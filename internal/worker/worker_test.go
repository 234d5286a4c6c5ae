package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The tests run the real worker (python/hoard_worker) on the project's
// interpreter: no Python is a failure, not a skip.

// syncLog is a Config.Log that tells when a line containing want arrives.
type syncLog struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{}
}

func newSyncLog(want string) *syncLog { return &syncLog{want: want, seen: make(chan struct{})} }

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	if l.want != "" && strings.Contains(l.buf.String(), l.want) {
		select {
		case <-l.seen:
		default:
			close(l.seen)
		}
	}
	return len(p), nil
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// start runs a worker on a code directory holding files.
func start(t *testing.T, files map[string]string, opts ...func(*Config)) *Worker {
	t.Helper()
	dir := t.TempDir()
	for name, src := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	py, err := FindPython()
	if err != nil {
		t.Fatalf("FindPython: %v", err)
	}
	cfg := Config{
		Python:  py,
		CodeDir: dir,
		Env:     []string{"HOARD_APP=testapp", "PATH=" + os.Getenv("PATH")},
	}
	for _, o := range opts {
		o(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	w, err := Start(ctx, cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = w.Kill() })
	return w
}

func invoke(t *testing.T, w *Worker, handler string, event any) *Result {
	t.Helper()
	raw, err := json.Marshal(event)
	if err != nil {
		t.Fatal(err)
	}
	res, err := w.Invoke(context.Background(), Request{
		RequestID: fmt.Sprintf("req-%d", time.Now().UnixNano()), Function: "fn", Handler: handler,
		Event: raw, Timeout: 10 * time.Second, MemoryLimitMB: 128,
	})
	if err != nil {
		t.Fatalf("Invoke %s: %v", handler, err)
	}
	return res
}

func payload(t *testing.T, res *Result) any {
	t.Helper()
	if !res.OK {
		t.Fatalf("invocation failed: %v\nlog:\n%s", res.Error, res.Log)
	}
	var v any
	if err := json.Unmarshal(res.Payload, &v); err != nil {
		t.Fatalf("payload %q: %v", res.Payload, err)
	}
	return v
}

func wantError(t *testing.T, res *Result, typ, msgPart string) {
	t.Helper()
	if res.OK || res.Error == nil {
		t.Fatalf("want a %s error, got OK %s", typ, res.Payload)
	}
	if res.Error.Type != typ || !strings.Contains(res.Error.Message, msgPart) {
		t.Fatalf("error = %q %q, want type %q with %q", res.Error.Type, res.Error.Message, typ, msgPart)
	}
}

func TestFind(t *testing.T) {
	t.Parallel()
	py, err := FindPython()
	if err != nil {
		t.Fatalf("FindPython: %v", err)
	}
	wp, err := FindWorkerPath()
	if err != nil {
		t.Fatalf("FindWorkerPath: %v", err)
	}
	if _, err := os.Stat(filepath.Join(wp, "hoard_worker", "worker.py")); err != nil {
		t.Fatalf("worker path %s: %v", wp, err)
	}
	t.Logf("python %s, worker path %s", py, wp)
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	w := start(t, map[string]string{"app.py": `
def handler(event, context):
    return {"got": event, "double": event["n"] * 2, "text": "héllo"}

def none(event, context):
    pass

def length(event, context):
    return len(event)
`})
	if !strings.HasPrefix(w.Python(), "3.") || w.Pid() <= 0 {
		t.Fatalf("python %q pid %d", w.Python(), w.Pid())
	}
	res := invoke(t, w, "app.handler", map[string]any{"n": 21, "list": []any{1, "two", nil}})
	want := map[string]any{
		"got":    map[string]any{"n": 21.0, "list": []any{1.0, "two", nil}},
		"double": 42.0,
		"text":   "héllo",
	}
	if got := payload(t, res); !reflect.DeepEqual(got, want) {
		t.Fatalf("payload = %#v, want %#v", got, want)
	}
	if res.Duration <= 0 || res.Duration > 5*time.Second {
		t.Fatalf("duration %v", res.Duration)
	}
	res = invoke(t, w, "app.none", nil)
	if string(res.Payload) != "null" {
		t.Fatalf("payload of None = %s", res.Payload)
	}
	// Far more than a pipe holds.
	if got := payload(t, invoke(t, w, "app.length", strings.Repeat("é", 1<<20))); got != float64(1<<20) {
		t.Fatalf("length of a 2 MiB event: %v", got)
	}
}

func TestContext(t *testing.T) {
	t.Parallel()
	w := start(t, map[string]string{"ctx.py": `
import os, sys, time

def handler(event, context):
    r1 = context.get_remaining_time_in_millis()
    time.sleep(0.05)
    r2 = context.get_remaining_time_in_millis()
    return {
        "request_id": context.aws_request_id,
        "function_name": context.function_name,
        "function_version": context.function_version,
        "memory": context.memory_limit_in_mb,
        "arn": context.invoked_function_arn,
        "log_group": context.log_group_name,
        "log_stream": context.log_stream_name,
        "r1": r1, "r2": r2,
        "cwd": os.getcwd(), "path0": sys.path[0],
        "nonce": os.environ.get("HOARD_WORKER_NONCE"),
    }
`})
	res, err := w.Invoke(context.Background(), Request{
		RequestID: "ctx-1", Function: "resize", Handler: "ctx.handler",
		Timeout: 5 * time.Second, MemoryLimitMB: 256,
	})
	if err != nil {
		t.Fatal(err)
	}
	got := payload(t, res).(map[string]any)
	for k, want := range map[string]any{
		"request_id": "ctx-1", "function_name": "resize", "function_version": "$LATEST",
		"memory": "256", "arn": "arn:hoard:function:testapp:resize", "log_group": "/hoard/testapp/resize",
		"nonce": nil,
	} {
		if got[k] != want {
			t.Errorf("%s = %#v, want %#v", k, got[k], want)
		}
	}
	if s, _ := got["log_stream"].(string); !strings.Contains(s, "[$LATEST]") {
		t.Errorf("log_stream = %q", s)
	}
	r1, r2 := got["r1"].(float64), got["r2"].(float64)
	if r1 > 5000 || r1 < 4000 || r2 > r1-40 {
		t.Errorf("remaining time %v then %v, want <= 5000 and decreasing by the 50 ms slept", r1, r2)
	}
	// The worker's cwd and import path are the code directory (TempDir
	// may sit behind a symlink, so compare resolved).
	code := w.cfg.CodeDir
	for _, k := range []string{"cwd", "path0"} {
		a, _ := filepath.EvalSymlinks(got[k].(string))
		b, _ := filepath.EvalSymlinks(code)
		if a != b {
			t.Errorf("%s = %v, want %s", k, got[k], code)
		}
	}
	// A context deadline sooner than the timeout is the one announced.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	res, err = w.Invoke(ctx, Request{RequestID: "ctx-2", Handler: "ctx.handler", Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if r1 := payload(t, res).(map[string]any)["r1"].(float64); r1 > 2000 {
		t.Errorf("remaining time %v with a 2 s context", r1)
	}
}

func TestLog(t *testing.T) {
	t.Parallel()
	log := newSyncLog("")
	w := start(t, map[string]string{"logs.py": `
import logging, sys

def handler(event, context):
    print("out line")
    logging.info("info line %d", 7)
    logging.getLogger("mine").warning("warned")
    sys.stderr.write("err line\n")
    print("partial", end="")
    return "ok"

def write(event, context):
    sys.stdout.write(event)

def big(event, context):
    for _ in range(2 * 1024):
        print("x" * 1023)
`}, func(c *Config) { c.Log = log })

	res := invoke(t, w, "logs.handler", nil)
	for _, want := range []string{"out line\n", "info line 7", "warned", "err line\n", "partial"} {
		if !strings.Contains(res.Log, want) {
			t.Errorf("log lacks %q:\n%s", want, res.Log)
		}
	}
	if !strings.Contains(res.Log, "[INFO]\t") || !strings.Contains(res.Log, "[WARNING]\t") {
		t.Errorf("log lines are not Lambda-formatted:\n%s", res.Log)
	}
	var reqID string
	for _, line := range strings.Split(res.Log, "\n") {
		if strings.HasPrefix(line, "[INFO]") {
			if f := strings.Split(line, "\t"); len(f) == 4 {
				reqID = f[2]
			}
		}
	}
	if !strings.HasPrefix(reqID, "req-") {
		t.Errorf("the log record's request id is %q", reqID)
	}
	if strings.Contains(res.Log, markerPrefix) || strings.Contains(log.String(), markerPrefix) {
		t.Errorf("a marker leaked into the log:\n%s", res.Log)
	}
	if !strings.Contains(log.String(), "out line\n") || !strings.Contains(log.String(), "hoard_worker: pid") {
		t.Errorf("Config.Log lacks the output:\n%s", log.String())
	}

	// Exactly what the function wrote, whether or not it ended a line
	// (a last partial line gets its newline).
	for _, c := range []struct{ in, want string }{
		{"", ""}, {"x", "x\n"}, {"x\n", "x\n"}, {"x\n\n", "x\n\n"}, {"\n", "\n"},
		{"\n\n\n", "\n\n\n"}, {"a\n\nb", "a\n\nb\n"},
	} {
		if res := invoke(t, w, "logs.write", c.in); res.Log != c.want {
			t.Errorf("wrote %q: log %q, want %q", c.in, res.Log, c.want)
		}
	}

	res = invoke(t, w, "logs.big", nil)
	if len(res.Log) > MaxLog+200 || !strings.Contains(res.Log, "log truncated") {
		t.Errorf("2 MiB of output: log of %d bytes, ends %q", len(res.Log), res.Log[max(0, len(res.Log)-100):])
	}
	if res := invoke(t, w, "logs.write", "next\n"); res.Log != "next\n" {
		t.Errorf("after a truncated log: %q", res.Log)
	}
}

func TestWarm(t *testing.T) {
	t.Parallel()
	w := start(t, map[string]string{"counter.py": `
print("importing counter")
count = 0

def handler(event, context):
    global count
    count += 1
    return count
`})
	for i := 1; i <= 3; i++ {
		res := invoke(t, w, "counter.handler", nil)
		if got := payload(t, res); got != float64(i) {
			t.Fatalf("invocation %d: count %v", i, got)
		}
		if imported := strings.Contains(res.Log, "importing counter"); imported != (i == 1) {
			t.Fatalf("invocation %d: import in the log = %v:\n%s", i, imported, res.Log)
		}
	}
}

func TestRaised(t *testing.T) {
	t.Parallel()
	w := start(t, map[string]string{"fail.py": `
def inner(x):
    raise ValueError(f"bad input {x}")

def handler(event, context):
    inner(event)
`})
	res := invoke(t, w, "fail.handler", 3)
	wantError(t, res, "ValueError", "bad input 3")
	tb := res.Error.Traceback
	if !strings.HasPrefix(tb, "Traceback") || !strings.Contains(tb, "fail.py") || !strings.Contains(tb, "in inner") {
		t.Errorf("traceback:\n%s", tb)
	}
	if strings.Contains(tb, "hoard_worker") {
		t.Errorf("traceback shows the worker's frames:\n%s", tb)
	}
	if !strings.Contains(res.Log, "[ERROR] ValueError: bad input 3") {
		t.Errorf("log lacks the error:\n%s", res.Log)
	}
	if res.Error.Error() != "ValueError: bad input 3" {
		t.Errorf("Error() = %q", res.Error.Error())
	}
}

func TestBadHandlers(t *testing.T) {
	t.Parallel()
	w := start(t, map[string]string{
		"mod.py":    "CONST = 3\n\ndef handler(event, context):\n    return 'fine'\n",
		"broken.py": "raise RuntimeError('cannot load')\n",
		"syntax.py": "def handler(:\n",
	})
	wantError(t, invoke(t, w, "nomod.handler", nil), "ImportError", "No module named 'nomod'")
	wantError(t, invoke(t, w, "mod.missing", nil), "HandlerNotFound", "'missing'")
	wantError(t, invoke(t, w, "mod.CONST", nil), "HandlerNotFound", "not callable")
	wantError(t, invoke(t, w, "nodot", nil), "MalformedHandlerName", "MODULE.FUNCTION")
	res := invoke(t, w, "broken.handler", nil)
	wantError(t, res, "ImportError", "RuntimeError: cannot load")
	if !strings.Contains(res.Error.Traceback, "broken.py") {
		t.Errorf("traceback:\n%s", res.Error.Traceback)
	}
	wantError(t, invoke(t, w, "syntax.handler", nil), "ImportError", "SyntaxError")
	if got := payload(t, invoke(t, w, "mod.handler", nil)); got != "fine" {
		t.Fatalf("payload %v", got)
	}
}

func TestNotSerializable(t *testing.T) {
	t.Parallel()
	w := start(t, map[string]string{"ser.py": `
import decimal

def a_set(event, context):
    return {1, 2}

def nan(event, context):
    return float("nan")

def dec(event, context):
    return {"price": decimal.Decimal("1.5")}
`})
	wantError(t, invoke(t, w, "ser.a_set", nil), "ResultNotSerializable", "set")
	wantError(t, invoke(t, w, "ser.nan", nil), "ResultNotSerializable", "")
	if got := payload(t, invoke(t, w, "ser.dec", nil)); !reflect.DeepEqual(got, map[string]any{"price": 1.5}) {
		t.Fatalf("payload %v", got)
	}
}

func TestSystemExit(t *testing.T) {
	t.Parallel()
	w := start(t, map[string]string{"ex.py": `
import os, sys, threading

def exit3(event, context):
    sys.exit(3)

def interrupt(event, context):
    raise KeyboardInterrupt

def pid(event, context):
    threading.Thread(target=lambda: sys.exit(1)).start()
    return os.getpid()
`})
	wantError(t, invoke(t, w, "ex.exit3", nil), "SystemExit", "3")
	wantError(t, invoke(t, w, "ex.interrupt", nil), "KeyboardInterrupt", "")
	if got := payload(t, invoke(t, w, "ex.pid", nil)); got != float64(w.Pid()) {
		t.Fatalf("pid %v, want the same worker %d", got, w.Pid())
	}
}

func TestTimeout(t *testing.T) {
	t.Parallel()
	files := map[string]string{"slow.py": `
import time

def handler(event, context):
    print("before sleep")
    time.sleep(10)
    return "woke"
`}
	w := start(t, files)
	begin := time.Now()
	_, err := w.Invoke(context.Background(), Request{RequestID: "slow", Handler: "slow.handler", Timeout: 300 * time.Millisecond})
	var te *TimeoutError
	if !errors.Is(err, ErrTimeout) || !errors.As(err, &te) {
		t.Fatalf("err = %v, want a timeout", err)
	}
	if el := time.Since(begin); el > 3*time.Second {
		t.Fatalf("timed out after %v", el)
	}
	if te.Timeout != 300*time.Millisecond || !strings.Contains(te.Log, "before sleep") {
		t.Fatalf("timeout %v, log %q", te.Timeout, te.Log)
	}
	select {
	case <-w.Done():
	default:
		t.Fatal("worker alive after a timeout")
	}
	if _, err := w.Invoke(context.Background(), Request{RequestID: "after", Handler: "slow.handler"}); !errors.Is(err, ErrExited) {
		t.Fatalf("Invoke after a timeout: %v", err)
	}

	// A context ending stops it too.
	w = start(t, files)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	_, err = w.Invoke(ctx, Request{RequestID: "cancelled", Handler: "slow.handler", Timeout: time.Minute})
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.Canceled) || !errors.As(err, &te) || !strings.Contains(te.Log, "before sleep") {
		t.Fatalf("err = %v, want a timeout caused by the cancel with the log", err)
	}
}

func TestCrash(t *testing.T) {
	t.Parallel()
	files := map[string]string{"die.py": `
import os, sys

def kill(event, context):
    print("last words")
    sys.stderr.write("on stderr too\n")
    os.kill(os.getpid(), 9)

def exit7(event, context):
    print("bye", end="")
    os._exit(7)
`}
	w := start(t, files)
	_, err := w.Invoke(context.Background(), Request{RequestID: "die", Handler: "die.kill", Timeout: 10 * time.Second})
	var ce *CrashError
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v, want a crash", err)
	}
	if ce.Signal != syscall.SIGKILL || ce.ExitCode != -1 || ce.Log != "last words\non stderr too\n" && ce.Log != "on stderr too\nlast words\n" {
		t.Fatalf("crash %+v log %q", ce, ce.Log)
	}
	if st := w.ExitState(); st == nil || st.Success() {
		t.Fatalf("exit state %v", st)
	}

	w = start(t, files)
	_, err = w.Invoke(context.Background(), Request{RequestID: "exit", Handler: "die.exit7", Timeout: 10 * time.Second})
	if !errors.As(err, &ce) || ce.Signal != 0 || ce.ExitCode != 7 || ce.Log != "bye" {
		t.Fatalf("err = %v (%+v), want exit status 7 with its log; log %q", err, ce, ce.Log)
	}
}

func TestSpoofedMarker(t *testing.T) {
	t.Parallel()
	w := start(t, map[string]string{"spoof.py": `
import os, sys

def handler(event, context):
    rid = context.aws_request_id.encode().hex()
    print("@@hoard-worker-end:" + "0" * 32 + ":" + rid)
    print("@@hoard-worker-end:" + str(os.environ.get("HOARD_WORKER_NONCE")) + ":" + rid)
    sys.stderr.write("@@hoard-worker-end:\n")
    print("after the fake markers")
    return "done"
`})
	res := invoke(t, w, "spoof.handler", nil)
	if payload(t, res) != "done" {
		t.Fatal("bad payload")
	}
	for _, want := range []string{"0000:", "None:", "@@hoard-worker-end:\n", "after the fake markers"} {
		if !strings.Contains(res.Log, want) {
			t.Errorf("log lacks %q:\n%s", want, res.Log)
		}
	}
	if strings.Contains(res.Log, string(w.marker)) {
		t.Errorf("the real marker leaked:\n%s", res.Log)
	}
}

func TestBusy(t *testing.T) {
	t.Parallel()
	log := newSyncLog("handler started")
	w := start(t, map[string]string{"busy.py": `
import time

def handler(event, context):
    print("handler started")
    time.sleep(0.5)
    return event
`}, func(c *Config) { c.Log = log })
	first := make(chan error, 1)
	go func() {
		res, err := w.Invoke(context.Background(), Request{RequestID: "one", Handler: "busy.handler", Event: json.RawMessage(`1`), Timeout: 10 * time.Second})
		if err == nil && string(res.Payload) != "1" {
			err = fmt.Errorf("payload %s", res.Payload)
		}
		first <- err
	}()
	select {
	case <-log.seen:
	case <-time.After(10 * time.Second):
		t.Fatal("the first invocation did not start")
	}
	begin := time.Now()
	if _, err := w.Invoke(context.Background(), Request{RequestID: "two", Handler: "busy.handler"}); !errors.Is(err, ErrBusy) {
		t.Fatalf("concurrent Invoke: %v, want ErrBusy", err)
	}
	if el := time.Since(begin); el > 100*time.Millisecond {
		t.Fatalf("ErrBusy took %v", el)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if got := payload(t, invoke(t, w, "busy.handler", 2)); got != 2.0 {
		t.Fatalf("payload %v", got)
	}
}

func TestClose(t *testing.T) {
	t.Parallel()
	w := start(t, map[string]string{"bg.py": `
import subprocess, threading, time

def handler(event, context):
    # Left running: a thread, and a process holding the worker's stdout.
    threading.Thread(target=time.sleep, args=(60,)).start()
    subprocess.Popen(["sleep", "60"])
    return "started"
`})
	if got := payload(t, invoke(t, w, "bg.handler", nil)); got != "started" {
		t.Fatalf("payload %v", got)
	}
	begin := time.Now()
	if err := w.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if el := time.Since(begin); el > 1500*time.Millisecond {
		t.Fatalf("Close took %v", el)
	}
	select {
	case <-w.Done():
	default:
		t.Fatal("Done not closed after Close")
	}
	if st := w.ExitState(); st == nil || !st.Success() {
		t.Fatalf("exit state %v", st)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestStartFailure is not parallel: it executes scripts it has just
// written, and a fork in a parallel test could inherit a script's open
// descriptor for a moment, failing the exec with "text file busy".
func TestStartFailure(t *testing.T) {
	dir := t.TempDir()
	script := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	dies, silent := script("dies", "echo boom >&2; exit 3"), script("silent", "echo hello; exec sleep 30")
	ctx := context.Background()
	_, err := Start(ctx, Config{Python: dies, CodeDir: dir})
	if err == nil || !strings.Contains(err.Error(), "boom") || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("a worker that dies: %v", err)
	}
	begin := time.Now()
	_, err = Start(ctx, Config{Python: silent, CodeDir: dir, StartTimeout: 300 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "not ready") || !strings.Contains(err.Error(), "hello") {
		t.Fatalf("a silent worker: %v", err)
	}
	if el := time.Since(begin); el > 3*time.Second {
		t.Fatalf("a silent worker failed after %v", el)
	}
	if _, err := Start(ctx, Config{CodeDir: filepath.Join(dir, "missing")}); err == nil {
		t.Fatal("a missing code directory started")
	}
}
