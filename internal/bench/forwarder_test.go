package bench

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// TestForwarder: requests on one kept-alive connection through the
// forwarder reach the upstream and come back whole, and a client that
// ends its writing half gets the upstream's last answer and its end.
func TestForwarder(t *testing.T) {
	body := strings.Repeat("hoard", 50_000) // 250 kB, many segments
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.URL.Path+":"+body)
	}), ReadHeaderTimeout: 10 * time.Second}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = up.Serve(ln) }()
	t.Cleanup(func() { _ = up.Close() })

	f, err := StartForwarder(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	if f.Addr() == ln.Addr().String() {
		t.Fatal("the forwarder listens where its upstream does")
	}

	c, err := net.Dial("tcp", f.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(c)
	for _, path := range []string{"/a", "/b", "/c"} {
		if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(got) != path+":"+body {
			t.Fatalf("%s: %d bytes, %v", path, len(got), err)
		}
	}
	// The client's end of writing reaches the upstream, which answers
	// what it had and closes; both come back.
	if _, err := io.WriteString(c, "GET /last HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(got) != "/last:"+body {
		t.Fatalf("last answer: %d bytes", len(got))
	}
	if n, err := br.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("after the last answer: %d bytes, %v; want EOF", n, err)
	}

	// An upstream that answers only once the client's bytes end (it
	// counts them until EOF): the end must cross the forwarder.
	counter, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer counter.Close()
	go func() {
		u, err := counter.Accept()
		if err != nil {
			return
		}
		defer u.Close()
		n, _ := io.Copy(io.Discard, u)
		_, _ = fmt.Fprintf(u, "%d", n)
	}()
	g, err := StartForwarder(counter.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	gc, err := net.Dial("tcp", g.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	_ = gc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := gc.Write(make([]byte, 100_000)); err != nil {
		t.Fatal(err)
	}
	if err := gc.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(gc); err != nil || string(got) != "100000" {
		t.Fatalf("counted %q, %v; want 100000 and the end", got, err)
	}
}

// TestForwarderClose: Close ends the connections it forwards (a client
// waiting on a silent upstream sees its connection end) and returns once
// their goroutines have; a connection to an upstream that is gone is
// closed at once; an address without a port is refused.
func TestForwarderClose(t *testing.T) {
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	held := make(chan net.Conn, 1)
	go func() {
		c, err := silent.Accept()
		if err == nil {
			held <- c // accepted, never answered
		}
	}()
	f, err := StartForwarder(silent.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", f.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	select {
	case u := <-held:
		defer u.Close()
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream never saw the connection")
	}
	done := make(chan error, 1)
	go func() { done <- f.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("client after Close: %d bytes, %v; want its connection ended", n, err)
	}
	if _, err := net.DialTimeout("tcp", f.Addr(), time.Second); err == nil {
		t.Error("the forwarder still accepts after Close")
	}

	// An upstream that is gone: the accepted connection is closed.
	gone, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := gone.Addr().String()
	gone.Close()
	g, err := StartForwarder(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	gc, err := net.Dial("tcp", g.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	_ = gc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := gc.Read(make([]byte, 1)); n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("with the upstream gone: %d bytes, %v; want the connection closed", n, err)
	}

	if _, err := StartForwarder("127.0.0.1"); err == nil {
		t.Error("an upstream without a port was accepted")
	}
}
