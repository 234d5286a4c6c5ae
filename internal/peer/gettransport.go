package peer

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"
)

// getTransport sends the client's fetches — GETs without a body: objects,
// ranges, shards, backup probes — on keep-alive connections of its own,
// writing each request and reading its answer in the caller's goroutine
// (ADR 0040). net/http's Transport hands every request to a connection's
// writer goroutine and every answer back from its reader goroutine, and
// holds the reader until the body's end is signalled: three goroutine
// wake-ups a fetch, ~20% of a small fetch's latency on loopback. The
// HTTP itself is net/http's (Request.Write, ReadResponse); what is here is
// the pool and the bounds:
//
//   - a connection's answer head (status and headers) must arrive within
//     headerTimeout and the request's deadline, and be at most
//     maxAnswerHead bytes (a peer cannot make the reader buffer without
//     end); the body's reads are bounded by the request's deadline, and
//     the request's cancellation interrupts any read or write;
//   - at most maxIdle idle connections per peer (the most recently used
//     kept), each dropped after idleTimeout;
//   - a connection is reused only when its last answer was read to its
//     end, the server did not ask to close it, and no deadline or
//     cancellation touched it;
//   - a request sent on a reused connection that the peer had closed
//     meanwhile (nothing of an answer arrived) is sent again once, on a
//     new connection: GETs are idempotent.
type getTransport struct {
	dial          func(ctx context.Context, network, addr string) (net.Conn, error)
	tls           *tls.Config // nil: plain TCP
	dialTimeout   time.Duration
	headerTimeout time.Duration
	maxIdle       int
	idleTimeout   time.Duration
	readBuf       int
	now           func() time.Time

	mu   sync.Mutex
	idle map[string][]*getConn // by address, least recently used first
}

// maxAnswerHead bounds an answer's status line and headers (net/http's
// Transport allows 10 MB; the peer protocol's largest headers are a
// backup probe's, 32 KiB).
const maxAnswerHead = 1 << 20

// errNotFetch: the fetch transport carries bodiless GETs only.
var errNotFetch = errors.New("peer: the fetch transport sends GETs without a body only")

// getConn is one connection of the pool.
type getConn struct {
	conn net.Conn
	lim  *limitedReader
	br   *bufio.Reader
	bw   *bufio.Writer
	// idleSince is when it was last put back.
	idleSince time.Time
}

// limitedReader reads from r, at most n bytes while n >= 0.
type limitedReader struct {
	r io.Reader
	n int64
}

// errAnswerHeadTooLong: an answer's head passed maxAnswerHead.
var errAnswerHeadTooLong = fmt.Errorf("peer: answer head longer than %d bytes", maxAnswerHead)

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n < 0 {
		return l.r.Read(p)
	}
	if l.n == 0 {
		return 0, errAnswerHeadTooLong
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

func newGetTransport(cfg ClientConfig, d *net.Dialer, readBuf int) *getTransport {
	t := &getTransport{dial: d.DialContext, dialTimeout: cfg.DialTimeout, headerTimeout: cfg.GetTimeout,
		maxIdle: cfg.MaxIdleConnsPerPeer, idleTimeout: 90 * time.Second, readBuf: readBuf, now: time.Now,
		idle: map[string][]*getConn{}}
	if cfg.TLS != nil {
		t.tls = cfg.TLS.Clone()
	}
	return t
}

// RoundTrip implements http.RoundTripper.
func (t *getTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.roundTrip(req)
	if err != nil && req.Body != nil {
		req.Body.Close() // as a RoundTripper must, even on errors
	}
	return resp, err
}

func (t *getTransport) roundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet || (req.Body != nil && req.Body != http.NoBody) {
		return nil, errNotFetch
	}
	wantTLS := req.URL.Scheme == "https"
	if wantTLS != (t.tls != nil) || (req.URL.Scheme != "http" && !wantTLS) {
		return nil, fmt.Errorf("peer: the fetch transport does not speak %q here", req.URL.Scheme)
	}
	addr := req.URL.Host
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, fmt.Errorf("peer: fetch address %q: %w", addr, err)
	}
	ctx := req.Context()
	for retried := false; ; retried = true {
		pc, reused := t.take(addr)
		if pc == nil {
			var err error
			if pc, err = t.connect(ctx, addr); err != nil {
				return nil, err
			}
		}
		resp, sent, err := t.exchange(ctx, pc, req)
		if err == nil {
			return resp, nil
		}
		pc.conn.Close()
		if !reused || sent || retried || ctx.Err() != nil || !closedByPeer(err) {
			return nil, err
		}
		// The peer had closed the pooled connection: once more on a new
		// one.
	}
}

// closedByPeer reports whether err is what a connection the peer closed
// gives (not a timeout: a peer that is slow to answer is not asked twice).
func closedByPeer(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// take returns an idle connection to addr (nil if none) and whether it
// was one.
func (t *getTransport) take(addr string) (*getConn, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	for l := t.idle[addr]; len(l) > 0; l = t.idle[addr] {
		pc := l[len(l)-1]
		l[len(l)-1] = nil
		t.idle[addr] = l[:len(l)-1]
		if now.Sub(pc.idleSince) <= t.idleTimeout {
			return pc, true
		}
		pc.conn.Close()
	}
	delete(t.idle, addr)
	return nil, false
}

// put keeps pc as an idle connection to addr, dropping the least
// recently used beyond maxIdle.
func (t *getTransport) put(addr string, pc *getConn) {
	pc.idleSince = t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	l := append(t.idle[addr], pc)
	for len(l) > max(t.maxIdle, 0) {
		l[0].conn.Close()
		l = l[1:]
	}
	if len(l) == 0 {
		delete(t.idle, addr)
		return
	}
	t.idle[addr] = l
}

// CloseIdleConnections closes every idle connection.
func (t *getTransport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = map[string][]*getConn{}
	t.mu.Unlock()
	for _, l := range idle {
		for _, pc := range l {
			pc.conn.Close()
		}
	}
}

// connect dials addr (and makes the TLS handshake), within dialTimeout
// and ctx.
func (t *getTransport) connect(ctx context.Context, addr string) (*getConn, error) {
	if t.dialTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t.dialTimeout)
		defer cancel()
	}
	c, err := t.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if t.tls != nil {
		cfg := t.tls
		if cfg.ServerName == "" {
			host, _, _ := net.SplitHostPort(addr)
			cfg = cfg.Clone()
			cfg.ServerName = host
		}
		tc := tls.Client(c, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, err
		}
		c = tc
	}
	lim := &limitedReader{r: c, n: -1}
	return &getConn{conn: c, lim: lim, br: bufio.NewReaderSize(lim, t.readBuf), bw: bufio.NewWriterSize(c, 8<<10)}, nil
}

// aLongTimeAgo is a deadline that has passed: set, it interrupts every
// read and write in progress.
var aLongTimeAgo = time.Unix(1, 0)

// exchange sends req on pc and reads the answer's head. sent says whether
// any of an answer arrived (a failure then is not the peer's closing of
// an idle connection). On success the answer's body, read to its end,
// puts pc back in the pool; closed early, it closes pc.
func (t *getTransport) exchange(ctx context.Context, pc *getConn, req *http.Request) (_ *http.Response, sent bool, err error) {
	deadline, hasDeadline := ctx.Deadline()
	// Cancellation interrupts whatever pc is doing, and pc is never
	// reused after it.
	stop := context.AfterFunc(ctx, func() { pc.conn.SetDeadline(aLongTimeAgo) })
	defer func() {
		if err != nil {
			stop()
		}
	}()
	if err := pc.conn.SetDeadline(deadline); err != nil { // zero without a deadline: none
		return nil, false, err
	}
	if err := req.Write(pc.bw); err != nil {
		return nil, false, t.failed(ctx, err)
	}
	if err := pc.bw.Flush(); err != nil {
		return nil, false, t.failed(ctx, err)
	}
	head := deadline
	if t.headerTimeout > 0 {
		if h := t.now().Add(t.headerTimeout); !hasDeadline || h.Before(head) {
			head = h
		}
	}
	if err := pc.conn.SetReadDeadline(head); err != nil {
		return nil, false, err
	}
	pc.lim.n = maxAnswerHead - int64(pc.br.Buffered())
	if _, err := pc.br.Peek(1); err != nil {
		// Nothing arrived: a closed idle connection, or no answer in
		// time.
		return nil, false, t.failed(ctx, err)
	}
	resp, err := http.ReadResponse(pc.br, req)
	if err != nil {
		return nil, true, t.failed(ctx, err)
	}
	pc.lim.n = -1
	if resp.StatusCode < 200 {
		resp.Body.Close()
		return nil, true, fmt.Errorf("peer: unexpected interim answer %s", resp.Status)
	}
	if err := pc.conn.SetReadDeadline(deadline); err != nil { // the body's reads: the request's deadline
		resp.Body.Close()
		return nil, true, err
	}
	b := &fetchBody{t: t, pc: pc, addr: req.URL.Host, body: resp.Body, stop: stop, reuse: !resp.Close}
	if resp.Body == http.NoBody {
		b.release(true)
		return resp, true, nil
	}
	resp.Body = b
	return resp, true, nil
}

// failed is err, or the context's error when the context ended it.
func (t *getTransport) failed(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%v)", ctx.Err(), err)
	}
	return err
}

// fetchBody is an answer's body: read to its end, it puts its connection
// back in the pool; closed before, it closes it.
type fetchBody struct {
	t     *getTransport
	pc    *getConn
	addr  string
	body  io.ReadCloser
	stop  func() bool
	reuse bool // the server did not ask to close
	mu    sync.Mutex
	done  bool
}

func (b *fetchBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	if err != nil {
		b.release(err == io.EOF)
	}
	return n, err
}

func (b *fetchBody) Close() error {
	b.release(false)
	return nil
}

// release gives up the connection, once: back to the pool when the body
// was read to its end (whole) and nothing else forbids it, else closed.
func (b *fetchBody) release(whole bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return
	}
	b.done = true
	// stop false: the cancellation fired (or is firing) and set a past
	// deadline on the connection, which must not be reused.
	if b.stop() && whole && b.reuse && b.pc.conn.SetDeadline(time.Time{}) == nil {
		b.t.put(b.addr, b.pc)
		return
	}
	b.pc.conn.Close()
}
