//go:build linux && amd64

package sandbox

import "golang.org/x/sys/unix"

// auditArch is the architecture seccomp reports for this one's calls;
// foreignABI, when not 0, is the bit that marks another ABI's calls
// (x32's) among them.
const (
	auditArch  = unix.AUDIT_ARCH_X86_64
	foreignABI = 0x40000000
)
