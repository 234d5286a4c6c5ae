// Package sandbox gives each application instance a memory sandbox: a
// memory cgroup with a hard limit that holds the instance's processes (its
// cachelet and its Python worker). A process that allocates past the limit
// is killed by the kernel's OOM killer, and the kill is counted in the
// cgroup, so the node agent can tell an OOM kill from any other death.
//
// A Manager finds what the host offers, once, when it is made:
//
//   - "cgroup2": the unified hierarchy with the memory controller. Sandboxes
//     are child cgroups of the process's own cgroup. If that cgroup cannot
//     give its children the memory controller because the process sits in
//     it (cgroup v2's "no internal processes" rule), and it is the only
//     process there, it first moves itself into a leaf child "<root>.self".
//   - "cgroup1": the v1 memory controller (a legacy or hybrid host).
//     Sandboxes are child cgroups of the process's own memory cgroup.
//   - "none": neither is usable (not Linux, not mounted, or no permission).
//     The Manager logs why, once, and its sandboxes only record their limit:
//     nothing is enforced or killed, and no OOM kills are counted (see
//     Sandbox.Enforced).
//
// Sandboxes are made with swap disabled where the host allows it (v2
// memory.swap.max=0; v1 memory.memsw.limit_in_bytes equal to the limit and
// memory.swappiness=0), so a process over the limit is killed rather than
// swapped out, and with the kernel's default OOM behaviour: the largest
// process in the sandbox is killed, not the whole group (v2 memory.oom.group=0,
// v1 oom_kill_disable=0). Sandbox.ProtectFromOOM keeps the cachelet out of
// reach, or Sandbox.PreferForOOM points the killer at the worker, so an
// over-allocating function is what gets killed.
//
// Sandboxes are named "<root>-<name>" below the process's own cgroup, so two
// agents on one host, or the tests, do not collide as long as their roots
// differ. The package is built on github.com/containerd/cgroups/v3.
package sandbox

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Modes, as Manager.Mode reports them.
const (
	// ModeCgroup2: sandboxes are cgroup v2 (unified hierarchy) cgroups.
	ModeCgroup2 = "cgroup2"
	// ModeCgroup1: sandboxes are cgroup v1 memory cgroups.
	ModeCgroup1 = "cgroup1"
	// ModeNone: no usable memory cgroup; limits are not enforced.
	ModeNone = "none"
)

// Limits on names, so that "<root>-<name>" stays a valid directory name.
const (
	// MaxRootLen is the longest root NewManager accepts.
	MaxRootLen = 64
	// MaxNameLen is the longest sandbox name Create accepts.
	MaxNameLen = 128
)

// DeleteTimeout is how long Sandbox.Delete waits for the processes it
// killed to leave the cgroup before it gives up.
const DeleteTimeout = 5 * time.Second

// Sentinel errors.
var (
	// ErrDeleted: the sandbox was deleted. Add, Procs, OOMKills, Usage and
	// SetLimit return it; Delete again is a no-op.
	ErrDeleted = errors.New("sandbox: deleted")
	// ErrExists: a sandbox of that name is live in this Manager, or its
	// cgroup exists and holds processes.
	ErrExists = errors.New("sandbox: already exists")
)

// Manager makes the sandboxes of one node agent. Its methods are safe for
// concurrent use.
type Manager struct {
	root   string
	log    *slog.Logger
	mode   string
	reason string  // why the mode is "none"; empty otherwise
	be     backend // nil in mode "none"

	mu   sync.Mutex
	live map[string]*Sandbox
}

// backend is a cgroup implementation (v1 or v2).
type backend interface {
	// mode is ModeCgroup1 or ModeCgroup2.
	mode() string
	// parent is the directory sandboxes are made in.
	parent() string
	// create makes the cgroup dir below parent with the given hard limit.
	// An existing directory is an error wrapping os.ErrExist.
	create(dir string, limit int64) (group, error)
	// open returns the existing cgroup dir below parent.
	open(dir string) (group, error)
}

// group is one cgroup made by a backend.
type group interface {
	path() string
	add(pid int) error
	setLimit(limit int64) error
	usage() (int64, error)
	oomKills() (uint64, error)
	// procs lists the processes in the cgroup and its descendants.
	procs() ([]int, error)
	// kill sends SIGKILL to every process in the cgroup (pids is what
	// procs just returned).
	kill(pids []int) error
	// remove removes the (empty) cgroup.
	remove() error
}

// option configures newManager; the tests use it.
type option func(*managerConfig)

type managerConfig struct {
	forceNone string // non-empty: mode "none" with this reason
}

// withNone makes the Manager run in mode "none", for the given reason.
func withNone(reason string) option {
	return func(c *managerConfig) { c.forceNone = reason }
}

// NewManager finds the host's memory cgroups (the v1 memory controller
// where one is mounted, as on legacy and hybrid hosts; else cgroup v2 with
// the memory controller; else none), checks it may make one by making and
// removing a probe cgroup, and returns a Manager that makes sandboxes
// below the calling process's own cgroup, named "<root>-<name>". root must
// be 1 to MaxRootLen characters of [a-z0-9-_.] (e.g. "hoard"). A nil log
// discards. NewManager logs the mode it settled on once; a host without
// usable memory cgroups is not an error (the mode is "none", logged with the
// reason as a warning).
func NewManager(root string, log *slog.Logger) (*Manager, error) {
	return newManager(root, log)
}

func newManager(root string, log *slog.Logger, opts ...option) (*Manager, error) {
	if err := validName("root", root, MaxRootLen); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var cfg managerConfig
	for _, o := range opts {
		o(&cfg)
	}
	m := &Manager{root: root, log: log, live: map[string]*Sandbox{}}
	if cfg.forceNone != "" {
		m.mode, m.reason = ModeNone, cfg.forceNone
	} else {
		m.be, m.reason = detect(root, log)
		m.mode = ModeNone
		if m.be != nil {
			m.mode = m.be.mode()
		}
	}
	if m.be == nil {
		log.Warn("sandbox: no usable memory cgroup, instances run without memory limits", "reason", m.reason)
	} else {
		log.Info("sandbox: memory cgroups", "mode", m.mode, "parent", m.be.parent())
	}
	return m, nil
}

// Mode is "cgroup2", "cgroup1" or "none" (ModeCgroup2, ModeCgroup1,
// ModeNone).
func (m *Manager) Mode() string { return m.mode }

// Reason says why the mode is "none"; it is empty otherwise.
func (m *Manager) Reason() string { return m.reason }

// Create makes the sandbox name with a hard memory limit of limit bytes.
// name must be 1 to MaxNameLen characters of [a-z0-9-_.], and not "." or
// "..". A name live in this Manager is an error (ErrExists). A cgroup of
// that name left behind (by an earlier agent with the same root) is removed
// if it is empty; if it still holds processes, Create fails with ErrExists
// and leaves it alone. In mode "none" the sandbox only records its limit.
func (m *Manager) Create(name string, limit int64) (*Sandbox, error) {
	if err := validName("sandbox name", name, MaxNameLen); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, fmt.Errorf("sandbox %q: memory limit must be positive, got %d", name, limit)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.live[name]; ok {
		return nil, fmt.Errorf("%w: sandbox %q is live", ErrExists, name)
	}
	s := &Sandbox{m: m, name: name, limit: limit}
	if m.be != nil {
		g, err := m.createGroup(name, limit)
		if err != nil {
			return nil, err
		}
		s.g = g
	}
	m.live[name] = s
	return s, nil
}

// createGroup makes name's cgroup, removing an empty stale one first.
func (m *Manager) createGroup(name string, limit int64) (group, error) {
	dir := m.root + "-" + name
	g, err := m.be.create(dir, limit)
	if err == nil {
		return g, nil
	}
	if !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("sandbox %q: %w", name, err)
	}
	old, err := m.be.open(dir)
	if err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", name, err)
	}
	pids, err := old.procs()
	if err != nil {
		return nil, fmt.Errorf("sandbox %q: stale cgroup %s: %w", name, old.path(), err)
	}
	if len(pids) > 0 {
		return nil, fmt.Errorf("%w: sandbox %q: cgroup %s (left by an earlier run?) holds processes %v",
			ErrExists, name, old.path(), pids)
	}
	if err := old.remove(); err != nil {
		return nil, fmt.Errorf("sandbox %q: remove stale cgroup: %w", name, err)
	}
	m.log.Info("sandbox: removed a stale, empty cgroup", "sandbox", name, "path", old.path())
	g, err = m.be.create(dir, limit)
	if err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", name, err)
	}
	return g, nil
}

// validName checks a root or sandbox name: 1 to max characters of
// [a-z0-9-_.], not "." or "..".
func validName(what, s string, max int) error {
	if s == "" {
		return fmt.Errorf("sandbox: empty %s", what)
	}
	if len(s) > max {
		return fmt.Errorf("sandbox: %s %q is longer than %d characters", what, s, max)
	}
	if s == "." || s == ".." {
		return fmt.Errorf("sandbox: %s %q is not allowed", what, s)
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("sandbox: %s %q has %q; only a-z, 0-9, '-', '_' and '.' are allowed", what, s, c)
		}
	}
	return nil
}

// Sandbox is one instance's memory cgroup. Its methods are safe for
// concurrent use.
type Sandbox struct {
	m    *Manager
	name string
	g    group // nil in mode "none"

	mu      sync.Mutex
	limit   int64
	deleted bool
	pids    []int // mode "none": the processes added, for Usage
	// taskDirs are the v1 pids and cpu cgroups LimitTasks made.
	taskDirs []string
	// fn is the function's cgroup, once Function made it.
	fn *Function
}

// Name is the name the sandbox was created with.
func (s *Sandbox) Name() string { return s.name }

// Limit is the sandbox's memory limit in bytes, as last set.
func (s *Sandbox) Limit() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.limit
}

// Enforced reports whether the limit is enforced by a cgroup (false in
// mode "none").
func (s *Sandbox) Enforced() bool { return s.g != nil }

// Path is the sandbox's cgroup directory (e.g.
// /sys/fs/cgroup/memory/.../hoard-NAME); empty in mode "none".
func (s *Sandbox) Path() string {
	if s.g == nil {
		return ""
	}
	return s.g.path()
}

// Add moves process pid (all its threads) into the sandbox. Memory the
// process already uses stays charged where it was; what it allocates from
// now on counts against the limit, so start a process blocked and Add it
// before it allocates. In mode "none" Add only records pid (for Usage).
func (s *Sandbox) Add(pid int) error {
	if pid <= 0 {
		return fmt.Errorf("sandbox %q: bad pid %d", s.name, pid)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.deleted {
		return ErrDeleted
	}
	if s.g == nil {
		s.pids = append(s.pids, pid)
		return nil
	}
	if err := s.g.add(pid); err != nil {
		return fmt.Errorf("sandbox %q: add process %d: %w", s.name, pid, err)
	}
	return nil
}

// Procs lists the processes in the sandbox. In mode "none" it is the
// processes added that still run.
func (s *Sandbox) Procs() ([]int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.deleted {
		return nil, ErrDeleted
	}
	if s.g == nil {
		var alive []int
		for _, pid := range s.pids {
			if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
				alive = append(alive, pid)
			}
		}
		return alive, nil
	}
	pids, err := s.g.procs()
	if err != nil {
		return nil, fmt.Errorf("sandbox %q: %w", s.name, err)
	}
	return pids, nil
}

// ProtectFromOOM sets process pid's oom_score_adj to -1000, so the OOM
// killer never picks it. The agent protects the instance's cachelet: when
// the sandbox runs out of memory the kernel kills the largest unprotected
// process in it, the function's worker, and the cachelet (whose cache
// budget is inside the limit) keeps serving. oom_score_adj belongs to the
// process, not to the cgroup: the process is protected from the host-wide
// OOM killer too, and processes it forks afterwards inherit the setting. A
// protected process that alone exceeds the limit cannot be killed; its
// allocations fail or stall instead.
//
// Lowering oom_score_adj needs CAP_SYS_RESOURCE, which even root may lack
// (in some containers and VMs); the error then matches os.ErrPermission,
// and PreferForOOM on the other processes of the sandbox gets the same
// effect without privileges. In mode "none" ProtectFromOOM does nothing:
// with no sandbox around it, an unkillable process would only shift
// host-wide OOM kills onto others.
func (s *Sandbox) ProtectFromOOM(pid int) error {
	if pid <= 0 {
		return fmt.Errorf("sandbox %q: bad pid %d", s.name, pid)
	}
	if s.g == nil {
		return nil
	}
	if err := setOOMScoreAdj(pid, -1000); err != nil {
		return fmt.Errorf("sandbox %q: protect process %d from the OOM killer (needs CAP_SYS_RESOURCE): %w", s.name, pid, err)
	}
	return nil
}

// PreferForOOM sets process pid's oom_score_adj to 1000, so the OOM killer
// picks it before any other process in the sandbox (unless another one has
// 1000 too), whatever their sizes. The agent can mark the function's worker
// this way, which needs no privilege: raising oom_score_adj is always
// allowed. Like ProtectFromOOM it is a property of the process (it is also
// the host-wide OOM killer's first choice) and is inherited by processes it
// forks afterwards. It works in every mode.
func (s *Sandbox) PreferForOOM(pid int) error {
	if pid <= 0 {
		return fmt.Errorf("sandbox %q: bad pid %d", s.name, pid)
	}
	if err := setOOMScoreAdj(pid, 1000); err != nil {
		return fmt.Errorf("sandbox %q: make process %d the OOM killer's first choice: %w", s.name, pid, err)
	}
	return nil
}

// setOOMScoreAdj writes /proc/PID/oom_score_adj.
func setOOMScoreAdj(pid, adj int) error {
	return os.WriteFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", []byte(strconv.Itoa(adj)), 0)
}

// OOMKills is the number of processes the OOM killer has killed inside the
// sandbox since it was created (v2 memory.events oom_kill, v1
// memory.oom_control oom_kill). Compare it before and after a process dies
// to tell an OOM kill from other SIGKILLs. Always 0 in mode "none".
func (s *Sandbox) OOMKills() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.deleted {
		return 0, ErrDeleted
	}
	if s.g == nil {
		return 0, nil
	}
	n, err := s.g.oomKills()
	if err != nil {
		return 0, fmt.Errorf("sandbox %q: %w", s.name, err)
	}
	return n, nil
}

// Usage is the memory charged to the sandbox now, in bytes (v2
// memory.current, v1 memory.usage_in_bytes: anonymous memory, page cache
// and kernel memory of its processes). In mode "none" it is an estimate: the
// resident set sizes of the added processes that still run.
func (s *Sandbox) Usage() (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.deleted {
		return 0, ErrDeleted
	}
	if s.g == nil {
		var sum int64
		for _, pid := range s.pids {
			sum += rss(pid)
		}
		return sum, nil
	}
	n, err := s.g.usage()
	if err != nil {
		return 0, fmt.Errorf("sandbox %q: %w", s.name, err)
	}
	return n, nil
}

// rss reads a process's resident set size from /proc/PID/status; 0 if the
// process is gone.
func rss(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v) // "1234 kB"
			if len(f) == 2 && f[1] == "kB" {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n << 10
			}
		}
	}
	return 0
}

// SetLimit changes the sandbox's hard memory limit to limit bytes (and the
// swap limit with it). Lowering it below what the sandbox uses makes the
// kernel reclaim memory; on cgroup v1 the call fails if it cannot reclaim
// enough, on cgroup v2 the OOM killer runs. In mode "none" it only records
// the limit.
func (s *Sandbox) SetLimit(limit int64) error {
	if limit <= 0 {
		return fmt.Errorf("sandbox %q: memory limit must be positive, got %d", s.name, limit)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.deleted {
		return ErrDeleted
	}
	if s.g != nil {
		if err := s.g.setLimit(limit); err != nil {
			return fmt.Errorf("sandbox %q: set memory limit to %d bytes: %w", s.name, limit, err)
		}
	}
	s.limit = limit
	return nil
}

// removeFunction removes the (empty) function cgroup, if any.
func (s *Sandbox) removeFunction() error {
	if s.fn == nil {
		return nil
	}
	if err := os.Remove(s.fn.full); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	s.fn = nil
	return nil
}

// Delete kills the processes left in the sandbox (SIGKILL), waits up to
// DeleteTimeout for them to leave it, and removes the cgroup. The killed
// processes' parents still have to reap them (exec.Cmd.Wait). If processes
// are still there after DeleteTimeout, Delete fails and the sandbox stays
// usable, so Delete can be called again. Deleting a deleted sandbox does
// nothing; in mode "none" Delete kills nothing and only forgets the
// sandbox.
func (s *Sandbox) Delete() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.deleted {
		return nil
	}
	if s.g != nil {
		if err := s.deleteGroup(); err != nil {
			return fmt.Errorf("sandbox %q: delete: %w", s.name, err)
		}
	}
	if err := s.removeTaskDirs(); err != nil {
		return fmt.Errorf("sandbox %q: delete: %w", s.name, err)
	}
	s.deleted = true
	s.m.mu.Lock()
	if s.m.live[s.name] == s {
		delete(s.m.live, s.name)
	}
	s.m.mu.Unlock()
	return nil
}

func (s *Sandbox) deleteGroup() error {
	deadline := time.Now().Add(DeleteTimeout)
	for {
		pids, err := s.g.procs()
		if errors.Is(err, os.ErrNotExist) {
			return nil // removed behind our back
		}
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			break
		}
		if err := s.g.kill(pids); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v still in %s %v after SIGKILL", pids, s.g.path(), DeleteTimeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
	for {
		err := s.removeFunction()
		if err == nil {
			err = s.g.remove()
		}
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
}
