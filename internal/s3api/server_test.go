package s3api

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/cachelet"
	"github.com/hoard-io/hoard/internal/s3auth"
	"github.com/hoard-io/hoard/internal/store/memstore"
)

const (
	testAK, testSK = "testaccess", "testsecret"
	testRegion     = "us-east-1"
)

type creds struct{}

func (creds) Secret(ak string) (string, bool) { return testSK, ak == testAK }

// testServer is the S3 front over a cachelet over an in-memory store.
type testServer struct {
	*httptest.Server
	api   *Server
	store *memstore.Store
}

func newTestServer(t testing.TB, domains ...string) *testServer {
	t.Helper()
	return newTestServerWith(t, Config{Region: testRegion, Domains: domains})
}

// newTestServerWith is newTestServer with the front's config given.
func newTestServerWith(t testing.TB, cfg Config) *testServer {
	t.Helper()
	st := memstore.New()
	cl, err := cachelet.New(cachelet.Config{Cache: cache.Config{Budget: 16 << 20}}, st, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ver, err := s3auth.New(s3auth.Config{Region: cfg.Region, Domains: cfg.Domains}, creds{})
	if err != nil {
		t.Fatal(err)
	}
	api, err := New(cfg, cl, ver, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(func() { srv.Close(); cl.Close() })
	if err := st.CreateBucket(context.Background(), "bkt", testRegion); err != nil {
		t.Fatal(err)
	}
	return &testServer{Server: srv, api: api, store: st}
}

// do sends a SigV4-signed request with the payload's SHA-256 signed.
func (s *testServer) do(t *testing.T, method, target string, body []byte, hdr map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, s.URL+target, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	sum := sha256.Sum256(body)
	hash := hex.EncodeToString(sum[:])
	if req.Header.Get("X-Amz-Content-Sha256") == "" {
		req.Header.Set("X-Amz-Content-Sha256", hash)
	} else {
		hash = req.Header.Get("X-Amz-Content-Sha256")
	}
	sign(t, req, hash)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// sign signs req as S3 SDKs do: the path exactly as sent, not re-escaped.
func sign(t testing.TB, req *http.Request, payloadHash string) {
	t.Helper()
	signer := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
	if err := signer.SignHTTP(context.Background(), aws.Credentials{AccessKeyID: testAK, SecretAccessKey: testSK},
		req, payloadHash, "s3", testRegion, time.Now()); err != nil {
		t.Fatal(err)
	}
}

func errorCodeOf(t *testing.T, resp *http.Response) string {
	t.Helper()
	var e errorResponse
	data, _ := io.ReadAll(resp.Body)
	if err := xml.Unmarshal(data, &e); err != nil {
		t.Fatalf("status %d, body %q is not an S3 error: %v", resp.StatusCode, data, err)
	}
	return e.Code
}

func (s *testServer) object(t *testing.T, key string) string {
	t.Helper()
	body, _, _, err := s.store.Get(context.Background(), "bkt", key, storeGetAll)
	if err != nil {
		return "<" + err.Error() + ">"
	}
	defer body.Close()
	data, _ := io.ReadAll(body)
	return string(data)
}

func TestBadRequestsChangeNothing(t *testing.T) {
	s := newTestServer(t)
	if resp := s.do(t, http.MethodPut, "/bkt/k", []byte("original"), nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("seed put: %d", resp.StatusCode)
	}
	big := strings.Repeat("x", maxHeaderSection)
	tests := []struct {
		name, method, target string
		body                 []byte
		hdr                  map[string]string
		status               int
		code                 string
	}{
		{"unsupported sub-resource", "PUT", "/bkt/k?tagging", []byte("<Tagging/>"), nil, 501, "NotImplemented"},
		{"versioned read", "GET", "/bkt/k?versionId=3", nil, nil, 501, "NotImplemented"},
		{"part read", "GET", "/bkt/k?partNumber=1", nil, nil, 501, "NotImplemented"},
		{"upload part copy", "PUT", "/bkt/k?partNumber=1&uploadId=x", nil, map[string]string{"x-amz-copy-source": "/bkt/k"}, 501, "NotImplemented"},
		{"dot-dot key", "PUT", "/bkt/a/../k", []byte("evil"), nil, 400, "InvalidArgument"},
		{"encoded dot-dot key", "PUT", "/bkt/a/%2E%2E/k", []byte("evil"), nil, 400, "InvalidArgument"},
		{"NUL in key", "PUT", "/bkt/k%00x", []byte("evil"), nil, 400, "InvalidArgument"},
		{"bad bucket name", "PUT", "/Bad_Bucket/k", []byte("evil"), nil, 400, "InvalidBucketName"},
		{"headers too large", "PUT", "/bkt/k", []byte("evil"), map[string]string{"x-amz-meta-big": big}, 400, "RequestHeaderSectionTooLarge"},
		{"metadata too large", "PUT", "/bkt/k", []byte("evil"), map[string]string{"x-amz-meta-big": big[:maxMetaSize+1]}, 400, "MetadataTooLarge"},
		{"body differs from signed hash", "PUT", "/bkt/k", []byte("evil"), map[string]string{"X-Amz-Content-Sha256": strings.Repeat("ab", 32)}, 400, "XAmzContentSHA256Mismatch"},
		{"wrong content-md5", "PUT", "/bkt/k", []byte("evil"), map[string]string{"Content-MD5": "AAAAAAAAAAAAAAAAAAAAAA=="}, 400, "BadDigest"},
		{"malformed delete xml", "POST", "/bkt?delete", []byte("<Delete><Object>"), nil, 400, "MalformedXML"},
		{"empty delete", "POST", "/bkt?delete", []byte("<Delete></Delete>"), nil, 400, "MalformedXML"},
		{"bad max-keys", "GET", "/bkt?list-type=2&max-keys=-1", nil, nil, 400, "InvalidArgument"},
		{"bad encoding type", "GET", "/bkt?encoding-type=base64", nil, nil, 400, "InvalidArgument"},
		{"unsatisfiable range", "GET", "/bkt/k", nil, map[string]string{"Range": "bytes=100-"}, 416, "InvalidRange"},
		{"bad part number", "PUT", "/bkt/k?partNumber=0&uploadId=x", []byte("p"), nil, 400, "InvalidArgument"},
		{"missing object", "GET", "/bkt/nope", nil, nil, 404, "NoSuchKey"},
		{"missing bucket", "GET", "/nobucket/k", nil, nil, 404, "NoSuchBucket"},
		{"copy to itself", "PUT", "/bkt/k", nil, map[string]string{"x-amz-copy-source": "/bkt/k"}, 400, "InvalidRequest"},
		{"copy source without key", "PUT", "/bkt/k2", nil, map[string]string{"x-amz-copy-source": "/bkt"}, 400, "InvalidArgument"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := s.do(t, tt.method, tt.target, tt.body, tt.hdr)
			if resp.StatusCode != tt.status {
				data, _ := io.ReadAll(resp.Body)
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, data)
			}
			if code := errorCodeOf(t, resp); code != tt.code {
				t.Fatalf("code %s, want %s", code, tt.code)
			}
			if resp.Header.Get("x-amz-request-id") == "" {
				t.Error("no x-amz-request-id")
			}
			if got := s.object(t, "k"); got != "original" {
				t.Fatalf("object changed to %q", got)
			}
		})
	}
}

func TestCompleteMultipartUploadPartOrder(t *testing.T) {
	s := newTestServer(t)
	body := `<CompleteMultipartUpload><Part><PartNumber>2</PartNumber><ETag>"a"</ETag></Part>` +
		`<Part><PartNumber>1</PartNumber><ETag>"b"</ETag></Part></CompleteMultipartUpload>`
	resp := s.do(t, http.MethodPost, "/bkt/k?uploadId=whatever", []byte(body), nil)
	if resp.StatusCode != 400 || errorCodeOf(t, resp) != "InvalidPartOrder" {
		t.Fatalf("status %d, want 400 InvalidPartOrder", resp.StatusCode)
	}
}

func TestUnauthenticated(t *testing.T) {
	s := newTestServer(t)
	resp, err := http.Get(s.URL + "/bkt/k")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 403 || errorCodeOf(t, resp) != "AccessDenied" {
		t.Fatalf("anonymous GET: status %d", resp.StatusCode)
	}
	// HEAD errors carry no body, only the status.
	resp, err = http.Head(s.URL + "/bkt/k")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 || resp.ContentLength > 0 {
		t.Fatalf("anonymous HEAD: status %d, length %d", resp.StatusCode, resp.ContentLength)
	}
}

func TestVirtualHostStyle(t *testing.T) {
	s := newTestServer(t, "s3.test")
	req, _ := http.NewRequest(http.MethodPut, s.URL+"/dir/k", strings.NewReader("virtual"))
	req.Host = "bkt.s3.test"
	sum := sha256.Sum256([]byte("virtual"))
	req.Header.Set("X-Amz-Content-Sha256", hex.EncodeToString(sum[:]))
	sign(t, req, hex.EncodeToString(sum[:]))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("virtual-host put: %d", resp.StatusCode)
	}
	if got := s.object(t, "dir/k"); got != "virtual" {
		t.Fatalf("stored %q under bkt/dir/k", got)
	}
}

func TestGetHeaders(t *testing.T) {
	s := newTestServer(t)
	s.do(t, http.MethodPut, "/bkt/k", []byte("0123456789"), map[string]string{"Content-Type": "text/plain", "x-amz-meta-Color": "Blue"})
	resp := s.do(t, http.MethodGet, "/bkt/k?response-content-type=application/x-override", nil, map[string]string{"Range": "bytes=2-4"})
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 206 || string(data) != "234" {
		t.Fatalf("ranged get: %d %q", resp.StatusCode, data)
	}
	h := resp.Header
	if h.Get("Content-Range") != "bytes 2-4/10" || h.Get("Content-Type") != "application/x-override" {
		t.Fatalf("headers: %v", h)
	}
	if h.Get("x-amz-meta-color") != "Blue" {
		t.Fatalf("user metadata: %v", h)
	}
	for name := range h {
		if strings.HasPrefix(strings.ToLower(name), "x-amz-checksum-") {
			t.Fatalf("a 206 carries %s", name)
		}
	}
	resp = s.do(t, http.MethodGet, "/bkt/k", nil, map[string]string{"If-None-Match": h.Get("ETag")})
	if resp.StatusCode != http.StatusNotModified {
		t.Fatalf("If-None-Match: %d", resp.StatusCode)
	}
}

// TestMetadataHeaderCase: user metadata goes out with lower-case names, as
// S3 sends them; SDKs hand the name's suffix to users as is.
func TestMetadataHeaderCase(t *testing.T) {
	s := newTestServer(t)
	s.do(t, http.MethodPut, "/bkt/k", []byte("v"), map[string]string{"X-Amz-Meta-Color": "Blue"})
	req := httptest.NewRequest(http.MethodGet, "/bkt/k", nil)
	req.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
	sign(t, req, "UNSIGNED-PAYLOAD")
	rec := httptest.NewRecorder()
	s.api.ServeHTTP(rec, req)
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	//lint:ignore SA1008 the point is the exact, non-canonical name sent on the wire
	if vals := rec.Header()["x-amz-meta-color"]; len(vals) != 1 || vals[0] != "Blue" {
		t.Fatalf("headers sent: %v", rec.Header())
	}
}

// TestOversizedUpload: a declared length over S3's 5 GiB limit is refused
// before any of the body is read.
func TestOversizedUpload(t *testing.T) {
	s := newTestServer(t)
	for _, target := range []string{"/bkt/huge", "/bkt/huge?partNumber=1&uploadId=x"} {
		req := httptest.NewRequest(http.MethodPut, target, strings.NewReader(""))
		req.ContentLength = MaxObjectSize + 1
		req.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
		sign(t, req, "UNSIGNED-PAYLOAD")
		rec := httptest.NewRecorder()
		s.api.ServeHTTP(rec, req)
		if rec.Code != 400 || !strings.Contains(rec.Body.String(), "<Code>EntityTooLarge</Code>") {
			t.Fatalf("%s: %d %s", target, rec.Code, rec.Body)
		}
	}
	if got := s.object(t, "huge"); !strings.HasPrefix(got, "<") {
		t.Fatalf("an object was stored: %q", got)
	}
}

// TestContinueForEmptyBodies: a request that asks for 100 Continue gets it
// even with an empty body, as from S3. botocore, answered finally while it
// waits for 100, leaves its kept-alive connection in a state where its next
// request hangs; `aws s3 sync` of a tree holding an empty file did.
func TestContinueForEmptyBodies(t *testing.T) {
	s := newTestServer(t)
	req, _ := http.NewRequest(http.MethodPut, s.URL+"/bkt/empty", http.NoBody)
	req.ContentLength = 0
	req.Header.Set("Expect", "100-continue")
	const emptySHA = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
	req.Header.Set("X-Amz-Content-Sha256", emptySHA)
	sign(t, req, emptySHA)
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusContinue {
		t.Fatalf("first answer %d, want 100 Continue", resp.StatusCode)
	}
	if resp, err = http.ReadResponse(br, req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("final status %d", resp.StatusCode)
	}
}

// TestLeadingSlashesInKey: /bkt//k names the key "k", as the store takes
// it, for writes, reads and the cache alike.
func TestLeadingSlashesInKey(t *testing.T) {
	s := newTestServer(t)
	read := func(target string) string {
		data, _ := io.ReadAll(s.do(t, http.MethodGet, target, nil, nil).Body)
		return string(data)
	}
	s.do(t, http.MethodPut, "/bkt//k", []byte("v1"), nil)
	if got := s.object(t, "k"); got != "v1" {
		t.Fatalf("store holds %q under k", got)
	}
	if a, b := read("/bkt//k"), read("/bkt/k"); a != "v1" || b != "v1" {
		t.Fatalf("reads %q and %q", a, b)
	}
	s.do(t, http.MethodPut, "/bkt/k", []byte("v2"), nil)
	if got := read("/bkt//k"); got != "v2" {
		t.Fatalf("read of /bkt//k after a write to /bkt/k: %q", got)
	}
	if resp := s.do(t, http.MethodGet, "/bkt///", nil, nil); resp.StatusCode != 400 {
		t.Fatalf("a key of slashes: %d", resp.StatusCode)
	}
}
