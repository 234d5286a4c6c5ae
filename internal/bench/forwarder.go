package bench

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// Forwarder is a TCP forwarder on loopback: every connection it accepts
// is joined to a new connection to its upstream, and the bytes are copied
// both ways without being looked at (io.Copy between two TCP connections,
// which the runtime does with splice(2)). In front of the store it is the
// least any proxy can add to a request: one more hop, no parsing, no
// request of its own; `hoard bench access`'s store-fwd targets measure
// that floor beside hoard in the same run.
type Forwarder struct {
	ln       net.Listener
	upstream string
	wg       sync.WaitGroup

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// forwardDialTimeout bounds the dial to the upstream of each connection.
const forwardDialTimeout = 5 * time.Second

// StartForwarder listens on a loopback port and forwards every
// connection to upstream (host:port).
func StartForwarder(upstream string) (*Forwarder, error) {
	if _, _, err := net.SplitHostPort(upstream); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &Forwarder{ln: ln, upstream: upstream, conns: map[net.Conn]struct{}{}}
	f.wg.Add(1)
	go f.accept()
	return f, nil
}

// Addr is the address clients connect to.
func (f *Forwarder) Addr() string { return f.ln.Addr().String() }

func (f *Forwarder) accept() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.wg.Add(1)
		go f.forward(c)
	}
}

// track adds c to the connections Close closes; false once closed.
func (f *Forwarder) track(cs ...net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	for _, c := range cs {
		f.conns[c] = struct{}{}
	}
	return true
}

func (f *Forwarder) untrack(cs ...net.Conn) {
	f.mu.Lock()
	for _, c := range cs {
		delete(f.conns, c)
	}
	f.mu.Unlock()
}

// forward joins c to a new upstream connection until both directions end.
func (f *Forwarder) forward(c net.Conn) {
	defer f.wg.Done()
	up, err := net.DialTimeout("tcp", f.upstream, forwardDialTimeout)
	if err != nil {
		c.Close()
		return
	}
	if !f.track(c, up) {
		c.Close()
		up.Close()
		return
	}
	defer func() {
		f.untrack(c, up)
		c.Close()
		up.Close()
	}()
	done := make(chan struct{})
	go func() {
		defer close(done)
		pipe(up, c)
	}()
	pipe(c, up)
	<-done
}

// pipe copies src to dst until src ends, then ends dst's writing half so
// that the end reaches the other side; a failed copy ends both.
func pipe(dst, src net.Conn) {
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		src.Close()
		return
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
}

// Close stops accepting, closes every forwarded connection and waits for
// their goroutines.
func (f *Forwarder) Close() error {
	err := f.ln.Close()
	f.mu.Lock()
	f.closed = true
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}
