//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/containerd/cgroups/v3"
)

// probeSeq tells apart the probe cgroups of Managers made at once.
var probeSeq atomic.Uint64

// probeLimit is the limit of the cgroup detect makes to check that it can.
const probeLimit = 64 << 20

// detect picks the backend: the v1 memory controller when one is mounted
// (it then cannot be in the unified hierarchy), else a cgroup2 mount whose
// memory controller reaches the process's own cgroup. It makes and removes
// a probe cgroup to check permissions. With no backend it says why.
func detect(root string, log *slog.Logger) (backend, string) {
	host := hostMode()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Sprintf("%s host: %v", host, err)
	}
	ms, err := parseMountinfo(f)
	f.Close()
	if err != nil {
		return nil, fmt.Sprintf("%s host: %v", host, err)
	}
	v1paths, unified, err := cgroups.ParseCgroupFileUnified("/proc/self/cgroup")
	if err != nil {
		return nil, fmt.Sprintf("%s host: %v", host, err)
	}
	if m, ok := findV1Memory(ms); ok {
		b, err := newV1(m, v1paths["memory"], log)
		if err == nil {
			err = probe(b, root)
		}
		if err != nil {
			return nil, fmt.Sprintf("%s host: cgroup v1 memory controller at %s: %v", host, m.point, err)
		}
		return b, ""
	}
	var why []string
	for _, m := range findV2(ms) {
		b, err := newV2(root, m, unified, log)
		if err == nil {
			err = probe(b, root)
		}
		if err == nil {
			return b, ""
		}
		why = append(why, fmt.Sprintf("cgroup v2 at %s: %v", m.point, err))
	}
	if len(why) == 0 {
		return nil, host + " host: neither a cgroup v2 hierarchy nor the cgroup v1 memory controller is mounted"
	}
	return nil, host + " host: " + strings.Join(why, "; ")
}

// hostMode names containerd's view of the host's cgroups.
func hostMode() string {
	switch cgroups.Mode() {
	case cgroups.Unified:
		return "cgroup v2 (unified)"
	case cgroups.Hybrid:
		return "cgroup v1/v2 hybrid"
	case cgroups.Legacy:
		return "cgroup v1 (legacy)"
	default:
		return "cgroup-less"
	}
}

// probe makes and removes a cgroup with a memory limit, removing one a
// crashed earlier probe left.
func probe(b backend, root string) error {
	dir := fmt.Sprintf("%s.probe-%d-%d", root, os.Getpid(), probeSeq.Add(1))
	g, err := b.create(dir, probeLimit)
	if errors.Is(err, os.ErrExist) {
		if old, err := b.open(dir); err == nil {
			_ = old.remove()
		}
		g, err = b.create(dir, probeLimit)
	}
	if err != nil {
		return err
	}
	return g.remove()
}

// killAll sends SIGKILL to pids; processes already gone are fine.
func killAll(pids []int) error {
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("kill process %d: %w", pid, err)
		}
	}
	return nil
}

// readInt reads a file holding one integer.
func readInt(file string) (int64, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", file, err)
	}
	return n, nil
}

// readKey reads key's value from a flat keyed file ("key value" lines,
// e.g. memory.events or memory.oom_control).
func readKey(file, key string) (uint64, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == key {
			n, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s: %s: %w", file, key, err)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("%s has no %s (kernel too old?)", file, key)
}

// tune writes a setting that only makes the sandbox better, logging
// instead of failing when the host does not take it.
func tune(log *slog.Logger, file, value string) {
	if err := os.WriteFile(file, []byte(value), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
		log.Debug("sandbox: optional cgroup setting not applied", "file", file, "value", value, "err", err)
	}
}

// exists reports whether file exists.
func exists(file string) bool {
	_, err := os.Lstat(file)
	return err == nil
}
