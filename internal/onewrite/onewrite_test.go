package onewrite

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/onewrite/onewritetest"
)

func payload(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i>>8)
	}
	return b
}

// server answers GET /N with N bytes, holding the answer when asked
// (?hold=1) with the size it announces (?claim=M, else N); /abort/N
// aborts after writing half of it.
func server(t *testing.T, useTLS bool) (*httptest.Server, *onewritetest.Counter) {
	t.Helper()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var n int
		abort := false
		if s, ok := cutPrefix(r.URL.Path, "/abort/"); ok {
			n, abort = atoi(s), true
		} else {
			n = atoi(r.URL.Path[1:])
		}
		claim := int64(n)
		if c := r.URL.Query().Get("claim"); c != "" {
			claim = int64(atoi(c))
		}
		w.Header().Set("Content-Length", strconv.Itoa(n))
		w.Header().Set("X-Padding", string(bytes.Repeat([]byte("p"), 1200)))
		if r.URL.Query().Get("hold") == "1" {
			defer Hold(w, r, claim)()
		}
		body := payload(n)
		if abort {
			_, _ = w.Write(body[:n/2])
			panic(http.ErrAbortHandler)
		}
		if r.URL.Query().Get("readfrom") == "1" {
			_, _ = io.Copy(w, onlyReader{bytes.NewReader(body)})
			return
		}
		// In pieces, as a body streamed from a cache entry is.
		for len(body) > 0 {
			k := min(len(body), 1500)
			if _, err := w.Write(body[:k]); err != nil {
				return
			}
			body = body[k:]
		}
	})
	srv := httptest.NewUnstartedServer(h)
	cl := onewritetest.NewCounter(srv.Listener)
	srv.Listener = Listen(cl)
	srv.Config.ConnContext = ConnContext
	if useTLS {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return srv, cl
}

type onlyReader struct{ io.Reader }

func cutPrefix(s, p string) (string, bool) {
	if len(s) >= len(p) && s[:len(p)] == p {
		return s[len(p):], true
	}
	return s, false
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		panic(err)
	}
	return n
}

func get(t *testing.T, c *http.Client, url string, n int) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !bytes.Equal(got, payload(n)) {
		t.Fatalf("GET %s: %d bytes, %v; want %d bytes intact", url, len(got), err, n)
	}
}

// A held answer leaves in one write, whatever its size within the
// bounds, intact, on a kept-alive connection; not held, the same answers
// take several writes (what makes the count mean something).
func TestHeldAnswerLeavesInOneWrite(t *testing.T) {
	for _, useTLS := range []bool{false, true} {
		t.Run(fmt.Sprintf("tls=%v", useTLS), func(t *testing.T) {
			srv, cl := server(t, useTLS)
			c := srv.Client()
			get(t, c, srv.URL+"/10", 10) // the connection, its handshake done
			for _, n := range []int{From, 4 << 10, 5000, 16 << 10, 33 << 10, To - 1} {
				for range 3 {
					before := cl.Writes()
					get(t, c, fmt.Sprintf("%s/%d?hold=1", srv.URL, n), n)
					if w := cl.Writes() - before; w != 1 {
						t.Errorf("%d bytes held: %d writes, want 1", n, w)
					}
					before = cl.Writes()
					get(t, c, fmt.Sprintf("%s/%d", srv.URL, n), n)
					if w := cl.Writes() - before; w < 2 {
						t.Errorf("%d bytes not held: %d writes, want several", n, w)
					}
				}
			}
		})
	}
}

// Out of bounds, Hold does nothing; an answer larger than it claimed
// outgrows its buffer and goes out as written, intact; the connection is
// then not held any more (the next answer is as fast as before).
func TestHoldBoundsAndOverflow(t *testing.T) {
	srv, cl := server(t, false)
	c := srv.Client()
	for _, n := range []int{0, 100, From - 1} {
		get(t, c, fmt.Sprintf("%s/%d?hold=1", srv.URL, n), n)
	}
	before := cl.Writes()
	get(t, c, fmt.Sprintf("%s/%d?hold=1", srv.URL, 200<<10), 200<<10)
	if w := cl.Writes() - before; w < 2 {
		t.Errorf("200 KiB: %d writes: held beyond the bounds", w)
	}
	// Claims 4 KiB, writes 300 KiB: overflows its buffer.
	get(t, c, fmt.Sprintf("%s/%d?hold=1&claim=4096", srv.URL, 300<<10), 300<<10)
	before = cl.Writes()
	get(t, c, fmt.Sprintf("%s/%d?hold=1", srv.URL, 4096), 4096)
	if w := cl.Writes() - before; w != 1 {
		t.Errorf("after an overflow: %d writes, want 1", w)
	}
}

// A held answer whose body goes through the response's ReadFrom (the
// path net/http takes to sendfile and splice, and io.Copy to a response
// from a plain reader) is held whole too, and arrives intact; one that
// outgrows its buffer that way arrives intact as well.
func TestHeldThenReadFrom(t *testing.T) {
	srv, cl := server(t, false)
	c := srv.Client()
	get(t, c, srv.URL+"/10", 10)
	for _, n := range []int{4 << 10, 20 << 10} {
		before := cl.Writes()
		get(t, c, fmt.Sprintf("%s/%d?hold=1&readfrom=1", srv.URL, n), n)
		if w := cl.Writes() - before; w != 1 {
			t.Errorf("%d bytes held through ReadFrom: %d writes, want 1", n, w)
		}
	}
	get(t, c, fmt.Sprintf("%s/%d?hold=1&readfrom=1&claim=4096", srv.URL, 300<<10), 300<<10)
	get(t, c, fmt.Sprintf("%s/%d?readfrom=1", srv.URL, 300<<10), 300<<10)
}

// A handler that aborts mid-answer while holding: the client sees an
// error, never a whole answer, and the server goes on serving.
func TestHeldAbort(t *testing.T) {
	srv, _ := server(t, false)
	c := srv.Client()
	resp, err := c.Get(srv.URL + "/abort/8192?hold=1")
	if err == nil {
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	if err == nil {
		t.Fatal("an aborted answer read without error")
	}
	get(t, c, srv.URL+"/8192?hold=1", 8192)
}

// Many clients at once, each on its own connections: every answer
// intact (run with -race).
func TestHeldConcurrent(t *testing.T) {
	srv, _ := server(t, false)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			tr := &http.Transport{MaxIdleConnsPerHost: 1}
			defer tr.CloseIdleConnections()
			c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
			for j := range 30 {
				n := From + (i*997+j*131)%(To-From)
				resp, err := c.Get(fmt.Sprintf("%s/%d?hold=1", srv.URL, n))
				if err != nil {
					errs <- err
					return
				}
				got, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || !bytes.Equal(got, payload(n)) {
					errs <- fmt.Errorf("%d bytes: got %d, %v", n, len(got), err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// Without Listen's connections (or without ConnContext) Hold does
// nothing, and answers are as written.
func TestHoldWithoutConn(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer Hold(w, r, 4096)()
		_, _ = w.Write(payload(4096))
	}))
	defer srv.Close()
	get(t, srv.Client(), srv.URL+"/", 4096)
}

// A failed write of a held answer closes the connection rather than
// leave net/http a stream that lost bytes; a closed connection drops
// what it holds.
func TestReleaseFailureCloses(t *testing.T) {
	a, b := net.Pipe()
	c := &Conn{Conn: a}
	if !c.hold(4096 + headroom) {
		t.Fatal("hold refused")
	}
	if _, err := c.Write(payload(100)); err != nil {
		t.Fatal(err)
	}
	b.Close() // the peer goes: the held write fails
	c.release()
	// Closed here, a read says so; closed only by the peer, it reads EOF.
	if _, err := a.Read(make([]byte, 1)); !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("after a failed release the connection is open: %v", err)
	}
	if err := c.Close(); err != nil && !errors.Is(err, io.ErrClosedPipe) {
		t.Fatal(err)
	}
	if c.held != nil {
		t.Fatal("a closed connection still holds a buffer")
	}
}

// Close, from another goroutine (a server shutting down), interrupts a
// write blocked on a client that does not read, held or not: the lock
// is never held across I/O.
func TestCloseInterruptsBlockedWrite(t *testing.T) {
	for _, held := range []bool{false, true} {
		a, b := net.Pipe() // synchronous: a write waits for a read
		defer b.Close()
		c := &Conn{Conn: a}
		if held && !c.hold(4096+headroom) {
			t.Fatal("hold refused")
		}
		done := make(chan error, 1)
		go func() {
			_, err := c.Write(payload(200 << 10)) // outgrows any held buffer: sent now, blocks
			done <- err
		}()
		// The write has begun (its first byte read), and waits for the rest.
		if _, err := io.ReadFull(b, make([]byte, 1)); err != nil {
			t.Fatal(err)
		}
		closed := make(chan error, 1)
		go func() { closed <- c.Close() }()
		select {
		case err := <-closed:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("held=%v: Close waited for a blocked write", held)
		}
		select {
		case err := <-done:
			if err == nil {
				t.Fatalf("held=%v: a write to a closed connection succeeded", held)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("held=%v: the write stayed blocked after Close", held)
		}
	}
}

// Over HTTP/2 the connection carries several answers at once: Hold does
// nothing there, and an answer whose handler is still writing never holds
// another stream's.
func TestHoldSkipsHTTP2(t *testing.T) {
	release, entered := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "4096")
		defer Hold(w, r, 4096)()
		if r.URL.Path == "/slow" {
			_, _ = w.Write(payload(100))
			_ = http.NewResponseController(w).Flush()
			close(entered)
			<-release
			_, _ = w.Write(payload(4096)[100:])
			return
		}
		_, _ = w.Write(payload(4096))
	})
	srv := httptest.NewUnstartedServer(h)
	srv.EnableHTTP2 = true
	srv.Listener = Listen(srv.Listener)
	srv.Config.ConnContext = ConnContext
	srv.StartTLS()
	defer srv.Close()
	let := sync.OnceFunc(func() { close(release) })
	defer let() // the slow handler goes, whatever happens
	c := srv.Client()
	c.Timeout = 10 * time.Second
	slow := make(chan error, 1)
	go func() {
		resp, err := c.Get(srv.URL + "/slow")
		if err == nil {
			var got []byte
			got, err = io.ReadAll(resp.Body) // until the handler is let go
			resp.Body.Close()
			switch {
			case err == nil && resp.ProtoMajor != 2:
				err = fmt.Errorf("served over %s, want HTTP/2", resp.Proto)
			case err == nil && !bytes.Equal(got, payload(4096)):
				err = fmt.Errorf("slow answer: %d bytes, not the payload", len(got))
			}
		}
		slow <- err
	}()
	// The slow answer's handler has written and waits: the same
	// connection must carry another answer meanwhile.
	select {
	case <-entered:
	case err := <-slow:
		t.Fatalf("slow answer ended early: %v", err)
	}
	resp, err := c.Get(srv.URL + "/fast")
	if err != nil {
		t.Fatalf("another stream while one is held: %v", err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !bytes.Equal(got, payload(4096)) || resp.ProtoMajor != 2 {
		t.Fatalf("fast answer: %d bytes, %v, %s", len(got), err, resp.Proto)
	}
	let()
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
}
