package peer

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/clock"
	"github.com/hoard-io/hoard/internal/onewrite"
	"github.com/hoard-io/hoard/internal/store"
)

// fakeOwner is an Owner over a map, recording what it was asked.
type fakeOwner struct {
	mu          sync.Mutex
	objects     map[string]stored
	invalidated []Key
	notOwner    bool
	flushes     int
	flushRev    int64
}

type stored struct {
	info store.ObjectInfo
	data []byte
}

func newFakeOwner() *fakeOwner { return &fakeOwner{objects: map[string]stored{}} }

func (f *fakeOwner) PeerGet(_ context.Context, bucket, key, inm string) (*Object, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.notOwner {
		return nil, ErrNotOwner
	}
	o, ok := f.objects[bucket+"/"+key]
	switch {
	case !ok:
		return nil, store.ErrNoSuchKey
	case inm != "" && inm == o.info.ETag:
		return nil, store.ErrNotModified
	}
	return &Object{Info: o.info, Body: io.NopCloser(bytes.NewReader(o.data)), Outcome: RemoteHit}, nil
}

func (f *fakeOwner) PeerPut(_ context.Context, bucket, key string, body io.Reader, size int64, opts store.PutOptions, _ Persist) (store.PutResult, error) {
	data, err := io.ReadAll(body)
	if err != nil {
		return store.PutResult{}, err // nothing committed
	}
	if int64(len(data)) != size {
		return store.PutResult{}, errors.New("short body passed")
	}
	etag := "etag-" + key
	f.mu.Lock()
	f.objects[bucket+"/"+key] = stored{info: store.ObjectInfo{Bucket: bucket, Key: key, Size: size, ETag: etag,
		ContentType: opts.ContentType, UserMetadata: opts.UserMetadata, LastModified: time.Unix(1700000000, 123)}, data: data}
	f.mu.Unlock()
	return store.PutResult{ETag: etag}, nil
}

func (f *fakeOwner) PeerInvalidate(_ context.Context, keys []Key) {
	f.mu.Lock()
	f.invalidated = append(f.invalidated, keys...)
	f.mu.Unlock()
}

func (f *fakeOwner) PeerFlush(_ context.Context, rev int64) error {
	f.mu.Lock()
	f.flushes++
	f.flushRev = rev
	f.mu.Unlock()
	return nil
}

func (f *fakeOwner) get(bucket, key string) ([]byte, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	o, ok := f.objects[bucket+"/"+key]
	return o.data, ok
}

const secret = "0123456789abcdef-app-secret"

func newPair(t *testing.T) (*Client, *fakeOwner, string) {
	t.Helper()
	auth, err := NewAuth("app1", []byte(secret), nil)
	if err != nil {
		t.Fatal(err)
	}
	owner := newFakeOwner()
	srv := httptest.NewUnstartedServer(NewServer(auth, owner, nil))
	srv.Listener = onewrite.Listen(srv.Listener)
	srv.Config.ConnContext = onewrite.ConnContext
	srv.Start()
	t.Cleanup(srv.Close)
	cl := NewClient(auth, ClientConfig{})
	t.Cleanup(cl.Close)
	return cl, owner, strings.TrimPrefix(srv.URL, "http://")
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

func TestPutThenGet(t *testing.T) {
	cl, owner, addr := newPair(t)
	ctx := context.Background()
	for _, tc := range []struct {
		key  string
		size int
	}{{"small", 10}, {"empty", 0}, {"dir/ünï cødé+x=y%z", 1000}, {"big", 8 << 20}} {
		data := randomBytes(tc.size)
		res, err := cl.Put(ctx, addr, "bkt", tc.key, bytes.NewReader(data), int64(len(data)),
			store.PutOptions{ContentType: "text/x-test", UserMetadata: map[string]string{"color": "blue"}}, PersistSync)
		if err != nil {
			t.Fatalf("put %q: %v", tc.key, err)
		}
		if got, _ := owner.get("bkt", tc.key); !bytes.Equal(got, data) {
			t.Fatalf("put %q: owner holds %d bytes, want %d", tc.key, len(got), len(data))
		}
		obj, err := cl.Get(ctx, addr, "bkt", tc.key, "")
		if err != nil {
			t.Fatalf("get %q: %v", tc.key, err)
		}
		got, err := io.ReadAll(obj.Body)
		obj.Body.Close()
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("get %q: %d bytes, err %v", tc.key, len(got), err)
		}
		i := obj.Info
		if i.ETag != res.ETag || i.Size != int64(tc.size) || i.ContentType != "text/x-test" ||
			i.UserMetadata["color"] != "blue" || obj.Outcome != RemoteHit || !i.LastModified.Equal(time.Unix(1700000000, 123)) {
			t.Fatalf("get %q: info %+v outcome %q", tc.key, i, obj.Outcome)
		}
		if _, err := cl.Get(ctx, addr, "bkt", tc.key, res.ETag); !errors.Is(err, store.ErrNotModified) {
			t.Fatalf("conditional get of the current version: %v", err)
		}
	}
}

func TestErrorsCrossTheWire(t *testing.T) {
	cl, owner, addr := newPair(t)
	ctx := context.Background()
	if _, err := cl.Get(ctx, addr, "bkt", "missing", ""); !errors.Is(err, store.ErrNoSuchKey) {
		t.Fatalf("missing key: %v", err)
	}
	owner.notOwner = true
	if _, err := cl.Get(ctx, addr, "bkt", "k", ""); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("not owner: %v", err)
	}
	if _, err := cl.Get(ctx, "127.0.0.1:1", "bkt", "k", ""); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("unreachable peer: %v", err)
	}
}

type failingReader struct {
	data []byte
	err  error
}

func (f *failingReader) Read(p []byte) (int, error) {
	if len(f.data) == 0 {
		return 0, f.err
	}
	n := copy(p, f.data)
	f.data = f.data[n:]
	return n, nil
}

func TestPutBodyFailureCommitsNothing(t *testing.T) {
	cl, owner, addr := newPair(t)
	bad := errors.New("client body failed verification")
	_, err := cl.Put(context.Background(), addr, "bkt", "k", &failingReader{data: randomBytes(100 << 10), err: bad}, 200<<10, store.PutOptions{}, PersistSync)
	if err == nil {
		t.Fatal("put of a failing body succeeded")
	}
	if _, ok := owner.get("bkt", "k"); ok {
		t.Fatal("owner committed a failed body")
	}
	// A body shorter than announced is refused too.
	if _, err := cl.Put(context.Background(), addr, "bkt", "k", bytes.NewReader([]byte("abc")), 10, store.PutOptions{}, PersistSync); err == nil {
		t.Fatal("short body accepted")
	}
	if _, ok := owner.get("bkt", "k"); ok {
		t.Fatal("owner committed a short body")
	}
}

// TestTamperedTrailer: a body whose CRC32C trailer does not match is not
// committed.
func TestTamperedTrailer(t *testing.T) {
	auth, _ := NewAuth("app1", []byte(secret), nil)
	owner := newFakeOwner()
	srv := httptest.NewServer(NewServer(auth, owner, nil))
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodPut, srv.URL+objectPath("bkt", "k"), strings.NewReader("payload"))
	req.ContentLength = -1
	req.Trailer = http.Header{hdrCRC: []string{"deadbeef"}}
	req.Header.Set(hdrSize, "7")
	req.Header.Set(hdrPersist, string(PersistSync))
	auth.Sign(req)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("status %d, want 400", resp.StatusCode)
	}
	if _, ok := owner.get("bkt", "k"); ok {
		t.Fatal("owner committed a body with a wrong checksum")
	}
}

func TestAuthentication(t *testing.T) {
	auth, _ := NewAuth("app1", []byte(secret), nil)
	owner := newFakeOwner()
	owner.objects["bkt/k"] = stored{info: store.ObjectInfo{ETag: "e", Size: 1}, data: []byte("x")}
	srv := httptest.NewServer(NewServer(auth, owner, nil))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	ctx := context.Background()

	other, _ := NewAuth("app1", []byte("another-secret-0123456789"), nil)
	if _, err := NewClient(other, ClientConfig{}).Get(ctx, addr, "bkt", "k", ""); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("wrong secret: %v", err)
	}
	otherApp, _ := NewAuth("app2", []byte(secret), nil)
	if _, err := NewClient(otherApp, ClientConfig{}).Get(ctx, addr, "bkt", "k", ""); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("another application: %v", err)
	}
	skewed, _ := NewAuth("app1", []byte(secret), clock.NewFake(time.Now().Add(-time.Hour)))
	if _, err := NewClient(skewed, ClientConfig{}).Get(ctx, addr, "bkt", "k", ""); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("stale date: %v", err)
	}
	resp, err := http.Get(srv.URL + objectPath("bkt", "k"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("unsigned: %d", resp.StatusCode)
	}

	// A captured request cannot be replayed.
	req, _ := http.NewRequest(http.MethodGet, srv.URL+objectPath("bkt", "k"), nil)
	auth.Sign(req)
	for i, want := range []int{http.StatusOK, http.StatusForbidden} {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("send %d of the same signed request: %d, want %d", i+1, resp.StatusCode, want)
		}
	}
	// Changing what the signature covers breaks it.
	req, _ = http.NewRequest(http.MethodGet, srv.URL+objectPath("bkt", "k"), nil)
	auth.Sign(req)
	req.URL.Path = "/v1/o/bkt/other"
	if err := auth.Verify(req); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("tampered path: %v", err)
	}
}

func TestInvalidate(t *testing.T) {
	cl, owner, addr := newPair(t)
	keys := []Key{{"bkt", "a"}, {"bkt", "b/c"}}
	if err := cl.Invalidate(context.Background(), addr, keys); err != nil {
		t.Fatal(err)
	}
	if len(owner.invalidated) != 2 || owner.invalidated[1] != keys[1] {
		t.Fatalf("invalidated %v", owner.invalidated)
	}
	if err := cl.Flush(context.Background(), addr, 42); err != nil || owner.flushes != 1 || owner.flushRev != 42 {
		t.Fatalf("flush: %v, %d flushes at revision %d", err, owner.flushes, owner.flushRev)
	}
}

func TestObjectPathRoundTrip(t *testing.T) {
	for _, k := range []string{"a", "a/b/c", "sp ace", "ü/ï", "a+b=c&d%e", "dir/", "q?x#y"} {
		req := httptest.NewRequest(http.MethodGet, objectPath("bkt", k), nil)
		b, key, ok := splitObjectPath(req.URL.Path)
		if !ok || b != "bkt" || key != k {
			t.Errorf("key %q: round trip gave %q, %q, %v", k, b, key, ok)
		}
	}
}

func BenchmarkGet4KiB(b *testing.B) {
	auth, _ := NewAuth("app1", []byte(secret), nil)
	owner := newFakeOwner()
	data := randomBytes(4 << 10)
	owner.objects["bkt/k"] = stored{info: store.ObjectInfo{ETag: "e", Size: int64(len(data))}, data: data}
	srv := httptest.NewServer(NewServer(auth, owner, nil))
	defer srv.Close()
	cl := NewClient(auth, ClientConfig{})
	addr := strings.TrimPrefix(srv.URL, "http://")
	buf := make([]byte, 64<<10)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		obj, err := cl.Get(context.Background(), addr, "bkt", "k", "")
		if err != nil {
			b.Fatal(err)
		}
		for {
			if _, err := obj.Body.Read(buf); err != nil {
				break
			}
		}
		obj.Body.Close()
	}
}

// TestStuckOwner: an owner that accepts the connection but never answers
// (paused, overloaded) costs a fetch GetTimeout, not the reader's patience:
// the caller gets ErrUnavailable and falls back to the store.
func TestStuckOwner(t *testing.T) {
	auth, _ := NewAuth("app1", []byte(secret), nil)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
	defer srv.Close()
	defer close(release)
	cl := NewClient(auth, ClientConfig{GetTimeout: 100 * time.Millisecond})
	defer cl.Close()
	start := time.Now()
	_, err := cl.Get(context.Background(), strings.TrimPrefix(srv.URL, "http://"), "bkt", "k", "")
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("stuck owner: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("waited %v for a stuck owner", d)
	}
}

// The peer protocol carries only what cachelets say to each other: the
// node agent's requests (drop, budget, pre-warm, access metadata) go over
// the control API (package control), and a peer asking for them, signed
// or not, is refused.
func TestNoAgentControl(t *testing.T) {
	auth, _ := NewAuth("app1", []byte(secret), nil)
	srv := httptest.NewServer(NewServer(auth, newFakeOwner(), nil))
	defer srv.Close()
	for _, r := range []struct{ method, path string }{
		{http.MethodPost, "/v1/drop?bucket=bkt&prefix="},
		{http.MethodPost, "/v1/budget?bytes=0"},
		{http.MethodPost, "/v1/prewarm"},
		{http.MethodGet, "/v1/access"},
	} {
		req, _ := http.NewRequest(r.method, srv.URL+r.path, strings.NewReader("[]"))
		auth.Sign(req)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("signed %s %s: %d, want 400", r.method, r.path, resp.StatusCode)
		}
	}
}
