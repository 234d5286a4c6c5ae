//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/containerd/cgroups/v3/cgroup1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// v1Backend makes sandboxes in the cgroup v1 memory hierarchy, below the
// process's own memory cgroup.
type v1Backend struct {
	point string            // the memory hierarchy's mount point, e.g. /sys/fs/cgroup/memory
	base  string            // the own memory cgroup below it, e.g. /process_api/ID
	hier  cgroup1.Hierarchy // the memory controller alone
	memsw bool              // swap is accounted: memory.memsw.limit_in_bytes exists
	log   *slog.Logger
}

// newV1 sets up the v1 backend for mount m, own being the process's memory
// cgroup as /proc/self/cgroup names it.
func newV1(m mount, own string, log *slog.Logger) (*v1Backend, error) {
	if own == "" {
		return nil, errors.New("/proc/self/cgroup has no memory entry")
	}
	rel, err := relativeTo(m.root, own)
	if err != nil {
		return nil, err
	}
	if fi, err := os.Stat(filepath.Join(m.point, rel)); err != nil {
		return nil, err
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a directory", filepath.Join(m.point, rel))
	}
	// containerd's memory controller lives at <dir>/memory.
	dir := filepath.Dir(m.point)
	if filepath.Base(m.point) != "memory" {
		want, err1 := filepath.EvalSymlinks(m.point)
		got, err2 := filepath.EvalSymlinks(filepath.Join(dir, "memory"))
		if err1 != nil || err2 != nil || want != got {
			return nil, fmt.Errorf("the hierarchy is mounted at %s, with no %s next to it", m.point, filepath.Join(dir, "memory"))
		}
	}
	mem := cgroup1.NewMemory(dir)
	return &v1Backend{
		point: m.point,
		base:  rel,
		hier:  func() ([]cgroup1.Subsystem, error) { return []cgroup1.Subsystem{mem}, nil },
		memsw: exists(filepath.Join(m.point, "memory.memsw.limit_in_bytes")),
		log:   log,
	}, nil
}

func (b *v1Backend) mode() string   { return ModeCgroup1 }
func (b *v1Backend) parent() string { return filepath.Join(b.point, b.base) }

// resources is a hard limit of limit bytes, and with swap accounting a
// memory+swap limit of as much: no swap.
func (b *v1Backend) resources(limit int64) *specs.LinuxResources {
	mem := &specs.LinuxMemory{Limit: &limit}
	if b.memsw {
		swap := limit
		mem.Swap = &swap
	}
	return &specs.LinuxResources{Memory: mem}
}

func (b *v1Backend) create(dir string, limit int64) (group, error) {
	rel := path.Join(b.base, dir)
	full := filepath.Join(b.point, rel)
	if exists(full) {
		return nil, fmt.Errorf("cgroup %s: %w", full, os.ErrExist)
	}
	cg, err := cgroup1.New(cgroup1.StaticPath(rel), b.resources(limit), cgroup1.WithHierarchy(b.hier))
	if err != nil {
		_ = os.Remove(full)
		return nil, fmt.Errorf("create cgroup: %w", err)
	}
	// Children inherit these from their parent in v1: set the defaults.
	tune(b.log, filepath.Join(full, "memory.swappiness"), "0")
	tune(b.log, filepath.Join(full, "memory.oom_control"), "0") // OOM killer on
	return &v1Group{b: b, cg: cg, full: full}, nil
}

func (b *v1Backend) open(dir string) (group, error) {
	rel := path.Join(b.base, dir)
	cg, err := cgroup1.Load(cgroup1.StaticPath(rel), cgroup1.WithHierarchy(b.hier))
	if err != nil {
		return nil, err
	}
	return &v1Group{b: b, cg: cg, full: filepath.Join(b.point, rel)}, nil
}

// v1Group is one v1 memory cgroup.
type v1Group struct {
	b    *v1Backend
	cg   cgroup1.Cgroup
	full string
}

func (g *v1Group) path() string { return g.full }

func (g *v1Group) add(pid int) error { return g.cg.Add(cgroup1.Process{Pid: pid}) }

// setLimit writes the two limits in the order that keeps memsw >= limit
// at every step: memsw first when growing, limit first when shrinking.
// (containerd's Update means to do this but swaps the wrong settings in
// v3.1.0, so each limit goes in an Update of its own.)
func (g *v1Group) setLimit(limit int64) error {
	mem := &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: &limit}}
	if !g.b.memsw {
		return g.cg.Update(mem)
	}
	swap := &specs.LinuxResources{Memory: &specs.LinuxMemory{Swap: &limit}}
	cur, err := readInt(filepath.Join(g.full, "memory.limit_in_bytes"))
	if err != nil {
		return err
	}
	first, second := mem, swap
	if limit > cur {
		first, second = swap, mem
	}
	if err := g.cg.Update(first); err != nil {
		return err
	}
	return g.cg.Update(second)
}

func (g *v1Group) usage() (int64, error) {
	return readInt(filepath.Join(g.full, "memory.usage_in_bytes"))
}

func (g *v1Group) oomKills() (uint64, error) {
	return readKey(filepath.Join(g.full, "memory.oom_control"), "oom_kill")
}

func (g *v1Group) procs() ([]int, error) {
	ps, err := g.cg.Processes(cgroup1.Memory, true)
	if err != nil {
		return nil, err
	}
	pids := make([]int, 0, len(ps))
	for _, p := range ps {
		pids = append(pids, p.Pid)
	}
	slices.Sort(pids)
	return slices.Compact(pids), nil
}

func (g *v1Group) kill(pids []int) error { return killAll(pids) }

func (g *v1Group) remove() error {
	if !exists(g.full) {
		return nil
	}
	return g.cg.Delete()
}

// makeChild makes a memory cgroup below this one with a hard limit (and,
// with swap accounting, no swap). It inherits use_hierarchy, so the
// parent's limit bounds it too.
func (g *v1Group) makeChild(name string, limit int64) (string, error) {
	full := filepath.Join(g.full, name)
	if err := os.Mkdir(full, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", err
	}
	tune(g.b.log, filepath.Join(full, "memory.swappiness"), "0")
	if err := g.childSetLimit(full, limit); err != nil {
		_ = os.Remove(full)
		return "", err
	}
	return full, nil
}

// childSetLimit writes memory.limit_in_bytes (and memsw, in the order
// that keeps memsw >= limit).
func (g *v1Group) childSetLimit(full string, limit int64) error {
	lim := filepath.Join(full, "memory.limit_in_bytes")
	files := []string{lim}
	if g.b.memsw {
		cur, err := readInt(lim)
		if err != nil {
			return err
		}
		sw := filepath.Join(full, "memory.memsw.limit_in_bytes")
		files = []string{lim, sw}
		if limit > cur {
			files = []string{sw, lim}
		}
	}
	for _, f := range files {
		if err := os.WriteFile(f, []byte(strconv.FormatInt(limit, 10)), 0); err != nil {
			return err
		}
	}
	return nil
}

func (g *v1Group) childLimit(full string) (int64, error) {
	return readInt(filepath.Join(full, "memory.limit_in_bytes"))
}

func (g *v1Group) childUsage(full string) (int64, error) {
	return readInt(filepath.Join(full, "memory.usage_in_bytes"))
}

func (g *v1Group) childPeak(full string) (int64, error) {
	return readInt(filepath.Join(full, "memory.max_usage_in_bytes"))
}

func (g *v1Group) childResetPeak(full string) error {
	return os.WriteFile(filepath.Join(full, "memory.max_usage_in_bytes"), []byte("0"), 0)
}

func (g *v1Group) childOOMKills(full string) (uint64, error) {
	return readKey(filepath.Join(full, "memory.oom_control"), "oom_kill")
}
