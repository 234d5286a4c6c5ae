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

// LimitTasks moves process pid into cgroups of the pids and cpu
// controllers of its own ("<root>-<name>-fn", below the process's own
// ones), with the limits l, so a function cannot fork-bomb or take every
// CPU; the instance's cachelet is not in them. On a cgroup v2 host the
// limits go on the sandbox's own cgroup (the whole instance), when its
// parent can give it those controllers. A controller the host lacks is
// an error naming it. Delete removes these cgroups too.
func (s *Sandbox) LimitTasks(pid int, l TaskLimits) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.deleted {
		return ErrDeleted
	}
	if s.g == nil {
		return fmt.Errorf("sandbox %q: no cgroups on this host (mode none): tasks are not limited", s.name)
	}
	if cgroups.Mode() == cgroups.Unified {
		return s.limitTasksV2(pid, l)
	}
	for _, c := range []struct {
		ctl    string
		limits map[string]string
	}{
		{"pids", map[string]string{"pids.max": pidsMax(l.PIDs)}},
		{"cpu", map[string]string{"cpu.cfs_period_us": strconv.Itoa(cfsPeriod), "cpu.cfs_quota_us": cpuQuota(l.CPUs)}},
	} {
		dir, err := s.v1Dir(c.ctl)
		if err != nil {
			return fmt.Errorf("sandbox %q: %s controller: %w", s.name, c.ctl, err)
		}
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("sandbox %q: %w", s.name, err)
		}
		if !slices.Contains(s.taskDirs, dir) {
			s.taskDirs = append(s.taskDirs, dir)
		}
		for _, f := range []string{"cpu.cfs_period_us", "pids.max", "cpu.cfs_quota_us"} {
			if v, ok := c.limits[f]; ok {
				if err := os.WriteFile(filepath.Join(dir, f), []byte(v), 0); err != nil {
					return fmt.Errorf("sandbox %q: %s: %w", s.name, f, err)
				}
			}
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
			return fmt.Errorf("sandbox %q: add process %d to its %s cgroup: %w", s.name, pid, c.ctl, err)
		}
	}
	return nil
}

// limitTasksV2 sets pids.max and cpu.max on the sandbox's cgroup.
func (s *Sandbox) limitTasksV2(_ int, l TaskLimits) error {
	full := s.g.path()
	_ = os.WriteFile(filepath.Join(filepath.Dir(full), "cgroup.subtree_control"), []byte("+pids +cpu"), 0)
	cpu := "max"
	if l.CPUs > 0 {
		cpu = cpuQuota(l.CPUs)
	}
	for f, v := range map[string]string{"pids.max": pidsMax(l.PIDs), "cpu.max": cpu + " " + strconv.Itoa(cfsPeriod)} {
		if err := os.WriteFile(filepath.Join(full, f), []byte(v), 0); err != nil {
			return fmt.Errorf("sandbox %q: %s: %w", s.name, f, err)
		}
	}
	return nil
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
