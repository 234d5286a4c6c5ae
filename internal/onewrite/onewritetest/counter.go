// Package onewritetest counts the writes a server makes to its
// connections, for tests of what leaves in one write (onewrite).
package onewritetest

import (
	"net"
	"sync/atomic"
)

// Counter is a listener whose connections count their writes, all
// together.
type Counter struct {
	net.Listener
	writes atomic.Int64
}

// NewCounter counts the writes to ln's connections.
func NewCounter(ln net.Listener) *Counter { return &Counter{Listener: ln} }

// Writes is the number of writes made so far to the connections accepted.
func (l *Counter) Writes() int64 { return l.writes.Load() }

// Accept accepts a connection that counts its writes.
func (l *Counter) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countedConn{Conn: c, n: &l.writes}, nil
}

type countedConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countedConn) Write(p []byte) (int, error) {
	c.n.Add(1)
	return c.Conn.Write(p)
}
