package peer

import (
	"io"
	"net"

	"github.com/hoard-io/hoard/internal/cache"
)

// tcpSocket is a TCP connection: a *net.TCPConn, or the wrapper of one
// that the connection's ReadFrom hands to a source's WriteTo (the path
// net/http's response takes for a body of a known length). net.Buffers
// writes to either with one writev.
type tcpSocket interface {
	net.Conn
	SetNoDelay(noDelay bool) error
}

// Vector returns w as a cache.VectorWriter: w itself when it is one, a
// writev of w when w is a TCP socket, else nil. A TLS connection is not
// one (its records are sealed one write at a time); nor is a writer in
// memory.
func Vector(w io.Writer) cache.VectorWriter {
	switch v := w.(type) {
	case cache.VectorWriter:
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

// SocketBody is r as a response body for an http.ResponseWriter's
// ReadFrom: where the connection hands its WriteTo a TCP socket, r's own
// WriteTo (a cache entry's reader) gets it as a cache.VectorWriter, so
// that the entry's chunks go to the socket several at a time, as they
// lie.
func SocketBody(r io.Reader) io.Reader {
	if _, ok := r.(io.WriterTo); !ok {
		return r
	}
	return socketBody{r}
}

type socketBody struct{ r io.Reader }

func (b socketBody) Read(p []byte) (int, error) { return b.r.Read(p) }

func (b socketBody) WriteTo(w io.Writer) (int64, error) {
	if v := Vector(w); v != nil {
		w = v
	}
	return b.r.(io.WriterTo).WriteTo(w)
}
