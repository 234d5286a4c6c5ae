//go:build linux

package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The tests re-execute their own binary as a process that allocates memory
// (allocHelper) when this variable holds a number of MiB.
const allocEnv = "HOARD_SANDBOX_TEST_ALLOC_MIB"

func TestMain(m *testing.M) {
	// The jail tests run this binary as sandbox-init.
	if len(os.Args) > 1 && os.Args[1] == InitCommand {
		j, argv, err := ParseInitArgs(os.Args[2:])
		if err == nil {
			var status int
			if status, err = Enter(j, argv, os.Environ()); err == nil {
				os.Exit(status)
			}
		}
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if mib := os.Getenv(allocEnv); mib != "" {
		os.Exit(allocHelper(mib))
	}
	if os.Getenv(syscallsEnv) != "" {
		os.Exit(syscallsHelper())
	}
	os.Exit(m.Run())
}

// allocHelper waits for a byte on stdin (so the test can move it into a
// sandbox before it allocates), maps mib MiB with MAP_POPULATE, which makes
// the kernel fault in and charge every page without Go code touching them
// (no race detector shadow memory), says "allocated", and waits for stdin
// to close.
func allocHelper(mib string) int {
	n, err := strconv.Atoi(mib)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var b [1]byte
	if _, err := os.Stdin.Read(b[:]); err != nil {
		return 2
	}
	if _, err := syscall.Mmap(-1, 0, n<<20, syscall.PROT_READ|syscall.PROT_WRITE,
		syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS|syscall.MAP_POPULATE); err != nil {
		fmt.Fprintln(os.Stderr, "mmap:", err)
		return 3
	}
	os.Stdout.WriteString("allocated\n")
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// helper is a running allocHelper.
type helper struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	waited chan error
}

// startHelper starts an allocHelper that will allocate mib MiB once
// released; it is killed and reaped when the test ends.
func startHelper(t *testing.T, mib int) *helper {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), allocEnv+"="+strconv.Itoa(mib))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &helper{t: t, cmd: cmd, stdin: stdin, lines: make(chan string, 1), waited: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
		close(h.lines)
		h.waited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		stdin.Close()
		<-h.waited
	})
	return h
}

// release lets the helper allocate.
func (h *helper) release() {
	h.t.Helper()
	if _, err := h.stdin.Write([]byte{1}); err != nil {
		h.t.Fatal(err)
	}
}

// allocated waits for the helper to say it allocated; false if it died.
func (h *helper) allocated() bool {
	h.t.Helper()
	select {
	case l, ok := <-h.lines:
		return ok && l == "allocated"
	case <-time.After(10 * time.Second):
		h.t.Fatal("helper neither allocated nor died in 10s")
		return false
	}
}

// wait waits for the helper to exit and returns how.
func (h *helper) wait() error {
	h.t.Helper()
	for range h.lines {
	}
	select {
	case err := <-h.waited:
		h.waited <- err // for the cleanup
		return err
	case <-time.After(10 * time.Second):
		h.t.Fatal("helper did not exit in 10s")
		return nil
	}
}

// killedBy reports whether err says the process died of sig.
func killedBy(err error, sig syscall.Signal) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}

// cgroupManager returns a Manager with real memory cgroups and a root of
// its own. A host without them fails the test, unless HOARD_SANDBOX_NONE_OK=1
// says that is expected.
func cgroupManager(t *testing.T) *Manager {
	t.Helper()
	log, buf := bufLogger()
	m, err := NewManager(fmt.Sprintf("hoardtest-%d", os.Getpid()), log)
	if err != nil {
		t.Fatal(err)
	}
	if m.Mode() == ModeNone {
		if os.Getenv("HOARD_SANDBOX_NONE_OK") == "1" {
			t.Skipf("no usable memory cgroup (%s); HOARD_SANDBOX_NONE_OK=1", m.Reason())
		}
		t.Fatalf("no usable memory cgroup on this host: %s\n"+
			"These tests need cgroup v2 or the cgroup v1 memory controller, writable (root); "+
			"set HOARD_SANDBOX_NONE_OK=1 to skip them where that is expected.", m.Reason())
	}
	if out := buf.String(); strings.Count(out, "sandbox: memory cgroups") != 1 || !strings.Contains(out, "mode="+m.Mode()) {
		t.Errorf("NewManager logged %q, want one line with the mode", out)
	}
	return m
}

// create makes a sandbox that is deleted when the test ends.
func create(t *testing.T, m *Manager, name string, limit int64) *Sandbox {
	t.Helper()
	s, err := m.Create(name, limit)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Enforced() || s.Path() == "" || s.Limit() != limit {
		t.Fatalf("Enforced, Path, Limit = %v, %q, %d", s.Enforced(), s.Path(), s.Limit())
	}
	t.Cleanup(func() {
		if err := s.Delete(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// readFile reads a cgroup file, trimmed.
func readFile(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// checkLimit checks the limit files of s against limit, and that swap is
// off.
func checkLimit(t *testing.T, m *Manager, s *Sandbox, limit int64) {
	t.Helper()
	want := strconv.FormatInt(limit, 10)
	switch m.Mode() {
	case ModeCgroup1:
		if got := readFile(t, s.Path(), "memory.limit_in_bytes"); got != want {
			t.Errorf("memory.limit_in_bytes = %s, want %s", got, want)
		}
		if exists(filepath.Join(s.Path(), "memory.memsw.limit_in_bytes")) {
			if got := readFile(t, s.Path(), "memory.memsw.limit_in_bytes"); got != want {
				t.Errorf("memory.memsw.limit_in_bytes = %s, want %s", got, want)
			}
		}
		if got := readFile(t, s.Path(), "memory.swappiness"); got != "0" {
			t.Errorf("memory.swappiness = %s, want 0", got)
		}
		if got := readFile(t, s.Path(), "memory.oom_control"); !strings.Contains(got, "oom_kill_disable 0") {
			t.Errorf("memory.oom_control = %q, want the OOM killer on", got)
		}
	case ModeCgroup2:
		if got := readFile(t, s.Path(), "memory.max"); got != want {
			t.Errorf("memory.max = %s, want %s", got, want)
		}
		if exists(filepath.Join(s.Path(), "memory.swap.max")) {
			if got := readFile(t, s.Path(), "memory.swap.max"); got != "0" {
				t.Errorf("memory.swap.max = %s, want 0", got)
			}
		}
	}
}

func TestOOMKill(t *testing.T) {
	m := cgroupManager(t)
	s := create(t, m, "oom", 64<<20)
	checkLimit(t, m, s, 64<<20)
	if n, err := s.OOMKills(); n != 0 || err != nil {
		t.Fatalf("OOMKills = %d, %v before anything ran", n, err)
	}
	h := startHelper(t, 200)
	if err := s.Add(h.cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	h.release()
	if h.allocated() {
		t.Fatal("a process allocated 200 MiB in a 64 MiB sandbox")
	}
	if err := h.wait(); !killedBy(err, syscall.SIGKILL) {
		t.Fatalf("helper exited with %v, want SIGKILL", err)
	}
	if n, err := s.OOMKills(); n < 1 || err != nil {
		t.Fatalf("OOMKills = %d, %v after an OOM kill", n, err)
	}
	t.Logf("%s: OOM kill counted in %s", m.Mode(), s.Path())
}

func TestWithinLimitAndDelete(t *testing.T) {
	m := cgroupManager(t)
	s, err := m.Create("fits", 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	h := startHelper(t, 16)
	pid := h.cmd.Process.Pid
	if err := s.Add(pid); err != nil {
		t.Fatal(err)
	}
	h.release()
	if !h.allocated() {
		t.Fatalf("a process died allocating 16 MiB in a 64 MiB sandbox: %v", h.wait())
	}
	u, err := s.Usage()
	if err != nil || u < 16<<20 || u > 64<<20 {
		t.Errorf("Usage = %d, %v; want 16 to 64 MiB", u, err)
	}
	if pids, err := s.Procs(); err != nil || !slices.Equal(pids, []int{pid}) {
		t.Errorf("Procs = %v, %v; want [%d]", pids, err, pid)
	}
	if n, err := s.OOMKills(); n != 0 || err != nil {
		t.Errorf("OOMKills = %d, %v", n, err)
	}
	path := s.Path()
	if _, err := m.Create("fits", 64<<20); !errors.Is(err, ErrExists) {
		t.Errorf("Create of a live name: err = %v, want ErrExists", err)
	}

	start := time.Now()
	if err := s.Delete(); err != nil {
		t.Fatal(err)
	}
	t.Logf("Delete took %v", time.Since(start))
	if err := h.wait(); !killedBy(err, syscall.SIGKILL) {
		t.Errorf("helper exited with %v, want SIGKILL", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cgroup %s still there after Delete: %v", path, err)
	}
	if err := s.Delete(); err != nil {
		t.Errorf("second Delete: %v", err)
	}
	if _, err := s.Usage(); !errors.Is(err, ErrDeleted) {
		t.Errorf("Usage after Delete: %v", err)
	}
	if err := s.Add(os.Getpid()); !errors.Is(err, ErrDeleted) {
		t.Errorf("Add after Delete: %v", err)
	}
	create(t, m, "fits", 64<<20) // the name is free again
}

func TestSetLimit(t *testing.T) {
	m := cgroupManager(t)
	s := create(t, m, "resize", 64<<20)
	if err := s.SetLimit(128 << 20); err != nil {
		t.Fatal(err)
	}
	if s.Limit() != 128<<20 {
		t.Errorf("Limit = %d", s.Limit())
	}
	checkLimit(t, m, s, 128<<20)

	h := startHelper(t, 96) // over the old limit, under the new one
	if err := s.Add(h.cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	h.release()
	if !h.allocated() {
		t.Fatalf("a process died allocating 96 MiB in a sandbox raised to 128 MiB: %v", h.wait())
	}
	if err := s.SetLimit(256 << 20); err != nil {
		t.Fatal(err)
	}
	checkLimit(t, m, s, 256<<20)
	if err := s.SetLimit(112 << 20); err != nil { // down, still above the usage
		t.Fatal(err)
	}
	checkLimit(t, m, s, 112<<20)
	if err := s.SetLimit(-1); err == nil {
		t.Error("SetLimit(-1): no error")
	}
	if s.Limit() != 112<<20 {
		t.Errorf("Limit = %d after a failed SetLimit", s.Limit())
	}
}

// hasCapSysResource reports whether this process may lower oom_score_adj.
func hasCapSysResource(t *testing.T) bool {
	t.Helper()
	for line := range strings.Lines(readFile(t, "/proc/self", "status")) {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return caps&(1<<24) != 0 // CAP_SYS_RESOURCE
		}
	}
	t.Fatal("no CapEff in /proc/self/status")
	return false
}

// oomVictim runs, in a 64 MiB sandbox, a 40 MiB helper (mark is applied to
// it first) and then a greedy one, and checks that the OOM killer took the
// greedy one although the other is larger. markGreedy is applied to the
// greedy helper.
func oomVictim(t *testing.T, name string, mark, markGreedy func(s *Sandbox, pid int) error) {
	m := cgroupManager(t)
	s := create(t, m, name, 64<<20)
	big := startHelper(t, 40)
	if err := s.Add(big.cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if mark != nil {
		if err := mark(s, big.cmd.Process.Pid); err != nil {
			t.Fatal(err)
		}
	}
	big.release()
	if !big.allocated() {
		t.Fatalf("40 MiB helper died: %v", big.wait())
	}
	greedy := startHelper(t, 100)
	if err := s.Add(greedy.cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if markGreedy != nil {
		if err := markGreedy(s, greedy.cmd.Process.Pid); err != nil {
			t.Fatal(err)
		}
	}
	greedy.release()
	if greedy.allocated() {
		t.Fatal("greedy helper allocated 100 MiB next to 40 MiB in a 64 MiB sandbox")
	}
	if err := greedy.wait(); !killedBy(err, syscall.SIGKILL) {
		t.Fatalf("greedy helper exited with %v, want SIGKILL", err)
	}
	if n, err := s.OOMKills(); n != 1 || err != nil {
		t.Errorf("OOMKills = %d, %v; want 1", n, err)
	}
	if pids, err := s.Procs(); err != nil || !slices.Equal(pids, []int{big.cmd.Process.Pid}) {
		t.Errorf("Procs = %v, %v; want the 40 MiB helper alone", pids, err)
	}
}

func TestProtectFromOOM(t *testing.T) {
	if !hasCapSysResource(t) {
		// Check the failure is the documented one, then skip.
		m := cgroupManager(t)
		s := create(t, m, "protect", 64<<20)
		h := startHelper(t, 1)
		if err := s.ProtectFromOOM(h.cmd.Process.Pid); !errors.Is(err, os.ErrPermission) {
			t.Fatalf("ProtectFromOOM without CAP_SYS_RESOURCE: err = %v, want os.ErrPermission", err)
		}
		t.Skip("this process lacks CAP_SYS_RESOURCE, which lowering oom_score_adj needs (TestPreferForOOM covers the unprivileged way)")
	}
	oomVictim(t, "protect", func(s *Sandbox, pid int) error {
		if err := s.ProtectFromOOM(pid); err != nil {
			return err
		}
		if got := readFile(t, fmt.Sprintf("/proc/%d", pid), "oom_score_adj"); got != "-1000" {
			return fmt.Errorf("oom_score_adj = %s", got)
		}
		return nil
	}, nil)
}

func TestPreferForOOM(t *testing.T) {
	oomVictim(t, "prefer", nil, func(s *Sandbox, pid int) error {
		if err := s.PreferForOOM(pid); err != nil {
			return err
		}
		if got := readFile(t, fmt.Sprintf("/proc/%d", pid), "oom_score_adj"); got != "1000" {
			return fmt.Errorf("oom_score_adj = %s", got)
		}
		return nil
	})
}

// Without marks the OOM killer takes the largest process: the one the
// tests above protect.
func TestOOMKillsLargest(t *testing.T) {
	m := cgroupManager(t)
	s := create(t, m, "largest", 64<<20)
	big := startHelper(t, 40)
	if err := s.Add(big.cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	big.release()
	if !big.allocated() {
		t.Fatalf("40 MiB helper died: %v", big.wait())
	}
	greedy := startHelper(t, 100)
	if err := s.Add(greedy.cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	greedy.release()
	if err := big.wait(); !killedBy(err, syscall.SIGKILL) {
		t.Fatalf("40 MiB helper exited with %v, want SIGKILL", err)
	}
}

func TestStaleCgroup(t *testing.T) {
	m1 := cgroupManager(t)
	m2 := cgroupManager(t) // same root: a restarted agent

	// Busy: a process still runs in it; left alone.
	busy := create(t, m1, "busy", 64<<20)
	h := startHelper(t, 1)
	if err := busy.Add(h.cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	_, err := m2.Create("busy", 64<<20)
	if !errors.Is(err, ErrExists) || !strings.Contains(err.Error(), strconv.Itoa(h.cmd.Process.Pid)) {
		t.Errorf("Create over a busy cgroup: err = %v, want ErrExists naming pid %d", err, h.cmd.Process.Pid)
	}
	if !exists(busy.Path()) {
		t.Error("Create removed a busy cgroup")
	}

	// Empty: removed and made anew.
	if _, err := m1.Create("empty", 64<<20); err != nil {
		t.Fatal(err)
	}
	s := create(t, m2, "empty", 32<<20)
	checkLimit(t, m2, s, 32<<20)
}

func TestDeleteRemovedBehindItsBack(t *testing.T) {
	m := cgroupManager(t)
	s, err := m.Create("gone", 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(s.Path()); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(); err != nil {
		t.Errorf("Delete of a removed cgroup: %v", err)
	}
}
