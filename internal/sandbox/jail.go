package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// A Jail is what isolates one instance's function processes (ADR 14,
// docs/security.md). The node agent starts the function's worker as
// `hoard sandbox-init SPEC -- PROGRAM ARGS...` in fresh mount, PID, IPC
// and UTS namespaces (Cloneflags, Command) and, through a file it hands
// over, in the instance's network namespace (Network). sandbox-init,
// PID 1 of the new PID namespace and still root, runs Enter: it joins
// the network namespace, builds a root of its own (a small tmpfs holding
// the listed host paths bound read-only, a private /tmp, a fresh /proc, a
// minimal /dev), pivots into it, drops every privilege (setgroups, setgid,
// setuid to the jail's uid; no_new_privs) and starts the program, staying
// as the jail's init to reap the processes the program orphans.
//
// Nothing secret is in a Jail: it travels on sandbox-init's command line.
type Jail struct {
	// UID and GID the program runs as; never 0.
	UID int `json:"uid"`
	GID int `json:"gid"`
	// Hostname is the UTS namespace's host name; default "sandbox".
	Hostname string `json:"hostname,omitempty"`
	// ReadOnly are host paths (directories or files, absolute) visible at
	// the same path inside, read-only, nosuid, nodev (under /tmp: inside
	// the private /tmp). A path that does not
	// exist is skipped; one that is a symbolic link is recreated as the
	// same link (list its target too).
	ReadOnly []string `json:"read_only"`
	// Code, when set, is a host directory shown read-only at CodeDir
	// (the application's code: its host path, under the agent's state
	// directory, stays hidden).
	Code string `json:"code,omitempty"`
	// Files are files written into the jail's root before it is made
	// read-only (e.g. the SDK's configuration), path → content, mode
	// 0444. Not for secrets: the function can read them.
	Files map[string]string `json:"files,omitempty"`
	// TmpBytes caps the private, writable /tmp (and /dev/shm); it is
	// memory, charged to the instance's memory cgroup. Default 64 MiB.
	TmpBytes int64 `json:"tmp_bytes,omitempty"`
	// Dir is the program's working directory inside; default "/".
	Dir string `json:"dir,omitempty"`
	// NetNSFD is the file descriptor (3 or more) of the network namespace
	// to join, handed to sandbox-init open; 0 keeps a fresh network
	// namespace (Cloneflags with CLONE_NEWNET) with only loopback, down.
	NetNSFD int `json:"netns_fd,omitempty"`
	// KeepFDs are descriptors above 2 the program inherits (the worker's
	// pipes); every other one is closed before the exec.
	KeepFDs []int `json:"keep_fds,omitempty"`
	// Cgroups are cgroup.procs files (absolute host paths) sandbox-init
	// joins first, before anything in the jail runs: the instance's
	// memory cgroup and the function's task cgroups
	// (Sandbox.CgroupProcs, Sandbox.TaskCgroups), so that nothing the
	// program does escapes their limits.
	Cgroups []string `json:"cgroups,omitempty"`
	// Root is an empty host directory the jail's root is mounted on (in
	// the jail's own mount namespace: the host never sees the mount).
	Root string `json:"root"`
	// OOMScoreAdj, when not 0, is the oom_score_adj (-1000 to 1000) of
	// the jail's init and so of everything it starts: 1000 makes the
	// function the OOM killer's first choice (Sandbox.PreferForOOM), set
	// before the program runs.
	OOMScoreAdj int `json:"oom_score_adj,omitempty"`
}

// TaskLimits bound a jailed function's processes, apart from its
// cachelet: how many tasks (processes and threads) they may have, and
// how much CPU time they get.
type TaskLimits struct {
	// PIDs is the most tasks at once (pids.max); a fork past it fails
	// with EAGAIN. 0: no limit.
	PIDs int64
	// CPUs is the CPU time per wall-clock second, in CPUs (CFS quota
	// over a 100 ms period); 0: no limit.
	CPUs float64
}

// CodeDir is where a jail shows Jail.Code: Lambda's task directory.
const CodeDir = "/var/task"

// DefaultTmpBytes is Jail.TmpBytes's default.
const DefaultTmpBytes = 64 << 20

// InitCommand is the hidden subcommand of the hoard binary that runs
// Enter.
const InitCommand = "sandbox-init"

// ErrNoIsolation is wrapped by the errors of a host that cannot isolate
// functions (not Linux, not root, namespaces refused).
var ErrNoIsolation = errors.New("sandbox: functions cannot be isolated on this host")

// Validate checks j and fills in its defaults.
func (j *Jail) Validate() error {
	if j.UID <= 0 || j.GID <= 0 {
		return fmt.Errorf("sandbox: jail uid %d gid %d: must be unprivileged (> 0)", j.UID, j.GID)
	}
	if j.Hostname == "" {
		j.Hostname = "sandbox"
	}
	if j.TmpBytes == 0 {
		j.TmpBytes = DefaultTmpBytes
	}
	if j.TmpBytes < 0 {
		return errors.New("sandbox: jail tmp size must not be negative")
	}
	if j.Dir == "" {
		j.Dir = "/"
	}
	if !filepath.IsAbs(j.Root) || filepath.Clean(j.Root) == "/" {
		return fmt.Errorf("sandbox: jail root %q must be an absolute directory other than /", j.Root)
	}
	for _, p := range j.ReadOnly {
		if err := jailPath(p); err != nil {
			return err
		}
	}
	for _, p := range j.Cgroups {
		if !filepath.IsAbs(p) || filepath.Base(p) != "cgroup.procs" {
			return fmt.Errorf("sandbox: jail cgroup %q: want an absolute path to a cgroup.procs file", p)
		}
	}
	if j.Code != "" && !filepath.IsAbs(j.Code) {
		return fmt.Errorf("sandbox: jail code directory %q must be absolute", j.Code)
	}
	for p := range j.Files {
		if err := jailPath(p); err != nil {
			return err
		}
		if !strings.HasPrefix(p, "/run/") {
			return fmt.Errorf("sandbox: jail file %q must be under /run", p)
		}
	}
	if j.OOMScoreAdj < -1000 || j.OOMScoreAdj > 1000 {
		return fmt.Errorf("sandbox: jail oom_score_adj %d: want -1000 to 1000", j.OOMScoreAdj)
	}
	if j.NetNSFD != 0 && j.NetNSFD < 3 {
		return fmt.Errorf("sandbox: jail network namespace fd %d must be 3 or more", j.NetNSFD)
	}
	return nil
}

// jailPath checks a path inside the jail: absolute, clean, not "/", not
// one of the mounts Enter makes itself.
func jailPath(p string) error {
	if !filepath.IsAbs(p) || filepath.Clean(p) != p || p == "/" {
		return fmt.Errorf("sandbox: jail path %q must be absolute, clean and not /", p)
	}
	if p == "/tmp" {
		return fmt.Errorf("sandbox: jail path %q: the jail has a private /tmp", p)
	}
	for _, own := range []string{"/proc", "/dev"} {
		if p == own || strings.HasPrefix(p, own+"/") {
			return fmt.Errorf("sandbox: jail path %q is under %s, which the jail makes itself", p, own)
		}
	}
	return nil
}

// Args is sandbox-init's command line for running argv in j: the hoard
// binary's arguments after its name.
func (j *Jail) Args(argv []string) ([]string, error) {
	if err := j.Validate(); err != nil {
		return nil, err
	}
	if len(argv) == 0 || !filepath.IsAbs(argv[0]) {
		return nil, errors.New("sandbox: the jailed program must be an absolute path")
	}
	b, err := json.Marshal(j)
	if err != nil {
		return nil, err
	}
	return append([]string{InitCommand, string(b), "--"}, argv...), nil
}

// ParseInitArgs reads what Args wrote (the arguments after InitCommand).
func ParseInitArgs(args []string) (*Jail, []string, error) {
	if len(args) < 3 || args[1] != "--" {
		return nil, nil, errors.New("sandbox: usage: hoard sandbox-init SPEC -- PROGRAM [ARG...]")
	}
	var j Jail
	dec := json.NewDecoder(strings.NewReader(args[0]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return nil, nil, fmt.Errorf("sandbox: jail spec: %w", err)
	}
	if err := j.Validate(); err != nil {
		return nil, nil, err
	}
	if !filepath.IsAbs(args[2]) {
		return nil, nil, errors.New("sandbox: the jailed program must be an absolute path")
	}
	return &j, args[2:], nil
}
