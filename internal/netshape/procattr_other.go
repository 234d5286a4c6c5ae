//go:build !linux

package netshape

import "syscall"

// sysProcAttr: only Linux has a parent-death signal; elsewhere Close is the
// only thing that stops toxiproxy.
func sysProcAttr() *syscall.SysProcAttr { return nil }
