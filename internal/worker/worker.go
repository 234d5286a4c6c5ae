// Package worker is the node agent's side of an instance's function worker:
// the Python process (`python -m hoard_worker --code DIR`, the package in
// python/hoard_worker) that runs the application's AWS-Lambda-style
// handlers (ADR 9, "Worker protocol").
//
// The worker gets two extra pipes: fd 3 carries requests to it and fd 4
// its answers, one JSON object per line. It announces itself with
// {"type":"ready"}, then answers each {"type":"invoke"} with one
// {"type":"result"}; {"type":"shutdown"} or the end of fd 3 ends it. Its
// stdout and stderr are the functions' log, read here line by line: an
// invocation's log is what the two streams carry between its request and
// the end-of-invocation marker the worker writes on each after flushing
// them. The marker holds a per-worker random nonce, passed in
// $HOARD_WORKER_NONCE (which the worker removes from its environment), so
// what a function prints cannot end its log early; markers never reach the
// log. The worker's start-up output ends with a marker too (an empty
// request id), so none of it is taken for the first invocation's.
//
// A Worker runs one invocation at a time. A timeout (the request's, or its
// context's end) kills the worker, and so does nothing else: a worker that
// dies mid-invocation is reported as a *CrashError. Either way the log so
// far comes back, and the Worker is dead; the caller starts another.
package worker

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"
)

const (
	// MaxLog caps the log one invocation collects. Past it the log is
	// cut, and ends with a line saying how many bytes were dropped.
	MaxLog = 1 << 20

	// DefaultStartTimeout is how long Start waits for "ready" by default.
	DefaultStartTimeout = 30 * time.Second

	// closeGrace is how long Close waits for a worker asked to shut down
	// before it kills it.
	closeGrace = 2 * time.Second
	// drainGrace is how long, after the worker exits, its stdout and
	// stderr may stay open (held by processes it started) before they are
	// closed unread.
	drainGrace = 2 * time.Second
	// startLogMax caps the output kept for Start's error.
	startLogMax = 64 << 10

	// nonceEnv passes the marker nonce to the worker.
	nonceEnv = "HOARD_WORKER_NONCE"
	// markerPrefix starts an end-of-invocation marker line:
	// markerPrefix + nonce + ":" + hex(request id). python/hoard_worker
	// has the same constant.
	markerPrefix = "@@hoard-worker-end:"
)

var (
	// ErrTimeout is wrapped by the *TimeoutError of an invocation that
	// ran past its time limit or its context.
	ErrTimeout = errors.New("worker: invocation timed out")
	// ErrBusy is returned by Invoke while another invocation runs.
	ErrBusy = errors.New("worker: busy with another invocation")
	// ErrExited is returned by Invoke once the worker has exited.
	ErrExited = errors.New("worker: not running")
)

// Config configures one worker process.
type Config struct {
	// Python is the interpreter; default FindPython().
	Python string
	// CodeDir is the application's code directory: the worker's working
	// directory, and where handlers are imported from. Required.
	CodeDir string
	// Env is the worker's whole environment (AWS_ENDPOINT_URL,
	// credentials, HOARD_APP, PATH...); nil means an empty one. The
	// package adds PYTHONPATH (the directory holding hoard_worker, before
	// any PYTHONPATH in Env), PYTHONUNBUFFERED=1 and the marker nonce.
	Env []string
	// Log, when set, gets a copy of every line the worker writes on
	// stdout and stderr (the instance's log file), markers excepted.
	// Writes come from two goroutines, one at a time.
	Log io.Writer
	// StartTimeout bounds the wait for the worker's "ready"; default
	// DefaultStartTimeout.
	StartTimeout time.Duration
	// SysProcAttr is the process's attributes. Default: its own process
	// group (Setpgid). When the worker leads its own group, Kill and the
	// worker's exit kill the whole group, so processes a function started
	// do not outlive it. (Pdeathsig follows the OS thread that starts the
	// worker.)
	SysProcAttr *syscall.SysProcAttr
	// Wrap, when set, turns the worker's command line (the interpreter
	// and its arguments) into the one started instead, which runs it
	// (the node agent's jail, `hoard sandbox-init`); the worker's pipes
	// stay fds 3 and 4.
	Wrap func(argv []string) ([]string, error)
	// ExtraFiles are handed to the process after the worker's pipes, as
	// fds 5 and up.
	ExtraFiles []*os.File
}

// Request is one invocation.
type Request struct {
	// RequestID names the invocation (context.aws_request_id). Required.
	RequestID string
	// Function is the function's name (context.function_name).
	Function string
	// Handler is "module.function", imported from the code directory.
	// Required.
	Handler string
	// Event is the handler's first argument, JSON; empty means null.
	Event json.RawMessage
	// Timeout is the invocation's time limit; 0 means none but ctx's.
	Timeout time.Duration
	// MemoryLimitMB is context.memory_limit_in_mb (the sandbox, not the
	// worker, enforces it).
	MemoryLimitMB int
}

// Result is the answer to an invocation that ran to its end: the
// handler's result, or the error it raised (which is not a Go error).
type Result struct {
	// OK is true when the handler returned; Payload is then its result,
	// JSON. Otherwise Error says what went wrong.
	OK      bool
	Payload json.RawMessage
	Error   *FunctionError
	// Log is what the worker wrote on stdout and stderr during the
	// invocation, at most MaxLog bytes.
	Log string
	// Duration is the invocation's time in the worker.
	Duration time.Duration
}

// Streams, as indexes.
const (
	stdout = iota
	stderr
)

// message is one line from fd 4.
type message struct {
	Type       string          `json:"type"`
	PID        int             `json:"pid"`
	Python     string          `json:"python"`
	RequestID  string          `json:"request_id"`
	OK         bool            `json:"ok"`
	Result     json.RawMessage `json:"result"`
	Error      *FunctionError  `json:"error"`
	DurationMS float64         `json:"duration_ms"`
}

// invocation is the one in flight, shared with the reading goroutines.
type invocation struct {
	idHex    string
	log      logBuf
	marked   [2]bool
	logDone  chan struct{} // closed when both streams are marked or ended
	answer   *message
	answered chan struct{} // closed when answer is set
}

// Worker is one running worker process.
type Worker struct {
	cfg    Config
	cmd    *exec.Cmd
	pid    int
	python string
	group  bool
	reqW   *os.File // fd 3's other end
	pipes  []*os.File
	marker []byte // markerPrefix + nonce + ":"

	busy      atomic.Bool
	closeOnce sync.Once

	mu     sync.Mutex
	cur    *invocation
	ready  chan message // gets the ready message, once
	ended  [2]bool      // stdout, stderr at EOF
	exited bool

	readers sync.WaitGroup
	done    chan struct{}
	state   *os.ProcessState
}

// Validate checks the config and fills in the defaults that need no I/O
// (StartTimeout); Start finds Python and checks the code directory.
func (c *Config) Validate() error {
	if c.CodeDir == "" {
		return errors.New("worker: the code directory is required")
	}
	if c.StartTimeout < 0 {
		return errors.New("worker: StartTimeout must not be negative")
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = DefaultStartTimeout
	}
	return nil
}

// Start starts a worker and waits for it to be ready. ctx bounds the start
// only; the worker runs until Close or Kill. A worker that exits or stays
// silent past cfg.StartTimeout is an error holding its output.
func Start(ctx context.Context, cfg Config) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	codeDir, err := filepath.Abs(cfg.CodeDir)
	if err != nil {
		return nil, fmt.Errorf("worker: code directory: %w", err)
	}
	if st, err := os.Stat(codeDir); err != nil {
		return nil, fmt.Errorf("worker: code directory: %w", err)
	} else if !st.IsDir() {
		return nil, fmt.Errorf("worker: code directory %s is not a directory", codeDir)
	}
	cfg.CodeDir = codeDir
	if cfg.Python == "" {
		if cfg.Python, err = FindPython(); err != nil {
			return nil, err
		}
	}
	workerPath, err := FindWorkerPath()
	if err != nil {
		return nil, err
	}
	var nb [16]byte
	if _, err := rand.Read(nb[:]); err != nil {
		return nil, fmt.Errorf("worker: nonce: %w", err)
	}
	nonce := hex.EncodeToString(nb[:])

	// Start-up is collected as an invocation with an empty request id: the
	// worker marks the end of its start-up output before it is ready.
	boot := &invocation{log: logBuf{max: startLogMax}, logDone: make(chan struct{}), answered: make(chan struct{})}
	w := &Worker{
		cur:    boot,
		cfg:    cfg,
		marker: []byte(markerPrefix + nonce + ":"),
		ready:  make(chan message, 1),
		done:   make(chan struct{}),
	}
	// Four pipes, {read end, write end}: requests (the worker reads fd 3),
	// answers (it writes fd 4), stdout, stderr.
	var ps [4][2]*os.File
	for i := range ps {
		r, wr, err := os.Pipe()
		if err != nil {
			for _, p := range ps[:i] {
				_, _ = p[0].Close(), p[1].Close()
			}
			return nil, fmt.Errorf("worker: pipe: %w", err)
		}
		ps[i] = [2]*os.File{r, wr}
	}
	reqR, reqW := ps[0][0], ps[0][1]
	ansR, ansW := ps[1][0], ps[1][1]
	outR, outW := ps[2][0], ps[2][1]
	errR, errW := ps[3][0], ps[3][1]

	argv := []string{cfg.Python, "-m", "hoard_worker", "--code", codeDir}
	if cfg.Wrap != nil {
		if argv, err = cfg.Wrap(argv); err != nil {
			for _, p := range ps {
				_, _ = p[0].Close(), p[1].Close()
			}
			return nil, fmt.Errorf("worker: %w", err)
		}
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = codeDir
	cmd.Env = workerEnv(cfg.Env, workerPath, nonce)
	cmd.Stdout, cmd.Stderr = outW, errW
	cmd.ExtraFiles = append([]*os.File{reqR, ansW}, cfg.ExtraFiles...) // fds 3, 4, then cfg's
	cmd.SysProcAttr = cfg.SysProcAttr
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	w.group = cmd.SysProcAttr.Setpgid && cmd.SysProcAttr.Pgid == 0
	err = cmd.Start()
	// The worker's ends are its own now.
	for _, f := range []*os.File{reqR, ansW, outW, errW} {
		_ = f.Close()
	}
	if err != nil {
		for _, f := range []*os.File{reqW, ansR, outR, errR} {
			_ = f.Close()
		}
		return nil, fmt.Errorf("worker: start %s: %w", cfg.Python, err)
	}
	w.cmd, w.pid, w.reqW = cmd, cmd.Process.Pid, reqW
	w.pipes = []*os.File{ansR, outR, errR}

	w.readers.Add(3)
	go w.readLog(outR, stdout)
	go w.readLog(errR, stderr)
	go w.readAnswers(ansR)
	go w.wait()

	timer := time.NewTimer(cfg.StartTimeout)
	defer timer.Stop()
	fail := func(why string) (*Worker, error) {
		_ = w.Kill()
		w.mu.Lock()
		out := strings.TrimRight(boot.log.String(), "\n")
		w.cur = nil
		w.mu.Unlock()
		if out == "" {
			out = "(no output)"
		}
		return nil, fmt.Errorf("worker: %s; its output:\n%s", why, out)
	}
	var ready *message
	logDone := boot.logDone
	for ready == nil || logDone != nil {
		select {
		case m := <-w.ready:
			ready = &m
		case <-logDone:
			logDone = nil
		case <-w.done:
			return fail(fmt.Sprintf("%s exited (%v) before it was ready", cfg.Python, w.state))
		case <-timer.C:
			return fail(fmt.Sprintf("not ready after %v", cfg.StartTimeout))
		case <-ctx.Done():
			return fail(fmt.Sprintf("start abandoned: %v", ctx.Err()))
		}
	}
	w.mu.Lock()
	w.cur = nil
	w.mu.Unlock()
	w.python = ready.Python
	return w, nil
}

// workerEnv is env with the package's variables set.
func workerEnv(env []string, workerPath, nonce string) []string {
	out := make([]string, 0, len(env)+3)
	pythonPath := workerPath
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "PYTHONPATH":
			if v != "" {
				pythonPath = workerPath + string(os.PathListSeparator) + v
			}
		case "PYTHONUNBUFFERED", nonceEnv:
		default:
			out = append(out, kv)
		}
	}
	return append(out, "PYTHONPATH="+pythonPath, "PYTHONUNBUFFERED=1", nonceEnv+"="+nonce)
}

// Pid is the worker's process id.
func (w *Worker) Pid() int { return w.pid }

// Python is the interpreter's version, as the worker reported it.
func (w *Worker) Python() string { return w.python }

// Done is closed when the worker has exited and its output is read.
func (w *Worker) Done() <-chan struct{} { return w.done }

// ExitState is how the worker exited; nil before Done is closed.
func (w *Worker) ExitState() *os.ProcessState {
	select {
	case <-w.done:
		return w.state
	default:
		return nil
	}
}

// Invoke runs one invocation and returns its Result, whether the handler
// returned or raised. Its errors: ErrBusy while another invocation runs
// (at once); ErrExited once the worker is gone; a *TimeoutError when it
// ran past req.Timeout or ctx ended (ctx ended before the request was sent
// is ctx's error, and the worker lives on); a *CrashError when the worker
// died. After a *TimeoutError or *CrashError, and after a malformed
// answer, the worker is dead.
func (w *Worker) Invoke(ctx context.Context, req Request) (*Result, error) {
	if !w.busy.CompareAndSwap(false, true) {
		return nil, ErrBusy
	}
	defer w.busy.Store(false)
	if req.RequestID == "" {
		return nil, errors.New("worker: request id required")
	}
	if !utf8.ValidString(req.RequestID) {
		// It would not come back the same through JSON.
		return nil, errors.New("worker: request id is not UTF-8")
	}
	if req.Handler == "" {
		return nil, errors.New("worker: handler required")
	}
	select {
	case <-w.done:
		return nil, ErrExited
	default:
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}

	start := time.Now()
	var deadline time.Time
	if req.Timeout > 0 {
		deadline = start.Add(req.Timeout)
	}
	if d, ok := ctx.Deadline(); ok && (deadline.IsZero() || d.Before(deadline)) {
		deadline = d
	}
	var timeoutMS int64
	var timeout <-chan time.Time
	if !deadline.IsZero() {
		left := deadline.Sub(start)
		timeoutMS = max(int64((left+time.Millisecond-1)/time.Millisecond), 1)
		t := time.NewTimer(left)
		defer t.Stop()
		timeout = t.C
	}
	event := req.Event
	if len(event) == 0 {
		event = json.RawMessage("null")
	}
	line, err := json.Marshal(struct {
		Type          string          `json:"type"`
		RequestID     string          `json:"request_id"`
		Function      string          `json:"function"`
		Handler       string          `json:"handler"`
		Event         json.RawMessage `json:"event"`
		TimeoutMS     int64           `json:"timeout_ms"`
		MemoryLimitMB int             `json:"memory_limit_mb"`
	}{"invoke", req.RequestID, req.Function, req.Handler, event, timeoutMS, req.MemoryLimitMB})
	if err != nil {
		return nil, fmt.Errorf("worker: event: %w", err)
	}
	line = append(line, '\n')

	inv := &invocation{
		idHex:    hex.EncodeToString([]byte(req.RequestID)),
		log:      logBuf{max: MaxLog},
		logDone:  make(chan struct{}),
		answered: make(chan struct{}),
	}
	w.mu.Lock()
	w.cur = inv
	w.checkLogDone()
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.cur = nil
		w.mu.Unlock()
	}()
	logString := func() string {
		w.mu.Lock()
		defer w.mu.Unlock()
		return inv.log.String()
	}

	// Written aside: a worker not reading must not hold Invoke past its
	// deadline.
	wrote := make(chan error, 1)
	go func() {
		_, err := w.reqW.Write(line)
		wrote <- err
	}()

	answered, logDone := inv.answered, inv.logDone
	for answered != nil || logDone != nil {
		select {
		case err := <-wrote:
			wrote = nil
			if err != nil {
				// The worker closed fd 3: it is exiting.
				select {
				case <-w.done:
				case <-time.After(drainGrace):
					_ = w.Kill()
				}
				return nil, w.crash(logString())
			}
		case <-answered:
			answered = nil
		case <-logDone:
			logDone = nil
		case <-w.done:
			// Its output and answers are all read now.
			select {
			case <-inv.answered:
				// It answered, then exited: the answer stands.
				answered, logDone = nil, nil
				continue
			default:
			}
			return nil, w.crash(logString())
		case <-timeout:
			_ = w.Kill()
			return nil, &TimeoutError{Timeout: req.Timeout, Log: logString()}
		case <-ctx.Done():
			_ = w.Kill()
			return nil, &TimeoutError{Timeout: req.Timeout, Cause: ctx.Err(), Log: logString()}
		}
	}

	w.mu.Lock()
	m := inv.answer
	log := inv.log.String()
	w.mu.Unlock()
	if m.RequestID != req.RequestID {
		_ = w.Kill()
		return nil, fmt.Errorf("worker: answer for request %q to request %q; worker killed", m.RequestID, req.RequestID)
	}
	res := &Result{
		OK:       m.OK,
		Log:      log,
		Duration: time.Duration(m.DurationMS * float64(time.Millisecond)),
	}
	switch {
	case m.OK:
		res.Payload = m.Result
		if len(res.Payload) == 0 {
			res.Payload = json.RawMessage("null")
		}
	case m.Error != nil:
		res.Error = m.Error
	default:
		res.Error = &FunctionError{Type: "Unknown", Message: "the worker answered neither a result nor an error"}
	}
	return res, nil
}

// crash is the *CrashError of the exited worker.
func (w *Worker) crash(log string) error {
	e := &CrashError{ExitCode: -1, Log: log}
	if st := w.state; st != nil {
		if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			e.Signal = ws.Signal()
		} else {
			e.ExitCode = st.ExitCode()
		}
	}
	return e
}

// Close asks the worker to exit, kills it if it has not after a grace of
// 2 s, and waits for it. It is an error when the worker had to be killed,
// or exited with a failure status, in answer to Close; a worker already
// dead is not.
func (w *Worker) Close() error {
	select {
	case <-w.done:
		return nil
	default:
	}
	var err error
	w.closeOnce.Do(func() {
		// Shutdown, then the end of fd 3 in case it is not read; aside,
		// as a worker that does not read must not hold Close up.
		go func() {
			_, _ = w.reqW.Write([]byte(`{"type":"shutdown"}` + "\n"))
			_ = w.reqW.Close()
		}()
		t := time.NewTimer(closeGrace)
		defer t.Stop()
		select {
		case <-w.done:
			if !w.state.Success() {
				err = fmt.Errorf("worker: exited with %v on shutdown", w.state)
			}
		case <-t.C:
			_ = w.Kill()
			err = fmt.Errorf("worker: did not exit within %v of shutdown; killed", closeGrace)
		}
	})
	<-w.done
	return err
}

// Kill kills the worker (its process group, when it leads one) with
// SIGKILL and waits for it to exit and its output to be read.
func (w *Worker) Kill() error {
	w.mu.Lock()
	if !w.exited {
		if w.group {
			_ = syscall.Kill(-w.pid, syscall.SIGKILL)
		}
		_ = w.cmd.Process.Kill()
	}
	w.mu.Unlock()
	<-w.done
	return nil
}

// wait reaps the worker, lets its output drain, and closes done.
func (w *Worker) wait() {
	_ = w.cmd.Wait()
	w.mu.Lock()
	w.exited = true
	w.mu.Unlock()
	if w.group {
		// What the function left running goes with it. The group
		// outlives its leader while it has members, so its id is not
		// reused meanwhile.
		_ = syscall.Kill(-w.pid, syscall.SIGKILL)
	}
	drained := make(chan struct{})
	go func() {
		w.readers.Wait()
		close(drained)
	}()
	t := time.NewTimer(drainGrace)
	select {
	case <-drained:
	case <-t.C:
		// Held open by a process that escaped: stop reading.
		for _, f := range w.pipes {
			_ = f.Close()
		}
		<-drained
	}
	t.Stop()
	for _, f := range w.pipes {
		_ = f.Close()
	}
	_ = w.reqW.Close()
	w.state = w.cmd.ProcessState
	close(w.done)
}

// readAnswers reads fd 4: the ready message, then answers.
func (w *Worker) readAnswers(f *os.File) {
	defer w.readers.Done()
	r := bufio.NewReaderSize(f, 64<<10)
	for {
		line, err := r.ReadBytes('\n')
		if line = bytes.TrimSpace(line); len(line) > 0 {
			var m message
			if jerr := json.Unmarshal(line, &m); jerr != nil {
				w.note(fmt.Sprintf("malformed message from the worker (%v): %.200q", jerr, line))
			} else {
				w.deliver(m)
			}
		}
		if err != nil {
			return
		}
	}
}

// deliver hands a message from fd 4 to whoever waits for it.
func (w *Worker) deliver(m message) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch m.Type {
	case "ready":
		select {
		case w.ready <- m:
		default:
		}
		return
	case "result":
		if inv := w.cur; inv != nil && inv.answer == nil {
			inv.answer = &m
			close(inv.answered)
			return
		}
	}
	w.noteLocked(fmt.Sprintf("unexpected %q message from the worker (request %q); dropped", m.Type, m.RequestID))
}

// note writes a line of the package's own to the Log.
func (w *Worker) note(s string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.noteLocked(s)
}

func (w *Worker) noteLocked(s string) {
	if w.cfg.Log != nil {
		_, _ = io.WriteString(w.cfg.Log, "[hoard worker] "+s+"\n")
	}
}
