// Package testaddr gives tests loopback addresses with a known behaviour.
package testaddr

import (
	"net"
	"strconv"
	"syscall"
	"testing"
)

// Refused returns "127.0.0.1:port" where a connection is refused for the
// whole test: the port is bound, without SO_REUSEADDR, by a socket that never
// listens, so no other listener on the machine can take it (closing a
// listener to free its port leaves a window in which a parallel test's server
// may take it). The socket is closed when the test ends.
func Refused(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("testaddr: socket: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("testaddr: bind: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatalf("testaddr: getsockname: %v", err)
	}
	in4, ok := sa.(*syscall.SockaddrInet4)
	if !ok {
		t.Fatalf("testaddr: getsockname gave %T", sa)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(in4.Port))
}
