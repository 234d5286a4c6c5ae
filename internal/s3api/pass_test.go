package s3api

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/minio/minio-go/v7/pkg/signer"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/cachelet"
	"github.com/hoard-io/hoard/internal/checksum"
	"github.com/hoard-io/hoard/internal/notify"
	"github.com/hoard-io/hoard/internal/s3auth"
	s3store "github.com/hoard-io/hoard/internal/store/s3"
)

const storeAK, storeSK = "storekey", "storesecret"

type storeCredStore struct{}

func (storeCredStore) Secret(ak string) (string, bool) { return storeSK, ak == storeAK }

// received is what the S3 endpoint behind the front got of one request.
type received struct {
	method, path, query string
	header              http.Header
	body                string
	bodyErr, authErr    error
	trailerSum          string // the checksum in the body's trailer, verified
}

// newPassServer is the front over a cachelet over the S3 store client,
// whose endpoint checks each request's signature with the store's own
// credentials (as the store does), records it, and answers with
// answer(r), or 200 and a small XML body.
func newPassServer(t *testing.T, answer func(w http.ResponseWriter, r *http.Request), opts ...func(*Config)) (*testServer, <-chan received) {
	t.Helper()
	ver, err := s3auth.New(s3auth.Config{Region: testRegion}, storeCredStore{})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan received, 16)
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := received{method: r.Method, path: r.URL.Path, query: r.URL.RawQuery, header: r.Header.Clone()}
		ar, err := ver.Verify(r)
		if err != nil {
			rc.authErr = err
			got <- rc
			w.WriteHeader(http.StatusForbidden)
			return
		}
		b, err := io.ReadAll(ar.Body)
		rc.body, rc.bodyErr = string(b), err
		_, rc.trailerSum = ar.TrailerChecksum()
		got <- rc
		if err != nil {
			return // an upload cut short is never answered
		}
		if answer != nil {
			answer(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/xml")
		w.Header().Set("X-Amz-Request-Id", "STORE")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "<Store>"+r.Method+" "+r.URL.RawQuery+"</Store>")
	}))
	st, err := s3store.New(s3store.Config{Endpoint: endpoint.URL, AccessKey: storeAK, SecretKey: storeSK,
		CallTimeout: time.Second, IdleTimeout: time.Second}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := cachelet.New(cachelet.Config{Cache: cache.Config{Budget: 16 << 20}}, st, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cver, err := s3auth.New(s3auth.Config{Region: testRegion}, creds{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Region: testRegion}
	for _, o := range opts {
		o(&cfg)
	}
	api, err := New(cfg, cl, cver, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(func() {
		srv.Close()
		cl.Close()
		_ = st.Close()
		endpoint.Close()
	})
	return &testServer{Server: srv, api: api}, got
}

// TestPassThroughRelays: a request only the store answers reaches it with
// its method, path, query, headers and verified body, signed with the
// store's identity, and the store's answer (status, headers, body) comes
// back as it is.
func TestPassThroughRelays(t *testing.T) {
	s, got := newPassServer(t, nil)
	for _, tc := range []struct {
		name, method, target string
		body                 []byte
		hdr                  map[string]string
		path, query          string
	}{
		{"bucket versioning", "GET", "/bkt?versioning", nil, nil, "/bkt", "versioning="},
		{"object tagging", "PUT", "/bkt/dir/k?tagging", []byte("<Tagging><TagSet/></Tagging>"),
			map[string]string{"Content-MD5": "MiK6ZqQ1QvDEa+XYsdLcQg=="}, "/bkt/dir/k", "tagging="},
		{"versioned read", "GET", "/bkt/k?versionId=v%2B1", nil, nil, "/bkt/k", "versionId=v%2B1"},
		{"part read", "HEAD", "/bkt/k?partNumber=2", nil, nil, "/bkt/k", "partNumber=2"},
		{"object lock on a put", "PUT", "/bkt/k", []byte("locked"),
			map[string]string{"x-amz-object-lock-mode": "GOVERNANCE", "x-amz-object-lock-retain-until-date": "2030-01-01T00:00:00Z"}, "/bkt/k", ""},
		{"lock on a new bucket", "PUT", "/newbkt", nil, map[string]string{"x-amz-bucket-object-lock-enabled": "true"}, "/newbkt", ""},
		{"white-space key", "PUT", "/bkt/%20", []byte("blank"), nil, "/bkt/ ", ""},
		{"list uploads", "GET", "/bkt?uploads&prefix=a%20b", nil, nil, "/bkt", "prefix=a%20b&uploads="},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := s.do(t, tc.method, tc.target, tc.body, tc.hdr)
			rc := <-got
			if rc.authErr != nil {
				t.Fatalf("the store refused the request's signature: %v", rc.authErr)
			}
			if rc.method != tc.method || rc.path != tc.path || rc.query != tc.query || rc.body != string(tc.body) {
				t.Errorf("store got %s %q ? %q body %q", rc.method, rc.path, rc.query, rc.body)
			}
			for k, v := range tc.hdr {
				if rc.header.Get(k) != v {
					t.Errorf("store got %s %q, want %q", k, rc.header.Get(k), v)
				}
			}
			if strings.Contains(rc.header.Get("Authorization"), testAK) {
				t.Error("the client's signature reached the store")
			}
			data, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Amz-Request-Id") != "STORE" {
				t.Errorf("answer %d, request id %q", resp.StatusCode, resp.Header.Get("X-Amz-Request-Id"))
			}
			if want := "<Store>" + tc.method + " " + tc.query + "</Store>"; tc.method != "HEAD" && string(data) != want {
				t.Errorf("answer body %q, want %q", data, want)
			}
		})
	}
}

// TestPassThroughStoreErrors: the store's own errors come back as it sent
// them, status, code and all.
func TestPassThroughStoreErrors(t *testing.T) {
	const notFound = `<?xml version="1.0" encoding="UTF-8"?><Error><Code>NoSuchBucketPolicy</Code><Message>The bucket policy does not exist</Message></Error>`
	s, got := newPassServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, notFound)
	})
	resp := s.do(t, "GET", "/bkt?policy", nil, nil)
	<-got
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusNotFound || string(data) != notFound {
		t.Errorf("answer %d %q", resp.StatusCode, data)
	}
}

// TestPassThroughBadBodyNotCommitted: a body that fails verification
// (its signed SHA-256 is another's) is cut short before its last byte, so
// the store, short of the declared length, commits nothing; the client
// gets the verification's error.
func TestPassThroughBadBodyNotCommitted(t *testing.T) {
	s, got := newPassServer(t, nil)
	resp := s.do(t, "PUT", "/bkt/k?tagging", []byte("<Tagging><TagSet/></Tagging>"),
		map[string]string{"X-Amz-Content-Sha256": strings.Repeat("ab", 32)})
	if resp.StatusCode != http.StatusBadRequest || errorCodeOf(t, resp) != "XAmzContentSHA256Mismatch" {
		t.Errorf("status %d, want 400 XAmzContentSHA256Mismatch", resp.StatusCode)
	}
	select {
	case rc := <-got:
		if rc.bodyErr == nil {
			t.Errorf("the store got the whole body %q", rc.body)
		}
	case <-time.After(5 * time.Second):
		// The request never reached the store's handler: nothing sent.
	}
}

// TestPassThroughPresigned: a presigned URL's own signature stays with
// the front: the store gets the operation's query only.
func TestPassThroughPresigned(t *testing.T) {
	s, got := newPassServer(t, nil)
	req, err := http.NewRequest(http.MethodGet, s.URL+"/bkt/k?versionId=7", nil)
	if err != nil {
		t.Fatal(err)
	}
	presign(t, req)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(resp.Body)
		t.Fatalf("answer %d: %s", resp.StatusCode, data)
	}
	rc := <-got
	if rc.authErr != nil || rc.query != "versionId=7" {
		t.Errorf("store got %q (auth %v); answer %d", rc.query, rc.authErr, resp.StatusCode)
	}
}

// TestRoute: which requests the front answers itself and which go to the
// store as they are.
func TestRoute(t *testing.T) {
	s := newTestServer(t)
	passFn := reflect.ValueOf(s.api.pass).Pointer()
	for _, tc := range []struct {
		method, target string
		hdr            map[string]string
		op             string
		pass           bool
	}{
		{"GET", "/bkt/k", nil, "GetObject", false},
		{"GET", "/bkt/k?versionId=1", nil, "PassGET?versionId", true},
		{"GET", "/bkt/k?partNumber=1", nil, "GetObject", true},
		{"HEAD", "/bkt/k?partNumber=1", nil, "HeadObject", true},
		{"GET", "/bkt/k", map[string]string{"x-amz-server-side-encryption-customer-algorithm": "AES256"}, "GetObject", true},
		{"GET", "/bkt/k", map[string]string{"x-amz-checksum-mode": "ENABLED"}, "GetObject", false},
		{"PUT", "/bkt/k", map[string]string{"x-amz-meta-a": "1", "x-amz-checksum-crc32": "AAAAAA=="}, "PutObject", false},
		{"PUT", "/bkt/k", map[string]string{"x-amz-tagging": "a=1"}, "PutObject", true},
		{"PUT", "/bkt/k", map[string]string{"x-amz-acl": "private"}, "PutObject", true},
		{"PUT", "/bkt/k", map[string]string{"x-amz-storage-class": "STANDARD"}, "PutObject", true},
		{"PUT", "/bkt/k", map[string]string{"x-amz-object-lock-legal-hold": "ON"}, "PutObject", true},
		{"PUT", "/bkt/k", map[string]string{"x-amz-server-side-encryption": "AES256"}, "PutObject", true},
		{"PUT", "/bkt/%20", nil, "PutObject", true},
		{"GET", "/bkt/a%01b", nil, "GetObject", true},
		{"PUT", "/bkt/a%0Ab", nil, "PutObject", true},
		{"GET", "/bkt/%FF", nil, "GetObject", true},
		{"DELETE", "/bkt/a%7F", nil, "DeleteObject", true},
		{"GET", "/bkt/caf%C3%A9", nil, "GetObject", false},
		{"PUT", "/bkt/k", map[string]string{"x-amz-copy-source": "/bkt/s"}, "CopyObject", false},
		{"PUT", "/bkt/k", map[string]string{"x-amz-copy-source": "/bkt/s", "x-amz-copy-source-if-modified-since": "Mon, 02 Jan 2006 15:04:05 GMT"}, "CopyObject", true},
		{"PUT", "/bkt/k?partNumber=1&uploadId=u", map[string]string{"x-amz-copy-source": "/bkt/s"}, "UploadPartCopy", true},
		{"POST", "/bkt/k?uploads", map[string]string{"x-amz-checksum-algorithm": "CRC32"}, "CreateMultipartUpload", false},
		{"POST", "/bkt/k?uploads", map[string]string{"x-amz-checksum-type": "FULL_OBJECT"}, "CreateMultipartUpload", true},
		{"POST", "/bkt/k?uploadId=u", map[string]string{"x-amz-checksum-type": "FULL_OBJECT"}, "CompleteMultipartUpload", true},
		{"PUT", "/bkt", map[string]string{"x-amz-bucket-object-lock-enabled": "true"}, "CreateBucket", true},
		{"PUT", "/bkt", map[string]string{"x-amz-acl": "private"}, "CreateBucket", true},
		{"GET", "/bkt?uploads", nil, "ListMultipartUploads", true},
		{"GET", "/bkt?versions", nil, "PassGET?versions", true},
		{"PUT", "/bkt?versioning", nil, "PassPUT?versioning", true},
		{"DELETE", "/bkt?policy", nil, "PassDELETE?policy", true},
		{"DELETE", "/bkt?cors", nil, "PassDELETE?cors", true},
		{"DELETE", "/bkt", nil, "DeleteBucket", false},
		// The store deletes the bucket whatever else the query says.
		{"DELETE", "/bkt?unheard-of", nil, "DeleteBucket", true},
		{"DELETE", "/bkt?versionId=1", nil, "DeleteBucket", true},
		{"DELETE", "/bkt/k?versionId=1", nil, "PassDELETE?versionId", true},
		{"GET", "/", nil, "ListBuckets", false},
		{"GET", "/", map[string]string{"x-amz-expected-bucket-owner": "x"}, "ListBuckets", false},
		{"GET", "/?max-buckets=1", nil, "PassGET", true},
		{"POST", "/bkt/k?select&select-type=2", nil, "PassPOST?select", true},
		// A method of the client's own naming is "OTHER" in the
		// operation's name (a metric label), whatever it is.
		{"FROB1", "/bkt/k", nil, "ObjectOTHER", true},
		{"FROB2", "/bkt?versioning", nil, "PassOTHER?versioning", true},
		{"PATCH", "/", nil, "ServicePATCH", true},
	} {
		req, err := http.NewRequest(tc.method, "http://front"+tc.target, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range tc.hdr {
			req.Header.Set(k, v)
		}
		rq := &request{}
		rq.bucket, rq.key, _ = s.api.bucketAndKey(req)
		rq.query, _ = url.ParseQuery(req.URL.RawQuery)
		op, fn := s.api.route(req, rq)
		pass := fn != nil && reflect.ValueOf(fn).Pointer() == passFn
		if op != tc.op || pass != tc.pass {
			t.Errorf("%s %s %v: %s (pass %v), want %s (pass %v)", tc.method, tc.target, tc.hdr, op, pass, tc.op, tc.pass)
		}
	}
}

// TestKeysAsTheStoreSeesThem: the bucket is the path's first segment as
// sent (the store does not decode it: /b%2Fk names no bucket of ours),
// the key is decoded (%2F in a key is a slash).
func TestKeysAsTheStoreSeesThem(t *testing.T) {
	s := newTestServer(t)
	for _, tc := range []struct {
		raw, bucket, key string
		err              bool
	}{
		{"/bkt/k", "bkt", "k", false},
		{"/bkt/a%2Fb", "bkt", "a/b", false},
		{"/bkt%2Fk", "bkt%2Fk", "", true},
		{"/bk%74/k", "bk%74", "", true},
		{"/bkt/%20", "bkt", " ", false},
		{"/bkt//k", "bkt", "k", false},
		{"/bkt/a%00b", "bkt", "", true},
		{"/bkt/a/../b", "bkt", "", true},
		{"/bkt/a%01b", "bkt", "a\x01b", false},
	} {
		req, err := http.NewRequest(http.MethodGet, "http://front"+tc.raw, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, k, err := s.api.bucketAndKey(req)
		if b != tc.bucket || (!tc.err && k != tc.key) || (err != nil) != tc.err {
			t.Errorf("%s: bucket %q key %q err %v; want %q %q (error %v)", tc.raw, b, k, err, tc.bucket, tc.key, tc.err)
		}
	}
	resp := s.do(t, "PUT", "/bkt/k", []byte("secret"), nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatal(resp.StatusCode)
	}
	// Signed over "%2F" as sent: the stores refuse such a signature (they
	// sign the decoded path, where it is a slash), and so does hoard,
	// before the path is split at all.
	resp = s.do(t, "GET", "/bkt%2Fk", nil, nil)
	if resp.StatusCode != http.StatusForbidden || errorCodeOf(t, resp) != "SignatureDoesNotMatch" {
		t.Errorf("GET /bkt%%2Fk: %d, want 403 SignatureDoesNotMatch", resp.StatusCode)
	}
	resp = s.do(t, "GET", "/bkt/a%2Fk", nil, nil)
	if resp.StatusCode != http.StatusForbidden || errorCodeOf(t, resp) != "SignatureDoesNotMatch" {
		t.Errorf("GET /bkt/a%%2Fk: %d, want 403 SignatureDoesNotMatch", resp.StatusCode)
	}
}

// presign turns req into a presigned URL request with the client's keys.
func presign(t *testing.T, req *http.Request) {
	t.Helper()
	q := req.URL.Query()
	q.Set("X-Amz-Expires", "900")
	req.URL.RawQuery = q.Encode()
	signer := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
	u, _, err := signer.PresignHTTP(t.Context(), aws.Credentials{AccessKeyID: testAK, SecretAccessKey: testSK},
		req, "UNSIGNED-PAYLOAD", "s3", testRegion, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	req.URL = pu
}

// TestPassThroughWritesNotified: a write that passed through sends the
// event its typed path would have: a PutObject from its answer, a copy
// once the store described the new object.
func TestPassThroughWritesNotified(t *testing.T) {
	rec := &events{}
	s, got := newPassServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"e-`+r.Method+`"`)
		if r.Method == http.MethodHead {
			w.Header().Set("Content-Length", "42")
			w.Header().Set("Last-Modified", time.Now().UTC().Format(http.TimeFormat))
		}
		w.WriteHeader(http.StatusOK)
	}, func(c *Config) { c.Notifier = rec })
	resp := s.do(t, "PUT", "/bkt/k", []byte("tagged"), map[string]string{"x-amz-tagging": "a=1"})
	<-got
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("put: %d", resp.StatusCode)
	}
	if ev := rec.wait(t, 1); len(ev) != 1 || ev[0].Name != notify.ObjectCreatedPut || ev[0].Size != 6 || ev[0].ETag != "e-PUT" {
		t.Fatalf("put events %+v", ev)
	}
	resp = s.do(t, "PUT", "/bkt/c", nil, map[string]string{"x-amz-copy-source": "/bkt/k?versionId=1"})
	if rc := <-got; rc.method != http.MethodHead || rc.path != "/bkt/k" {
		t.Errorf("a copy first asks for its source's size; the store got %s %s", rc.method, rc.path)
	}
	<-got // the copy
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("copy: %d", resp.StatusCode)
	}
	<-got // the HEAD that describes the copy
	if ev := rec.wait(t, 1); len(ev) != 1 || ev[0].Name != notify.ObjectCreatedCopy || ev[0].Size != 42 || ev[0].ETag != "e-HEAD" {
		t.Fatalf("copy events %+v", ev)
	}
	// Other operations passed through are not notified.
	s.do(t, "PUT", "/bkt/k?tagging", []byte("<Tagging><TagSet/></Tagging>"), nil)
	<-got
	if ev := rec.take(); len(ev) != 0 {
		t.Fatalf("events for a tagging change: %+v", ev)
	}
}

// TestPassThroughTrailer: a checksum the client sent in its aws-chunked
// trailer is verified here and reaches the store in the store's own
// trailer, so the store records it.
func TestPassThroughTrailer(t *testing.T) {
	s, got := newPassServer(t, nil)
	body := []byte("tagged and checksummed")
	sum := checksum.Sum(checksum.CRC32, body)
	req, err := http.NewRequest(http.MethodPut, s.URL+"/bkt/k", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = int64(len(body))
	req.Header.Set("x-amz-tagging", "a=1")
	req.Header.Set("X-Amz-Content-Sha256", "STREAMING-UNSIGNED-PAYLOAD-TRAILER")
	req = signer.SignV4Trailer(*req, testAK, testSK, "", testRegion, http.Header{"x-amz-checksum-crc32": {sum}})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rc := <-got
	if rc.authErr != nil || rc.bodyErr != nil || rc.body != string(body) {
		t.Fatalf("store got %q (auth %v, body %v)", rc.body, rc.authErr, rc.bodyErr)
	}
	if tr := rc.header.Get("X-Amz-Trailer"); tr != "x-amz-checksum-crc32" || rc.trailerSum != sum {
		t.Errorf("store got trailer %q with %q, want x-amz-checksum-crc32 %q", tr, rc.trailerSum, sum)
	}
	if resp.StatusCode != http.StatusOK {
		t.Errorf("answer %d", resp.StatusCode)
	}
}

// TestHeadCaptureFailed: a copy or completion answered 200 whose body is
// an S3 error document counts as failed (no event is sent for it).
func TestHeadCaptureFailed(t *testing.T) {
	for _, tc := range []struct {
		body   string
		failed bool
	}{
		{`<?xml version="1.0" encoding="UTF-8"?><CopyObjectResult><ETag>"e"</ETag></CopyObjectResult>`, false},
		{`<?xml version="1.0" encoding="UTF-8"?>` + strings.Repeat(" ", 100) + `<Error><Code>InternalError</Code></Error>`, true},
		{strings.Repeat(" ", 5000) + `<Error><Code>InternalError</Code></Error>`, false}, // beyond what is kept
	} {
		h := &headCapture{r: strings.NewReader(tc.body)}
		if _, err := io.Copy(io.Discard, h); err != nil {
			t.Fatal(err)
		}
		if h.failed() != tc.failed {
			t.Errorf("%.60q...: failed %v, want %v", tc.body, h.failed(), tc.failed)
		}
	}
	var none *headCapture
	if none.failed() {
		t.Error("no capture counts as failed")
	}
}

// TestStoreAnsweredOpsPass: in front of a store that takes requests as
// they are, the typed operations the cache does not serve (bucket
// operations, listings, multipart uploads) reach it as the client sent
// them, and its answer comes back as it is.
func TestStoreAnsweredOpsPass(t *testing.T) {
	s, got := newPassServer(t, nil)
	for _, tc := range []struct {
		method, target, path, query, op string
		body                            []byte
	}{
		{"HEAD", "/bkt", "/bkt", "", "HeadBucket", nil},
		{"GET", "/bkt?location", "/bkt", "location=", "GetBucketLocation", nil},
		{"PUT", "/newbkt", "/newbkt", "", "CreateBucket",
			[]byte("<CreateBucketConfiguration><LocationConstraint>elsewhere</LocationConstraint></CreateBucketConfiguration>")},
		{"GET", "/bkt?prefix=a", "/bkt", "prefix=a", "ListObjects", nil},
		{"GET", "/bkt?list-type=2&max-keys=2", "/bkt", "list-type=2&max-keys=2", "ListObjectsV2", nil},
		{"POST", "/bkt/k?uploads", "/bkt/k", "uploads=", "CreateMultipartUpload", nil},
		{"PUT", "/bkt/k?partNumber=1&uploadId=u", "/bkt/k", "partNumber=1&uploadId=u", "UploadPart", []byte("part one")},
		{"GET", "/bkt/k?uploadId=u", "/bkt/k", "uploadId=u", "ListParts", nil},
		{"POST", "/bkt/k?uploadId=u", "/bkt/k", "uploadId=u", "CompleteMultipartUpload",
			[]byte(`<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>"e"</ETag></Part></CompleteMultipartUpload>`)},
		{"DELETE", "/bkt/k?uploadId=u", "/bkt/k", "uploadId=u", "AbortMultipartUpload", nil},
		{"DELETE", "/bkt", "/bkt", "", "DeleteBucket", nil},
		{"PUT", "/bkt/k", "/bkt/k", "", "PutObject", []byte("only if new")},
		{"DELETE", "/bkt/k", "/bkt/k", "", "DeleteObject", nil},
		{"POST", "/bkt?delete", "/bkt", "delete=", "DeleteObjects",
			[]byte("<Delete><Quiet>true</Quiet><Object><Key>a</Key></Object><Object><Key>b</Key></Object></Delete>")},
	} {
		t.Run(tc.op, func(t *testing.T) {
			var hdr map[string]string
			if tc.op == "PutObject" {
				hdr = map[string]string{"If-None-Match": "*"} // a conditional write
			}
			resp := s.do(t, tc.method, tc.target, tc.body, hdr)
			rc := <-got
			if rc.authErr != nil {
				t.Fatalf("the store refused the request's signature: %v", rc.authErr)
			}
			if rc.method != tc.method || rc.path != tc.path || rc.query != tc.query || rc.body != string(tc.body) {
				t.Errorf("store got %s %q ? %q body %q", rc.method, rc.path, rc.query, rc.body)
			}
			data, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Amz-Request-Id") != "STORE" {
				t.Errorf("answer %d, request id %q", resp.StatusCode, resp.Header.Get("X-Amz-Request-Id"))
			}
			if want := "<Store>" + tc.method + " " + tc.query + "</Store>"; tc.method != "HEAD" && string(data) != want {
				t.Errorf("answer body %q, want %q", data, want)
			}
		})
	}
}

// TestCompletionPassedThroughNotified: a multipart completion passed
// through sends its object-created event, sized by the store.
func TestCompletionPassedThroughNotified(t *testing.T) {
	rec := &events{}
	s, got := newPassServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"e-`+r.Method+`"`)
		if r.Method == http.MethodHead {
			w.Header().Set("Content-Length", "42")
			w.Header().Set("Last-Modified", time.Now().UTC().Format(http.TimeFormat))
		}
		w.WriteHeader(http.StatusOK)
	}, func(c *Config) { c.Notifier = rec })
	resp := s.do(t, "POST", "/bkt/k?uploadId=u", []byte(`<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>"e"</ETag></Part></CompleteMultipartUpload>`), nil)
	if rc := <-got; rc.method != http.MethodPost {
		t.Fatalf("store got %s first", rc.method)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("complete: %d", resp.StatusCode)
	}
	<-got // the HEAD that describes the object
	if ev := rec.wait(t, 1); len(ev) != 1 || ev[0].Name != notify.ObjectCreatedCompleteMultipartUpload || ev[0].Size != 42 || ev[0].ETag != "e-HEAD" {
		t.Fatalf("completion events %+v", ev)
	}
	// Parts are not objects yet: no event.
	s.do(t, "PUT", "/bkt/k?partNumber=1&uploadId=u", []byte("part"), nil)
	<-got
	if ev := rec.take(); len(ev) != 0 {
		t.Fatalf("events for a part: %+v", ev)
	}
}
