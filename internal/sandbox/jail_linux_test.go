//go:build linux

package sandbox

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// needRoot skips tests that make namespaces.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("jails need root")
	}
}

// runJailed runs argv in j, with this test binary as sandbox-init, and
// returns its output.
func runJailed(t *testing.T, j *Jail, extra []*os.File, argv ...string) (string, error) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if j.Root == "" {
		j.Root = t.TempDir()
	}
	args, err := j.Args(argv)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, self, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "SECRET=only-mine"}
	cmd.ExtraFiles = extra
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: j.Cloneflags(), Pdeathsig: syscall.SIGKILL}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	return out.String(), err
}

func TestProbe(t *testing.T) {
	needRoot(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := Probe(context.Background(), self); err != nil {
		t.Fatal(err)
	}
}

func TestJailEnter(t *testing.T) {
	needRoot(t)
	code := t.TempDir()
	if err := os.WriteFile(code+"/f", []byte("code"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(code, 0o755); err != nil {
		t.Fatal(err)
	}
	shown := t.TempDir() // under /tmp: shown inside the private /tmp
	if err := os.WriteFile(shown+"/s", []byte("shown"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{shown, filepath.Dir(shown)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	j := &Jail{UID: 65534, GID: 65534, Hostname: "jailtest", ReadOnly: append(SystemPaths(), shown), Code: code, Dir: CodeDir,
		Files: map[string]string{"/run/hoard/cfg": "cfg"}, OOMScoreAdj: 1000}
	script := `
id -u; id -g; hostname; pwd; cat f; echo; cat /run/hoard/cfg; echo
ls /proc | grep -c '^[0-9]'
echo tmp > /tmp/x && cat /tmp/x
cat ` + shown + `/s; echo
cat /proc/self/oom_score_adj
(echo no > ` + shown + `/s) 2>/dev/null && echo SHOWN-WRITABLE
(echo no > f) 2>/dev/null && echo CODE-WRITABLE
(echo no > /usr/x) 2>/dev/null && echo USR-WRITABLE
test -e ` + code + ` && echo HOST-PATH-VISIBLE
true
`
	out, err := runJailed(t, j, nil, "/bin/sh", "-c", script)
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	// Line 6: how many processes /proc shows: the jail's init, sh, ls,
	// grep at most.
	want := []string{"65534", "65534", "jailtest", CodeDir, "code", "cfg", "", "tmp", "shown", "1000"}
	if len(lines) < len(want) {
		t.Fatalf("output %q", out)
	}
	if n, err := strconv.Atoi(lines[6]); err != nil || n > 4 {
		t.Errorf("the jail sees %q processes; want at most 4", lines[6])
	}
	for i, w := range want {
		if w != "" && lines[i] != w {
			t.Errorf("line %d: %q, want %q (output %q)", i, lines[i], w, out)
		}
	}
	for _, bad := range []string{"CODE-WRITABLE", "USR-WRITABLE", "HOST-PATH-VISIBLE", "SHOWN-WRITABLE"} {
		if strings.Contains(out, bad) {
			t.Errorf("%s: %s", bad, out)
		}
	}
}

func TestNetwork(t *testing.T) {
	needRoot(t)
	n, err := NewNetwork()
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ln, err := net.FileListener(n.Listener())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- err.Error()
			return
		}
		b := make([]byte, 16)
		k, _ := c.Read(b)
		c.Close()
		got <- string(b[:k])
	}()
	// A listener on the host's loopback: not reachable from the jail.
	host, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	hostPort := strconv.Itoa(host.Addr().(*net.TCPAddr).Port)
	port := strings.TrimPrefix(n.Endpoint(), "127.0.0.1:")
	j := &Jail{UID: 65534, GID: 65534, ReadOnly: SystemPaths(), NetNSFD: 3}
	script := `echo hello > /dev/tcp/127.0.0.1/` + port + ` && echo SENT
(echo x > /dev/tcp/127.0.0.1/` + hostPort + `) 2>/dev/null && echo HOST-REACHED
true`
	out, err := runJailed(t, j, []*os.File{n.Namespace()}, "/bin/bash", "-c", script)
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !strings.Contains(out, "SENT") || strings.Contains(out, "HOST-REACHED") {
		t.Errorf("jailed output %q", out)
	}
	select {
	case s := <-got:
		if s != "hello\n" {
			t.Errorf("the namespace's listener got %q", s)
		}
	case <-time.After(10 * time.Second):
		t.Error("nothing reached the namespace's listener")
	}
}

func TestLimitTasks(t *testing.T) {
	needRoot(t)
	m, err := NewManager("hoardtest-tasks", nil)
	if err != nil {
		t.Fatal(err)
	}
	if m.Mode() == ModeNone {
		t.Skip("no cgroups")
	}
	box, err := m.Create("t", 256<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer box.Delete()
	// A shell that waits for a line, then forks 50 sleeps.
	cmd := exec.Command("/bin/sh", "-c", `read x; n=0; while [ $n -lt 50 ]; do sleep 5 & n=$((n+1)); done 2>/dev/null; echo started; wait`)
	in, _ := cmd.StdinPipe()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	if err := box.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if err := box.LimitTasks(cmd.Process.Pid, TaskLimits{PIDs: 10, CPUs: 0.5}); err != nil {
		t.Fatal(err)
	}
	in.Write([]byte("go\n"))
	in.Close()
	time.Sleep(500 * time.Millisecond) // let it fork what it can
	pids, err := box.Procs()
	if err != nil {
		t.Fatal(err)
	}
	if len(pids) > 10 {
		t.Errorf("%d processes in the sandbox; want at most the limit, 10", len(pids))
	}
	if err := box.Delete(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
}

// TestJailCgroups: a jailed program is in its cgroups from its first
// instruction (sandbox-init joins them before it execs).
func TestJailCgroups(t *testing.T) {
	needRoot(t)
	m, err := NewManager("hoardtest-jailcg", nil)
	if err != nil {
		t.Fatal(err)
	}
	if m.Mode() == ModeNone {
		t.Skip("no cgroups")
	}
	box, err := m.Create("j", 256<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer box.Delete()
	// Room for the jail's init (this test binary, whose runtime's
	// threads count as tasks, more of them under the race detector) and
	// the program: this test is about membership, not the limit.
	tasks, err := box.TaskCgroups(TaskLimits{PIDs: 128, CPUs: 1})
	if err != nil {
		t.Fatal(err)
	}
	j := &Jail{UID: 65534, GID: 65534, ReadOnly: SystemPaths(), Cgroups: append([]string{box.CgroupProcs()}, tasks...)}
	out, err := runJailed(t, j, nil, "/bin/cat", "/proc/self/cgroup")
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := []string{"hoardtest-jailcg-j\n"}
	if m.Mode() == ModeCgroup1 {
		want = []string{":memory:", "hoardtest-jailcg-j\n", ":pids:", "hoardtest-jailcg-j-fn\n"}
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("/proc/self/cgroup in the jail has no %q:\n%s", w, out)
		}
	}
	if err := box.Delete(); err != nil {
		t.Fatal(err)
	}
}

// TestJailReapsOrphans: processes a jailed program orphans (double forks)
// are reaped by the jail's init once they end, as on any host; none stays
// a zombie.
func TestJailReapsOrphans(t *testing.T) {
	needRoot(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	j := &Jail{UID: 65534, GID: 65534, ReadOnly: SystemPaths(), Root: t.TempDir()}
	// Three grandchildren wait for the end of stdin (as fd 3: a
	// background job's stdin is /dev/null); their parents exit at once,
	// so they are orphans. The program then becomes a process
	// that reaps nothing.
	args, err := j.Args([]string{"/bin/sh", "-c", `exec 3<&0; for i in 1 2 3; do (/bin/sh -c 'read x <&3' &); done; echo started; exec /bin/sleep 60 3<&-`})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: j.Cloneflags(), Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	line := make([]byte, 8)
	if n, err := stdout.Read(line); err != nil || string(line[:n]) != "started\n" {
		t.Fatalf("the program said %q, %v", line[:n], err)
	}
	ns, err := os.Readlink("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/ns/pid")
	if err != nil {
		t.Fatal(err)
	}
	// The jail's processes, as the host sees them: pid → state.
	jailed := func() map[int]string {
		out := map[int]string{}
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if l, err := os.Readlink("/proc/" + e.Name() + "/ns/pid"); err != nil || l != ns {
				continue
			}
			stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
			if err != nil {
				continue
			}
			// pid (comm) state ...: the state follows the last ')'.
			s := string(stat)
			out[pid] = strings.Fields(s[strings.LastIndexByte(s, ')')+1:])[0]
		}
		return out
	}
	before := jailed()
	if len(before) < 4 {
		t.Fatalf("the jail holds %v; want the program and 3 orphans at least", before)
	}
	stdin.Close() // the orphans' read ends: they exit
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := jailed()
		if len(got) == len(before)-3 {
			for pid, state := range got {
				if state == "Z" {
					t.Errorf("process %d of the jail is a zombie", pid)
				}
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s after the orphans ended the jail still holds %v (Z: zombies); want %d processes", got, len(before)-3)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
