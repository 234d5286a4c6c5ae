//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/cgroups/v3"
)

// cfsPeriod is the CFS period the CPU quota is set over, in µs.
const cfsPeriod = 100_000

// LimitTasks moves process pid into the function's task cgroups
// (TaskCgroups), with the limits l.
func (s *Sandbox) LimitTasks(pid int, l TaskLimits) error {
	procs, err := s.TaskCgroups(l)
	if err != nil {
		return err
	}
	for _, p := range procs {
		if err := os.WriteFile(p, []byte(strconv.Itoa(pid)), 0); err != nil {
			return fmt.Errorf("sandbox %q: add process %d to %s: %w", s.name, pid, filepath.Dir(p), err)
		}
	}
	return nil
}

// TaskCgroups makes (or updates) the function's task cgroups, with the
// limits l, and returns their cgroup.procs files for a process to join
// (Jail.Cgroups). On cgroup v1 they are cgroups of the pids and cpu
// controllers of their own ("<root>-<name>-fn", below the process's own
// ones), so a function cannot fork-bomb or take every CPU, and the
// instance's cachelet is not in them. On cgroup v2 the limits go on the
// sandbox's own cgroup (the whole instance; no file to join besides
// CgroupProcs), when its parent can give it those controllers. The task
// limit is required (an error if the host has no pids controller); the
// CPU limit is applied where the host has the cpu controller, and logged
// as a warning where not. Delete removes these cgroups too.
func (s *Sandbox) TaskCgroups(l TaskLimits) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.deleted {
		return nil, ErrDeleted
	}
	if s.g == nil {
		return nil, fmt.Errorf("sandbox %q: no cgroups on this host (mode none): tasks are not limited", s.name)
	}
	var procs []string
	var pidsErr, cpuErr error
	if s.m.mode == ModeCgroup2 {
		pidsErr, cpuErr = s.limitTasksV2(l)
	} else {
		var p string
		p, pidsErr = s.limitV1("pids", [][2]string{{"pids.max", pidsMax(l.PIDs)}})
		if pidsErr == nil {
			procs = append(procs, p)
		}
		p, cpuErr = s.limitV1("cpu", [][2]string{{"cpu.cfs_period_us", strconv.Itoa(cfsPeriod)}, {"cpu.cfs_quota_us", cpuQuota(l.CPUs)}})
		if cpuErr == nil {
			procs = append(procs, p)
		}
	}
	if pidsErr != nil {
		return nil, fmt.Errorf("sandbox %q: %w", s.name, pidsErr)
	}
	if cpuErr != nil && l.CPUs > 0 {
		s.m.log.Warn("sandbox: the function's CPU is not limited", "sandbox", s.name, "err", cpuErr)
	}
	return procs, nil
}

// CgroupProcs is the sandbox's own cgroup.procs file, for a process to
// join (Jail.Cgroups); empty in mode "none".
func (s *Sandbox) CgroupProcs() string {
	if s.g == nil {
		return ""
	}
	return filepath.Join(s.g.path(), "cgroup.procs")
}

// limitV1 makes the sandbox's task cgroup of v1 controller ctl with the
// settings given (in order) and returns its cgroup.procs file.
func (s *Sandbox) limitV1(ctl string, settings [][2]string) (string, error) {
	dir, err := s.v1Dir(ctl)
	if err != nil {
		return "", fmt.Errorf("%s controller: %w", ctl, err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", err
	}
	if !slices.Contains(s.taskDirs, dir) {
		s.taskDirs = append(s.taskDirs, dir)
	}
	for _, kv := range settings {
		if err := os.WriteFile(filepath.Join(dir, kv[0]), []byte(kv[1]), 0); err != nil {
			return "", fmt.Errorf("%s: %w", kv[0], err)
		}
	}
	return filepath.Join(dir, "cgroup.procs"), nil
}

// limitTasksV2 sets pids.max and cpu.max on the sandbox's cgroup, after
// asking its parent for the two controllers.
func (s *Sandbox) limitTasksV2(l TaskLimits) (pidsErr, cpuErr error) {
	full := s.g.path()
	parent := filepath.Join(filepath.Dir(full), "cgroup.subtree_control")
	_ = os.WriteFile(parent, []byte("+pids"), 0)
	_ = os.WriteFile(parent, []byte("+cpu"), 0)
	pidsErr = os.WriteFile(filepath.Join(full, "pids.max"), []byte(pidsMax(l.PIDs)), 0)
	cpu := "max"
	if l.CPUs > 0 {
		cpu = cpuQuota(l.CPUs)
	}
	cpuErr = os.WriteFile(filepath.Join(full, "cpu.max"), []byte(cpu+" "+strconv.Itoa(cfsPeriod)), 0)
	return pidsErr, cpuErr
}

// v1Dir is the sandbox's task cgroup in the v1 hierarchy of controller
// ctl, below the process's own cgroup there.
func (s *Sandbox) v1Dir(ctl string) (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	ms, err := parseMountinfo(f)
	f.Close()
	if err != nil {
		return "", err
	}
	paths, _, err := cgroups.ParseCgroupFileUnified("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for _, m := range ms {
		if m.fstype != "cgroup" || !slices.Contains(m.opts, ctl) {
			continue
		}
		rel, err := relativeTo(m.root, paths[ctl])
		if err != nil {
			return "", err
		}
		return filepath.Join(m.point, rel, s.m.root+"-"+s.name+"-fn"), nil
	}
	return "", errors.New("not mounted")
}

// removeTaskDirs removes the v1 task cgroups once their processes are
// gone (the memory cgroup's, which Delete killed, are the same ones).
func (s *Sandbox) removeTaskDirs() error {
	deadline := time.Now().Add(DeleteTimeout)
	for _, dir := range s.taskDirs {
		for {
			err := os.Remove(dir)
			if err == nil || errors.Is(err, os.ErrNotExist) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("remove %s: %w", dir, err)
			}
			if b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs")); len(b) > 0 {
				for _, p := range strings.Fields(string(b)) {
					if pid, err := strconv.Atoi(p); err == nil {
						_ = killAll([]int{pid})
					}
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	s.taskDirs = nil
	return nil
}

func pidsMax(n int64) string {
	if n <= 0 {
		return "max"
	}
	return strconv.FormatInt(n, 10)
}

func cpuQuota(cpus float64) string {
	if cpus <= 0 {
		return "-1"
	}
	return strconv.FormatInt(max(int64(cpus*cfsPeriod), 1000), 10)
}
