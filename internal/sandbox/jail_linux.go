//go:build linux

package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Cloneflags are the namespaces a jailed process is started in (with
// CLONE_NEWNET too when it joins no network namespace of its own): put
// them in the exec.Cmd's SysProcAttr that runs sandbox-init.
func (j *Jail) Cloneflags() uintptr {
	f := uintptr(unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS)
	if j.NetNSFD == 0 {
		f |= unix.CLONE_NEWNET
	}
	return f
}

// Enter is sandbox-init's work: with j validated (ParseInitArgs), in the
// namespaces Cloneflags names, as root, it sets the jail up, drops its
// privileges and runs argv with env. As PID 1 of its PID namespace (as
// the agent starts it) it starts argv as its child and stays, as the
// jail's unprivileged init, to reap whatever the program orphans (reap);
// it returns the program's exit status when the program ends (128+N when
// signal N killed it), and sandbox-init exits with it, which ends
// everything left in the namespace. Outside a PID namespace of its own it
// execs argv and does not return. The error is why the jail could not be
// entered.
func Enter(j *Jail, argv, env []string) (int, error) {
	if err := enter(j); err != nil {
		return 0, err
	}
	if os.Getpid() != 1 {
		if err := unix.Exec(argv[0], argv, env); err != nil {
			return 0, fmt.Errorf("sandbox-init: exec %s: %w", argv[0], err)
		}
	}
	return reap(argv, env, j.KeepFDs)
}

// enter sets the jail up and drops every privilege; the calling thread
// stays locked to its goroutine.
func enter(j *Jail) error {
	// The network namespace is a thread's; the exec happens on this one.
	runtime.LockOSThread()
	for _, p := range j.Cgroups {
		// "0" is the writing process, whatever its pid is seen as.
		if err := os.WriteFile(p, []byte("0"), 0); err != nil {
			return fmt.Errorf("sandbox-init: join cgroup %s: %w", filepath.Dir(p), err)
		}
	}
	if j.NetNSFD != 0 {
		if err := unix.Setns(j.NetNSFD, unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("sandbox-init: join the network namespace: %w", err)
		}
		_ = unix.Close(j.NetNSFD)
	} else if err := loopbackUp(); err != nil {
		return err
	}
	if err := buildRoot(j); err != nil {
		return err
	}
	if err := unix.Sethostname([]byte(j.Hostname)); err != nil {
		return fmt.Errorf("sandbox-init: host name: %w", err)
	}
	if err := unix.Chdir(j.Dir); err != nil {
		return fmt.Errorf("sandbox-init: working directory %s: %w", j.Dir, err)
	}
	if err := closeOtherFDs(j.KeepFDs); err != nil {
		return err
	}
	if j.OOMScoreAdj != 0 {
		if err := os.WriteFile("/proc/self/oom_score_adj", []byte(strconv.Itoa(j.OOMScoreAdj)), 0); err != nil {
			return fmt.Errorf("sandbox-init: oom_score_adj: %w", err)
		}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("sandbox-init: no_new_privs: %w", err)
	}
	// Go's Setgroups, Setgid and Setuid change every thread.
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("sandbox-init: setgroups: %w", err)
	}
	if err := syscall.Setresgid(j.GID, j.GID, j.GID); err != nil {
		return fmt.Errorf("sandbox-init: setgid %d: %w", j.GID, err)
	}
	if err := syscall.Setresuid(j.UID, j.UID, j.UID); err != nil {
		return fmt.Errorf("sandbox-init: setuid %d: %w", j.UID, err)
	}
	// Changing credentials cleared the parent-death signal; the worker
	// still dies with the agent.
	_ = unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0)
	// Last, on every thread: the jail's init and all it starts.
	return installSeccomp()
}

// forwarded are the signals the jail's init passes on to the program. A
// PID 1 gets only the signals it handles from its own namespace, and
// SIGKILL and SIGSTOP from its parent's, which end the whole jail.
var forwarded = []os.Signal{unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2}

// reap is the jail's init, PID 1 of its namespace and already
// unprivileged: it starts argv (with the descriptors keep and 0-2), passes
// it the signals it is sent, and reaps every process that ends in the
// namespace (the program's orphans are reparented to it), until the
// program itself ends; it returns the program's exit status.
func reap(argv, env []string, keep []int) (int, error) {
	files := []*os.File{os.Stdin, os.Stdout, os.Stderr}
	for _, fd := range keep {
		for len(files) <= fd {
			files = append(files, nil)
		}
		files[fd] = os.NewFile(uintptr(fd), "kept")
	}
	// Forwarding starts before the program does: nothing is lost.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	p, err := os.StartProcess(argv[0], argv, &os.ProcAttr{Env: env, Files: files})
	if err != nil {
		return 0, fmt.Errorf("sandbox-init: start %s: %w", argv[0], err)
	}
	// The program holds the kept descriptors (its pipes); their ends
	// close when it ends.
	for _, f := range files[3:] {
		if f != nil {
			_ = f.Close()
		}
	}
	go func() {
		for s := range sigs {
			_ = unix.Kill(p.Pid, s.(unix.Signal))
		}
	}()
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return 0, fmt.Errorf("sandbox-init: wait: %w", err)
		case pid != p.Pid:
			continue // an orphan, reaped
		case ws.Signaled():
			return 128 + int(ws.Signal()), nil
		case ws.Exited():
			return ws.ExitStatus(), nil
		}
	}
}

// buildRoot mounts the jail's root on j.Root (a tmpfs with the read-only
// host paths, /proc, /dev, /tmp and j.Files), pivots into it, drops the
// host's root and makes the new one read-only.
func buildRoot(j *Jail) error {
	m := func(src, dst, fstype string, flags uintptr, data string) error {
		if err := unix.Mount(src, dst, fstype, flags, data); err != nil {
			return fmt.Errorf("sandbox-init: mount %s on %s: %w", src, dst, err)
		}
		return nil
	}
	// Nothing mounted here propagates to the host.
	if err := m("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return err
	}
	root := j.Root
	if err := m("tmpfs", root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=4m,mode=0755"); err != nil {
		return err
	}
	// /tmp first: a host path under /tmp is shown inside the private one.
	tmpOpts := "mode=1777,size=" + strconv.FormatInt(j.TmpBytes, 10)
	if err := os.Mkdir(filepath.Join(root, "tmp"), 0o755); err != nil {
		return fmt.Errorf("sandbox-init: %w", err)
	}
	if err := m("tmpfs", filepath.Join(root, "tmp"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, tmpOpts); err != nil {
		return err
	}
	paths := slices.Clone(j.ReadOnly)
	slices.Sort(paths)
	var shown []string
	for _, p := range paths {
		if slices.ContainsFunc(shown, func(d string) bool { return strings.HasPrefix(p, d+"/") || p == d }) {
			continue // already visible through a directory above it
		}
		ok, err := expose(root, p)
		if err != nil {
			return err
		}
		if ok {
			shown = append(shown, p)
		}
	}
	if j.Code != "" {
		dst := filepath.Join(root, CodeDir)
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return fmt.Errorf("sandbox-init: %w", err)
		}
		if err := bindReadOnly(j.Code, dst); err != nil {
			return err
		}
	}
	for _, d := range []string{"proc", "dev"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			return fmt.Errorf("sandbox-init: %w", err)
		}
	}
	if err := m("proc", filepath.Join(root, "proc"), "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return err
	}
	dev := filepath.Join(root, "dev")
	if err := m("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=64k"); err != nil {
		return err
	}
	for _, d := range []string{"null", "zero", "full", "random", "urandom"} {
		p := filepath.Join(dev, d)
		if err := os.WriteFile(p, nil, 0o666); err != nil {
			return fmt.Errorf("sandbox-init: %w", err)
		}
		if err := m("/dev/"+d, p, "", unix.MS_BIND, ""); err != nil {
			return err
		}
	}
	for name, target := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := os.Symlink(target, filepath.Join(dev, name)); err != nil {
			return fmt.Errorf("sandbox-init: %w", err)
		}
	}
	shm := filepath.Join(dev, "shm")
	if err := os.Mkdir(shm, 0o755); err != nil {
		return fmt.Errorf("sandbox-init: %w", err)
	}
	if err := m("tmpfs", shm, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, tmpOpts); err != nil {
		return err
	}
	for p, body := range j.Files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return fmt.Errorf("sandbox-init: %w", err)
		}
		if err := os.WriteFile(full, []byte(body), 0o444); err != nil {
			return fmt.Errorf("sandbox-init: %w", err)
		}
	}
	old := filepath.Join(root, ".old")
	if err := os.Mkdir(old, 0o700); err != nil {
		return fmt.Errorf("sandbox-init: %w", err)
	}
	if err := unix.PivotRoot(root, old); err != nil {
		return fmt.Errorf("sandbox-init: pivot_root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("sandbox-init: %w", err)
	}
	if err := unix.Unmount("/.old", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("sandbox-init: unmount the host's root: %w", err)
	}
	if err := os.Remove("/.old"); err != nil {
		return fmt.Errorf("sandbox-init: %w", err)
	}
	return m("", "/", "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, "")
}

// expose makes host path p visible at root+p: a symbolic link as the
// same link, anything else bound read-only. A missing p is skipped
// (false).
func expose(root, p string) (bool, error) {
	fi, err := os.Lstat(p)
	if os.IsNotExist(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("sandbox-init: %w", err)
	}
	dst := filepath.Join(root, p)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return false, fmt.Errorf("sandbox-init: %w", err)
	}
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		t, err := os.Readlink(p)
		if err != nil {
			return false, fmt.Errorf("sandbox-init: %w", err)
		}
		if err := os.Symlink(t, dst); err != nil {
			return false, fmt.Errorf("sandbox-init: %w", err)
		}
		return true, nil
	case fi.IsDir():
		err = os.Mkdir(dst, 0o755)
	default:
		err = os.WriteFile(dst, nil, 0o444)
	}
	if err != nil {
		return false, fmt.Errorf("sandbox-init: %w", err)
	}
	return true, bindReadOnly(p, dst)
}

// bindReadOnly binds host path src on dst, read-only, nosuid, nodev.
func bindReadOnly(src, dst string) error {
	if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("sandbox-init: bind %s: %w", src, err)
	}
	if err := unix.Mount("", dst, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("sandbox-init: make %s read-only: %w", src, err)
	}
	return nil
}

// closeOtherFDs marks every descriptor above 2 but keep close-on-exec.
func closeOtherFDs(keep []int) error {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return fmt.Errorf("sandbox-init: %w", err)
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd <= 2 || slices.Contains(keep, fd) {
			continue
		}
		unix.CloseOnExec(fd)
	}
	for _, fd := range keep {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0); err != nil {
			return fmt.Errorf("sandbox-init: keep fd %d: %w", fd, err)
		}
	}
	return nil
}

// loopbackUp brings the calling thread's network namespace's loopback
// interface up.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("sandbox: loopback: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("sandbox: loopback: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("sandbox: loopback flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("sandbox: loopback up: %w", err)
	}
	return nil
}

// Network is an instance's network namespace: only loopback, and on it
// one listening TCP socket, the instance's cachelet's S3 endpoint as its
// function sees it. The cachelet serves on the socket (handed over open)
// from the host's namespace; the function's processes join the namespace
// (Jail.NetNSFD) and reach that socket and nothing else.
type Network struct {
	ns   *os.File
	ln   *os.File
	port int
}

// NewNetwork makes a network namespace with loopback up and a socket
// listening on 127.0.0.1 (a free port) in it. It needs CAP_SYS_ADMIN;
// without it the error wraps ErrNoIsolation.
func NewNetwork() (*Network, error) {
	type result struct {
		n   *Network
		err error
	}
	ch := make(chan result, 1)
	go func() {
		// The namespace is made on this thread, which then goes back to
		// the host's. A thread must not end here: children it started
		// earlier (cachelets, workers) have it as their parent for
		// Pdeathsig, and would be killed. Only if it cannot go back is
		// it left locked, and so ended, with the goroutine.
		runtime.LockOSThread()
		host, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{nil, fmt.Errorf("sandbox: the host's network namespace: %w", err)}
			return
		}
		defer host.Close()
		n, err := newNetwork()
		if err := unix.Setns(int(host.Fd()), unix.CLONE_NEWNET); err != nil {
			if n != nil {
				n.Close()
			}
			ch <- result{nil, fmt.Errorf("sandbox: back to the host's network namespace: %w", err)}
			return // still locked: the thread ends
		}
		runtime.UnlockOSThread()
		ch <- result{n, err}
	}()
	r := <-ch
	return r.n, r.err
}

func newNetwork() (*Network, error) {
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		return nil, fmt.Errorf("%w: a network namespace: %v", ErrNoIsolation, err)
	}
	if err := loopbackUp(); err != nil {
		return nil, err
	}
	ns, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return nil, fmt.Errorf("sandbox: network namespace: %w", err)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		ns.Close()
		return nil, fmt.Errorf("sandbox: listener: %w", err)
	}
	fail := func(err error) (*Network, error) {
		_ = unix.Close(fd)
		ns.Close()
		return nil, fmt.Errorf("sandbox: listener: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return fail(err)
	}
	if err := unix.Listen(fd, 1024); err != nil {
		return fail(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return fail(err)
	}
	in4, ok := sa.(*unix.SockaddrInet4)
	if !ok {
		return fail(fmt.Errorf("unexpected address %T", sa))
	}
	return &Network{ns: ns, ln: os.NewFile(uintptr(fd), "s3-listener"), port: in4.Port}, nil
}

// Namespace is the namespace, open: hand it to sandbox-init
// (exec.Cmd.ExtraFiles, Jail.NetNSFD). Owned by the Network.
func (n *Network) Namespace() *os.File { return n.ns }

// Listener is the listening socket: hand it to the cachelet
// (exec.Cmd.ExtraFiles). Owned by the Network.
func (n *Network) Listener() *os.File { return n.ln }

// Endpoint is the listener's address inside the namespace,
// "127.0.0.1:PORT".
func (n *Network) Endpoint() string { return "127.0.0.1:" + strconv.Itoa(n.port) }

// Close closes the Network's files; the namespace goes away with the
// last process in it. Idempotent.
func (n *Network) Close() error {
	if n.ns != nil {
		n.ns.Close()
		n.ln.Close()
		n.ns, n.ln = nil, nil
	}
	return nil
}

// Probe checks that this host can jail a process: it runs hoardBin's
// sandbox-init with a jail of uid and gid 65534 on /bin/true (in a fresh
// network namespace and a temporary root) and waits for it. An error
// wraps ErrNoIsolation and says why.
func Probe(ctx context.Context, hoardBin string) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: the agent does not run as root (uid %d)", ErrNoIsolation, os.Geteuid())
	}
	tr, err := exec.LookPath("true")
	if err != nil {
		return fmt.Errorf("%w: no true(1) to probe with: %v", ErrNoIsolation, err)
	}
	tr, _ = filepath.EvalSymlinks(tr)
	root, err := os.MkdirTemp("", "hoard-jail-probe-")
	if err != nil {
		return err
	}
	defer os.Remove(root)
	j := &Jail{UID: 65534, GID: 65534, Root: root, ReadOnly: append(SystemPaths(), filepath.Dir(tr))}
	args, err := j.Args([]string{tr})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, hoardBin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: j.Cloneflags(), Pdeathsig: syscall.SIGKILL}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%w: %s %s: %v: %s", ErrNoIsolation, hoardBin, InitCommand, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// SystemPaths are the host's directories every jail shows read-only:
// programs, libraries and /etc (no secrets of the platform are there).
func SystemPaths() []string {
	return []string{"/bin", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/sbin", "/usr"}
}
