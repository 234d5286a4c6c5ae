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
	"strings"
	"syscall"

	"github.com/containerd/cgroups/v3/cgroup2"
)

// v2Backend makes sandboxes in the unified hierarchy, below the process's
// own cgroup.
type v2Backend struct {
	point string           // the unified hierarchy's mount point, e.g. /sys/fs/cgroup
	base  string           // the own cgroup below it
	own   *cgroup2.Manager // base
	log   *slog.Logger
}

// newV2 sets up the v2 backend for mount m, own being the process's cgroup
// as /proc/self/cgroup names it ("0::/..."). It enables the memory
// controller for the own cgroup's children, moving this process into a
// leaf "<root>.self" when it is alone in its cgroup and that is what
// stands in the way.
func newV2(root string, m mount, own string, log *slog.Logger) (*v2Backend, error) {
	if own == "" {
		return nil, errors.New("/proc/self/cgroup has no cgroup v2 entry")
	}
	rel, err := relativeTo(m.root, own)
	if err != nil {
		return nil, err
	}
	if path.Base(rel) == root+".self" { // moved there by an earlier Manager
		rel = path.Dir(rel)
	}
	dir := filepath.Join(m.point, rel)
	ctrl, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return nil, err
	}
	if !slices.Contains(strings.Fields(string(ctrl)), "memory") {
		return nil, fmt.Errorf("the memory controller is not available in %s (cgroup.controllers: %q)", dir, strings.TrimSpace(string(ctrl)))
	}
	if err := enableMemory(dir, root, log); err != nil {
		return nil, err
	}
	mgr, err := cgroup2.Load(rel, cgroup2.WithMountpoint(m.point))
	if err != nil {
		return nil, err
	}
	return &v2Backend{point: m.point, base: rel, own: mgr, log: log}, nil
}

// enableMemory turns on the memory controller for dir's children. cgroup
// v2 refuses (EBUSY) while dir itself holds processes, unless it is the
// root; if the only one is this process, it moves into the leaf
// dir/<root>.self and tries again.
func enableMemory(dir, root string, log *slog.Logger) error {
	sc := filepath.Join(dir, "cgroup.subtree_control")
	b, err := os.ReadFile(sc)
	if err != nil {
		return err
	}
	if slices.Contains(strings.Fields(string(b)), "memory") {
		return nil
	}
	err = os.WriteFile(sc, []byte("+memory"), 0)
	if err == nil || !errors.Is(err, syscall.EBUSY) {
		return err
	}
	b, err = os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return err
	}
	self := strconv.Itoa(os.Getpid())
	if others := slices.DeleteFunc(strings.Fields(string(b)), func(p string) bool { return p == self }); len(others) > 0 {
		return fmt.Errorf("cannot enable the memory controller below %s: it holds processes %v besides this one "+
			"(cgroup v2 has controllers only below cgroups without processes; run hoard in a cgroup of its own, "+
			"e.g. a systemd service with Delegate=yes)", dir, others)
	}
	leaf := filepath.Join(dir, root+".self")
	if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	if err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte(self), 0); err != nil {
		return fmt.Errorf("move this process to %s: %w", leaf, err)
	}
	log.Info("sandbox: moved this process into a leaf cgroup, so that its own can hold sandboxes", "from", dir, "to", leaf)
	if err := os.WriteFile(sc, []byte("+memory"), 0); err != nil {
		return fmt.Errorf("enable the memory controller in %s: %w", dir, err)
	}
	return nil
}

func (b *v2Backend) mode() string   { return ModeCgroup2 }
func (b *v2Backend) parent() string { return filepath.Join(b.point, b.base) }

func (b *v2Backend) create(dir string, limit int64) (group, error) {
	full := filepath.Join(b.point, b.base, dir)
	if exists(full) {
		return nil, fmt.Errorf("cgroup %s: %w", full, os.ErrExist)
	}
	// No resources here: NewChild would then enable the controllers in
	// every ancestor up to the mount point; newV2 did what this needs.
	cg, err := b.own.NewChild(dir, nil)
	if err != nil {
		return nil, fmt.Errorf("create cgroup: %w", err)
	}
	mem := &cgroup2.Memory{Max: &limit}
	if exists(filepath.Join(full, "memory.swap.max")) {
		zero := int64(0)
		mem.Swap = &zero
	}
	if err := cg.Update(&cgroup2.Resources{Memory: mem}); err != nil {
		_ = os.Remove(full)
		return nil, fmt.Errorf("set up cgroup: %w", err)
	}
	tune(b.log, filepath.Join(full, "memory.oom.group"), "0") // kill the largest process, not all
	return &v2Group{cg: cg, full: full}, nil
}

func (b *v2Backend) open(dir string) (group, error) {
	full := filepath.Join(b.point, b.base, dir)
	if !exists(full) {
		return nil, fmt.Errorf("cgroup %s: %w", full, os.ErrNotExist)
	}
	cg, err := cgroup2.Load(path.Join(b.base, dir), cgroup2.WithMountpoint(b.point))
	if err != nil {
		return nil, err
	}
	return &v2Group{cg: cg, full: full}, nil
}

// v2Group is one cgroup v2 cgroup.
type v2Group struct {
	cg   *cgroup2.Manager
	full string
}

func (g *v2Group) path() string { return g.full }

func (g *v2Group) add(pid int) error { return g.cg.AddProc(uint64(pid)) }

func (g *v2Group) setLimit(limit int64) error {
	return g.cg.Update(&cgroup2.Resources{Memory: &cgroup2.Memory{Max: &limit}})
}

func (g *v2Group) usage() (int64, error) {
	return readInt(filepath.Join(g.full, "memory.current"))
}

func (g *v2Group) oomKills() (uint64, error) {
	return readKey(filepath.Join(g.full, "memory.events"), "oom_kill")
}

func (g *v2Group) procs() ([]int, error) {
	ps, err := g.cg.Procs(true)
	if err != nil {
		return nil, err
	}
	pids := make([]int, 0, len(ps))
	for _, p := range ps {
		pids = append(pids, int(p))
	}
	slices.Sort(pids)
	return slices.Compact(pids), nil
}

// kill uses cgroup.kill (Linux 5.14+), which also catches processes forked
// meanwhile, else signals pids. (Not containerd's Kill: its fallback waits
// for the processes, reaping children whose exec.Cmd would then fail.)
func (g *v2Group) kill(pids []int) error {
	if err := os.WriteFile(filepath.Join(g.full, "cgroup.kill"), []byte("1"), 0); err == nil {
		return nil
	}
	return killAll(pids)
}

func (g *v2Group) remove() error {
	if !exists(g.full) {
		return nil
	}
	return g.cg.Delete()
}
