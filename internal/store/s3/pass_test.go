package s3store

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/s3auth"
	"github.com/hoard-io/hoard/internal/store"
)

type storeCreds struct{}

func (storeCreds) Secret(ak string) (string, bool) { return "storesecret", ak == "storekey" }

// seen is what the store received of one request, after verifying its
// signature as S3 does.
type seen struct {
	method, path, rawPath, query string
	header                       http.Header
	body                         string
	authErr                      error
}

// signingStore is an S3 endpoint that checks every request's SigV4
// signature with the store's credentials (s3auth, as the store would),
// records it, and answers 200 with a body naming what it got.
func signingStore(t *testing.T) (*Store, <-chan seen) {
	t.Helper()
	ver, err := s3auth.New(s3auth.Config{Region: "us-east-1"}, storeCreds{})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan seen, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := seen{method: r.Method, path: r.URL.Path, rawPath: r.URL.EscapedPath(), query: r.URL.RawQuery, header: r.Header.Clone()}
		ar, err := ver.Verify(r)
		if err != nil {
			s.authErr = err
			got <- s
			w.WriteHeader(http.StatusForbidden)
			return
		}
		b, err := io.ReadAll(ar.Body)
		if err != nil {
			s.authErr = err
		}
		s.body = string(b)
		got <- s
		w.Header().Set("X-Amz-Version-Id", "v7")
		w.Header().Set("Connection", "close")
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "<Answer>"+r.Method+"</Answer>")
	}))
	t.Cleanup(srv.Close)
	st, err := New(Config{Endpoint: srv.URL, AccessKey: "storekey", SecretKey: "storesecret"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st, got
}

// TestPassSignsAndForwards: a request passed through reaches the store
// with its method, path, query, headers and body, signed with the store's
// identity in place of the client's, and the store's answer comes back
// whole, hop-by-hop headers aside.
func TestPassSignsAndForwards(t *testing.T) {
	st, got := signingStore(t)
	body := "<Tagging><TagSet/></Tagging>"
	req := &http.Request{
		Method: http.MethodPut,
		URL:    &url.URL{Path: "/bkt/dir/a key+x", RawQuery: "tagging=&versionId=3"},
		Header: http.Header{
			"Authorization":          {"AWS4-HMAC-SHA256 Credential=client/..."},
			"X-Amz-Date":             {"20200101T000000Z"},
			"X-Amz-Content-Sha256":   {strings.ToUpper(hashOf(body))},
			"X-Amz-Security-Token":   {"client-token"},
			"Connection":             {"keep-alive"},
			"Expect":                 {"100-continue"},
			"Content-Md5":            {"MiK6ZqQ1QvDEa+XYsdLcQg=="},
			"X-Amz-Object-Lock-Mode": {"GOVERNANCE"},
			"X-Amz-Meta-Two":         {"a", "b"},
		},
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)),
	}
	resp, err := st.Pass(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	answer, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	s := <-got
	if s.authErr != nil {
		t.Fatalf("the store refused the signature: %v", s.authErr)
	}
	if s.method != http.MethodPut || s.path != "/bkt/dir/a key+x" || s.body != body {
		t.Errorf("store got %s %q body %q", s.method, s.path, s.body)
	}
	if q, _ := url.ParseQuery(s.query); q.Get("versionId") != "3" || !q.Has("tagging") {
		t.Errorf("store got query %q", s.query)
	}
	for name, want := range map[string]string{
		"Content-Md5": "MiK6ZqQ1QvDEa+XYsdLcQg==", "X-Amz-Object-Lock-Mode": "GOVERNANCE",
		"X-Amz-Content-Sha256": hashOf(body), "X-Amz-Security-Token": "", "Expect": "",
	} {
		if v := s.header.Get(name); v != want {
			t.Errorf("store got %s %q, want %q", name, v, want)
		}
	}
	if v := s.header.Values("X-Amz-Meta-Two"); len(v) != 2 {
		t.Errorf("repeated header arrived as %q", v)
	}
	if strings.Contains(s.header.Get("Authorization"), "client") {
		t.Errorf("the client's signature reached the store: %q", s.header.Get("Authorization"))
	}
	if resp.StatusCode != http.StatusCreated || string(answer) != "<Answer>PUT</Answer>" ||
		resp.Header.Get("X-Amz-Version-Id") != "v7" || resp.Header.Get("Connection") != "" {
		t.Errorf("answer %d %q headers %v", resp.StatusCode, answer, resp.Header)
	}
}

// TestPassPayloadHash: a body signed by its SHA-256 goes to the store
// signed by it, so a body that is not the one signed fails the store's
// check too; any other body goes unsigned.
func TestPassPayloadHash(t *testing.T) {
	st, got := signingStore(t)
	for _, tc := range []struct {
		hash, sent string
		refused    bool
	}{
		{hashOf("the body"), hashOf("the body"), false},
		{hashOf("another body"), hashOf("another body"), true},
		{"UNSIGNED-PAYLOAD", "UNSIGNED-PAYLOAD", false},
		{"not hex", "UNSIGNED-PAYLOAD", false},
	} {
		req := &http.Request{
			Method: http.MethodPut, URL: &url.URL{Path: "/bkt/k"},
			Header:        http.Header{"X-Amz-Content-Sha256": {tc.hash}},
			Body:          io.NopCloser(strings.NewReader("the body")),
			ContentLength: int64(len("the body")),
		}
		resp, err := st.Pass(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		s := <-got
		if s.header.Get("X-Amz-Content-Sha256") != tc.sent || (s.authErr != nil) != tc.refused {
			t.Errorf("%q: store got %q, refused %v (%v); want %q, refused %v",
				tc.hash, s.header.Get("X-Amz-Content-Sha256"), s.authErr != nil, s.authErr, tc.sent, tc.refused)
		}
	}
}

// TestPassSignedChunks: a body that came in signed chunks goes to the
// store in chunks signed with the store's identity, the last one too, so
// a body cut short (the client's chunk signature failed) never verifies
// at the store, whatever it does with a request cut short.
func TestPassSignedChunks(t *testing.T) {
	st, got := signingStore(t)
	body := strings.Repeat("0123456789abcdef", 200*1024/16+3) // four chunks
	for _, tc := range []struct {
		name string
		cut  bool
	}{{"whole", false}, {"cut short", true}} {
		var r io.Reader = strings.NewReader(body)
		if tc.cut {
			r = io.MultiReader(strings.NewReader(body[:100*1024]), failingReader{})
		}
		req := &http.Request{
			Method: http.MethodPut, URL: &url.URL{Path: "/bkt/k", RawQuery: "partNumber=1&uploadId=u"},
			Header:        http.Header{"X-Amz-Content-Sha256": {"STREAMING-AWS4-HMAC-SHA256-PAYLOAD"}},
			Body:          io.NopCloser(r),
			ContentLength: int64(len(body)),
		}
		resp, err := st.Pass(t.Context(), req)
		if err == nil {
			resp.Body.Close()
		}
		s := <-got
		if v := s.header.Get("X-Amz-Content-Sha256"); v != "STREAMING-AWS4-HMAC-SHA256-PAYLOAD" {
			t.Errorf("%s: store got X-Amz-Content-Sha256 %q", tc.name, v)
		}
		switch {
		case !tc.cut && (err != nil || s.authErr != nil || s.body != body):
			t.Errorf("%s: err %v, store refused %v, body of %d bytes", tc.name, err, s.authErr, len(s.body))
		case tc.cut && (err == nil || s.authErr == nil):
			t.Errorf("%s: err %v, store verified a body of %d bytes", tc.name, err, len(s.body))
		}
	}
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("chunk signature failed") }

func hashOf(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// TestPassBodiless: GET and HEAD carry no body; a bucket-level and a
// service-level request are addressed as such.
func TestPassBodiless(t *testing.T) {
	st, got := signingStore(t)
	for _, tc := range []struct{ method, path, query string }{
		{http.MethodGet, "/bkt", "versioning="},
		{http.MethodHead, "/bkt/k", "partNumber=1"},
		{http.MethodGet, "/", ""},
		{http.MethodDelete, "/bkt/k", "versionId=x%2By"},
	} {
		resp, err := st.Pass(t.Context(), &http.Request{Method: tc.method, URL: &url.URL{Path: tc.path, RawQuery: tc.query}, Header: http.Header{}})
		if err != nil {
			t.Fatalf("%s %s: %v", tc.method, tc.path, err)
		}
		resp.Body.Close()
		s := <-got
		if s.authErr != nil || s.path != tc.path || s.query != tc.query || s.body != "" {
			t.Errorf("%s %s?%s: store got %q?%q body %q, auth %v", tc.method, tc.path, tc.query, s.path, s.query, s.body, s.authErr)
		}
	}
}

// TestPassRefusesAbsoluteURLs: Pass addresses its own store only.
func TestPassRefusesAbsoluteURLs(t *testing.T) {
	st, _ := signingStore(t)
	for _, u := range []*url.URL{
		{Scheme: "http", Host: "elsewhere.example", Path: "/bkt/k"},
		{Path: "bkt/k"},
	} {
		if _, err := st.Pass(t.Context(), &http.Request{Method: http.MethodGet, URL: u, Header: http.Header{}}); !errors.Is(err, ErrPassRequest) {
			t.Errorf("%s: err %v, want ErrPassRequest", u, err)
		}
	}
}

// TestPassHungStore: a store that never answers fails a pass-through
// within its call timeout (bodiless) or idle timeout (with a body), as
// store.ErrUnavailable; a copy waits longer for its answer.
func TestPassHungStore(t *testing.T) {
	st, _ := hangingStore(t)
	for _, tc := range []struct {
		name string
		req  *http.Request
		max  time.Duration
	}{
		{"get versioning", &http.Request{Method: http.MethodGet, URL: &url.URL{Path: "/bkt", RawQuery: "versioning="}, Header: http.Header{}}, 2 * time.Second},
		{"put tagging", &http.Request{Method: http.MethodPut, URL: &url.URL{Path: "/bkt/k", RawQuery: "tagging="}, Header: http.Header{},
			Body: io.NopCloser(strings.NewReader("<Tagging/>")), ContentLength: 10}, 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			_, err := st.Pass(t.Context(), tc.req)
			if !errors.Is(err, store.ErrUnavailable) {
				t.Fatalf("err %v, want ErrUnavailable", err)
			}
			if d := time.Since(start); d > tc.max {
				t.Errorf("took %v, want at most %v", d, tc.max)
			}
		})
	}
	// A copy asks for its source's size first: a hung store fails that.
	start := time.Now()
	copyReq := &http.Request{Method: http.MethodPut, URL: &url.URL{Path: "/bkt/k", RawQuery: "partNumber=1&uploadId=u"},
		Header: http.Header{"X-Amz-Copy-Source": {"/bkt/src"}}}
	if _, err := st.Pass(t.Context(), copyReq); !errors.Is(err, store.ErrUnavailable) || time.Since(start) > 2*time.Second {
		t.Errorf("UploadPartCopy against a hung store: %v after %v", err, time.Since(start))
	}
}

// TestPassAnswerDeadlines: a copy's answer may take time in proportion to
// the bytes it copies, a completion's to its parts; others CallTimeout.
func TestPassAnswerDeadlines(t *testing.T) {
	st := &Store{callTimeout: 3 * time.Second, responseHeaderTimeout: 2 * time.Minute}
	for _, tc := range []struct {
		name string
		req  *http.Request
		want time.Duration
	}{
		{"tagging", &http.Request{Method: http.MethodPut, URL: &url.URL{Path: "/b/k", RawQuery: "tagging="}, Header: http.Header{}}, 3 * time.Second},
		{"ranged part copy", &http.Request{Method: http.MethodPut, URL: &url.URL{Path: "/b/k", RawQuery: "partNumber=1&uploadId=u"},
			Header: http.Header{"X-Amz-Copy-Source": {"/b/src"}, "X-Amz-Copy-Source-Range": {"bytes=0-83886079"}}}, 13 * time.Second},
		{"small completion", &http.Request{Method: http.MethodPost, URL: &url.URL{Path: "/b/k", RawQuery: "uploadId=u"}, Header: http.Header{}, ContentLength: 500}, 3 * time.Second},
		{"10,000 parts", &http.Request{Method: http.MethodPost, URL: &url.URL{Path: "/b/k", RawQuery: "uploadId=u"}, Header: http.Header{}, ContentLength: 10000 * 150}, 72 * time.Second},
	} {
		got, err := st.answerDeadline(t.Context(), tc.req)
		if err != nil || got != tc.want {
			t.Errorf("%s: %v (%v), want %v", tc.name, got, err, tc.want)
		}
	}
}

// TestPassStalledBody: an answer whose body stops moving fails its read
// within the idle timeout, with ErrUnavailable.
func TestPassStalledBody(t *testing.T) {
	st, _ := hangingStore(t)
	resp, err := st.Pass(t.Context(), &http.Request{Method: http.MethodGet, URL: &url.URL{Path: "/bkt/slow"}, Header: http.Header{}})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	start := time.Now()
	_, err = io.ReadAll(resp.Body)
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("read err %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("stalled body took %v to fail", d)
	}
}

// BenchmarkPassPart: what re-signing a part's body chunk by chunk costs
// hoard, next to sending it unsigned, in the same run: an 8 MiB part
// passed through to a server that reads and discards it.
//
//	go test -run XXX -bench PassPart ./internal/store/s3
func BenchmarkPassPart(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	defer srv.Close()
	st, err := New(Config{Endpoint: srv.URL, AccessKey: "storekey", SecretKey: "storesecret"}, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	body := strings.Repeat("p", 8<<20)
	pass := func(payload string) time.Duration {
		req := &http.Request{
			Method: http.MethodPut, URL: &url.URL{Path: "/bkt/k", RawQuery: "partNumber=1&uploadId=u"},
			Header:        http.Header{"X-Amz-Content-Sha256": {payload}},
			Body:          io.NopCloser(strings.NewReader(body)),
			ContentLength: int64(len(body)),
		}
		start := time.Now()
		resp, err := st.Pass(b.Context(), req)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		return time.Since(start)
	}
	var signed, unsigned time.Duration
	for b.Loop() {
		signed += pass(streamingSigned)
		unsigned += pass("UNSIGNED-PAYLOAD")
	}
	mbps := func(d time.Duration) float64 { return float64(b.N) * float64(len(body)) / (1 << 20) / d.Seconds() }
	b.ReportMetric(mbps(signed), "signed-MiB/s")
	b.ReportMetric(mbps(unsigned), "unsigned-MiB/s")
	b.ReportMetric(float64(signed)/float64(unsigned), "signed/unsigned")
}
