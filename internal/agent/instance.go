package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/appspec"
	"github.com/hoard-io/hoard/internal/bytesize"
	"github.com/hoard-io/hoard/internal/cacheconfig"
	"github.com/hoard-io/hoard/internal/control"
	"github.com/hoard-io/hoard/internal/sandbox"
	"github.com/hoard-io/hoard/internal/worker"
)

// Instance is one loaded instance of an application.
type Instance struct {
	agent   *Agent
	req     api.StartRequest
	spec    *appspec.Spec
	started time.Time

	dir, code, logPath string
	logFile            *os.File
	box                *sandbox.Sandbox
	fn                 *sandbox.Function // the function's own cgroup in box; nil where there is none (sizing.go)
	cachelet           *exec.Cmd
	cacheletDone       chan struct{}
	ctl                *control.Client // the cachelet's control API; set under mu (control())
	ctlDir             string          // the control socket's own directory, when not dir
	ctlSocket          string          // the control socket; set under mu
	ready              control.Ready
	net                *sandbox.Network // the function's network; nil unjailed (jail.go)
	uid                int              // the function's uid; 0 unjailed
	cacheletUID        int              // the cachelet's uid; 0 unjailed (it runs as the agent's)
	disk               *control.Disk    // the application's disk tier on this node; nil: none
	diskGID            int              // its group, which the cachelet is given; 0: none
	jailRoot           string           // where its jail's root is mounted
	startDur           time.Duration

	invokeMu sync.Mutex // one invocation at a time
	// stats is the cachelet's counters after the last invocation (or at
	// load), which the next one's reads are counted from; statsOK says
	// whether it is current. Guarded by invokeMu (cachelet.go).
	stats   control.Stats
	statsOK bool
	// noCache is the admission last set on the cachelet (false: admits,
	// as it starts). Guarded by invokeMu.
	noCache bool
	sz      sizing // guarded by invokeMu

	// drainingLog: a drain of its dead cachelet's durable log runs
	// (durable.go); set under the agent's diskMu.
	drainingLog atomic.Bool
	// stopRetries is closed when the instance is torn down again (an
	// explicit stop) while its first teardown still retries a drain: the
	// retries stop waiting, and the log stays for the next instance.
	stopRetries     chan struct{}
	stopRetriesOnce sync.Once

	mu          sync.Mutex
	state       string
	reason      string
	worker      *worker.Worker
	lastUsed    time.Time
	invocations int64
	tornDown    bool
	done        chan struct{}

	mem           *memoryDaemon         // nil without one (memory.go)
	lastMem       *api.InvocationMemory // the last invocation's sizing (sizing.go)
	prewarm       api.PrewarmStatus
	caBundle      string             // the CA bundle (PEM) functions trust their cachelet by; "" without TLS
	cacheCounters api.CacheCounters  // as of the last stats read
	prewarmStop   context.CancelFunc // ends the pre-warm run
	batchStop     context.CancelFunc // ends the pre-warm batch in flight
}

// load brings the instance up; on error the caller tears it down.
func (in *Instance) load(ctx context.Context) error {
	a := in.agent
	in.dir = filepath.Join(a.cfg.Dir, "instances", in.req.ID)
	os.RemoveAll(in.dir)
	if err := os.MkdirAll(in.dir, 0o700); err != nil {
		return err
	}
	in.logPath = filepath.Join(a.cfg.LogDir, in.req.ID+".log")
	f, err := os.OpenFile(in.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	in.logFile = f
	if err := writeFile(filepath.Join(in.dir, "aws-config"), awsConfig); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(in.dir, "aws-credentials"), ""); err != nil {
		return err
	}
	code, err := a.code(ctx, in.req.Package, treeChain(in.req))
	if err != nil {
		return err
	}
	in.code = code
	box, err := a.cfg.Sandboxes.Create("hoard-"+in.req.ID, in.spec.InstanceMemory())
	if err != nil {
		return fmt.Errorf("making the sandbox: %w", err)
	}
	in.box = box
	in.sz.base = box.Limit()
	switch fn, err := box.Function(box.Limit()); {
	case err == nil:
		in.fn = fn
	case !errors.Is(err, sandbox.ErrNotSupported):
		return fmt.Errorf("making the function's cgroup: %w", err)
	}
	if err := in.prepareJail(); err != nil {
		return fmt.Errorf("making the function's jail: %w", err)
	}
	if err := in.startCachelet(ctx); err != nil {
		return err
	}
	w, err := in.startWorker(ctx)
	if err != nil {
		return err
	}
	in.mu.Lock()
	in.worker = w
	in.state = api.StateIdle
	in.lastUsed = time.Now()
	in.startDur = time.Since(in.started)
	in.mu.Unlock()
	in.startMemoryDaemon()
	a.log.Info("instance loaded", "instance", in.req.ID, "app", in.spec.Name,
		"memory_limit", bytesize.Format(box.Limit()), "enforced", box.Enforced(), "took", in.startDur.Round(time.Millisecond))
	return nil
}

// Info describes the instance.
func (in *Instance) Info() api.InstanceInfo {
	in.mu.Lock()
	info := api.InstanceInfo{
		ID: in.req.ID, App: in.req.App, Rev: in.req.Package.SHA256, Agent: in.agent.cfg.ID,
		State: in.state, Reason: in.reason,
		Endpoint: in.ready.Endpoint, MetricsURL: in.ready.MetricsURL, PeerAddr: in.ready.PeerAddr,
		StartedAt: in.started, LastUsed: in.lastUsed, StartMillis: float64(in.startDur.Microseconds()) / 1e3,
		Invocations: in.invocations, Prewarm: in.prewarm,
	}
	box, state, ctl := in.box, in.state, in.ctl
	in.mu.Unlock()
	if state == api.StateIdle || state == api.StateBusy {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if s, err := ctl.Stats(ctx); err == nil {
			in.setCounters(s)
		}
		cancel()
	}
	in.mu.Lock()
	info.Cache = in.cacheCounters
	in.mu.Unlock()
	if box != nil {
		info.MemoryLimit, info.Enforced = box.Limit(), box.Enforced()
		info.MemoryUsage, _ = box.Usage()
		info.MemoryWorkingSet, _ = box.WorkingSet()
		info.OOMKills = in.oomKills() // the function's cgroup's with the sandbox's
	}
	info.MemoryDaemon = in.memoryInfo()
	if in.fn != nil {
		info.FunctionLimit, _ = in.fn.Limit()
	}
	if m, ok := in.agent.codeMount(in.req.Package.SHA256); ok {
		info.Code = &api.CodeInfo{Bytes: m.PackageBytes, Held: m.Held, FromParent: m.FromParent, FromStore: m.FromStore, Pushed: m.Pushed}
		if !m.Whole.IsZero() {
			info.Code.Whole = &m.Whole
		}
	}
	in.mu.Lock()
	if in.lastMem != nil {
		m := *in.lastMem
		info.LastMemory = &m
	}
	in.mu.Unlock()
	return info
}

// ErrBusy is returned by Invoke while another invocation runs.
var ErrBusy = errors.New("agent: the instance is busy")

// ErrUnavailable is returned by Invoke on an instance that is not loaded.
var ErrUnavailable = errors.New("agent: the instance is not available")

// Invoke runs one function. A function's own failure (an exception, a
// timeout, running out of memory) is an api.InvokeResult with OK false and
// the function's log; an error means the invocation did not run.
func (in *Instance) Invoke(ctx context.Context, req api.InvokeRequest) (*api.InvokeResult, error) {
	if !in.invokeMu.TryLock() {
		return nil, ErrBusy
	}
	defer in.invokeMu.Unlock()
	fn := in.spec.Functions[req.Function]
	if fn == nil {
		return nil, fmt.Errorf("agent: application %s has no function %q", in.spec.Name, req.Function)
	}
	in.mu.Lock()
	if in.state != api.StateIdle {
		state := in.state
		in.mu.Unlock()
		return nil, fmt.Errorf("%w (%s)", ErrUnavailable, state)
	}
	in.state = api.StateBusy
	in.pausePrewarmLocked()
	w := in.worker
	in.invocations++
	in.mu.Unlock()

	a := in.agent
	res := &api.InvokeResult{RequestID: req.RequestID, Instance: in.req.ID}
	in.readBefore(ctx) // normally a no-op: the last invocation's snapshot
	in.setAdmission(ctx, req.NoCache)
	booked := int64(fn.Memory)
	res.Memory = in.size(ctx, booked, req.MemoryLimit)
	predictedLimit := res.Memory.Limit
	oomBefore := in.oomKills()
	start := time.Now()
	event := req.Event
	if len(event) == 0 {
		event = []byte("{}")
	}
	wreq := worker.Request{
		RequestID: req.RequestID, Function: req.Function, Handler: fn.Handler, Event: event,
		Timeout: fn.Timeout.D(), MemoryLimitMB: int(fn.Memory >> 20),
	}
	var wres *worker.Result
	var werr error
	if res.Memory.Sized {
		stop := make(chan struct{})
		lent := in.watch(stop, booked)
		wres, werr = w.Invoke(ctx, wreq)
		close(stop)
		res.Memory.Raised = <-lent
	} else {
		wres, werr = w.Invoke(ctx, wreq)
	}
	res.Memory.Peak = in.peak()
	var crash *worker.CrashError
	if res.Memory.Sized && errors.As(werr, &crash) && in.oomKills() > oomBefore {
		// Killed under the predicted size: run again at the booked size,
		// with a new worker, once.
		a.log.Info("sizing: killed for memory under the predicted size; running again at the booked size",
			"instance", in.req.ID, "function", req.Function, "limit", bytesize.Format(res.Memory.Limit), "peak", bytesize.Format(res.Memory.Peak))
		a.m.oomRetries.Inc()
		<-w.Done()
		nw, err := in.startWorker(context.WithoutCancel(ctx))
		if err == nil {
			in.mu.Lock()
			in.worker = nw
			in.mu.Unlock()
			w = nw
			in.unsize(ctx)
			res.Memory.Retried, res.Memory.Sized, res.Memory.CacheGiven = true, false, 0
			res.Memory.Limit = in.box.Limit()
			if in.fn != nil {
				_ = in.fn.ResetPeak()
			}
			oomBefore = in.oomKills()
			start = time.Now()
			wres, werr = w.Invoke(ctx, wreq)
			res.Memory.Peak = max(res.Memory.Peak, in.peak())
		} else {
			a.log.Error("replacing a worker killed for memory failed", "instance", in.req.ID, "err", err)
		}
	}
	res.DurationMS = float64(time.Since(start).Microseconds()) / 1e3
	var timeout *worker.TimeoutError
	switch {
	case werr == nil:
		res.OK, res.Result, res.Log = wres.OK, wres.Payload, wres.Log
		if wres.Error != nil {
			res.Error = &api.ErrorInfo{Type: wres.Error.Type, Message: wres.Error.Message, Traceback: wres.Error.Traceback}
		}
	case errors.As(werr, &timeout):
		res.Log = timeout.Log
		res.Error = &api.ErrorInfo{Type: "Timeout", Message: fmt.Sprintf("the function ran longer than its timeout of %s and was stopped", fn.Timeout.D())}
		a.m.failures.WithLabelValues("timeout").Inc()
	case errors.As(werr, &crash):
		res.Log = crash.Log
		if in.oomKills() > oomBefore {
			split := fmt.Sprintf("%s booked + %s cache", bytesize.Format(int64(fn.Memory)), bytesize.Format(int64(in.spec.Cache.Budget)))
			if in.spec.Cache.Shared {
				split = fmt.Sprintf("%s booked, shared with a cache of up to %s", bytesize.Format(int64(fn.Memory)), bytesize.Format(int64(in.spec.Cache.Budget)))
			}
			split += " + " + bytesize.Format(cacheconfig.DefaultMemoryOverhead) + " for the cachelet's process"
			res.Error = &api.ErrorInfo{Type: "OutOfMemory", Message: fmt.Sprintf(
				"the function exceeded the instance's memory limit (%s: %s) and was killed", bytesize.Format(in.box.Limit()), split)}
			a.m.failures.WithLabelValues("oom").Inc()
		} else {
			res.Error = &api.ErrorInfo{Type: "Crashed", Message: "the function's worker died: " + crash.Error()}
			a.m.failures.WithLabelValues("crash").Inc()
		}
	default:
		res.Error = &api.ErrorInfo{Type: "InstanceUnavailable", Message: werr.Error()}
	}
	res.Reads, res.IO, res.NotAdmitted = in.invocationReads(context.WithoutCancel(ctx))
	if m := res.Memory; m.Sized || m.Retried {
		// What the prediction left out, for the slack pool's size: the
		// peak over the limit it started under (a retry's whole peak
		// above the predicted limit).
		a.m.slackSize.Set(float64(a.slack.observe(m.Peak - predictedLimit)))
	}
	last := *res.Memory
	in.mu.Lock()
	in.lastMem = &last
	in.mu.Unlock()
	// A worker that died (timeout, OOM, crash) is replaced; the instance
	// keeps its cachelet and what it caches.
	next := api.StateIdle
	select {
	case <-w.Done():
		res.Replaced = true
		nw, err := in.startWorker(context.WithoutCancel(ctx))
		if err != nil {
			a.log.Error("replacing a dead worker failed", "instance", in.req.ID, "err", err)
			next = api.StateDead
			in.mu.Lock()
			in.reason = "its worker could not be restarted: " + err.Error()
			in.mu.Unlock()
		} else {
			in.mu.Lock()
			in.worker = nw
			in.mu.Unlock()
		}
	default:
	}
	in.mu.Lock()
	if in.state == api.StateBusy {
		in.state = next
	}
	in.lastUsed = time.Now()
	in.mu.Unlock()
	if next == api.StateDead {
		go func() { in.teardown(in.reason); a.forget(in.req.ID) }()
	}
	return res, nil
}

// Drop drops the application's objects under bucket/prefix from this
// instance's cachelet, asking it over the control API. Writes not yet
// persisted stay.
func (in *Instance) Drop(ctx context.Context, bucket, prefix string) (int, error) {
	ctl := in.control()
	if ctl == nil {
		return 0, ErrUnavailable
	}
	return ctl.Drop(ctx, bucket, prefix)
}

// CacheSettings asks the instance's cachelet which cache settings it
// applied: the spec's, as the configuration document carried them.
func (in *Instance) CacheSettings(ctx context.Context) (cacheconfig.Settings, error) {
	ctl := in.control()
	if ctl == nil {
		return cacheconfig.Settings{}, ErrUnavailable
	}
	return ctl.Config(ctx)
}

// cacheletExited is called when the cachelet process ends; unless the
// instance is being unloaded, the instance is dead.
func (in *Instance) cacheletExited(err error) {
	in.mu.Lock()
	if in.tornDown || in.state == api.StateStarting {
		in.mu.Unlock()
		return
	}
	in.state = api.StateDead
	in.reason = fmt.Sprintf("its cachelet exited: %v", err)
	in.mu.Unlock()
	in.agent.log.Error("cachelet exited", "instance", in.req.ID, "err", err)
	go func() { in.teardown(in.reason); in.agent.forget(in.req.ID) }()
}

// teardown stops the worker and the cachelet (SIGTERM: it leaves its
// ring and delivers what it holds for the store; SIGKILL after 30 s) and
// removes the sandbox. It is idempotent.
func (in *Instance) teardown(reason string) {
	in.mu.Lock()
	if in.tornDown {
		in.mu.Unlock()
		in.stopRetriesOnce.Do(func() { close(in.stopRetriesCh()) })
		<-in.done
		return
	}
	in.tornDown = true
	cacheletAlive := in.state != api.StateDead && in.state != api.StateStarting
	if in.state != api.StateDead {
		in.state = api.StateDead
		in.reason = reason
	}
	if in.prewarmStop != nil {
		in.prewarmStop()
	}
	w := in.worker
	in.mu.Unlock()
	defer close(in.done)
	in.stopMemoryDaemon()
	if cacheletAlive {
		in.saveAccessMetadata()
	}
	if w != nil {
		w.Close()
	}
	if in.cachelet != nil {
		_ = in.cachelet.Process.Signal(syscall.SIGTERM)
		select {
		case <-in.cacheletDone:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-in.cachelet.Process.Pid, syscall.SIGKILL)
			<-in.cacheletDone
		}
	}
	in.settleLog()
	if in.box != nil {
		if err := in.box.Delete(); err != nil {
			in.agent.log.Warn("removing a sandbox", "instance", in.req.ID, "err", err)
		}
	}
	in.releaseJail()
	// What the slack pool lent the sandbox goes back with it.
	in.invokeMu.Lock()
	if in.sz.lent > 0 {
		in.agent.slack.give(in.sz.lent)
		in.agent.m.slackFree.Set(float64(in.agent.slack.Free()))
		in.sz.lent = 0
	}
	in.invokeMu.Unlock()
	if in.logFile != nil {
		in.logFile.Close()
	}
	if ctl := in.control(); ctl != nil {
		ctl.Close()
	}
	if in.dir != "" {
		os.RemoveAll(in.dir)
	}
	if in.ctlDir != "" {
		os.RemoveAll(in.ctlDir)
	}
	in.agent.log.Info("instance unloaded", "instance", in.req.ID, "app", in.req.App, "reason", reason)
}
