package cache

import (
	"io"
	"net"
)

// VectorWriter is a destination that takes several buffers in one call
// without gathering them into one (a TCP socket's writev). A chunked
// entry's reader hands it the chunks as they lie (entryReader.WriteTo):
// one system call per up to writeBatch bytes, and no copy in memory.
type VectorWriter interface {
	io.Writer
	// WriteVector writes bufs in order and returns the bytes written.
	// It may change the slice headers in bufs, never the bytes.
	WriteVector(bufs [][]byte) (int64, error)
}

// tcpSocket is a TCP connection: a *net.TCPConn, or the wrapper of one
// that the connection's ReadFrom hands to a source's WriteTo (the path
// net/http's response takes for a body of a known length). net.Buffers
// writes to either with one writev.
type tcpSocket interface {
	net.Conn
	SetNoDelay(noDelay bool) error
}

// Vector returns w as a VectorWriter: w itself when it is one, a writev
// of w when w is a TCP socket, else nil. A TLS connection is not one (its
// records are sealed one write at a time); nor is a writer in memory.
func Vector(w io.Writer) VectorWriter {
	switch v := w.(type) {
	case VectorWriter:
		return v
	case tcpSocket:
		return socketVector{v}
	}
	return nil
}

// socketVector writes buffers to a TCP socket with writev.
type socketVector struct{ net.Conn }

func (s socketVector) WriteVector(bufs [][]byte) (int64, error) {
	b := net.Buffers(bufs)
	return b.WriteTo(s.Conn)
}
