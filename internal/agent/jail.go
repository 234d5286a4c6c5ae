package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/hoard-io/hoard/internal/sandbox"
	"github.com/hoard-io/hoard/internal/worker"
)

// An instance's function runs jailed (ADR 14, docs/security.md): its
// worker is started by `hoard sandbox-init` in mount, PID, IPC and UTS
// namespaces of its own and in the instance's network namespace, as a uid
// of its own, with the runtime and code read-only and a private /tmp; its
// processes are in pids and cpu cgroups of their own. The network
// namespace holds only loopback and the cachelet's S3 socket, which the
// cachelet (in the host's namespaces, for its peers and the store) serves
// on: the function reaches its cachelet and nothing else.

// InsecureSandboxEnv names the environment variable that, set to "on",
// lets agents run functions unisolated on hosts that cannot jail them
// (Config.InsecureSandbox).
const InsecureSandboxEnv = "HOARD_INSECURE_SANDBOX"

// Jail defaults (Config).
const (
	// DefaultSandboxUIDBase is the first uid functions and cachelets run
	// as.
	DefaultSandboxUIDBase = 200000
	// DefaultSandboxUIDCount is how many uids there are, two per live
	// instance (its function's and its cachelet's).
	DefaultSandboxUIDCount = 10000
	// DefaultFunctionPIDs caps an instance's function's tasks (processes
	// and threads).
	DefaultFunctionPIDs = 512
	// DefaultFunctionCPUs caps its CPU time, in CPUs.
	DefaultFunctionCPUs = 1.0
)

// NodeUIDs is the range of sandbox uids (Config.SandboxUIDBase and
// SandboxUIDCount) of the node agent with index i (0, 1, ...) among
// several sharing one machine (`hoard up --nodes`): each its own
// DefaultSandboxUIDCount uids from DefaultSandboxUIDBase up, so that no
// two agents ever run two instances as one uid.
func NodeUIDs(i int) (base, count int) {
	return DefaultSandboxUIDBase + i*DefaultSandboxUIDCount, DefaultSandboxUIDCount
}

// jailFDs: the worker's pipes are fds 3 and 4 (package worker); the
// network namespace follows as fd 5.
const jailNetNSFD = 5

// checkIsolation runs the probe once, at New: on a host that cannot
// jail, New fails unless cfg.InsecureSandbox, in which case the agent
// says so once and runs functions unisolated.
func (a *Agent) checkIsolation(ctx context.Context) error {
	if a.cfg.Unjailed {
		a.log.Warn("sandbox: functions run WITHOUT isolation (Unjailed): they see the host's processes, files and network, as the agent's user")
		return nil
	}
	err := sandbox.Probe(ctx, a.cfg.HoardBin)
	if err == nil {
		a.jailed = true
		a.log.Info("sandbox: functions run jailed", "uids", fmt.Sprintf("%d-%d", a.cfg.SandboxUIDBase, a.cfg.SandboxUIDBase+a.cfg.SandboxUIDCount-1),
			"pids", a.cfg.FunctionPIDs, "cpus", a.cfg.FunctionCPUs)
		return nil
	}
	if !a.cfg.InsecureSandbox {
		return fmt.Errorf("agent: %w (run as root on Linux, or allow unisolated functions with --insecure-sandbox / %s=on)", err, InsecureSandboxEnv)
	}
	a.log.Warn("sandbox: functions run WITHOUT isolation: they see the host's processes, files and network, as the agent's user", "reason", err.Error())
	return nil
}

// takeUID reserves a uid for an instance's function.
func (a *Agent) takeUID() (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := range a.cfg.SandboxUIDCount {
		uid := a.cfg.SandboxUIDBase + (a.nextUID+i)%a.cfg.SandboxUIDCount
		if !a.uids[uid] {
			a.uids[uid] = true
			a.nextUID = (a.nextUID + i + 1) % a.cfg.SandboxUIDCount
			return uid, nil
		}
	}
	return 0, errors.New("agent: every sandbox uid is in use")
}

// releaseUID gives an instance's uid back.
func (a *Agent) releaseUID(uid int) {
	a.mu.Lock()
	delete(a.uids, uid)
	a.mu.Unlock()
}

// prepareJail makes the instance's network namespace and uids (one for
// its function, one for its cachelet), before its cachelet starts.
// Without jails it does nothing.
func (in *Instance) prepareJail() error {
	if !in.agent.jailed {
		return nil
	}
	uid, err := in.agent.takeUID()
	if err != nil {
		return err
	}
	in.uid = uid
	if in.cacheletUID, err = in.agent.takeUID(); err != nil {
		return err
	}
	n, err := sandbox.NewNetwork()
	if err != nil {
		return err
	}
	in.net = n
	in.jailRoot = filepath.Join(in.dir, "root")
	return os.Mkdir(in.jailRoot, 0o700)
}

// releaseJail undoes prepareJail (teardown).
func (in *Instance) releaseJail() {
	if in.net != nil {
		in.net.Close()
	}
	if in.uid != 0 {
		in.agent.releaseUID(in.uid)
	}
	if in.cacheletUID != 0 {
		in.agent.releaseUID(in.cacheletUID)
	}
}

// UIDs are the uids the instance's function and cachelet run as; 0 for
// one that runs as the agent's user (unjailed).
func (in *Instance) UIDs() (function, cachelet int) { return in.uid, in.cacheletUID }

// jail is the worker's jail.
func (in *Instance) jail() (*sandbox.Jail, error) {
	a := in.agent
	ro := sandbox.SystemPaths()
	// The interpreter (a virtualenv's link and what it points to) and
	// the worker's package, at their host paths.
	python, err := filepath.Abs(a.cfg.Python)
	if err != nil {
		return nil, err
	}
	ro = append(ro, hostPaths(filepath.Dir(filepath.Dir(python)))...)
	if real, err := filepath.EvalSymlinks(python); err == nil {
		ro = append(ro, hostPaths(filepath.Dir(filepath.Dir(real)))...)
	}
	wp, err := worker.FindWorkerPath()
	if err != nil {
		return nil, err
	}
	ro = append(ro, hostPaths(wp)...)
	// The worker joins its cgroups before anything in the jail runs.
	var cgroups []string
	oomAdj := 0
	if in.box.Enforced() {
		oomAdj = 1000 // the function first, before any process of it runs (startWorker)
		tasks, err := in.box.TaskCgroups(sandbox.TaskLimits{PIDs: a.cfg.FunctionPIDs, CPUs: a.cfg.FunctionCPUs})
		if err != nil {
			return nil, err
		}
		procs := in.box.CgroupProcs()
		if in.fn != nil {
			procs = in.fn.CgroupProcs()
		}
		cgroups = append([]string{procs}, tasks...)
	}
	files := map[string]string{jailAWSConfig: awsConfig, jailAWSCredentials: ""}
	if in.caBundle != "" {
		files[jailCABundle] = in.caBundle
	}
	return &sandbox.Jail{
		UID: in.uid, GID: in.uid, Hostname: "fn-" + in.spec.Name,
		ReadOnly: ro,
		Files:    files,
		Code:     in.code, Dir: sandbox.CodeDir, NetNSFD: jailNetNSFD, KeepFDs: []int{3, 4},
		Root: in.jailRoot, Cgroups: cgroups, OOMScoreAdj: oomAdj,
	}, nil
}

// Where the SDK's files are inside a jail.
const (
	jailAWSConfig      = "/run/hoard/aws-config"
	jailAWSCredentials = "/run/hoard/aws-credentials"
)

// workerStart is how the instance's worker is started: jailed, or as a
// plain child of the agent.
func (in *Instance) workerStart() (worker.Config, error) {
	cfg := worker.Config{
		Python: in.agent.cfg.Python, CodeDir: in.code, Env: in.workerEnv(), Log: in.logFile,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	}
	if in.net == nil {
		return cfg, nil
	}
	j, err := in.jail()
	if err != nil {
		return cfg, err
	}
	python, err := filepath.Abs(cfg.Python)
	if err != nil {
		return cfg, err
	}
	cfg.Python = python
	cfg.SysProcAttr.Cloneflags = j.Cloneflags()
	cfg.ExtraFiles = []*os.File{in.net.Namespace()} // fd 5
	hoard := in.agent.cfg.HoardBin
	cfg.Wrap = func(argv []string) ([]string, error) {
		argv = slices.Clone(argv)
		for i, a := range argv {
			if a == in.code {
				argv[i] = sandbox.CodeDir
			}
		}
		args, err := j.Args(argv)
		if err != nil {
			return nil, err
		}
		return append([]string{hoard}, args...), nil
	}
	return cfg, nil
}

// hostPaths are the paths a jail shows so that p resolves inside as it
// does on the host: every symbolic link met on the way (shown as the same
// link) and the path it finally names.
func hostPaths(p string) []string {
	var out []string
	p = filepath.Clean(p)
	for range 40 { // as the kernel's link limit
		dir, linked := "/", false
		parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
		for i, c := range parts {
			next := filepath.Join(dir, c)
			fi, err := os.Lstat(next)
			if err != nil {
				return append(out, p)
			}
			if fi.Mode()&os.ModeSymlink != 0 {
				t, err := os.Readlink(next)
				if err != nil {
					return append(out, p)
				}
				if !filepath.IsAbs(t) {
					t = filepath.Join(dir, t)
				}
				out = append(out, next)
				p = filepath.Join(append([]string{t}, parts[i+1:]...)...)
				linked = true
				break
			}
			dir = next
		}
		if !linked {
			return append(out, p)
		}
	}
	return out
}
