//go:build linux

package netshape

import "syscall"

// sysProcAttr makes the kernel SIGKILL toxiproxy when the process that
// started it dies, so a crashed benchmark or test leaves nothing behind.
// (Pdeathsig follows the starting OS thread; Go only retires threads of
// goroutines that exit while locked to them, which nothing here does.)
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
