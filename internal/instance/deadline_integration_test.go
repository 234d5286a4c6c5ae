//go:build integration

package instance_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	mcreds "github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/hoard-io/hoard/internal/instance"
	"github.com/hoard-io/hoard/internal/localstore"
)

// clientDeadline bounds every request of TestStoreHung: the store's own
// deadlines (3 s per call, 5 s without progress on a body) must answer
// well within it.
const clientDeadline = 10 * time.Second

// TestStoreHung: with the store frozen (SIGSTOP: its connections stay
// open, nothing answers), every request through hoard ends within the
// client's deadline, with 503 or, under serve_stale_if_error, the cached
// bytes; after SIGCONT, service resumes without restarting hoard.
func TestStoreHung(t *testing.T) {
	srv := startStore(t, localstore.StartMinIO, filepath.Join(t.TempDir(), "data"), "127.0.0.1:0")
	t.Cleanup(func() { srv.Close() })
	start := func(stale bool) (*instance.Instance, *minio.Client) {
		cfg := instance.Config{AccessKey: clientAK, SecretKey: clientSK, MetricsListen: "off"}
		cfg.Store.Endpoint, cfg.Store.AccessKey, cfg.Store.SecretKey = srv.Endpoint(), storeAK, storeSK
		cfg.Cachelet.Cache.Budget = 64 << 20
		cfg.Cachelet.ServeStaleIfError = stale
		in, err := instance.Start(context.Background(), cfg, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { in.Close(context.Background()) })
		// One attempt per request: a 503 is seen, not retried.
		c, err := minio.New(strings.TrimPrefix(in.Endpoint(), "http://"), &minio.Options{
			Creds: mcreds.NewStaticV4(clientAK, clientSK, ""), Region: "us-east-1",
			BucketLookup: minio.BucketLookupPath, MaxRetries: 1,
		})
		if err != nil {
			t.Fatal(err)
		}
		return in, c
	}
	_, c := start(false)
	_, cs := start(true)
	ctx := context.Background()
	if err := c.MakeBucket(ctx, "hung", minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	v, cold := randomBytes(t, 100<<10), randomBytes(t, 1000)
	if _, err := c.PutObject(ctx, "hung", "k", bytes.NewReader(v), int64(len(v)), minio.PutObjectOptions{DisableMultipart: true}); err != nil {
		t.Fatal(err)
	}
	_ = get(t, c, "hung", "k", minio.GetObjectOptions{})  // cached in both
	_ = get(t, cs, "hung", "k", minio.GetObjectOptions{}) // instances
	// Written behind the cachelets' backs: cached in neither.
	direct := minioClient(t, srv.Endpoint(), storeAK, storeSK)
	if _, err := direct.PutObject(ctx, "hung", "cold", bytes.NewReader(cold), int64(len(cold)), minio.PutObjectOptions{DisableMultipart: true}); err != nil {
		t.Fatal(err)
	}

	if err := srv.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			if err := srv.Signal(syscall.SIGCONT); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(thaw) // before srv.Close, which a frozen store would ignore
	// The kernel stops a process's threads as each gets to run: wait
	// until the store no longer answers at all.
	for tries := 0; ; tries++ {
		if tries == 30 {
			t.Fatal("the store still answers after SIGSTOP")
		}
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := direct.BucketExists(ctx, "hung")
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			break
		}
	}

	read := func(c *minio.Client, key string) ([]byte, error) {
		ctx, cancel := context.WithTimeout(ctx, clientDeadline)
		defer cancel()
		obj, err := c.GetObject(ctx, "hung", key, minio.GetObjectOptions{})
		if err != nil {
			return nil, err
		}
		defer obj.Close()
		return io.ReadAll(obj)
	}
	write := func(c *minio.Client, key string, data []byte) error {
		ctx, cancel := context.WithTimeout(ctx, clientDeadline)
		defer cancel()
		_, err := c.PutObject(ctx, "hung", key, bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{DisableMultipart: true})
		return err
	}
	want503 := func(what string, err error) {
		t.Helper()
		if errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s with the store frozen: no answer within %v", what, clientDeadline)
			return
		}
		if code := minio.ToErrorResponse(err).StatusCode; code != http.StatusServiceUnavailable {
			t.Errorf("%s with the store frozen: %v (status %d), want 503", what, err, code)
		}
	}
	// The store stays frozen for at least HOARD_HUNG_FOR (default: the
	// one round below; the 30 s by hand), every round's requests
	// ending within the deadline.
	hungFor, _ := time.ParseDuration(os.Getenv("HOARD_HUNG_FOR"))
	frozen := time.Now()
	rounds := 0
	longest := map[string]time.Duration{}
	timed := func(what string, f func() error) {
		start := time.Now()
		want503(what, f())
		longest[what] = max(longest[what], time.Since(start))
	}
	for round := true; round; round = time.Since(frozen) < hungFor {
		rounds++
		timed("GET of a cached object", func() error { _, err := read(c, "k"); return err })
		timed("GET of an uncached object", func() error { _, err := read(c, "cold"); return err })
		timed("PUT", func() error { return write(c, "k", []byte("never stored")) })
	}
	t.Logf("store frozen for %v: %d rounds of requests, the longest answers: %v", time.Since(frozen).Round(time.Second), rounds, longest)
	func() {
		ctx, cancel := context.WithTimeout(ctx, clientDeadline)
		defer cancel()
		body, _, h, err := (minio.Core{Client: cs}).GetObject(ctx, "hung", "k", minio.GetObjectOptions{})
		if err != nil {
			t.Errorf("GET of a cached object under serve_stale_if_error: %v, want the cached bytes", err)
			return
		}
		defer body.Close()
		got, err := io.ReadAll(body)
		if err != nil || !bytes.Equal(got, v) || h.Get("x-hoard-stale") != "true" {
			t.Errorf("GET of a cached object under serve_stale_if_error: %v, x-hoard-stale %q; want the cached bytes, marked stale",
				err, h.Get("x-hoard-stale"))
		}
	}()
	_, err := read(cs, "cold")
	want503("GET of an uncached object under serve_stale_if_error", err)

	thaw()
	for _, tc := range []struct {
		c    *minio.Client
		key  string
		want []byte
	}{{c, "k", v}, {c, "cold", cold}, {cs, "k", v}, {cs, "cold", cold}} {
		if got, err := read(tc.c, tc.key); err != nil || !bytes.Equal(got, tc.want) {
			t.Errorf("GET %s after the store thawed: %v, or bytes differ from the last acknowledged write", tc.key, err)
		}
	}
	w := randomBytes(t, 2000)
	if err := write(c, "k", w); err != nil {
		t.Fatalf("PUT after the store thawed: %v", err)
	}
	if got, err := read(c, "k"); err != nil || !bytes.Equal(got, w) {
		t.Errorf("GET after a PUT after the thaw: %v, or stale bytes", err)
	}
}
