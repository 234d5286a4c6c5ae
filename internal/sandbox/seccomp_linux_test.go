//go:build linux

package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// syscallsEnv makes the test binary syscallsHelper.
const syscallsEnv = "HOARD_SANDBOX_TEST_SYSCALLS"

// syscallsHelper makes each denied system call, with arguments that an
// unprivileged process without the filter would see succeed where there
// are such (ptrace(TRACEME), unshare(CLONE_NEWUSER), process_vm_readv of
// itself, keyctl of its session keyring...), and a clone into a new user
// namespace, then what a function does (a thread, fork and exec); it
// prints one "name errno" line each.
func syscallsHelper() int {
	args := map[string][3]uintptr{
		"unshare":          {unix.CLONE_NEWUSER},
		"process_vm_readv": {uintptr(os.Getpid())},
		"keyctl":           {unix.KEYCTL_GET_KEYRING_ID, uintptr(unix.KEY_SPEC_SESSION_KEYRING & 0xffffffff), 1},
		"sethostname":      {0, 0},
	}
	// Children first: after ptrace(TRACEME) an exec would stop.
	cmd := exec.Command("/bin/true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER}
	fmt.Printf("clone(CLONE_NEWUSER) %d\n", errnoOf(cmd.Run()))
	fmt.Printf("fork and exec %d\n", errnoOf(exec.Command("/bin/true").Run()))
	for name, nr := range DeniedSyscalls() {
		a := args[name]
		_, _, errno := unix.Syscall6(nr, a[0], a[1], a[2], 0, 0, 0)
		fmt.Printf("%s %d\n", name, errno)
	}
	return 0
}

func errnoOf(err error) syscall.Errno {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	if err != nil {
		return syscall.EINVAL // some other failure
	}
	return 0
}

// TestJailSeccomp: in a jail, every denied system call fails with EPERM
// (and a clone into new namespaces too), while a fork and exec work.
func TestJailSeccomp(t *testing.T) {
	needRoot(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	j := &Jail{UID: 65534, GID: 65534, ReadOnly: append(SystemPaths(), filepath.Dir(self))}
	j.Root = t.TempDir()
	args, err := j.Args([]string{self})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, self, args...)
	cmd.Env = []string{syscallsEnv + "=1"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: j.Cloneflags(), Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if i := strings.LastIndexByte(l, ' '); i > 0 {
			got[l[:i]] = l[i+1:]
		}
	}
	eperm := fmt.Sprint(int(unix.EPERM))
	for name := range DeniedSyscalls() {
		if got[name] != eperm {
			t.Errorf("%s in the jail: errno %q; want EPERM (%s)", name, got[name], eperm)
		}
	}
	if got["clone(CLONE_NEWUSER)"] != eperm {
		t.Errorf("clone(CLONE_NEWUSER) in the jail: errno %q; want EPERM", got["clone(CLONE_NEWUSER)"])
	}
	if got["fork and exec"] != "0" {
		t.Errorf("fork and exec in the jail: errno %q; want success\n%s", got["fork and exec"], out)
	}
}
