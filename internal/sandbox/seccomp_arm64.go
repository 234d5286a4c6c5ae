//go:build linux && arm64

package sandbox

import "golang.org/x/sys/unix"

// auditArch is the architecture seccomp reports for this one's calls;
// foreignABI, when not 0, is the bit that marks another ABI's calls
// among them (none here).
const (
	auditArch  = unix.AUDIT_ARCH_AARCH64
	foreignABI = 0
)
