package s3api

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/cachelet"
	"github.com/hoard-io/hoard/internal/s3auth"
	"github.com/hoard-io/hoard/internal/store/memstore"
)

// newSizedTestServer is newTestServerWith over a cache of the given budget.
func newSizedTestServer(t *testing.T, cfg Config, budget int64) (*testServer, *cachelet.Cachelet) {
	t.Helper()
	st := memstore.New()
	cl, err := cachelet.New(cachelet.Config{Cache: cache.Config{Budget: budget}}, st, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ver, err := s3auth.New(s3auth.Config{Region: testRegion}, creds{})
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
	return &testServer{Server: srv, api: api, store: st}, cl
}

// rawPut sends a PUT of body, signed with body's SHA-256, on its own
// connection, but writes only the first sent bytes of it; the rest is
// never sent. It returns the connection, from which the answer is read.
func rawPut(t *testing.T, s *testServer, key string, body []byte, sent int) (net.Conn, *http.Request) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, s.URL+"/bkt/"+key, nil)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(body)
	hash := hex.EncodeToString(sum[:])
	req.Header.Set("X-Amz-Content-Sha256", hash)
	req.ContentLength = int64(len(body))
	sign(t, req, hash)
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	var head bytes.Buffer
	fmt.Fprintf(&head, "PUT %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n", req.URL.RequestURI(), req.Host, len(body))
	for k, vs := range req.Header {
		for _, v := range vs {
			fmt.Fprintf(&head, "%s: %s\r\n", k, v)
		}
	}
	head.WriteString("\r\n")
	head.Write(body[:sent])
	if _, err := conn.Write(head.Bytes()); err != nil {
		t.Fatal(err)
	}
	return conn, req
}

// answer reads the response on conn, waiting at most a generous bound.
func answer(t *testing.T, conn net.Conn, req *http.Request) *http.Response {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func TestStalledBodyTimesOut(t *testing.T) {
	s, cl := newSizedTestServer(t, Config{Region: testRegion, BodyIdleTimeout: 2 * time.Second}, 16<<20)
	body := bytes.Repeat([]byte("x"), 64<<10)
	conn, req := rawPut(t, s, "slow", body, 100)
	resp := answer(t, conn, req)
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("status %d, want 400", resp.StatusCode)
	}
	if code := errorCodeOf(t, resp); code != "RequestTimeout" {
		t.Fatalf("code %s, want RequestTimeout", code)
	}
	if got := s.object(t, "slow"); !strings.HasPrefix(got, "<") {
		t.Fatalf("the store committed %d bytes of a stalled upload", len(got))
	}
	if st := cl.Stats(); st.Reserved != 0 || st.Uploading != 0 {
		t.Fatalf("reservations left behind: %+v", st)
	}
}

func TestTricklingBodyTimesOut(t *testing.T) {
	// Idle never: a byte every 20 ms. Too slow for 1 KiB/s after 100 ms.
	s, _ := newSizedTestServer(t, Config{Region: testRegion, BodyIdleTimeout: time.Minute,
		BodyMinRate: 1 << 10, BodyRateGrace: 100 * time.Millisecond}, 16<<20)
	body := bytes.Repeat([]byte("x"), 64<<10)
	conn, req := rawPut(t, s, "trickle", body, 1)
	done := make(chan struct{})
	defer close(done)
	go func() {
		for i := 1; i < len(body); i++ {
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if _, err := conn.Write(body[i : i+1]); err != nil {
				return
			}
		}
	}()
	resp := answer(t, conn, req)
	if resp.StatusCode != http.StatusBadRequest || errorCodeOf(t, resp) != "RequestTimeout" {
		t.Fatalf("status %d, want 400 RequestTimeout", resp.StatusCode)
	}
	if got := s.object(t, "trickle"); !strings.HasPrefix(got, "<") {
		t.Fatalf("the store committed %d bytes of a trickled upload", len(got))
	}
}

func TestHalfClosedClientAfterCompleteBody(t *testing.T) {
	s, _ := newSizedTestServer(t, Config{Region: testRegion}, 16<<20)
	body := bytes.Repeat([]byte("y"), 300<<10)
	conn, req := rawPut(t, s, "half", body, len(body))
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	resp := answer(t, conn, req)
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d, want 200: %s", resp.StatusCode, data)
	}
	if got := s.object(t, "half"); got != string(body) {
		t.Fatalf("stored %d bytes, want %d", len(got), len(body))
	}
}

// Two uploads that declare a large body and send almost nothing must not
// evict a full cache: reads stay local hits while they hang.
func TestStalledUploadsDoNotEvict(t *testing.T) {
	const budget = 8 << 20
	s, cl := newSizedTestServer(t, Config{Region: testRegion, BodyIdleTimeout: 2 * time.Second}, budget)
	obj := bytes.Repeat([]byte("o"), 512<<10)
	const n = budget / (512 << 10)
	for i := range n {
		if resp := s.do(t, http.MethodPut, fmt.Sprintf("/bkt/o%d", i), obj, nil); resp.StatusCode != http.StatusOK {
			t.Fatalf("put o%d: %d", i, resp.StatusCode)
		}
	}
	before := cl.Stats()
	if before.Objects != n {
		t.Fatalf("cached %d objects, want %d", before.Objects, n)
	}
	big := bytes.Repeat([]byte("b"), budget/2)
	var conns []net.Conn
	var reqs []*http.Request
	for i := range 2 {
		c, r := rawPut(t, s, fmt.Sprintf("big%d", i), big, 1<<10)
		conns, reqs = append(conns, c), append(reqs, r)
	}
	// A read through the front serves after the uploads' reservations,
	// if any, were made: the first put's request line is in, and reads
	// are answered in any order; ask them all.
	for i := range n {
		resp := s.do(t, http.MethodGet, fmt.Sprintf("/bkt/o%d", i), nil, nil)
		if got := resp.Header.Get("x-hoard-read"); resp.StatusCode != http.StatusOK || got != string(cachelet.LocalHit) {
			t.Fatalf("get o%d: status %d, read %q, want a local hit", i, resp.StatusCode, got)
		}
	}
	if st := cl.Stats(); st.Evictions != before.Evictions || st.Objects != n {
		t.Fatalf("stalled uploads evicted: before %+v, after %+v", before, st)
	}
	for i := range conns {
		if resp := answer(t, conns[i], reqs[i]); resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("stalled put %d: status %d, want 400", i, resp.StatusCode)
		}
	}
	if st := cl.Stats(); st.Reserved != 0 || st.Uploading != 0 {
		t.Fatalf("reservations left behind: %+v", st)
	}
}
