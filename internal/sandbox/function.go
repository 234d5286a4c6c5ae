package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// Function is the function's own memory cgroup inside a sandbox (OFC's
// per-invocation sizing): a child of the sandbox's cgroup holding the
// function's worker alone, whose limit the agent sets per invocation,
// while the sandbox's limit still bounds the function and the cachelet
// together. Its methods are safe for concurrent use with each other and
// with the sandbox's.
type Function struct {
	s    *Sandbox
	full string
}

// childGroup is what a group that can have a function cgroup implements
// (cgroup v1; v2's rule of no processes in inner cgroups would move the
// cachelet too).
type childGroup interface {
	makeChild(name string, limit int64) (string, error)
	childSetLimit(full string, limit int64) error
	childPeak(full string) (int64, error)
	childResetPeak(full string) error
	childUsage(full string) (int64, error)
	childOOMKills(full string) (uint64, error)
	childLimit(full string) (int64, error)
}

// Function makes the sandbox's function cgroup with a limit of limit
// bytes (at most the sandbox's), or returns the one made before (its limit
// unchanged). It is ErrNotSupported in mode "none" and on cgroup v2; the
// caller then runs the function under the sandbox's limit alone.
func (s *Sandbox) Function(limit int64) (*Function, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.deleted {
		return nil, ErrDeleted
	}
	if s.fn != nil {
		return s.fn, nil
	}
	cg, ok := s.g.(childGroup)
	if s.g == nil || !ok {
		return nil, ErrNotSupported
	}
	if limit <= 0 || limit > s.limit {
		return nil, fmt.Errorf("sandbox %q: function limit %d bytes, want 1 to the sandbox's %d", s.name, limit, s.limit)
	}
	full, err := cg.makeChild("function", limit)
	if err != nil {
		return nil, fmt.Errorf("sandbox %q: function cgroup: %w", s.name, err)
	}
	s.fn = &Function{s: s, full: full}
	return s.fn, nil
}

// CgroupProcs is the function cgroup's cgroup.procs file, for a process
// to join (Jail.Cgroups).
func (f *Function) CgroupProcs() string { return filepath.Join(f.full, "cgroup.procs") }

// Path is the function cgroup's directory.
func (f *Function) Path() string { return f.full }

// do runs op on the child under the sandbox's lock, unless it was deleted.
func (f *Function) do(op func(cg childGroup) error) error {
	f.s.mu.Lock()
	defer f.s.mu.Unlock()
	if f.s.deleted {
		return ErrDeleted
	}
	return op(f.s.g.(childGroup))
}

// SetLimit sets the function's memory limit; it must be positive and at
// most the sandbox's. Lowering it under what the function holds makes the
// kernel reclaim, and fails if it cannot.
func (f *Function) SetLimit(limit int64) error {
	return f.do(func(cg childGroup) error {
		if limit <= 0 || limit > f.s.limit {
			return fmt.Errorf("sandbox %q: function limit %d bytes, want 1 to the sandbox's %d", f.s.name, limit, f.s.limit)
		}
		return cg.childSetLimit(f.full, limit)
	})
}

// Limit is the function's limit as the kernel has it.
func (f *Function) Limit() (n int64, err error) {
	err = f.do(func(cg childGroup) error { n, err = cg.childLimit(f.full); return err })
	return n, err
}

// Usage is the memory charged to the function now.
func (f *Function) Usage() (n int64, err error) {
	err = f.do(func(cg childGroup) error { n, err = cg.childUsage(f.full); return err })
	return n, err
}

// Peak is the most memory charged to the function since ResetPeak (v1
// memory.max_usage_in_bytes).
func (f *Function) Peak() (n int64, err error) {
	err = f.do(func(cg childGroup) error { n, err = cg.childPeak(f.full); return err })
	return n, err
}

// ResetPeak starts a new peak from the usage now.
func (f *Function) ResetPeak() error {
	return f.do(func(cg childGroup) error { return cg.childResetPeak(f.full) })
}

// OOMKills counts the processes the OOM killer killed in the function
// cgroup.
func (f *Function) OOMKills() (n uint64, err error) {
	err = f.do(func(cg childGroup) error { n, err = cg.childOOMKills(f.full); return err })
	return n, err
}

// Add moves a process into the function cgroup.
func (f *Function) Add(pid int) error {
	return f.do(func(childGroup) error {
		return os.WriteFile(f.CgroupProcs(), []byte(strconv.Itoa(pid)), 0)
	})
}
