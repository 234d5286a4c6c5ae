package httpfetch

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fetchServer answers GET /n with n bytes ("x"), /empty with 304, /close
// with Connection: close, /stall with a head and then nothing; it counts
// the connections it accepted.
type fetchServer struct {
	*httptest.Server
	conns   atomic.Int64
	release chan struct{}
}

func newFetchServer(t *testing.T) *fetchServer {
	f := &fetchServer{release: make(chan struct{})}
	f.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/empty":
			w.WriteHeader(http.StatusNotModified)
		case "/close":
			w.Header().Set("Connection", "close")
			_, _ = io.WriteString(w, "bye")
		case "/stall":
			w.Header().Set("Content-Length", "10")
			w.WriteHeader(http.StatusOK)
			_, _ = io.WriteString(w, "12345")
			http.NewResponseController(w).Flush()
			select {
			case <-f.release:
			case <-r.Context().Done():
			}
		case "/nohead":
			select {
			case <-f.release:
			case <-r.Context().Done():
			}
		default:
			_, _ = io.WriteString(w, strings.Repeat("x", len(r.URL.Path)-1))
		}
	}))
	f.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			f.conns.Add(1)
		}
	}
	f.Start()
	t.Cleanup(func() {
		close(f.release)
		f.Close()
	})
	return f
}

func newTestTransport(cfg Config) *Transport {
	if cfg.MaxIdlePerHost == 0 {
		cfg.MaxIdlePerHost = 16
	}
	return New(cfg)
}

// fetch GETs path with t and reads the whole body.
func fetch(ctx context.Context, tr *Transport, srv *httptest.Server, path string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// Answers read to their end leave their connection for the next: one
// connection for many fetches, with and without bodies.
func TestFetchTransportReusesConnections(t *testing.T) {
	srv := newFetchServer(t)
	tr := newTestTransport(Config{})
	defer tr.CloseIdleConnections()
	for i := range 20 {
		path := "/" + strings.Repeat("a", i*100)
		if i%3 == 0 {
			path = "/empty"
		}
		code, body, err := fetch(t.Context(), tr, srv.Server, path)
		if err != nil {
			t.Fatalf("fetch %d: %v", i, err)
		}
		if i%3 == 0 && code != http.StatusNotModified || i%3 != 0 && (code != 200 || len(body) != i*100) {
			t.Fatalf("fetch %d: %d, %d bytes", i, code, len(body))
		}
	}
	if n := srv.conns.Load(); n != 1 {
		t.Fatalf("%d connections for 20 fetches, want 1", n)
	}
}

// A fetch on a pooled connection the server has closed is sent again on a
// new one; a body closed before its end closes its connection; an
// answer that asks to close is not reused.
func TestFetchTransportConnectionEnds(t *testing.T) {
	srv := newFetchServer(t)
	tr := newTestTransport(Config{})
	defer tr.CloseIdleConnections()
	if _, _, err := fetch(t.Context(), tr, srv.Server, "/xyz"); err != nil {
		t.Fatal(err)
	}
	srv.CloseClientConnections() // the pooled one, from the server's side
	if _, body, err := fetch(t.Context(), tr, srv.Server, "/abcd"); err != nil || body != "xxxx" {
		t.Fatalf("after the server closed the idle connection: %q, %v", body, err)
	}
	if n := srv.conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}

	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/"+strings.Repeat("b", 5000), nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := resp.Body.Read(make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close() // most of the body unread
	if tr.IdleConns() != 0 {
		t.Fatal("a connection with an unread body was pooled")
	}
	if _, body, err := fetch(t.Context(), tr, srv.Server, "/cd"); err != nil || body != "xx" {
		t.Fatalf("after an early close: %q, %v", body, err)
	}
	if n := srv.conns.Load(); n != 3 {
		t.Fatalf("%d connections, want 3", n)
	}

	if _, body, err := fetch(t.Context(), tr, srv.Server, "/close"); err != nil || body != "bye" {
		t.Fatalf("/close: %q, %v", body, err)
	}
	if tr.IdleConns() != 0 {
		t.Fatal("a connection the server closes was pooled")
	}
}

// Cancelling a fetch interrupts its body's read, and its connection is
// not reused; a server that sends no head within the header timeout fails
// the fetch, and is not asked again.
func TestFetchTransportDeadlines(t *testing.T) {
	srv := newFetchServer(t)
	tr := newTestTransport(Config{HeaderTimeout: 200 * time.Millisecond})
	defer tr.CloseIdleConnections()

	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/stall", nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := io.ReadAll(resp.Body)
		done <- err
	}()
	cancel()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a cancelled fetch read its body to the end")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a cancelled fetch's body read did not return")
	}
	resp.Body.Close()
	if tr.IdleConns() != 0 {
		t.Fatal("a cancelled fetch's connection was pooled")
	}

	var served atomic.Int64
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if served.Add(1) == 1 {
			return // the first answers at once: its connection is pooled
		}
		<-r.Context().Done()
	}))
	defer slow.Close()
	if _, _, err := fetch(t.Context(), tr, slow, "/"); err != nil {
		t.Fatal(err)
	}
	_, _, err = fetch(t.Context(), tr, slow, "/")
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("err %v, want a timeout", err)
	}
	if n := served.Load(); n != 2 {
		t.Fatalf("the silent server was asked %d times for 2 fetches: a timeout is not retried", n)
	}
}

// An answer whose head never ends is refused once it passes the bound,
// rather than buffered without end.
func TestFetchTransportBoundsTheHead(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = bufio.NewReader(c).ReadString('\n')
		w := bufio.NewWriter(c)
		_, _ = w.WriteString("HTTP/1.1 200 OK\r\n")
		for i := 0; i < 2*MaxHead/32; i++ {
			if _, err := w.WriteString("X-Pad: 0123456789012345678901\r\n"); err != nil {
				return
			}
		}
		_ = w.Flush()
	}()
	tr := newTestTransport(Config{})
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+ln.Addr().String()+"/", nil)
	if _, err := tr.RoundTrip(req); !errors.Is(err, ErrHeadTooLong) {
		t.Fatalf("err %v, want %v", err, ErrHeadTooLong)
	}
}

// The pool keeps at most MaxIdlePerHost connections a host, none idle
// longer than the idle timeout; and it carries bodiless GETs and HEADs
// only.
func TestFetchTransportPoolBounds(t *testing.T) {
	srv := newFetchServer(t)
	tr := newTestTransport(Config{MaxIdlePerHost: 2})
	defer tr.CloseIdleConnections()
	var wg sync.WaitGroup
	bodies := make([]io.ReadCloser, 5)
	for i := range bodies {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/abc", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		bodies[i] = resp.Body
	}
	for _, b := range bodies {
		wg.Go(func() {
			_, _ = io.Copy(io.Discard, b)
			b.Close()
		})
	}
	wg.Wait()
	if n := tr.IdleConns(); n != 2 {
		t.Fatalf("%d idle connections, want 2", n)
	}

	now := time.Now()
	tr.now = func() time.Time { return now }
	before := srv.conns.Load()
	if _, _, err := fetch(t.Context(), tr, srv.Server, "/ab"); err != nil {
		t.Fatal(err)
	}
	if n := srv.conns.Load(); n != before {
		t.Fatalf("a fresh idle connection was not reused (%d connections, %d before)", n, before)
	}
	now = now.Add(tr.idleTimeout + time.Second)
	if _, _, err := fetch(t.Context(), tr, srv.Server, "/ab"); err != nil {
		t.Fatal(err)
	}
	if n := srv.conns.Load(); n != before+1 {
		t.Fatalf("%d connections after the idle timeout, want a new one (%d before)", n, before)
	}

	for _, mk := range []func() *http.Request{
		func() *http.Request {
			r, _ := http.NewRequest(http.MethodPost, srv.URL+"/x", nil)
			return r
		},
		func() *http.Request {
			r, _ := http.NewRequest(http.MethodGet, srv.URL+"/x", strings.NewReader("body"))
			return r
		},
		func() *http.Request {
			r, _ := http.NewRequest(http.MethodGet, strings.Replace(srv.URL, "http:", "https:", 1)+"/x", nil)
			return r
		},
	} {
		if _, err := tr.RoundTrip(mk()); err == nil {
			t.Errorf("%v: no error", mk().URL)
		}
	}
}

// A HEAD's answer carries a length and no body: its connection goes back
// to the pool at once, and the next request uses it.
func TestFetchTransportHead(t *testing.T) {
	srv := newFetchServer(t)
	tr := newTestTransport(Config{})
	defer tr.CloseIdleConnections()
	for range 3 {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodHead, srv.URL+"/abcdef", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.ContentLength != 6 || resp.Body != http.NoBody {
			t.Fatalf("HEAD: length %d, body %T", resp.ContentLength, resp.Body)
		}
		if tr.IdleConns() != 1 {
			t.Fatalf("%d idle connections after a HEAD, want 1", tr.IdleConns())
		}
	}
	if _, body, err := fetch(t.Context(), tr, srv.Server, "/xy"); err != nil || body != "xx" {
		t.Fatalf("GET after HEADs: %q, %v", body, err)
	}
	if n := srv.conns.Load(); n != 1 {
		t.Fatalf("%d connections, want 1", n)
	}
}

// A host without a port is dialled at its scheme's.
func TestFetchTransportDefaultPort(t *testing.T) {
	for _, c := range []struct{ scheme, host, want string }{
		{"http", "store.example", "store.example:80"},
		{"https", "store.example", "store.example:443"},
		{"http", "store.example:9000", "store.example:9000"},
		{"http", "[::1]", "[::1]:80"},
		{"https", "[::1]:8443", "[::1]:8443"},
	} {
		got, err := hostPort(c.scheme, c.host)
		if err != nil || got != c.want {
			t.Errorf("%s %s: %q, %v; want %q", c.scheme, c.host, got, err, c.want)
		}
	}
	if _, err := hostPort("http", ""); err == nil {
		t.Error("an empty host was accepted")
	}
	dialled := make(chan string, 1)
	tr := New(Config{Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
		dialled <- addr
		return nil, errors.New("not dialling")
	}})
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://store.example/b/k", nil)
	if _, err := tr.RoundTrip(req); err == nil {
		t.Fatal("no error from a dial that fails")
	}
	if got := <-dialled; got != "store.example:80" {
		t.Fatalf("dialled %q, want store.example:80", got)
	}
}

// rawServer answers each request on a connection with answers[path],
// written as is; it counts the connections it accepted.
func rawServer(t *testing.T, answers map[string]string) (addr string, conns *atomic.Int64) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	conns = new(atomic.Int64)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					if _, err := io.WriteString(c, answers[req.URL.Path]); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), conns
}

// With HeadlessNotModified a 304's headers are read and dropped: the
// answer has its status, no header and no body, and its connection serves
// the next request unless it asked to close, had a line longer than the
// buffer, or was not HTTP/1.1 (left to net/http); other answers are
// parsed whole; the head's bound holds. Without it a 304's headers are
// parsed.
func TestFetchTransportHeadlessNotModified(t *testing.T) {
	long := "HTTP/1.1 304 Not Modified\r\nX-Long: " + strings.Repeat("l", 8<<10) + "\r\n\r\n"
	huge := "HTTP/1.1 304 Not Modified\r\n" + strings.Repeat("X-Pad: 0123456789012345678901\r\n", 2*MaxHead/32) + "\r\n"
	addr, conns := rawServer(t, map[string]string{
		"/304":      "HTTP/1.1 304 Not Modified\r\nETag: \"abc\"\r\nConnection: keep-alive\r\nX-Amz-Request-Id: 1\r\nContent-Length: 0\r\n\r\n",
		"/304close": "HTTP/1.1 304 Not Modified\r\nETag: \"abc\"\r\nconnection: Keep-Alive, CLOSE\r\n\r\n",
		"/304long":  long,
		"/304huge":  huge,
		"/304old":   "HTTP/1.0 304 Not Modified\r\nETag: \"abc\"\r\n\r\n",
		"/200":      "HTTP/1.1 200 OK\r\nETag: \"abc\"\r\nContent-Length: 2\r\n\r\nok",
	})
	get := func(tr *Transport, path string) (*http.Response, string, error) {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+addr+path, nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			return nil, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp, string(b), err
	}
	tr := newTestTransport(Config{HeadlessNotModified: true, ReadBuffer: 4 << 10})
	defer tr.CloseIdleConnections()
	for _, step := range []struct {
		path      string
		status    int
		etag      string
		conns     int64 // accepted after the step
		idleAfter int
	}{
		{"/304", 304, "", 1, 1},
		{"/200", 200, `"abc"`, 1, 1},
		{"/304", 304, "", 1, 1},
		{"/304close", 304, "", 1, 0},
		{"/304", 304, "", 2, 1},
		{"/304long", 304, "", 2, 0},
		{"/200", 200, `"abc"`, 3, 1},
		{"/304old", 304, `"abc"`, 3, 0},
		{"/304", 304, "", 4, 1},
	} {
		resp, body, err := get(tr, step.path)
		if err != nil {
			t.Fatalf("%s: %v", step.path, err)
		}
		if resp.StatusCode != step.status || resp.Header.Get("ETag") != step.etag || (step.status == 304 && body != "") {
			t.Errorf("%s: %d, ETag %q, body %q; want %d, ETag %q", step.path, resp.StatusCode, resp.Header.Get("ETag"), body, step.status, step.etag)
		}
		if n := conns.Load(); n != step.conns {
			t.Errorf("after %s: %d connections, want %d", step.path, n, step.conns)
		}
		if n := tr.IdleConns(); n != step.idleAfter {
			t.Errorf("after %s: %d idle connections, want %d", step.path, n, step.idleAfter)
		}
	}
	if _, _, err := get(tr, "/304huge"); !errors.Is(err, ErrHeadTooLong) {
		t.Errorf("an endless 304 head: %v, want %v", err, ErrHeadTooLong)
	}

	plain := newTestTransport(Config{})
	defer plain.CloseIdleConnections()
	resp, _, err := get(plain, "/304")
	if err != nil || resp.StatusCode != 304 || resp.Header.Get("X-Amz-Request-Id") != "1" {
		t.Errorf("without HeadlessNotModified: %v, %v; want a 304 with its headers", resp, err)
	}
}
