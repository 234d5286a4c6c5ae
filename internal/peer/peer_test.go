package peer

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/clock"
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
	drops       []Key   // bucket and prefix of each drop
	budgets     []int64 // each budget asked for
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

// PeerDrop drops the fake's objects under bucket/prefix.
func (f *fakeOwner) PeerAccessMetadata(context.Context) (any, error) {
	return []Key{{Bucket: "b", Key: "seen"}}, nil
}

func (f *fakeOwner) PeerPrewarm(_ context.Context, keys []Key) (PrewarmResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return PrewarmResult{Owned: len(keys), Fetched: len(keys)}, nil
}

func (f *fakeOwner) PeerDrop(_ context.Context, bucket, prefix string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.drops = append(f.drops, Key{Bucket: bucket, Key: prefix})
	n := 0
	for k, o := range f.objects {
		if o.info.Bucket == bucket && strings.HasPrefix(o.info.Key, prefix) {
			delete(f.objects, k)
			n++
		}
	}
	return n, nil
}

// PeerBudget records the budget and "evicts" objects (fake sizes) until
// what is left fits.
func (f *fakeOwner) PeerBudget(_ context.Context, n int64) (BudgetResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.budgets = append(f.budgets, n)
	var held, freed int64
	for k, o := range f.objects {
		if held+o.info.Size > n {
			freed += o.info.Size
			delete(f.objects, k)
			continue
		}
		held += o.info.Size
	}
	return BudgetResult{Budget: n, Freed: freed, CacheBytes: held}, nil
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
	srv := httptest.NewServer(NewServer(auth, owner, nil))
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

func TestDrop(t *testing.T) {
	cl, owner, addr := newPair(t)
	ctx := context.Background()
	for _, k := range []string{"tmp/run 1/a", "tmp/run 1/b+c", "tmp/run 2/a", "keep/x"} {
		if _, err := cl.Put(ctx, addr, "bkt", k, strings.NewReader("x"), 1, store.PutOptions{}, PersistSync); err != nil {
			t.Fatal(err)
		}
	}
	n, err := cl.Drop(ctx, addr, "bkt", "tmp/run 1/")
	if err != nil || n != 2 {
		t.Fatalf("Drop(tmp/run 1/) = %d, %v; want 2", n, err)
	}
	if _, ok := owner.get("bkt", "tmp/run 2/a"); !ok {
		t.Fatal("an object outside the prefix was dropped")
	}
	// An empty prefix is the whole bucket; another bucket drops nothing.
	if n, err := cl.Drop(ctx, addr, "other", ""); err != nil || n != 0 {
		t.Fatalf("Drop(other) = %d, %v; want 0", n, err)
	}
	if n, err := cl.Drop(ctx, addr, "bkt", ""); err != nil || n != 2 {
		t.Fatalf("Drop(bkt, \"\") = %d, %v; want 2", n, err)
	}
	want := []Key{{"bkt", "tmp/run 1/"}, {"other", ""}, {"bkt", ""}}
	if len(owner.drops) != len(want) {
		t.Fatalf("owner was asked %v, want %v", owner.drops, want)
	}
	for i := range want {
		if owner.drops[i] != want[i] {
			t.Fatalf("owner was asked %v, want %v", owner.drops, want)
		}
	}
	if _, err := cl.Drop(ctx, addr, "", "tmp/"); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("drop without a bucket: %v, want ErrBadRequest", err)
	}
	if _, err := cl.Drop(ctx, "127.0.0.1:1", "bkt", ""); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("unreachable peer: %v", err)
	}
}

// A drop is signed like every peer request, its bucket and prefix
// included: nobody without the application's secret can empty a cache,
// and a signed drop cannot be widened.
func TestDropIsSigned(t *testing.T) {
	auth, _ := NewAuth("app1", []byte(secret), nil)
	owner := newFakeOwner()
	srv := httptest.NewServer(NewServer(auth, owner, nil))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	other, _ := NewAuth("app1", []byte("another-secret-0123456789"), nil)
	if _, err := NewClient(other, ClientConfig{}).Drop(context.Background(), addr, "bkt", ""); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("wrong secret: %v", err)
	}
	resp, err := http.Post(srv.URL+"/v1/drop?bucket=bkt&prefix=", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("unsigned drop: %d, want 403", resp.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/drop?bucket=bkt&prefix=tmp%2Frun-1%2F", nil)
	auth.Sign(req)
	req.URL.RawQuery = "bucket=bkt&prefix="
	if err := auth.Verify(req); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("widened prefix: %v, want ErrBadSignature", err)
	}
	if len(owner.drops) != 0 {
		t.Fatalf("owner dropped %v on unauthenticated requests", owner.drops)
	}
}

func TestPrewarm(t *testing.T) {
	cl, _, addr := newPair(t)
	ctx := context.Background()
	res, err := cl.Prewarm(ctx, addr, []Key{{Bucket: "b", Key: "k1"}, {Bucket: "b", Key: "k2"}})
	if err != nil || res.Owned != 2 || res.Fetched != 2 {
		t.Errorf("Prewarm = %+v, %v", res, err)
	}
	var meta []Key
	if err := cl.AccessMetadata(ctx, addr, &meta); err != nil || len(meta) != 1 || meta[0].Key != "seen" {
		t.Errorf("AccessMetadata = %v, %v", meta, err)
	}
}

func TestBudget(t *testing.T) {
	cl, owner, addr := newPair(t)
	ctx := context.Background()
	for _, k := range []string{"a", "b", "c"} {
		if _, err := cl.Put(ctx, addr, "bkt", k, strings.NewReader("0123456789"), 10, store.PutOptions{}, PersistSync); err != nil {
			t.Fatal(err)
		}
	}
	res, err := cl.Budget(ctx, addr, 15)
	if err != nil || res != (BudgetResult{Budget: 15, Freed: 20, CacheBytes: 10}) {
		t.Fatalf("Budget(15) = %+v, %v; want budget 15, 20 freed, 10 left", res, err)
	}
	if res, err := cl.Budget(ctx, addr, 1<<40); err != nil || res.Budget != 1<<40 || res.Freed != 0 {
		t.Fatalf("Budget(1 TiB) = %+v, %v", res, err)
	}
	if _, err := cl.Budget(ctx, addr, 0); err != nil {
		t.Fatalf("Budget(0): %v", err)
	}
	if _, err := cl.Budget(ctx, addr, -1); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("Budget(-1): %v, want ErrBadRequest", err)
	}
	if _, err := cl.Budget(ctx, "127.0.0.1:1", 5); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("unreachable peer: %v", err)
	}
	if want := []int64{15, 1 << 40, 0}; !slices.Equal(owner.budgets, want) {
		t.Fatalf("owner was asked %v, want %v", owner.budgets, want)
	}
}

// A budget request is signed, its byte count included; a malformed or
// negative count is refused before the owner sees it.
func TestBudgetIsSigned(t *testing.T) {
	auth, _ := NewAuth("app1", []byte(secret), nil)
	owner := newFakeOwner()
	srv := httptest.NewServer(NewServer(auth, owner, nil))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	other, _ := NewAuth("app1", []byte("another-secret-0123456789"), nil)
	if _, err := NewClient(other, ClientConfig{}).Budget(context.Background(), addr, 0); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("wrong secret: %v", err)
	}
	resp, err := http.Post(srv.URL+"/v1/budget?bytes=0", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("unsigned budget: %d, want 403", resp.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/budget?bytes=1048576", nil)
	auth.Sign(req)
	req.URL.RawQuery = "bytes=0"
	if err := auth.Verify(req); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("changed byte count: %v, want ErrBadSignature", err)
	}
	for _, q := range []string{"bytes=-1", "bytes=lots", ""} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/budget?"+q, nil)
		auth.Sign(req)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("budget with %q: %d, want 400", q, resp.StatusCode)
		}
	}
	if len(owner.budgets) != 0 {
		t.Fatalf("owner set budgets %v on refused requests", owner.budgets)
	}
}
