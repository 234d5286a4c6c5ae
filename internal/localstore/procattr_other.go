//go:build !linux

package localstore

import "syscall"

// sysProcAttr: only Linux has a parent-death signal; elsewhere Close is the
// only thing that stops the server.
func sysProcAttr() *syscall.SysProcAttr { return nil }
