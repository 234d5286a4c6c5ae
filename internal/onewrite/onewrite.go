// Package onewrite sends a small HTTP answer in one write.
//
// net/http's server writes an answer through a connection buffer of
// 4 KiB: an answer a few KiB long (a cached 4 KiB object with S3's
// headers, a peer's answer with its MACs) leaves in two or three writes,
// and the client wakes for the first, parses the head, then waits again
// for the rest. A handler that knows its answer is small holds its
// connection's writes (Hold) while it writes the answer, and the answer
// then leaves whole: one system call, one segment on the wire, one
// wake-up of the reader. (Linux's TCP_CORK does the like for TCP at the
// price of two more system calls an answer; this holds beneath TLS too.)
//
// A server serves Listen's connections and sets ConnContext as its
// http.Server.ConnContext; without them, Hold does nothing and answers
// leave as they are written.
//
// Bounds: a connection holds at most one answer at a time, in a buffer
// of at most MaxHeld bytes taken from a pool while the answer is held;
// an answer that outgrows its buffer has what was held written at once,
// with the write that did not fit, and is no longer held.
package onewrite

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
)

const (
	// From and To bound the bodies whose answers Hold holds: a smaller
	// one leaves with its head in one write anyway (the connection
	// buffer is 4 KiB); from To up, an answer takes a few large writes
	// whatever is done, and holding it would only copy it.
	From = 3 << 10
	To   = 64 << 10

	// headroom is what a held buffer keeps for the answer's head (and a
	// peer answer's MAC) beside its body.
	headroom = 8 << 10

	// MaxHeld is the largest buffer a connection holds an answer in.
	MaxHeld = To + headroom
)

// Listen returns ln, its connections able to hold an answer (Hold).
func Listen(ln net.Listener) net.Listener { return listener{ln} }

type listener struct{ net.Listener }

func (l listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &Conn{Conn: c}, nil
}

// Conn is a connection that can hold what is written to it (Hold) and
// send it in one write. Writes not held pass straight through.
type Conn struct {
	net.Conn

	mu   sync.Mutex
	held *[]byte // non-nil while an answer is held
}

// connKey carries a request's Conn in its context.
type connKey struct{}

// ConnContext is the http.Server.ConnContext of a server serving a
// Listen listener: it hands handlers the request's Conn (beneath TLS,
// where the server speaks TLS over it).
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if oc, ok := c.(*Conn); ok {
		return context.WithValue(ctx, connKey{}, oc)
	}
	return ctx
}

// Hold holds the writes of r's connection while the handler writes an
// answer whose body is n bytes long, when n is in [From, To), and
// returns what ends it, to be deferred: it flushes w (net/http's buffers
// into what is held) and writes what was held, in one write. Elsewhere
// (n out of bounds, a connection not from Listen, one already held, a
// request over HTTP/2) it does nothing and so does what it returns.
//
// A handler calls Hold once it knows the answer succeeds, before its
// first write of the body; an error answer after that aborts the
// connection anyway. What is held is sent by the returned function
// only: a handler that returns without calling it leaves its answer
// unsent until the connection's next write.
func Hold(w http.ResponseWriter, r *http.Request, n int64) (release func()) {
	if r.ProtoMajor != 1 {
		// HTTP/2 multiplexes answers on one connection: holding it for
		// one would hold the others.
		return func() {}
	}
	c, ok := r.Context().Value(connKey{}).(*Conn)
	if !ok || n < From || n >= To || !c.hold(int(n)+headroom) {
		return func() {}
	}
	rc := http.NewResponseController(w)
	return func() {
		_ = rc.Flush() // an error here is the connection's: release sees it too
		c.release()
	}
}

// hold starts holding writes in a buffer of at least size bytes, and
// reports whether it did (not when an answer is held already).
func (c *Conn) hold(size int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held != nil {
		return false
	}
	c.held = getBuf(size)
	return true
}

// take ends holding and returns what was held (nil when nothing was).
// The connection's lock is never held across I/O: Close, from another
// goroutine (a server shutting down), must be able to interrupt a write
// blocked on a client that does not read.
func (c *Conn) take() *[]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.held
	c.held = nil
	return b
}

// release writes what is held, in one write, and ends holding. A write
// that fails closes the connection: the answer was not sent whole, and
// net/http, which saw its writes succeed, must not go on to the next
// request on a stream that lost bytes.
func (c *Conn) release() {
	if b := c.take(); b != nil {
		if err := c.send(b, nil); err != nil {
			_ = c.Conn.Close()
		}
	}
}

// send writes b followed by p (one writev on a TCP connection) and gives
// b back to its pool.
func (c *Conn) send(b *[]byte, p []byte) error {
	defer putBuf(b)
	switch {
	case len(*b) == 0 && len(p) == 0:
		return nil
	case len(*b) == 0:
		_, err := c.Conn.Write(p)
		return err
	case len(p) == 0: // the usual end: one write of what was held
		_, err := c.Conn.Write(*b)
		return err
	}
	bufs := net.Buffers{*b, p}
	n, err := bufs.WriteTo(c.Conn)
	if err == nil && n != int64(len(*b)+len(p)) {
		err = io.ErrShortWrite
	}
	return err
}

// Write holds p while an answer is held and p fits what remains of its
// buffer; else it writes what is held with p, and ends holding.
func (c *Conn) Write(p []byte) (int, error) {
	c.mu.Lock()
	b := c.held
	if b == nil {
		c.mu.Unlock()
		return c.Conn.Write(p)
	}
	if len(*b)+len(p) <= cap(*b) {
		*b = append(*b, p...)
		c.mu.Unlock()
		return len(p), nil
	}
	c.held = nil
	c.mu.Unlock()
	if err := c.send(b, p); err != nil {
		return 0, err // none of p is known to have gone
	}
	return len(p), nil
}

// ReadFrom is the path net/http's response takes to hand a body to the
// connection (sendfile, splice, a source's WriteTo with the socket).
// While an answer is held, r's bytes are held with it (through Write: an
// answer that outgrows its buffer goes out as it comes); otherwise they
// go to the connection's own ReadFrom, as they would without this
// package.
func (c *Conn) ReadFrom(r io.Reader) (int64, error) {
	c.mu.Lock()
	holding := c.held != nil
	c.mu.Unlock()
	if holding {
		return io.Copy(writerOnly{c}, r)
	}
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(writerOnly{c.Conn}, r)
}

// writerOnly hides a writer's ReadFrom from io.Copy.
type writerOnly struct{ io.Writer }

// CloseWrite shuts the connection's writing side where it has one (TCP,
// Unix), after what is held.
func (c *Conn) CloseWrite() error {
	var err error
	if b := c.take(); b != nil {
		err = c.send(b, nil)
	}
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return errors.Join(err, cw.CloseWrite())
	}
	return err
}

// Close closes the connection, dropping what is held: an answer not
// released was not finished.
func (c *Conn) Close() error {
	if b := c.take(); b != nil {
		putBuf(b)
	}
	return c.Conn.Close()
}

// Held buffers come from pools by size: 16, 32 and MaxHeld bytes.
var (
	classes = [...]int{16 << 10, 32 << 10, MaxHeld}
	pools   [len(classes)]sync.Pool
)

func getBuf(size int) *[]byte {
	for i, c := range classes {
		if size <= c {
			if b, ok := pools[i].Get().(*[]byte); ok {
				*b = (*b)[:0]
				return b
			}
			b := make([]byte, 0, c)
			return &b
		}
	}
	b := make([]byte, 0, MaxHeld)
	return &b
}

func putBuf(b *[]byte) {
	for i, c := range classes {
		if cap(*b) == c {
			*b = (*b)[:0]
			pools[i].Put(b)
			return
		}
	}
}
