package peer

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/store"
)

// PeerRange serves ranges of the fake's objects; a key named "short/..."
// sends half of what was asked, as a store connection cut midway would.
func (f *fakeOwner) PeerRange(_ context.Context, bucket, key, etag string, off, n int64) (io.ReadCloser, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	o, ok := f.objects[bucket+"/"+key]
	switch {
	case !ok:
		return nil, store.ErrNoSuchKey
	case o.info.ETag != etag:
		return nil, store.ErrPreconditionFailed
	case off+n > int64(len(o.data)):
		return nil, store.ErrInvalidRange
	}
	b := o.data[off : off+n]
	if strings.HasPrefix(key, "short/") {
		b = b[:n/2]
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

func TestRange(t *testing.T) {
	cl, owner, addr := newPair(t)
	ctx := context.Background()
	data := randomBytes(3<<20 + 17)
	for _, key := range []string{"obj", "short/obj"} {
		res, err := cl.Put(ctx, addr, "bkt", key, bytes.NewReader(data), int64(len(data)), store.PutOptions{}, PersistSync)
		if err != nil {
			t.Fatal(err)
		}
		owner.objects["bkt/"+key] = stored{info: store.ObjectInfo{Bucket: "bkt", Key: key, Size: int64(len(data)), ETag: res.ETag}, data: data}
	}
	etag := "etag-obj"
	for _, r := range [][2]int64{{0, 1}, {0, int64(len(data))}, {1 << 20, 1<<20 + 5}, {int64(len(data)) - 9, 9}} {
		body, err := cl.Range(ctx, addr, "bkt", "obj", etag, r[0], r[1])
		if err != nil {
			t.Fatalf("range %v: %v", r, err)
		}
		got, err := io.ReadAll(body)
		body.Close()
		if err != nil || !bytes.Equal(got, data[r[0]:r[0]+r[1]]) {
			t.Fatalf("range %v: %d bytes, err %v", r, len(got), err)
		}
	}
	// The object changed since the owner looked: nothing is sent.
	if _, err := cl.Range(ctx, addr, "bkt", "obj", "older", 0, 10); !errors.Is(err, store.ErrPreconditionFailed) {
		t.Fatalf("range of a changed object: %v, want ErrPreconditionFailed", err)
	}
	// A cut stream is an error from Read, never a short body read as whole.
	body, err := cl.Range(ctx, addr, "bkt", "short/obj", "etag-short/obj", 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(body)
	body.Close()
	if err == nil || !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("cut range: %d bytes, err %v; want ErrUnavailable", len(got), err)
	}
	for _, q := range []string{"bucket=bkt&key=obj&etag=e&off=-1&n=5", "bucket=bkt&key=obj&etag=e&off=0&n=0", "bucket=bkt&key=obj&off=0&n=5", "key=obj&etag=e&off=0&n=5"} {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/v1/range?"+q, nil)
		cl.auth.Sign(req)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("range %q: %d, want 400", q, resp.StatusCode)
		}
	}
	// Unsigned: refused.
	resp, err := http.Get("http://" + addr + "/v1/range?" + rangeQuery("bkt", "obj", etag, 0, 5))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("unsigned range: %d, want 403", resp.StatusCode)
	}
}

func TestProbe(t *testing.T) {
	cl, _, addr := newPair(t)
	d, err := cl.Probe(context.Background(), addr, 4<<20)
	if err != nil || d <= 0 || d > time.Minute {
		t.Fatalf("probe: %v, %v", d, err)
	}
	for _, n := range []int64{0, -1, MaxProbeBytes + 1} {
		if _, err := cl.Probe(context.Background(), addr, n); err == nil {
			t.Errorf("probe of %d bytes accepted", n)
		}
	}
}
