//go:build !linux

package peer

import "net"

// setCork does nothing where TCP_CORK is not known: answers go as written.
func setCork(*net.TCPConn, bool) bool { return false }
