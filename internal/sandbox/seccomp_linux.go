//go:build linux

package sandbox

import (
	"fmt"
	"maps"
	"slices"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// A jail's processes run under a seccomp filter (ADR 14, "seccomp"): a
// deny list of system calls that a function has no use for and that are
// either ways around the jail (ptrace and process_vm_* into another
// process, new namespaces, mounts) or large kernel surfaces reachable
// without privilege (keyrings, BPF, perf events, userfaultfd, io_uring).
// Denied calls fail with EPERM, as they would for a process without the
// privilege; everything else is allowed. The filter is a classic BPF
// program assembled with golang.org/x/net/bpf and installed with
// seccomp(2) on every thread of sandbox-init (TSYNC) after no_new_privs,
// so the jail's init and everything it starts carry it; it cannot be
// removed, only narrowed.

// DeniedSyscalls are the system calls a jailed process gets EPERM from
// (besides clone with namespace flags), by name.
func DeniedSyscalls() map[string]uintptr {
	return map[string]uintptr{
		// Into other processes.
		"ptrace": unix.SYS_PTRACE, "process_vm_readv": unix.SYS_PROCESS_VM_READV,
		"process_vm_writev": unix.SYS_PROCESS_VM_WRITEV, "pidfd_getfd": unix.SYS_PIDFD_GETFD,
		// Out of the jail: namespaces, mounts, roots, file handles.
		"unshare": unix.SYS_UNSHARE, "setns": unix.SYS_SETNS,
		"mount": unix.SYS_MOUNT, "umount2": unix.SYS_UMOUNT2, "pivot_root": unix.SYS_PIVOT_ROOT,
		"chroot": unix.SYS_CHROOT, "mount_setattr": unix.SYS_MOUNT_SETATTR, "move_mount": unix.SYS_MOVE_MOUNT,
		"open_tree": unix.SYS_OPEN_TREE, "fsopen": unix.SYS_FSOPEN, "fsconfig": unix.SYS_FSCONFIG,
		"fsmount": unix.SYS_FSMOUNT, "fspick": unix.SYS_FSPICK,
		"open_by_handle_at": unix.SYS_OPEN_BY_HANDLE_AT, "name_to_handle_at": unix.SYS_NAME_TO_HANDLE_AT,
		// Kernel surfaces: keyrings, BPF, perf, userfaultfd, io_uring,
		// fanotify.
		"keyctl": unix.SYS_KEYCTL, "add_key": unix.SYS_ADD_KEY, "request_key": unix.SYS_REQUEST_KEY,
		"bpf": unix.SYS_BPF, "perf_event_open": unix.SYS_PERF_EVENT_OPEN, "userfaultfd": unix.SYS_USERFAULTFD,
		"io_uring_setup": unix.SYS_IO_URING_SETUP, "io_uring_enter": unix.SYS_IO_URING_ENTER,
		"io_uring_register": unix.SYS_IO_URING_REGISTER, "fanotify_init": unix.SYS_FANOTIFY_INIT,
		// The machine's: modules, kexec, reboot, swap, clocks, accounting,
		// quotas, the kernel log, names.
		"init_module": unix.SYS_INIT_MODULE, "finit_module": unix.SYS_FINIT_MODULE,
		"delete_module": unix.SYS_DELETE_MODULE, "kexec_load": unix.SYS_KEXEC_LOAD,
		"kexec_file_load": unix.SYS_KEXEC_FILE_LOAD, "reboot": unix.SYS_REBOOT,
		"swapon": unix.SYS_SWAPON, "swapoff": unix.SYS_SWAPOFF, "acct": unix.SYS_ACCT,
		"quotactl": unix.SYS_QUOTACTL, "syslog": unix.SYS_SYSLOG, "vhangup": unix.SYS_VHANGUP,
		"settimeofday": unix.SYS_SETTIMEOFDAY, "clock_settime": unix.SYS_CLOCK_SETTIME,
		"clock_adjtime": unix.SYS_CLOCK_ADJTIME, "adjtimex": unix.SYS_ADJTIMEX,
		"sethostname": unix.SYS_SETHOSTNAME, "setdomainname": unix.SYS_SETDOMAINNAME,
	}
}

// cloneNamespaces are clone(2)'s flags that make namespaces: a clone
// with any of them is denied like unshare. (CLONE_NEWTIME shares its bit
// with the exit signal in clone's flags; it is unshare's and clone3's
// only.)
const cloneNamespaces = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET

// Offsets in struct seccomp_data.
const (
	seccompNR   = 0
	seccompArch = 4
	seccompArg0 = 16 // the low 32 bits, little-endian
)

// seccompFilter is the jail's filter for this architecture.
func seccompFilter() ([]bpf.RawInstruction, error) {
	if auditArch == 0 {
		return nil, fmt.Errorf("%w: no seccomp filter for this architecture", ErrNoIsolation)
	}
	const (
		allow = unix.SECCOMP_RET_ALLOW
		eperm = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
		// clone3 passes its flags in memory a filter cannot read: it
		// answers "not implemented", and C libraries fall back to clone,
		// whose flags it can.
		enosys = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	)
	prog := []bpf.Instruction{
		// Another architecture's calls (numbered differently): the
		// process is killed.
		bpf.LoadAbsolute{Off: seccompArch, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: auditArch, SkipTrue: 1},
		bpf.RetConstant{Val: unix.SECCOMP_RET_KILL_PROCESS},
		bpf.LoadAbsolute{Off: seccompNR, Size: 4},
	}
	if foreignABI != 0 {
		// x32's calls, on x86-64: numbered with this bit set.
		prog = append(prog, bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: foreignABI, SkipFalse: 1}, bpf.RetConstant{Val: eperm})
	}
	denied := slices.Sorted(maps.Values(DeniedSyscalls()))
	for _, nr := range denied {
		prog = append(prog, bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(nr), SkipFalse: 1}, bpf.RetConstant{Val: eperm})
	}
	prog = append(prog,
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.SYS_CLONE3, SkipFalse: 1},
		bpf.RetConstant{Val: enosys},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.SYS_CLONE, SkipFalse: 3},
		bpf.LoadAbsolute{Off: seccompArg0, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: cloneNamespaces, SkipFalse: 1},
		bpf.RetConstant{Val: eperm},
		bpf.RetConstant{Val: allow},
	)
	return bpf.Assemble(prog)
}

// installSeccomp installs the jail's filter on every thread of the
// calling process; no_new_privs must be set.
func installSeccomp() error {
	raw, err := seccompFilter()
	if err != nil {
		return err
	}
	f := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		f[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	prog := unix.SockFprog{Len: uint16(len(f)), Filter: &f[0]}
	if _, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog))); errno != 0 {
		return fmt.Errorf("sandbox-init: seccomp: %w", errno)
	}
	return nil
}
