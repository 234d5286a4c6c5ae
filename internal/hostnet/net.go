package hostnet

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrUnavailable is wrapped by the errors of Available and Up when this
// process cannot make network namespaces; the message names the reason.
var ErrUnavailable = errors.New("network namespaces unavailable")

// Available reports whether this process can make namespaces, veth pairs
// and tc qdiscs (root, iproute2, a namespace made and removed): nil, or
// an error wrapping ErrUnavailable that says why in one line.
func Available(ctx context.Context) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: not root (namespaces, veth pairs and tc need CAP_NET_ADMIN)", ErrUnavailable)
	}
	for _, tool := range []string{"ip", "tc", "nsenter", "unshare"} {
		if _, err := exec.LookPath(tool); err != nil {
			pkg := "iproute2"
			if tool == "nsenter" || tool == "unshare" {
				pkg = "util-linux"
			}
			return fmt.Errorf("%w: %s (%s) is not installed", ErrUnavailable, tool, pkg)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultCommandTimeout)
	defer cancel()
	// A namespace made and removed: `ip netns list` can work where
	// adding one cannot (no /run/netns mount in a container).
	probe := fmt.Sprintf("hoard-probe-%d", os.Getpid())
	if out, err := exec.CommandContext(ctx, "ip", "netns", "add", probe).CombinedOutput(); err != nil {
		return fmt.Errorf("%w: `ip netns add` failed: %v %s", ErrUnavailable, err, firstLine(out))
	}
	if out, err := exec.CommandContext(ctx, "ip", "netns", "del", probe).CombinedOutput(); err != nil {
		return fmt.Errorf("%w: `ip netns del` failed: %v %s", ErrUnavailable, err, firstLine(out))
	}
	return nil
}

// Runner runs one command. Implementations must honour ctx's deadline.
type Runner interface {
	Run(ctx context.Context, argv []string) ([]byte, error)
}

// execRunner runs commands as child processes.
type execRunner struct{}

func (execRunner) Run(ctx context.Context, argv []string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.Bytes(), fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, firstLine(out.Bytes()))
	}
	return out.Bytes(), nil
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return s
}

// Net is a made layout; Close removes it.
type Net struct {
	Layout
	cfg       Config
	run       Runner
	log       *slog.Logger
	record    string
	closeOnce sync.Once
	closeErr  error
}

// record is what a run leaves in the registry: who made what.
type record struct {
	Owner      int      `json:"owner"`
	OwnerStart uint64   `json:"owner_start"` // its start time, against pid reuse
	Prefix     string   `json:"prefix"`
	Subnet     string   `json:"subnet"`
	Namespaces []string `json:"namespaces"`
	Devices    []string `json:"devices"` // removed in this order
}

// Up makes cfg's layout: it removes what dead runs of the same prefix
// left behind, picks a free subnet, records the run, and runs the plan.
// On failure everything made so far is removed.
func Up(ctx context.Context, cfg Config, log *slog.Logger) (*Net, error) {
	return up(ctx, cfg, log, execRunner{})
}

func up(ctx context.Context, cfg Config, log *slog.Logger, run Runner) (_ *Net, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if _, ok := run.(execRunner); ok {
		if err := Available(ctx); err != nil {
			return nil, err
		}
	}
	randomID := cfg.ID == ""
	cfg = cfg.withDefaults()
	if err := os.MkdirAll(cfg.RegistryDir, 0o755); err != nil {
		return nil, fmt.Errorf("hostnet: %w", err)
	}
	unlock, err := lock(ctx, cfg.RegistryDir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	n := &Net{cfg: cfg, run: run, log: log}
	n.sweep(ctx)
	if !cfg.Subnet.IsValid() {
		if cfg.Subnet, err = n.freeSubnet(ctx); err != nil {
			return nil, err
		}
	}
	for try := 0; ; try++ {
		n.cfg = cfg
		n.Layout = cfg.Layout()
		if _, err := n.do(ctx, "ip", "link", "show", n.Bridge); err != nil {
			break // free
		}
		if !randomID || try == 8 {
			return nil, fmt.Errorf("hostnet: a device named %s exists already", n.Bridge)
		}
		cfg.ID = ""
		cfg = cfg.withDefaults()
	}
	rec := record{Owner: os.Getpid(), OwnerStart: procStart(os.Getpid()), Prefix: cfg.Prefix, Subnet: cfg.Subnet.String()}
	for _, nd := range n.all() {
		rec.Namespaces = append(rec.Namespaces, nd.Name)
		rec.Devices = append(rec.Devices, nd.HostVeth)
	}
	rec.Devices = append(rec.Devices, n.Bridge)
	n.record = filepath.Join(cfg.RegistryDir, cfg.Prefix+cfg.ID+".json")
	data, _ := json.MarshalIndent(rec, "", "  ")
	if err := os.WriteFile(n.record, data, 0o644); err != nil {
		return nil, fmt.Errorf("hostnet: recording the run: %w", err)
	}
	defer func() {
		if err != nil {
			_ = n.close()
		}
	}()
	for _, argv := range n.Layout.Plan().Up {
		if _, err := n.do(ctx, argv...); err != nil {
			return nil, fmt.Errorf("hostnet: %w", err)
		}
	}
	log.Info("hostnet: nodes made", "bridge", n.Bridge, "subnet", cfg.Subnet, "nodes", len(n.Nodes),
		"node_rate", cfg.NodeRate, "node_in_rate", cfg.NodeInRate, "store", n.Store != nil, "store_rate", cfg.StoreRate)
	return n, nil
}

// do runs one command under the command deadline (and ctx's).
func (n *Net) do(ctx context.Context, argv ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.CommandTimeout)
	defer cancel()
	return n.run.Run(ctx, argv)
}

// Command returns a command that runs name in node's network namespace.
func (n *Net) Command(node Node, name string, args ...string) *exec.Cmd {
	w := n.Wrapper(node)
	return exec.Command(w[0], append(append(w[1:], name), args...)...)
}

// Wrapper is the argv prefix that runs a command in node's network
// namespace, in a mount namespace of its own (mounts made there, such as
// an agent's FUSE file systems, end with its last process) that still
// sees the host's mounts. Not `ip netns exec`: that also mounts a sysfs
// of the namespace's own over /sys, hiding the cgroup hierarchies under
// /sys/fs/cgroup (an agent there finds no memory cgroup and runs its
// sandboxes without limits).
func (n *Net) Wrapper(node Node) []string {
	return []string{"nsenter", "--net=" + filepath.Join("/run/netns", node.Name), "--",
		"unshare", "--mount", "--propagation", "slave", "--"}
}

// Qdiscs returns `tc qdisc show` of node's eth0, inside its namespace,
// and of its host end.
func (n *Net) Qdiscs(ctx context.Context, node Node) (inside, host string, err error) {
	in, err := n.do(ctx, "tc", "-n", node.Name, "qdisc", "show", "dev", "eth0")
	if err != nil {
		return "", "", err
	}
	h, err := n.do(ctx, "tc", "qdisc", "show", "dev", node.HostVeth)
	return string(in), string(h), err
}

// SetRates changes the link of node (or of the store) while it runs: out
// caps what it sends, in what it receives (0: as out); a negative rate
// leaves that direction unshaped. The Net's Layout records the new rates.
func (n *Net) SetRates(ctx context.Context, node Node, out, in int64) error {
	slot := n.Store
	if i := slices.IndexFunc(n.Nodes, func(x Node) bool { return x.Name == node.Name }); i >= 0 {
		slot = &n.Nodes[i]
	}
	if slot == nil || slot.Name != node.Name {
		return fmt.Errorf("hostnet: no node %s in this run", node.Name)
	}
	inside, host, err := n.Qdiscs(ctx, node)
	if err != nil {
		return err
	}
	// set shapes dev (in namespace ns, or the host's for "") at rate.
	set := func(rate int64, shaped bool, ns, dev string) error {
		argv := []string{"tc"}
		if ns != "" {
			argv = append(argv, "-n", ns)
		}
		switch {
		case rate > 0:
			argv = append(append(argv, "qdisc", "replace", "dev", dev, "root"), TBF(rate)...)
		case shaped:
			argv = append(argv, "qdisc", "del", "dev", dev, "root")
		default:
			return nil // unshaped already
		}
		_, err := n.do(ctx, argv...)
		return err
	}
	nd := *slot
	nd.Rate, nd.InRate = out, in
	if err := set(nd.Rate, strings.Contains(inside, "tbf"), node.Name, "eth0"); err != nil {
		return fmt.Errorf("hostnet: %w", err)
	}
	if err := set(nd.inRate(), strings.Contains(host, "tbf"), "", node.HostVeth); err != nil {
		return fmt.Errorf("hostnet: %w", err)
	}
	*slot = nd
	return nil
}

// Close kills what still runs in the namespaces, removes them, their
// links and the bridge, and the run's record. Safe to call more than
// once; every call returns the first one's result.
func (n *Net) Close() error {
	n.closeOnce.Do(func() { n.closeErr = n.close() })
	return n.closeErr
}

func (n *Net) close() error {
	var names, devs []string
	for _, nd := range n.all() {
		names = append(names, nd.Name)
		devs = append(devs, nd.HostVeth)
	}
	err := teardown(context.Background(), n.run, n.cfg.CommandTimeout, names, append(devs, n.Bridge))
	if err == nil {
		_ = os.Remove(n.record)
	}
	return err
}

// teardown kills the processes in namespaces, deletes them, then the
// devices; a device or namespace already gone is not an error.
func teardown(ctx context.Context, run Runner, timeout time.Duration, namespaces, devices []string) error {
	var errs []error
	step := func(argv ...string) ([]byte, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return run.Run(ctx, argv)
	}
	for _, ns := range namespaces {
		if !exists(filepath.Join("/run/netns", ns)) {
			continue
		}
		if out, err := step("ip", "netns", "pids", ns); err == nil {
			for _, f := range strings.Fields(string(out)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		if _, err := step("ip", "netns", "del", ns); err != nil {
			errs = append(errs, err)
		}
	}
	for _, d := range devices {
		if !exists(filepath.Join("/sys/class/net", d)) {
			continue
		}
		if _, err := step("ip", "link", "del", d); err != nil && exists(filepath.Join("/sys/class/net", d)) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// sweep removes the namespaces and devices of dead runs of this prefix;
// the caller holds the registry's lock.
func (n *Net) sweep(ctx context.Context) {
	for _, r := range deadRuns(n.cfg.RegistryDir, n.cfg.Prefix) {
		n.log.Warn("hostnet: removing what a dead run left behind", "record", r.path, "owner", r.Owner,
			"namespaces", r.Namespaces, "devices", r.Devices)
		if err := teardown(ctx, n.run, n.cfg.CommandTimeout, r.Namespaces, r.Devices); err != nil {
			n.log.Warn("hostnet: removing a dead run", "record", r.path, "err", err)
			continue
		}
		_ = os.Remove(r.path)
	}
}

// Sweep removes the namespaces and devices of dead runs of prefix
// recorded in registryDir ("" for DefaultRegistryDir) and says how many
// runs it removed: what `hoard down` does after stopping a run that had
// to be killed.
func Sweep(ctx context.Context, registryDir, prefix string, log *slog.Logger) (int, error) {
	cfg := Config{Nodes: 1, Prefix: prefix, RegistryDir: registryDir}.withDefaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if !exists(cfg.RegistryDir) {
		return 0, nil
	}
	unlock, err := lock(ctx, cfg.RegistryDir)
	if err != nil {
		return 0, err
	}
	defer unlock()
	before := len(deadRuns(cfg.RegistryDir, cfg.Prefix))
	n := &Net{cfg: cfg, run: execRunner{}, log: log}
	n.sweep(ctx)
	return before - len(deadRuns(cfg.RegistryDir, cfg.Prefix)), nil
}

type deadRun struct {
	record
	path string
}

func deadRuns(dir, prefix string) []deadRun {
	paths, _ := filepath.Glob(filepath.Join(dir, prefix+"*.json"))
	var out []deadRun
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		var r record
		if json.Unmarshal(data, &r) != nil || r.Prefix != prefix {
			continue
		}
		if r.Owner > 0 && procStart(r.Owner) == r.OwnerStart && r.OwnerStart != 0 {
			continue // alive
		}
		out = append(out, deadRun{r, p})
	}
	return out
}

// freeSubnet is the first 10.213.X.0/24 that no interface of the machine
// and no recorded run uses; the caller holds the registry's lock.
func (n *Net) freeSubnet(ctx context.Context) (netip.Prefix, error) {
	out, err := n.do(ctx, "ip", "-o", "-4", "addr", "show")
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("hostnet: %w", err)
	}
	used := map[netip.Prefix]bool{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		for i := 0; i+1 < len(f); i++ {
			if f[i] == "inet" {
				if p, err := netip.ParsePrefix(f[i+1]); err == nil {
					used[netip.PrefixFrom(p.Addr(), 24).Masked()] = true
				}
			}
		}
	}
	paths, _ := filepath.Glob(filepath.Join(n.cfg.RegistryDir, "*.json"))
	for _, p := range paths {
		var r record
		if data, err := os.ReadFile(p); err == nil && json.Unmarshal(data, &r) == nil {
			if s, err := netip.ParsePrefix(r.Subnet); err == nil {
				used[s] = true
			}
		}
	}
	base := netip.MustParsePrefix(subnetBase).Addr().As4()
	for x := range 256 {
		s := netip.PrefixFrom(netip.AddrFrom4([4]byte{base[0], base[1], byte(x), 0}), 24)
		if !used[s] {
			return s, nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("hostnet: every /24 of %s is in use", subnetBase)
}

// lockTimeout bounds the wait for another run's set-up or sweep.
const lockTimeout = time.Minute

// lock takes the registry's lock (flock), so that two runs never pick
// the same subnet or sweep each other.
func lock(ctx context.Context, dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("hostnet: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, lockTimeout)
	defer cancel()
	for syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("hostnet: locking %s: %w", dir, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

// procStart is a process's start time (field 22 of /proc/PID/stat), or 0
// when it does not exist or has ended (a zombie not reaped yet).
func procStart(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); the start time is field 22.
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return 0
	}
	v, _ := strconv.ParseUint(f[19], 10, 64)
	return v
}
