package bench

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/hoard-io/hoard/internal/httpfetch"
	"github.com/hoard-io/hoard/internal/onewrite"
)

// HTTPForwarder is an HTTP reverse proxy on loopback that passes every
// GET and HEAD to its upstream as it came (method, path, query and
// headers, Host included, so a request signed for the proxy is still
// valid at an S3 store) and the answer back as it came, doing nothing
// else. It is built from the parts hoard's own S3 front is built from
// and tuned as they are: a net/http server whose small answers leave in
// one write (onewrite), and the store client's transport, which writes
// each request and reads its answer in the handler's goroutine
// (httpfetch). In front of the store it is the least an HTTP proxy in
// Go adds: what Forwarder adds (one more hop) plus reading each request
// and answer and writing them again. `hoard bench access`'s store-http
// targets measure it beside hoard in the same run; what hoard adds above
// it is hoard's own work (authentication, the cache, the version check).
type HTTPForwarder struct {
	ln       net.Listener
	srv      *http.Server
	tr       *httpfetch.Transport
	upstream string
	wg       sync.WaitGroup
}

// httpForwardTimeout bounds the wait for a request's head and for the
// upstream's answer's; httpForwardDeadline bounds a forwarded request
// whole, its answer's body included (a large object behind a slow store
// link takes a while).
const (
	httpForwardTimeout  = 30 * time.Second
	httpForwardDeadline = 10 * time.Minute
)

// hopHeaders are the headers that describe one connection and are not
// passed on (RFC 9110, 7.6.1).
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// StartHTTPForwarder listens on a loopback port and forwards every GET
// and HEAD to upstream (host:port) over plain HTTP.
func StartHTTPForwarder(upstream string) (*HTTPForwarder, error) {
	if _, _, err := net.SplitHostPort(upstream); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	d := &net.Dialer{Timeout: forwardDialTimeout, KeepAlive: 30 * time.Second}
	f := &HTTPForwarder{
		ln:       onewrite.Listen(ln),
		upstream: upstream,
		tr: httpfetch.New(httpfetch.Config{
			Dial:           d.DialContext,
			DialTimeout:    forwardDialTimeout,
			HeaderTimeout:  httpForwardTimeout,
			MaxIdlePerHost: MaxConnections,
			ReadBuffer:     16 << 10, // as the store client's
		}),
	}
	f.srv = &http.Server{
		Handler:           f,
		ConnContext:       onewrite.ConnContext,
		ReadHeaderTimeout: httpForwardTimeout,
		IdleTimeout:       2 * time.Minute,
	}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		_ = f.srv.Serve(f.ln)
	}()
	return f, nil
}

// Addr is the address clients connect to.
func (f *HTTPForwarder) Addr() string { return f.ln.Addr().String() }

// ServeHTTP forwards r and copies the answer back.
func (f *HTTPForwarder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "the HTTP forwarder passes GET and HEAD only", http.StatusNotImplemented)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), httpForwardDeadline)
	defer cancel()
	h := r.Header.Clone()
	for _, k := range hopHeaders {
		delete(h, k)
	}
	out := (&http.Request{
		Method:     r.Method,
		URL:        &url.URL{Scheme: "http", Host: f.upstream, Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery},
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     h,
		Host:       r.Host,
	}).WithContext(ctx)
	resp, err := f.tr.RoundTrip(out)
	if err != nil {
		http.Error(w, "upstream: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	dst := w.Header()
	for k, v := range resp.Header {
		dst[k] = v
	}
	for _, k := range hopHeaders {
		delete(dst, k)
	}
	defer onewrite.Hold(w, r, resp.ContentLength)()
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// Close stops the server, closes its connections and the upstream ones,
// and waits for the server's goroutine.
func (f *HTTPForwarder) Close() error {
	err := f.srv.Close()
	f.wg.Wait()
	f.tr.CloseIdleConnections()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}
