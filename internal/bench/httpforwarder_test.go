package bench

import (
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestHTTPForwarder: GETs and HEADs reach the upstream as the client
// sent them (Host, raw path, query, headers; the connection's own
// headers dropped), over one kept-alive upstream connection, and come
// back with the upstream's status, headers and body; anything else is
// refused without reaching the upstream, and an upstream that is gone
// is a 502.
func TestHTTPForwarder(t *testing.T) {
	body := strings.Repeat("hoard", 2000) // 10 kB: held and sent in one write
	var reached, conns atomic.Int64
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		w.Header().Set("X-Seen", strings.Join([]string{r.Method, r.Host, r.URL.RawPath + "|" + r.URL.Path, r.URL.RawQuery,
			r.Header.Get("X-Amz-Date"), r.Header.Get("Te"), r.Header.Get("Keep-Alive"), "end"}, " "))
		w.Header().Set("ETag", `"e1"`)
		if r.Header.Get("If-None-Match") == `"e1"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("Content-Length", "10000")
		_, _ = io.WriteString(w, body)
	}), ReadHeaderTimeout: 10 * time.Second, ConnState: func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = up.Serve(ln) }()
	t.Cleanup(func() { _ = up.Close() })

	f, err := StartHTTPForwarder(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}
	do := func(method, path string, h http.Header) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+f.Addr()+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range h {
			req.Header[k] = v
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, string(b)
	}

	for range 3 {
		resp, got := do(http.MethodGet, "/b/a%2Fb//c?x-id=GetObject&a=%2F", http.Header{
			"X-Amz-Date": {"20260101T000000Z"}, "Te": {"trailers"}, "Keep-Alive": {"timeout=5"}})
		if resp.StatusCode != http.StatusOK || got != body || resp.Header.Get("ETag") != `"e1"` || resp.ContentLength != int64(len(body)) {
			t.Fatalf("GET: %s, %d bytes, ETag %q, length %d", resp.Status, len(got), resp.Header.Get("ETag"), resp.ContentLength)
		}
		want := "GET " + f.Addr() + " /b/a%2Fb//c|/b/a/b//c x-id=GetObject&a=%2F 20260101T000000Z   end"
		if seen := resp.Header.Get("X-Seen"); seen != want {
			t.Fatalf("the upstream saw %q, want %q", seen, want)
		}
	}
	resp, got := do(http.MethodHead, "/b/k", nil)
	if resp.StatusCode != http.StatusOK || got != "" || resp.ContentLength != int64(len(body)) {
		t.Fatalf("HEAD: %s, %q, length %d", resp.Status, got, resp.ContentLength)
	}
	resp, got = do(http.MethodGet, "/b/k", http.Header{"If-None-Match": {`"e1"`}})
	if resp.StatusCode != http.StatusNotModified || got != "" || resp.Header.Get("ETag") != `"e1"` {
		t.Fatalf("conditional GET: %s, %q, ETag %q", resp.Status, got, resp.Header.Get("ETag"))
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d upstream connections for requests one at a time, want 1", n)
	}

	before := reached.Load()
	for _, m := range []string{http.MethodPut, http.MethodPost, http.MethodDelete} {
		if resp, _ := do(m, "/b/k", nil); resp.StatusCode != http.StatusNotImplemented {
			t.Fatalf("%s: %s, want 501", m, resp.Status)
		}
	}
	if n := reached.Load(); n != before {
		t.Fatalf("refused requests reached the upstream (%d)", n-before)
	}

	_ = up.Close()
	if resp, _ := do(http.MethodGet, "/b/k", nil); resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("upstream gone: %s, want 502", resp.Status)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := net.DialTimeout("tcp", f.Addr(), time.Second); err == nil {
		t.Fatal("the forwarder still accepts after Close")
	}
	if _, err := StartHTTPForwarder("127.0.0.1"); err == nil {
		t.Fatal("an upstream without a port was accepted")
	}
}
