//go:build integration

package instance_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/hoard-io/hoard/internal/blockfmt"
	"github.com/hoard-io/hoard/internal/instance"
	"github.com/hoard-io/hoard/internal/localstore"
)

// storeCounter is an HTTP proxy in front of the store that counts the
// body bytes of the object GETs it relays under one path prefix.
type storeCounter struct {
	prefix string
	bytes  atomic.Int64
	gets   atomic.Int64
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

func startStoreCounter(t *testing.T, target, prefix string) (*storeCounter, string) {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	sc := &storeCounter{prefix: prefix}
	// The Host header is relayed as it is: the cachelet signs for the
	// proxy's address and the store checks that.
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ModifyResponse = func(resp *http.Response) error {
		if resp.Request.Method == http.MethodGet && strings.HasPrefix(resp.Request.URL.Path, sc.prefix) {
			sc.gets.Add(1)
			resp.Body = countingBody{resp.Body, &sc.bytes}
		}
		return nil
	}
	srv := &http.Server{Handler: rp}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return sc, "http://" + ln.Addr().String()
}

func (sc *storeCounter) take() (gets, n int64) { return sc.gets.Swap(0), sc.bytes.Swap(0) }

// TestUnpackedRangeFetchesOnlyItsBlocks: a ranged GET with x-hoard-unpacked
// of an object stored in the block format (as hoard pack writes it), by a
// real S3 client through a cachelet in front of a real MinIO, returns
// exactly those bytes of the packed content, and the store serves the
// object's tail (its index) and the blocks covering the range, nothing
// else, counted at a proxy in front of the store; a second read costs the
// store no object bytes. A plain GET of the same object is the stored
// container, byte for byte the store's answer. An object not in the
// format, a bad header value and a block that does not match its
// checksum in the store are refused, never served as other bytes.
func TestUnpackedRangeFetchesOnlyItsBlocks(t *testing.T) {
	srv := startStore(t, localstore.StartMinIO, filepath.Join(t.TempDir(), "data"), "127.0.0.1:0")
	t.Cleanup(func() { srv.Close() })
	const bucket = "packed"
	sc, proxy := startStoreCounter(t, srv.Endpoint(), "/"+bucket+"/")
	cfg := instance.Config{AccessKey: clientAK, SecretKey: clientSK, MetricsListen: "off"}
	cfg.Store.Endpoint, cfg.Store.AccessKey, cfg.Store.SecretKey = proxy, storeAK, storeSK
	cfg.Cachelet.Cache.Budget = 64 << 20
	in, err := instance.Start(context.Background(), cfg, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	if err != nil {
		t.Fatalf("start instance: %v", err)
	}
	t.Cleanup(func() { in.Close(context.Background()) })
	c := minioClient(t, in.Endpoint(), clientAK, clientSK)
	direct := minioClient(t, srv.Endpoint(), storeAK, storeSK)
	ctx := context.Background()
	if err := direct.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}

	// 6 MiB, half text, half random, in 256 KiB blocks: 24 blocks.
	const bs = 256 << 10
	data := make([]byte, 6<<20)
	rng := rand.New(rand.NewPCG(18, 1))
	for i := range data {
		if (i/7000)%2 == 0 {
			data[i] = "unpacked ranges "[i%16]
		} else {
			data[i] = byte(rng.Uint32())
		}
	}
	var packed bytes.Buffer
	w, err := blockfmt.NewWriter(&packed, blockfmt.WithBlockSize(bs))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	obj := packed.Bytes()
	layout, err := blockfmt.NewReader(ctx, blockfmt.ReaderAtSource(bytes.NewReader(obj)), int64(len(obj)))
	if err != nil {
		t.Fatal(err)
	}
	spans := func(first, last int) (n int64) {
		for i := first; i <= last; i++ {
			_, l := layout.BlockSpan(i)
			n += l
		}
		return n
	}
	tail := min(int64(len(obj)), 64<<10)
	put := func(key string, b []byte) {
		t.Helper()
		if _, err := direct.PutObject(ctx, bucket, key, bytes.NewReader(b), int64(len(b)), minio.PutObjectOptions{}); err != nil {
			t.Fatalf("put %s: %v", key, err)
		}
	}
	put("model.blk", obj)

	core := minio.Core{Client: c}
	unpacked := func(key string, start, end int64) ([]byte, http.Header, error) {
		t.Helper()
		var o minio.GetObjectOptions
		o.Set("x-hoard-unpacked", "true")
		if start >= 0 {
			if err := o.SetRange(start, end); err != nil {
				t.Fatal(err)
			}
		}
		body, _, h, err := core.GetObject(ctx, bucket, key, o)
		if err != nil {
			return nil, nil, err
		}
		defer body.Close()
		got, err := io.ReadAll(body)
		return got, h, err
	}

	// Blocks 3 to 5: one tail and three blocks from the store.
	a, b := int64(3*bs+100), int64(5*bs+50)
	sc.take()
	got, h, err := unpacked("model.blk", a, b)
	if err != nil || !bytes.Equal(got, data[a:b+1]) {
		t.Fatalf("unpacked range: %d bytes, %v; want %d bytes of the packed content", len(got), err, b-a+1)
	}
	gets, n := sc.take()
	if want := tail + spans(3, 5); n != want {
		t.Fatalf("store served %d bytes in %d GETs for the range, want %d (tail %d + blocks 3-5)", n, gets, want, tail)
	}
	if h.Get("x-hoard-read") != "local_miss" || h.Get("x-hoard-unpacked-size") != "6291456" {
		t.Fatalf("headers %v", h)
	}
	t.Logf("range of %d bytes: store served %d bytes of a %d-byte object (%d GETs)", b-a+1, n, len(obj), gets)

	// Again: every block is cached, the index known; the store is only asked for the version.
	got, h, err = unpacked("model.blk", a, b)
	if err != nil || !bytes.Equal(got, data[a:b+1]) || h.Get("x-hoard-read") != "local_hit" {
		t.Fatalf("second read: %d bytes, %v, %s", len(got), err, h.Get("x-hoard-read"))
	}
	if gets, n := sc.take(); n != 0 {
		t.Fatalf("second read: store served %d bytes in %d GETs, want 0", n, gets)
	}
	// Half cached: only block 6 is fetched. A suffix: only the last block.
	if got, _, err = unpacked("model.blk", 5*bs, 6*bs+10); err != nil || !bytes.Equal(got, data[5*bs:6*bs+11]) {
		t.Fatalf("overlapping range: %v", err)
	}
	if _, n := sc.take(); n != spans(6, 6) {
		t.Fatalf("overlapping range: store served %d bytes, want block 6's %d", n, spans(6, 6))
	}
	var so minio.GetObjectOptions
	so.Set("x-hoard-unpacked", "true")
	so.Set("Range", "bytes=-1000")
	body, _, _, err := core.GetObject(ctx, bucket, "model.blk", so)
	if err != nil {
		t.Fatal(err)
	}
	got, err = io.ReadAll(body)
	body.Close()
	if err != nil || !bytes.Equal(got, data[len(data)-1000:]) {
		t.Fatalf("suffix: %v", err)
	}
	if _, n := sc.take(); n != spans(23, 23) {
		t.Fatalf("suffix: store served %d bytes, want the last block's %d", n, spans(23, 23))
	}
	// The whole packed content, without a Range.
	if got, _, err = unpacked("model.blk", -1, 0); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("whole unpacked: %d bytes, %v", len(got), err)
	}
	sc.take()

	// A plain ranged GET is of the object as stored: the store's own bytes.
	var po minio.GetObjectOptions
	_ = po.SetRange(1000, 300<<10)
	if got := get(t, c, bucket, "model.blk", po); !bytes.Equal(got, obj[1000:300<<10+1]) || !bytes.Equal(got, get(t, direct, bucket, "model.blk", po)) {
		t.Fatal("a plain ranged GET is not the stored object's range")
	}

	// Refused: an object not in the format, a bad header value, a Range
	// the unpacked path does not read. Nothing changes.
	plain := randomBytes(t, 200<<10)
	put("plain", plain)
	refused := func(what, key, value, rangeHdr, code string) {
		t.Helper()
		var o minio.GetObjectOptions
		o.Set("x-hoard-unpacked", value)
		if rangeHdr != "" {
			o.Set("Range", rangeHdr)
		}
		body, _, _, err := core.GetObject(ctx, bucket, key, o)
		if err == nil {
			body.Close()
			t.Fatalf("%s: served", what)
		}
		var er minio.ErrorResponse
		if !errors.As(err, &er) || er.Code != code {
			t.Fatalf("%s: %v, want %s", what, err, code)
		}
	}
	refused("not packed", "plain", "true", "", "InvalidRequest")
	refused("bad value", "model.blk", "yes", "", "InvalidArgument")
	refused("two ranges", "model.blk", "true", "bytes=0-1,5-6", "InvalidArgument")
	// A version is the store's to find: refused, not passed through as the packed object.
	var vo minio.GetObjectOptions
	vo.Set("x-hoard-unpacked", "true")
	vo.VersionID = "null"
	if body, _, _, err := core.GetObject(ctx, bucket, "model.blk", vo); err == nil {
		body.Close()
		t.Fatal("a version's unpacked read was served")
	} else if er := minio.ToErrorResponse(err); er.Code != "InvalidArgument" {
		t.Fatalf("a version's unpacked read: %v", err)
	}
	if got := get(t, c, bucket, "plain", minio.GetObjectOptions{}); !bytes.Equal(got, plain) {
		t.Fatal("plain object changed")
	}

	// A block that does not match its checksum in the store: refused on
	// every read (never kept), while the blocks around it are served.
	// (A 5xx, which S3 clients retry: once is enough here.)
	retries := minio.MaxRetry
	minio.MaxRetry = 1
	t.Cleanup(func() { minio.MaxRetry = retries })
	bad := bytes.Clone(obj)
	off, l := layout.BlockSpan(10)
	bad[off+l/2] ^= 0x20
	put("bad.blk", bad)
	for range 2 {
		refused("corrupt block", "bad.blk", "true", "bytes=2621540-2621600", "InternalError")
	}
	if got, _, err := unpacked("bad.blk", 9*bs, 10*bs-1); err != nil || !bytes.Equal(got, data[9*bs:10*bs]) {
		t.Fatalf("block 9 of the corrupt object: %v", err)
	}
	// Read past the first run, a bad block ends the body short: an error, not other bytes.
	var ro minio.GetObjectOptions
	ro.Set("x-hoard-unpacked", "true")
	body, _, _, err = core.GetObject(ctx, bucket, "bad.blk", ro)
	if err == nil {
		got, err = io.ReadAll(body)
		body.Close()
		if err == nil {
			t.Fatalf("whole corrupt object read without an error (%d bytes)", len(got))
		}
		if !bytes.Equal(got, data[:len(got)]) {
			t.Fatal("corrupt object: served bytes that are not the packed content")
		}
	}
}
