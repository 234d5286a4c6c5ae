package s3store

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"unicode/utf8"

	"github.com/minio/minio-go/v7/pkg/s3utils"

	"github.com/hoard-io/hoard/internal/s3auth"
	"github.com/hoard-io/hoard/internal/store"
)

type testCreds map[string]string

func (c testCreds) Secret(ak string) (string, bool) { s, ok := c[ak]; return s, ok }

// newGetStore is a Store for a test server's URL.
func newGetStore(t testing.TB, endpoint string, virtual bool, attempts int) *Store {
	t.Helper()
	st, err := New(Config{Endpoint: endpoint, AccessKey: "getkey", SecretKey: "get-secret-key", Region: "eu-test-1",
		VirtualHostStyle: virtual, MaxAttempts: attempts}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// TestGetSignedAsS3Verifies sends GETs of awkward keys with every option
// to a server that checks them with hoard's own SigV4 verifier (written
// apart from the signer) and checks it received the key, the headers and
// the path as sent: a signature or escaping that differs from S3's fails.
func TestGetSignedAsS3Verifies(t *testing.T) {
	ver, err := s3auth.New(s3auth.Config{Region: "eu-test-1"}, testCreds{"getkey": "get-secret-key"})
	if err != nil {
		t.Fatal(err)
	}
	var got atomic.Pointer[http.Request]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := ver.Verify(r); err != nil {
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprintf(w, "<Error><Code>SignatureDoesNotMatch</Code><Message>%s</Message></Error>", err)
			return
		}
		got.Store(r)
		w.Header().Set("ETag", `"abc"`)
		w.Header().Set("Content-Length", "2")
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	keys := []string{
		"plain", "dir/sub/file.txt", "with space", "plus+sign", "percent%2Fnot-a-slash", "q?mark#hash",
		"ünïcödé/日本語", "tilde~_-.", "semi;colon,comma=eq&amp", "trailing/", "//double//slash", "a'quote\"",
	}
	opts := []store.GetOptions{
		{},
		{IfNoneMatch: "abc", ChecksumMode: true},
		{IfMatch: `"abc"`, Range: &store.ByteRange{Start: 0, End: 1}},
		{IfMatch: "a  b ", IfNoneMatch: " x", Range: &store.ByteRange{Start: 5, End: -1}, ChecksumMode: true},
	}
	for _, virtual := range []bool{false, true} {
		endpoint := srv.URL
		if virtual {
			// Virtual-host style names the bucket in the Host; the
			// server answers whatever host it is asked under.
			endpoint = strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)
		}
		st := newGetStore(t, endpoint, virtual, 1)
		if virtual {
			st.transport.DialContext = dialTo(srv.Listener.Addr().String())
		}
		for _, key := range keys {
			for i, o := range opts {
				body, info, _, err := st.Get(t.Context(), "bucket-1", key, o)
				if err != nil {
					t.Fatalf("virtual %v, key %q, options %d: %v", virtual, key, i, err)
				}
				b, _ := io.ReadAll(body)
				body.Close()
				if string(b) != "ok" || info.ETag != "abc" {
					t.Fatalf("key %q: body %q, etag %q", key, b, info.ETag)
				}
				r := got.Load()
				wantPath := "/bucket-1/" + key
				if virtual {
					wantPath = "/" + key
					if !strings.HasPrefix(r.Host, "bucket-1.") {
						t.Errorf("key %q: host %q, want the bucket's", key, r.Host)
					}
				}
				if r.URL.Path != wantPath {
					t.Errorf("key %q: path %q arrived, want %q", key, r.URL.Path, wantPath)
				}
				if want := s3utils.EncodePath(wantPath); r.URL.EscapedPath() != want {
					t.Errorf("key %q: escaped path %q, want S3's %q", key, r.URL.EscapedPath(), want)
				}
				if (o.IfNoneMatch != "") != (r.Header.Get("If-None-Match") != "") ||
					(o.Range != nil) != (r.Header.Get("Range") != "") ||
					o.ChecksumMode != (r.Header.Get("X-Amz-Checksum-Mode") == "ENABLED") {
					t.Errorf("key %q, options %d: headers %v", key, i, r.Header)
				}
			}
		}
	}
}

// dialTo makes a transport connect to addr whatever host a request names.
func dialTo(addr string) func(ctx context.Context, network, _ string) (net.Conn, error) {
	return func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
}

// TestEscapedPathIsS3s compares the path escaping with minio-go's
// EncodePath over random UTF-8 keys.
func TestEscapedPathIsS3s(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := []rune("aZ09-_.~/ +%?#&=;:,'\"!*()[]@$ü日\u00a0\u2028\U0001F600\x7f\x01")
	for range 5000 {
		n := 1 + r.IntN(20)
		rs := make([]rune, n)
		for i := range rs {
			rs[i] = alphabet[r.IntN(len(alphabet))]
		}
		p := "/" + string(rs)
		if !utf8.ValidString(p) {
			continue
		}
		if got, want := string(appendEscapedPath(nil, p)), s3utils.EncodePath(p); got != want {
			t.Fatalf("%q escaped %q, EncodePath %q", p, got, want)
		}
		if u, err := url.PathUnescape(string(appendEscapedPath(nil, p))); err != nil || u != p {
			t.Fatalf("%q does not unescape to itself: %q, %v", p, u, err)
		}
	}
}

// TestGetErrors checks how each answer of a store that is not a success
// reads, and which are tried again.
func TestGetErrors(t *testing.T) {
	cases := []struct {
		name     string
		status   int
		body     string
		header   map[string]string
		want     error  // a sentinel, or nil for an APIError
		wantCode string // the APIError's code when want is nil
		tries    int    // requests the store sees with MaxAttempts 3
	}{
		{name: "no such key (document)", status: 404, body: "<Error><Code>NoSuchKey</Code></Error>", want: store.ErrNoSuchKey, tries: 1},
		{name: "no such bucket (document)", status: 404, body: "<Error><Code>NoSuchBucket</Code></Error>", want: store.ErrNoSuchBucket, tries: 1},
		{name: "404 without a body", status: 404, want: store.ErrNoSuchKey, tries: 1},
		{name: "404, MinIO's code header", status: 404, header: map[string]string{"x-minio-error-code": "NoSuchBucket"}, want: store.ErrNoSuchBucket, tries: 1},
		{name: "not modified", status: 304, want: store.ErrNotModified, tries: 1},
		{name: "precondition failed", status: 412, want: store.ErrPreconditionFailed, tries: 1},
		{name: "invalid range", status: 416, body: "<Error><Code>InvalidRange</Code></Error>", want: store.ErrInvalidRange, tries: 1},
		{name: "access denied", status: 403, body: "<Error><Code>AccessDenied</Code><Message>no</Message></Error>", wantCode: "AccessDenied", tries: 1},
		{name: "403 without a body", status: 403, wantCode: "AccessDenied", tries: 1},
		{name: "slow down, retried", status: 503, body: "<Error><Code>SlowDown</Code></Error>", want: store.ErrUnavailable, tries: 3},
		{name: "internal error, retried", status: 500, body: "<Error><Code>InternalError</Code></Error>", want: store.ErrUnavailable, tries: 3},
		{name: "502 not XML, retried", status: 502, body: "<html>bad gateway</html>", want: store.ErrUnavailable, tries: 3},
		{name: "400 not retried", status: 400, body: "<Error><Code>InvalidArgument</Code></Error>", wantCode: "InvalidArgument", tries: 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var tries atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				tries.Add(1)
				for k, v := range c.header {
					w.Header().Set(k, v)
				}
				w.WriteHeader(c.status)
				_, _ = io.WriteString(w, c.body)
			}))
			t.Cleanup(srv.Close)
			st := newGetStore(t, srv.URL, false, 3)
			_, _, _, err := st.Get(t.Context(), "bucket-1", "key", store.GetOptions{})
			if c.want != nil && !errors.Is(err, c.want) {
				t.Errorf("error %v, want %v", err, c.want)
			}
			if c.want == nil {
				var api *store.APIError
				if !errors.As(err, &api) || api.Code != c.wantCode || api.StatusCode != c.status {
					t.Errorf("error %v, want an APIError %s (%d)", err, c.wantCode, c.status)
				}
			}
			if n := tries.Load(); int(n) != c.tries {
				t.Errorf("%d requests, want %d", n, c.tries)
			}
		})
	}
}

// TestGetRetriesThenSucceeds: a store that fails twice and then answers
// is read on the third attempt; with MaxAttempts 1 the first failure is
// the answer.
func TestGetRetriesThenSucceeds(t *testing.T) {
	for _, attempts := range []int{1, 3} {
		var tries atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if tries.Add(1) <= 2 {
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = io.WriteString(w, "<Error><Code>SlowDown</Code></Error>")
				return
			}
			w.Header().Set("ETag", `"e"`)
			_, _ = io.WriteString(w, "body")
		}))
		st := newGetStore(t, srv.URL, false, attempts)
		body, info, _, err := st.Get(t.Context(), "bucket-1", "key", store.GetOptions{})
		switch attempts {
		case 1:
			if !errors.Is(err, store.ErrUnavailable) || tries.Load() != 1 {
				t.Errorf("MaxAttempts 1: error %v after %d requests, want ErrUnavailable after 1", err, tries.Load())
			}
		default:
			if err != nil {
				t.Fatalf("MaxAttempts 3: %v", err)
			}
			b, _ := io.ReadAll(body)
			body.Close()
			if string(b) != "body" || info.ETag != "e" || tries.Load() != 3 {
				t.Errorf("MaxAttempts 3: body %q etag %q after %d requests", b, info.ETag, tries.Load())
			}
		}
		srv.Close()
	}
}

// TestGetRefusesBadNames: names minio-go refuses before sending are
// refused the same way, and nothing is sent.
func TestGetRefusesBadNames(t *testing.T) {
	var tries atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { tries.Add(1) }))
	t.Cleanup(srv.Close)
	st := newGetStore(t, srv.URL, false, 1)
	for _, c := range []struct{ bucket, key, code string }{
		{"ab", "k", "InvalidBucketName"},
		{"Bucket..x", "k", "InvalidBucketName"},
		{"192.168.1.1", "k", "InvalidBucketName"},
		{"bucket-1", "", "XMinioInvalidObjectName"},
		{"bucket-1", "   ", "XMinioInvalidObjectName"},
		{"bucket-1", "bad\xffutf8", "XMinioInvalidObjectName"},
		{"bucket-1", strings.Repeat("k", 1025), "XMinioInvalidObjectName"},
	} {
		_, _, _, err := st.Get(t.Context(), c.bucket, c.key, store.GetOptions{})
		var api *store.APIError
		if !errors.As(err, &api) || api.Code != c.code || api.StatusCode != http.StatusBadRequest {
			t.Errorf("%q/%q: %v, want %s (400)", c.bucket, c.key, err, c.code)
		}
	}
	if n := tries.Load(); n != 0 {
		t.Errorf("%d requests sent for names refused", n)
	}
	// Names the fast check leaves to minio-go's are still accepted.
	for _, b := range []string{"bucket.with.dots", "Upper_Case", "abc"} {
		if err := checkNames(b, "k"); err != nil {
			t.Errorf("%q refused: %v", b, err)
		}
	}
}

// TestStatHead: Stat sends a signed HEAD asking for checksums, reads the
// object's headers, and tells a delete marker from a missing key.
func TestStatHead(t *testing.T) {
	ver, err := s3auth.New(s3auth.Config{Region: "eu-test-1"}, testCreds{"getkey": "get-secret-key"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := ver.Verify(r); err != nil || r.Method != http.MethodHead || r.Header.Get("X-Amz-Checksum-Mode") != "ENABLED" {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		switch r.URL.Path {
		case "/bucket-1/here":
			w.Header().Set("ETag", `"e1"`)
			w.Header().Set("Content-Length", "42")
			w.Header().Set("Last-Modified", "Mon, 02 Jan 2006 15:04:05 GMT")
			w.Header().Set("X-Amz-Meta-Colour", "blue")
			w.Header().Set("X-Amz-Checksum-Crc32c", "AAAAAA==")
			w.Header().Set("X-Amz-Version-Id", "v1")
		case "/bucket-1/marked":
			w.Header().Set("X-Amz-Delete-Marker", "true")
			w.Header().Set("X-Amz-Version-Id", "dm1")
			w.WriteHeader(http.StatusNotFound)
		case "/nobucket/k":
			w.Header().Set("X-Minio-Error-Code", "NoSuchBucket")
			w.WriteHeader(http.StatusNotFound)
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	t.Cleanup(srv.Close)
	st := newGetStore(t, srv.URL, false, 1)
	info, err := st.Stat(t.Context(), "bucket-1", "here")
	if err != nil {
		t.Fatal(err)
	}
	if info.ETag != "e1" || info.Size != 42 || info.VersionID != "v1" || info.UserMetadata["colour"] != "blue" ||
		info.Checksums["CRC32C"] != "AAAAAA==" || info.LastModified.Year() != 2006 {
		t.Errorf("info %+v", info)
	}
	_, err = st.Stat(t.Context(), "bucket-1", "marked")
	var dm *store.DeleteMarkerError
	if !errors.As(err, &dm) || dm.VersionID != "dm1" || !errors.Is(err, store.ErrNoSuchKey) {
		t.Errorf("delete marker: %v", err)
	}
	if _, err = st.Stat(t.Context(), "bucket-1", "absent"); !errors.Is(err, store.ErrNoSuchKey) || errors.As(err, &dm) {
		t.Errorf("absent: %v, want ErrNoSuchKey and no delete marker", err)
	}
	if _, err = st.Stat(t.Context(), "nobucket", "k"); !errors.Is(err, store.ErrNoSuchBucket) {
		t.Errorf("no bucket: %v", err)
	}
}

// TestGetOverTLS: an https store (the server's own CA trusted) is read
// and asked about the same way, the Host signed as sent without the
// scheme's default port; a store whose certificate is not trusted fails
// at once, unretried.
func TestGetOverTLS(t *testing.T) {
	ver, err := s3auth.New(s3auth.Config{Region: "eu-test-1"}, testCreds{"getkey": "get-secret-key"})
	if err != nil {
		t.Fatal(err)
	}
	var tries atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tries.Add(1)
		if _, err := ver.Verify(r); err != nil {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		w.Header().Set("ETag", `"tls"`)
		w.Header().Set("Content-Length", "3")
		if r.Method == http.MethodGet {
			_, _ = io.WriteString(w, "tls")
		}
	}))
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	st, err := New(Config{Endpoint: srv.URL, AccessKey: "getkey", SecretKey: "get-secret-key", Region: "eu-test-1",
		TLS: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	body, info, _, err := st.Get(t.Context(), "bucket-1", "k y", store.GetOptions{ChecksumMode: true})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(body)
	body.Close()
	if string(b) != "tls" || info.ETag != "tls" {
		t.Errorf("GET over TLS: %q, etag %q", b, info.ETag)
	}
	if info, err := st.Stat(t.Context(), "bucket-1", "k y"); err != nil || info.Size != 3 {
		t.Errorf("HEAD over TLS: %+v, %v", info, err)
	}

	untrusted, err := New(Config{Endpoint: srv.URL, AccessKey: "getkey", SecretKey: "get-secret-key", Region: "eu-test-1", MaxAttempts: 3},
		slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = untrusted.Close() })
	before := tries.Load()
	if _, _, _, err := untrusted.Get(t.Context(), "bucket-1", "k", store.GetOptions{}); err == nil {
		t.Error("GET from a store whose certificate is not trusted succeeded")
	}
	if n := tries.Load() - before; n != 0 {
		t.Errorf("%d requests reached the handler over an untrusted TLS session", n)
	}
}

// TestGetInTheCallersGoroutine: the read path's GETs and HEADs go on the
// fetch transport's connections (ADR 0041), one kept-alive connection
// for many; a request a proxy applies to goes through net/http's
// Transport to the proxy instead.
func TestGetInTheCallersGoroutine(t *testing.T) {
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"abc"`)
		w.Header().Set("Content-Length", "2")
		_, _ = io.WriteString(w, "ok")
	})
	st := newGetStore(t, srv.URL, false, 1)
	for range 5 {
		body, _, _, err := st.Get(t.Context(), "bucket-1", "k", store.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := io.ReadAll(body); string(b) != "ok" {
			t.Fatalf("body %q", b)
		}
		body.Close()
		if _, err := st.Stat(t.Context(), "bucket-1", "k"); err != nil {
			t.Fatal(err)
		}
	}
	if n := st.fetch.IdleConns(); n != 1 {
		t.Fatalf("%d idle fetch connections, want 1", n)
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections for 10 requests, want 1", n)
	}

	var proxied atomic.Int64
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proxied.Add(1)
		if !r.URL.IsAbs() || r.URL.Host != srv.Listener.Addr().String() {
			t.Errorf("the proxy was asked for %s", r.URL)
		}
		w.Header().Set("ETag", `"abc"`)
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(proxy.Close)
	pu, _ := url.Parse(proxy.URL)
	st.transport.Proxy = http.ProxyURL(pu)
	st.fetch.CloseIdleConnections()
	body, _, _, err := st.Get(t.Context(), "bucket-1", "k", store.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.ReadAll(body)
	body.Close()
	if proxied.Load() != 1 || st.fetch.IdleConns() != 0 {
		t.Fatalf("through a proxy: %d proxied, %d idle fetch connections; want 1 and 0", proxied.Load(), st.fetch.IdleConns())
	}
}

// countingServer is a test server answering with h that counts the
// connections it accepted.
func countingServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int64) {
	conns := new(atomic.Int64)
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, conns
}

// TestNotModifiedKeepsTheConnection: a conditional GET answered 304 is
// store.ErrNotModified, sent once, and leaves its connection to the next
// request.
func TestNotModifiedKeepsTheConnection(t *testing.T) {
	var requests atomic.Int64
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.Header().Set("ETag", `"abc"`)
		if r.Header.Get("If-None-Match") == `"abc"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("Content-Length", "2")
		_, _ = io.WriteString(w, "ok")
	})
	st := newGetStore(t, srv.URL, false, 3)
	for range 10 {
		body, _, _, err := st.Get(t.Context(), "bucket-1", "k", store.GetOptions{IfNoneMatch: "abc", ChecksumMode: true})
		if !errors.Is(err, store.ErrNotModified) || body != nil {
			t.Fatalf("a 304: body %v, err %v; want store.ErrNotModified alone", body, err)
		}
	}
	body, _, _, err := st.Get(t.Context(), "bucket-1", "k", store.GetOptions{IfNoneMatch: "other"})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(body); string(b) != "ok" {
		t.Fatalf("body %q", b)
	}
	body.Close()
	if n := requests.Load(); n != 11 {
		t.Errorf("%d requests for 11 reads: a 304 was retried", n)
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections for 11 requests, want 1", n)
	}

}

// TestGetHTTPSToAPlainServer: an https endpoint where a plain HTTP server
// answers fails at once, without retries (its answer to the handshake is
// no TLS record).
func TestGetHTTPSToAPlainServer(t *testing.T) {
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	st := newGetStore(t, strings.Replace(srv.URL, "http:", "https:", 1), false, 3)
	_, _, _, err := st.Get(t.Context(), "bucket-1", "k", store.GetOptions{})
	if err == nil {
		t.Fatal("a plain HTTP server was read as an https store")
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections, want 1: the handshake's failure is not retried (%v)", n, err)
	}
}

// BenchmarkGetNotModified: a version check answered 304, the store
// client's side and a bare server's (go test -bench GetNotModified
// ./internal/store/s3).
func BenchmarkGetNotModified(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"abc"`)
		w.WriteHeader(http.StatusNotModified)
	}))
	b.Cleanup(srv.Close)
	st := newGetStore(b, srv.URL, false, 1)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, _, err := st.Get(b.Context(), "bucket-1", "k", store.GetOptions{IfNoneMatch: "abc", ChecksumMode: true}); !errors.Is(err, store.ErrNotModified) {
			b.Fatal(err)
		}
	}
}
