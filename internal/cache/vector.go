package cache

import "io"

// VectorWriter is a destination that takes several buffers in one call
// without gathering them into one (a TCP socket's writev: see
// peer.Vector, which finds one behind the connections net/http hands a
// body). A chunked entry's reader hands it the chunks as they lie
// (entryReader.WriteTo): one system call per up to writeBatch bytes, and
// no copy in memory.
type VectorWriter interface {
	io.Writer
	// WriteVector writes bufs in order and returns the bytes written.
	// It may change the slice headers in bufs, never the bytes.
	WriteVector(bufs [][]byte) (int64, error)
}

// Vector returns w as a VectorWriter when it is one, else nil.
func Vector(w io.Writer) VectorWriter {
	v, _ := w.(VectorWriter)
	return v
}
