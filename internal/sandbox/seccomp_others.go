//go:build linux && !amd64 && !arm64

package sandbox

// No seccomp filter is built for this architecture (seccompFilter fails,
// and so do jails).
const (
	auditArch  = 0
	foreignABI = 0
)
