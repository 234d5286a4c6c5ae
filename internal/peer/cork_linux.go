package peer

import (
	"net"
	"syscall"
)

// setCork sets TCP_CORK on c and reports whether it is set.
func setCork(c *net.TCPConn, on bool) bool {
	rc, err := c.SyscallConn()
	if err != nil {
		return false
	}
	v := 0
	if on {
		v = 1
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_CORK, v)
	}); err != nil {
		return false
	}
	return serr == nil
}
