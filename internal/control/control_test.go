package control

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/cacheconfig"
	"github.com/hoard-io/hoard/internal/prewarm"
)

// fakeCachelet records what it was asked.
type fakeCachelet struct {
	mu       sync.Mutex
	budget   int64
	dropped  []DropRequest
	prewarms [][]Key
	admits   []bool
	// block, when set, makes Prewarm wait for ctx to end and then report
	// the ctx's error on canceled.
	block    bool
	canceled chan error
}

func (f *fakeCachelet) Ready() Ready {
	return Ready{ID: "app-1", App: "app", Endpoint: "http://127.0.0.1:1", PeerAddr: "127.0.0.1:2", PID: 7}
}

func (f *fakeCachelet) Settings() cacheconfig.Settings {
	return cacheconfig.Settings{Consistency: "owner", Budget: f.budget}
}

func (f *fakeCachelet) Stats() Stats {
	return Stats{Reads: map[string]ReadCount{"local_hit": {Count: 3, Bytes: 300}}, Writes: 1, BudgetBytes: f.budget}
}

func (f *fakeCachelet) Drop(bucket, prefix string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dropped = append(f.dropped, DropRequest{bucket, prefix})
	return 2
}

func (f *fakeCachelet) SetBudget(n int64) BudgetResult {
	f.mu.Lock()
	defer f.mu.Unlock()
	freed := max(f.budget-n, 0)
	f.budget = n
	return BudgetResult{Budget: n, Freed: freed}
}

func (f *fakeCachelet) Prewarm(ctx context.Context, keys []Key) (PrewarmResult, error) {
	f.mu.Lock()
	f.prewarms = append(f.prewarms, keys)
	f.mu.Unlock()
	if f.block {
		<-ctx.Done()
		f.canceled <- ctx.Err()
		return PrewarmResult{}, ctx.Err()
	}
	return PrewarmResult{Owned: len(keys), Fetched: len(keys), Bytes: 10}, nil
}

func (f *fakeCachelet) SetAdmit(admit bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.admits = append(f.admits, admit)
}

func (f *fakeCachelet) AccessMetadata() []prewarm.Object {
	return []prewarm.Object{{Bucket: "b", Key: "k", LH: 2}}
}

// serve starts a control listener over f and returns its endpoint.
func serve(t *testing.T, f *fakeCachelet) Endpoint {
	t.Helper()
	ep := Endpoint{Socket: filepath.Join(shortDir(t), "control.sock"), Token: NewToken()}
	ln, err := Listen(t.Context(), ep.Socket)
	if err != nil {
		t.Fatal(err)
	}
	h, err := NewHandler(ep.Token, f, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(h, nil)
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ep
}

// shortDir is a private directory whose socket paths fit sun_path (test
// names make t.TempDir's long).
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ctl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func TestClientAgainstHandler(t *testing.T) {
	f := &fakeCachelet{budget: 100}
	ep := serve(t, f)
	c := NewClient(ep)
	defer c.Close()
	ctx := t.Context()

	r, err := c.Ready(ctx)
	if err != nil || r != f.Ready() {
		t.Fatalf("Ready = %+v, %v", r, err)
	}
	if cs, err := c.Config(ctx); err != nil || cs != (cacheconfig.Settings{Consistency: "owner", Budget: 100}) {
		t.Fatalf("Config = %+v, %v", cs, err)
	}
	s, err := c.Stats(ctx)
	if err != nil || s.Reads["local_hit"] != (ReadCount{Count: 3, Bytes: 300}) || s.Writes != 1 || s.BudgetBytes != 100 {
		t.Fatalf("Stats = %+v, %v", s, err)
	}
	if n, err := c.Drop(ctx, "b", "tmp/run 1/"); err != nil || n != 2 || f.dropped[0] != (DropRequest{"b", "tmp/run 1/"}) {
		t.Fatalf("Drop = %d, %v (%v)", n, err, f.dropped)
	}
	if _, err := c.Drop(ctx, "", "x"); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("Drop without a bucket: %v, want ErrBadRequest", err)
	}
	if res, err := c.SetBudget(ctx, 40); err != nil || res != (BudgetResult{Budget: 40, Freed: 60}) {
		t.Fatalf("SetBudget = %+v, %v", res, err)
	}
	if _, err := c.SetBudget(ctx, -1); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("SetBudget(-1): %v", err)
	}
	keys := []Key{{"b", "k1"}, {"b", "k2"}}
	if res, err := c.Prewarm(ctx, keys); err != nil || res.Fetched != 2 || len(f.prewarms) != 1 {
		t.Fatalf("Prewarm = %+v, %v", res, err)
	}
	if objs, err := c.AccessMetadata(ctx); err != nil || len(objs) != 1 || objs[0].Key != "k" || objs[0].LH != 2 {
		t.Fatalf("AccessMetadata = %+v, %v", objs, err)
	}
	if err := c.SetAdmit(ctx, false); err != nil {
		t.Fatalf("SetAdmit(false): %v", err)
	}
	if err := c.SetAdmit(ctx, true); err != nil || len(f.admits) != 2 || f.admits[0] || !f.admits[1] {
		t.Fatalf("SetAdmit(true): %v (%v)", err, f.admits)
	}
	// An admission request that says nothing, or something else, is
	// refused and changes nothing.
	for _, body := range []string{`{}`, `{"admit": "no"}`, `{"admit": false, "function": "f"}`} {
		req := fmt.Sprintf("POST /v1/admission HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n%s", ep.Token, len(body), body)
		if status := rawRequest(t, ep.Socket, req); status != http.StatusBadRequest {
			t.Fatalf("admission %s: %d, want 400", body, status)
		}
	}
	if len(f.admits) != 2 {
		t.Fatalf("a refused admission request reached the cachelet: %v", f.admits)
	}
}

// Without the token, or with another, nothing is answered.
func TestAuthRefused(t *testing.T) {
	f := &fakeCachelet{budget: 100}
	ep := serve(t, f)
	ctx := t.Context()
	for name, token := range map[string]string{"wrong": NewToken(), "empty": "", "prefix": ep.Token[:MinTokenLen]} {
		c := NewClient(Endpoint{Socket: ep.Socket, Token: token})
		if _, err := c.Stats(ctx); !errors.Is(err, ErrUnauthorized) {
			t.Errorf("%s token: Stats: %v, want ErrUnauthorized", name, err)
		}
		if _, err := c.SetBudget(ctx, 0); !errors.Is(err, ErrUnauthorized) {
			t.Errorf("%s token: SetBudget: %v, want ErrUnauthorized", name, err)
		}
		c.Close()
	}
	if f.budget != 100 {
		t.Fatalf("an unauthenticated request moved the budget to %d", f.budget)
	}
	// A caller speaking HTTP by hand, with no Authorization at all.
	if status := rawRequest(t, ep.Socket, "POST /v1/budget HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\n\r\n{\"bytes\": 0}"); status != http.StatusUnauthorized {
		t.Fatalf("raw request without a token: %d, want 401", status)
	}
	if f.budget != 100 {
		t.Fatalf("an unauthenticated request moved the budget to %d", f.budget)
	}
}

// rawRequest writes req on a fresh connection to the socket and returns
// the answer's status.
func rawRequest(t *testing.T, socket, req string) int {
	t.Helper()
	conn, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	// The server may answer (and close) before it read all of req.
	go conn.Write([]byte(req))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestOversizedBodyRefused(t *testing.T) {
	f := &fakeCachelet{}
	ep := serve(t, f)
	body := `{"keys": [` + strings.Repeat(`{"bucket": "b", "key": "k"},`, MaxRequestBytes/20) + `{"bucket": "b", "key": "k"}]}`
	req := fmt.Sprintf("POST /v1/prewarm HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n%s", ep.Token, len(body), body)
	if status := rawRequest(t, ep.Socket, req); status != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversized prewarm: %d, want 413", status)
	}
	if len(f.prewarms) != 0 {
		t.Fatal("the oversized request reached the cachelet")
	}
	// The client refuses to send one, too.
	c := NewClient(ep)
	defer c.Close()
	if _, err := c.Prewarm(t.Context(), make([]Key, MaxPrewarmKeys+1)); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("client Prewarm of too many keys: %v", err)
	}
	big := Key{Bucket: "b", Key: strings.Repeat("k", MaxRequestBytes/MaxPrewarmKeys+10)}
	keys := make([]Key, MaxPrewarmKeys)
	for i := range keys {
		keys[i] = big
	}
	if _, err := c.Prewarm(t.Context(), keys); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("client Prewarm of too many bytes: %v", err)
	}
}

// A call ends at its deadline, and the cachelet's work for it is
// canceled.
func TestDeadlineHonoured(t *testing.T) {
	f := &fakeCachelet{block: true, canceled: make(chan error, 1)}
	ep := serve(t, f)
	c := NewClient(ep)
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Prewarm(ctx, []Key{{"b", "k"}})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Prewarm past its deadline: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("Prewarm returned after %s", took)
	}
	select {
	case err := <-f.canceled:
		if err == nil {
			t.Fatal("the cachelet's context ended without an error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the cachelet's pre-warm was not canceled")
	}
}

func TestUnreachable(t *testing.T) {
	c := NewClient(Endpoint{Socket: filepath.Join(shortDir(t), "none.sock"), Token: NewToken()})
	if _, err := c.Ready(t.Context()); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Ready with nobody listening: %v", err)
	}
}

func TestListen(t *testing.T) {
	dir := shortDir(t)
	p := filepath.Join(dir, "s.sock")
	ln, err := Listen(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v, %v; want 0600", fi.Mode().Perm(), err)
	}
	// A stale socket (a crashed cachelet's) is replaced.
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	ln, err = Listen(t.Context(), p)
	if err != nil {
		t.Fatalf("over a stale socket: %v", err)
	}
	ln.Close()
	// Anything else is not.
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(t.Context(), p); err == nil {
		t.Fatal("Listen replaced a regular file")
	}
	// Nor in a directory others may enter.
	open := filepath.Join(dir, "open")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(t.Context(), filepath.Join(open, "s.sock")); err == nil {
		t.Fatal("Listen bound in a 0755 directory")
	}
	if _, err := Listen(t.Context(), "/"+strings.Repeat("x", MaxSocketPath)); err == nil {
		t.Fatal("Listen took a path longer than sun_path")
	}
}

func TestDocument(t *testing.T) {
	d := &Document{Version: DocumentVersion, App: "app", ID: "app-1", AccessKey: "ak", SecretKey: "sk",
		Store:   Store{Endpoint: "http://127.0.0.1:9000", AccessKey: "sak", SecretKey: "ssk"},
		Cache:   cacheconfig.Settings{Consistency: "owner", Eviction: cacheconfig.PolicyTTL, TTL: cacheconfig.Duration(time.Minute), Budget: 64 << 20},
		Control: Endpoint{Socket: "/x/control.sock", Token: NewToken()},
		TLS:     &TLSFiles{Cert: "/x/cachelet.crt", Key: "/x/cachelet.key", CA: "/tls/ca.crt"}}
	p := filepath.Join(t.TempDir(), "cachelet.json")
	if err := WriteDocument(p, d); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("document mode %v, %v; want 0600", fi.Mode().Perm(), err)
	}
	got, err := ReadDocument(p)
	if err != nil {
		t.Fatal(err)
	}
	if got.Cache != d.Cache || got.Control != d.Control || got.Store != d.Store || got.TLS == nil || *got.TLS != *d.TLS {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, d)
	}
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadDocument(p); !errors.Is(err, ErrInvalidDocument) {
		t.Fatalf("a document others may read: %v", err)
	}
	for name, doc := range map[string]string{
		"unknown field":     `{"version": 1, "secret": "x"}`,
		"version":           `{"version": 2}`,
		"short token":       `{"version": 1, "control": {"socket": "/s", "token": "abc"}}`,
		"no token":          `{"version": 1, "control": {"socket": "/s"}}`,
		"consistency":       `{"version": 1, "cache": {"consistency": "eventual"}}`,
		"ttl":               `{"version": 1, "cache": {"eviction": "ttl"}}`,
		"tls without a key": `{"version": 1, "tls": {"cert": "/c", "ca": "/ca"}}`,
	} {
		if _, err := ParseDocument([]byte(doc)); !errors.Is(err, ErrInvalidDocument) {
			t.Errorf("%s: %v, want ErrInvalidDocument", name, err)
		}
	}
}

func TestStatsSub(t *testing.T) {
	before := Stats{Reads: map[string]ReadCount{"local_hit": {1, 10, 100}, "local_miss": {2, 20, 200}}}
	after := Stats{Reads: map[string]ReadCount{"local_hit": {1, 10, 100}, "local_miss": {3, 25, 290}, "remote_hit": {1, 7, 9}}}
	got := after.Sub(before)
	if len(got) != 2 || got["local_miss"] != (ReadCount{Count: 1, Bytes: 5, Nanos: 90}) || got["remote_hit"] != (ReadCount{Count: 1, Bytes: 7, Nanos: 9}) {
		t.Fatalf("Sub = %v", got)
	}
}

// Grants survive the document: absent means every bucket, present with
// no buckets means none, and bad grants are refused.
func TestDocumentGrants(t *testing.T) {
	for _, tc := range []struct {
		json      string
		nilGrants bool
		allowed   bool
		bad       bool
	}{
		{`{"version":1}`, true, true, false},
		{`{"version":1,"grants":{"buckets":[]}}`, false, false, false},
		{`{"version":1,"grants":{"buckets":null}}`, false, false, false},
		{`{"version":1,"grants":{"buckets":[{"name":"photos","access":"read-only"}]}}`, false, true, false},
		{`{"version":1,"grants":{"buckets":[{"name":"photos","access":"all"}]}}`, false, false, true},
	} {
		d, err := ParseDocument([]byte(tc.json))
		if tc.bad {
			if err == nil {
				t.Errorf("%s: accepted", tc.json)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.json, err)
		}
		if (d.Grants == nil) != tc.nilGrants || d.Grants.Allows("photos", false) != tc.allowed {
			t.Errorf("%s: grants %+v", tc.json, d.Grants)
		}
	}
}
