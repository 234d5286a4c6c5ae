//go:build linux

package sandbox

import (
	"os"
	"path/filepath"
	"syscall"

	"github.com/containerd/cgroups/v3/cgroup1"
)

func (g *v1Group) inactiveFile() (int64, error) {
	n, err := readKey(filepath.Join(g.full, "memory.stat"), "total_inactive_file")
	return int64(n), err
}

// notifyUsage registers a memory.usage_in_bytes threshold: the kernel
// signals the eventfd each time usage crosses it.
func (g *v1Group) notifyUsage(threshold int64) (*os.File, error) {
	efd, err := g.cg.RegisterMemoryEvent(cgroup1.MemoryThresholdEvent(uint64(threshold), false))
	if err != nil {
		return nil, err
	}
	// Non-blocking, so that the runtime's poller waits on it and Close
	// ends a Read in progress.
	if err := syscall.SetNonblock(int(efd), true); err != nil {
		syscall.Close(int(efd))
		return nil, err
	}
	return os.NewFile(efd, "memory-threshold-eventfd"), nil
}

func (g *v2Group) inactiveFile() (int64, error) {
	n, err := readKey(filepath.Join(g.full, "memory.stat"), "inactive_file")
	return int64(n), err
}
