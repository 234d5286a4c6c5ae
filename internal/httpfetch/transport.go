// Package httpfetch is an http.RoundTripper for requests without a body
// (GET and HEAD) that writes each request and reads its answer in the
// caller's goroutine, on keep-alive connections of its own (ADR 0040,
// ADR 0041). net/http's Transport hands every request to a connection's
// writer goroutine and every answer back from its reader goroutine, and
// holds the reader until the body's end is signalled: three goroutine
// wake-ups a request, a fifth of a small read's latency on loopback and
// more on a busy machine. The HTTP itself is net/http's (Request.Write,
// ReadResponse; a 304's head is only read to its end, not parsed, under
// Config.HeadlessNotModified); what is here is the pool and the bounds:
//
//   - an answer's head (status and headers) must arrive within
//     Config.HeaderTimeout and the request's deadline, and be at most
//     MaxHead bytes (a server cannot make the client buffer without end);
//     the body's reads are bounded by the request's deadline, and the
//     request's cancellation interrupts any read or write;
//   - at most Config.MaxIdlePerHost idle connections per host (the most
//     recently used kept), each dropped after Config.IdleTimeout;
//   - a connection is reused only when its last answer was read to its
//     end, the server did not ask to close it, and no deadline or
//     cancellation touched it;
//   - a request sent on a reused connection that the server had closed
//     meanwhile (nothing of an answer arrived) is sent again once, on a
//     new connection: GETs and HEADs are idempotent.
//
// It speaks HTTP/1.1 only, over TCP or TLS, to the host the URL names
// (no proxy).
package httpfetch

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Config configures a Transport.
type Config struct {
	// Dial opens a connection; nil: a net.Dialer's.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// TLS is the configuration of https connections; nil: the transport
	// speaks plain http only.
	TLS *tls.Config
	// DialTimeout bounds a dial and its TLS handshake; 0: the request's
	// deadline only.
	DialTimeout time.Duration
	// HeaderTimeout bounds the wait for an answer's head once the request
	// is sent; 0: the request's deadline only.
	HeaderTimeout time.Duration
	// MaxIdlePerHost is how many idle connections are kept per host
	// (0: none).
	MaxIdlePerHost int
	// IdleTimeout is how long an idle connection is kept; 0:
	// DefaultIdleTimeout.
	IdleTimeout time.Duration
	// ReadBuffer is the size of a connection's read buffer; 0:
	// DefaultReadBuffer. A read of the body larger than the buffer, when
	// the buffer is empty, goes from the socket into the reader's memory
	// directly.
	ReadBuffer int
	// HeadlessNotModified: a 304's header lines are read (within MaxHead)
	// and dropped, not parsed into the Response's Header, which comes
	// back empty; only Connection is looked at, for reuse. For a caller
	// that needs nothing of a 304 but its status (a version check): the
	// parse of a store's dozen headers is most of a 304's cost here.
	HeadlessNotModified bool
}

// Defaults of Config.
const (
	DefaultIdleTimeout = 90 * time.Second
	DefaultReadBuffer  = 8 << 10
)

// Transport is the round tripper. Safe for concurrent use.
type Transport struct {
	dial          func(ctx context.Context, network, addr string) (net.Conn, error)
	tls           *tls.Config // nil: plain TCP
	dialTimeout   time.Duration
	headerTimeout time.Duration
	maxIdle       int
	idleTimeout   time.Duration
	readBuf       int
	headless304   bool
	now           func() time.Time

	mu   sync.Mutex
	idle map[string][]*getConn // by address, least recently used first
}

// MaxHead bounds an answer's status line and headers (net/http's
// Transport allows 10 MB; the peer protocol's largest headers are a
// backup probe's, 32 KiB; an S3 store's a few KiB).
const MaxHead = 1 << 20

// ErrNotFetch: the transport carries GETs and HEADs without a body only.
var ErrNotFetch = errors.New("httpfetch: GET and HEAD without a body only")

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

// ErrHeadTooLong: an answer's head passed MaxHead.
var ErrHeadTooLong = fmt.Errorf("httpfetch: answer head longer than %d bytes", MaxHead)

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n < 0 {
		return l.r.Read(p)
	}
	if l.n == 0 {
		return 0, ErrHeadTooLong
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

// New returns a Transport for cfg.
func New(cfg Config) *Transport {
	t := &Transport{dial: cfg.Dial, dialTimeout: cfg.DialTimeout, headerTimeout: cfg.HeaderTimeout,
		maxIdle: cfg.MaxIdlePerHost, idleTimeout: cfg.IdleTimeout, readBuf: cfg.ReadBuffer,
		headless304: cfg.HeadlessNotModified, now: time.Now, idle: map[string][]*getConn{}}
	if t.dial == nil {
		t.dial = (&net.Dialer{}).DialContext
	}
	if t.idleTimeout <= 0 {
		t.idleTimeout = DefaultIdleTimeout
	}
	if t.readBuf <= 0 {
		t.readBuf = DefaultReadBuffer
	}
	if cfg.TLS != nil {
		t.tls = cfg.TLS.Clone()
	}
	return t
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.roundTrip(req)
	if err != nil && req.Body != nil {
		req.Body.Close() // as a RoundTripper must, even on errors
	}
	return resp, err
}

func (t *Transport) roundTrip(req *http.Request) (*http.Response, error) {
	if (req.Method != http.MethodGet && req.Method != http.MethodHead) || (req.Body != nil && req.Body != http.NoBody) {
		return nil, ErrNotFetch
	}
	wantTLS := req.URL.Scheme == "https"
	if wantTLS != (t.tls != nil) || (req.URL.Scheme != "http" && !wantTLS) {
		return nil, fmt.Errorf("httpfetch: this transport does not speak %q", req.URL.Scheme)
	}
	addr, err := hostPort(req.URL.Scheme, req.URL.Host)
	if err != nil {
		return nil, err
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
		resp, sent, err := t.exchange(ctx, pc, req, addr)
		if err == nil {
			return resp, nil
		}
		pc.conn.Close()
		if !reused || sent || retried || ctx.Err() != nil || !closedByPeer(err) {
			return nil, err
		}
		// The server had closed the pooled connection: once more on a new
		// one.
	}
}

// hostPort is the address to dial for host: the scheme's port added when
// the host names none, as net/http does.
func hostPort(scheme, host string) (string, error) {
	if host == "" {
		return "", errors.New("httpfetch: a URL without a host")
	}
	if _, _, err := net.SplitHostPort(host); err == nil {
		return host, nil
	}
	h := host
	if len(h) > 1 && h[0] == '[' && h[len(h)-1] == ']' {
		h = h[1 : len(h)-1] // a bracketed IPv6 literal without a port
	}
	port := "80"
	if scheme == "https" {
		port = "443"
	}
	addr := net.JoinHostPort(h, port)
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return "", fmt.Errorf("httpfetch: address %q: %w", host, err)
	}
	return addr, nil
}

// closedByPeer reports whether err is what a connection the server closed
// gives (not a timeout: a server that is slow to answer is not asked twice).
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
func (t *Transport) take(addr string) (*getConn, bool) {
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
func (t *Transport) put(addr string, pc *getConn) {
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

// IdleConns is how many idle connections the pool holds.
func (t *Transport) IdleConns() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, l := range t.idle {
		n += len(l)
	}
	return n
}

// CloseIdleConnections closes every idle connection.
func (t *Transport) CloseIdleConnections() {
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
func (t *Transport) connect(ctx context.Context, addr string) (*getConn, error) {
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
// any of an answer arrived (a failure then is not the server's closing of
// an idle connection). On success the answer's body, read to its end,
// puts pc back in the pool; closed early, it closes pc.
func (t *Transport) exchange(ctx context.Context, pc *getConn, req *http.Request, addr string) (_ *http.Response, sent bool, err error) {
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
	pc.lim.n = MaxHead - int64(pc.br.Buffered())
	if _, err := pc.br.Peek(1); err != nil {
		// Nothing arrived: a closed idle connection, or no answer in
		// time.
		return nil, false, t.failed(ctx, err)
	}
	var resp *http.Response
	if t.headless304 {
		resp, err = readNotModified(pc.br, req)
	}
	if resp == nil && err == nil {
		resp, err = http.ReadResponse(pc.br, req)
	}
	if err != nil {
		return nil, true, t.failed(ctx, err)
	}
	pc.lim.n = -1
	if resp.StatusCode < 200 {
		resp.Body.Close()
		return nil, true, fmt.Errorf("httpfetch: unexpected interim answer %s", resp.Status)
	}
	if err := pc.conn.SetReadDeadline(deadline); err != nil { // the body's reads: the request's deadline
		resp.Body.Close()
		return nil, true, err
	}
	b := &fetchBody{t: t, pc: pc, addr: addr, body: resp.Body, stop: stop, reuse: !resp.Close}
	if resp.Body == http.NoBody {
		b.release(true)
		return resp, true, nil
	}
	resp.Body = b
	return resp, true, nil
}

// notModified304 is how an HTTP/1.1 304's status line begins.
const notModified304 = "HTTP/1.1 304 "

// readNotModified reads from br an answer to req that is an HTTP/1.1
// 304, its header lines dropped but Connection's, and returns it with an
// empty Header and no body (a 304 has none, whatever it says); nil and
// no error when br holds another answer, which is left unread. The
// head's bound is br's (MaxHead, by the connection's limited reader).
func readNotModified(br *bufio.Reader, req *http.Request) (*http.Response, error) {
	if start, err := br.Peek(len(notModified304)); err != nil || string(start) != notModified304 {
		return nil, nil // http.ReadResponse reads it, or says what is wrong
	}
	resp := &http.Response{Status: "304 Not Modified", StatusCode: http.StatusNotModified, Proto: "HTTP/1.1",
		ProtoMajor: 1, ProtoMinor: 1, Header: http.Header{}, Body: http.NoBody, Request: req}
	status := true // the line being read is the status line
	cont := false  // it began in a slice that filled the buffer
	for {
		line, err := br.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			// A line longer than the buffer: skipped in slices, and the
			// connection not used again (it is not looked at).
			resp.Close, cont = true, true
			continue
		case errors.Is(err, io.EOF):
			return nil, io.ErrUnexpectedEOF
		case err != nil:
			return nil, err
		}
		if status || cont {
			status, cont = false, false
			continue
		}
		if string(line) == "\r\n" || string(line) == "\n" {
			return resp, nil
		}
		if name, value, ok := bytes.Cut(line, []byte{':'}); ok && strings.EqualFold(string(name), "Connection") &&
			hasToken(string(value), "close") {
			resp.Close = true
		}
	}
}

// hasToken reports whether the comma-separated header value v holds
// token, in any case.
func hasToken(v, token string) bool {
	for f := range strings.SplitSeq(v, ",") {
		if strings.EqualFold(strings.TrimSpace(f), token) {
			return true
		}
	}
	return false
}

// failed is err, or the context's error when the context ended it.
func (t *Transport) failed(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%v)", ctx.Err(), err)
	}
	return err
}

// fetchBody is an answer's body: read to its end, it puts its connection
// back in the pool; closed before, it closes it.
type fetchBody struct {
	t     *Transport
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
