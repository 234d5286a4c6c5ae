//go:build integration

package instance_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/hoard-io/hoard/internal/instance"
	"github.com/hoard-io/hoard/internal/onewrite/onewritetest"
)

// The S3 front answers a small GET (a miss, a hit, a range) and a small
// listing in one write (ADR 0038), over the instance's own listeners;
// a large answer takes several, which is what makes the count mean
// something. Every answer arrives intact.
func TestSmallAnswersInOneWrite(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	counter := onewritetest.NewCounter(ln)
	e := newEnv(t, stores[0].start, func(cfg *instance.Config) { cfg.S3Listener = counter })
	core := minio.Core{Client: minioClient(t, "http://"+ln.Addr().String(), clientAK, clientSK)}
	ctx := context.Background()
	const bucket = "onewrite"
	if err := core.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	small, large := randomBytes(t, 5<<10), randomBytes(t, 200<<10)
	for key, data := range map[string][]byte{"small": small, "large": large} {
		if _, err := e.minio.PutObject(ctx, bucket, key, bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 40 {
		if _, err := e.minio.PutObject(ctx, bucket, fmt.Sprintf("list/%03d", i), strings.NewReader("x"), 1, minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.in.Cachelet().Invalidate(bucket, "small") // the first GET below a miss

	writes := func(what string, f func() error) int64 {
		t.Helper()
		before := counter.Writes()
		if err := f(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return counter.Writes() - before
	}
	read := func(key string, opts minio.GetObjectOptions, want []byte) func() error {
		return func() error {
			body, _, _, err := core.GetObject(ctx, bucket, key, opts)
			if err != nil {
				return err
			}
			defer body.Close()
			got, err := io.ReadAll(body)
			if err != nil {
				return err
			}
			if !bytes.Equal(got, want) {
				return fmt.Errorf("%d bytes, not the object's %d", len(got), len(want))
			}
			return nil
		}
	}
	// The connection first: its writes are not the answers'.
	writes("warm-up", read("small", minio.GetObjectOptions{}, small))
	e.in.Cachelet().Invalidate(bucket, "small")
	for _, what := range []string{"miss", "hit", "hit again"} {
		if n := writes("small "+what, read("small", minio.GetObjectOptions{}, small)); n != 1 {
			t.Errorf("5 KiB GET (%s): %d writes, want 1", what, n)
		}
	}
	var rng minio.GetObjectOptions
	if err := rng.SetRange(1000, 1000+8<<10-1); err != nil {
		t.Fatal(err)
	}
	if n := writes("range", read("large", rng, large[1000:1000+8<<10])); n != 1 {
		t.Errorf("8 KiB range: %d writes, want 1", n)
	}
	if n := writes("large", read("large", minio.GetObjectOptions{}, large)); n < 2 {
		t.Errorf("200 KiB GET: %d writes: held beyond the bounds", n)
	}
	if n := writes("list", func() error {
		res, err := core.ListObjectsV2(bucket, "list/", "", "", "", 1000)
		if err == nil && len(res.Contents) != 40 {
			err = fmt.Errorf("%d keys listed, want 40", len(res.Contents))
		}
		return err
	}); n != 1 {
		t.Errorf("a listing of 40 keys: %d writes, want 1", n)
	}
}
