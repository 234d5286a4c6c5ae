package bench

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/cachelet"
	"github.com/hoard-io/hoard/internal/instance"
	"github.com/hoard-io/hoard/internal/localstore"
	s3store "github.com/hoard-io/hoard/internal/store/s3"
)

// The go test -bench view of `hoard bench access` at 4 KiB: MinIO direct
// against hoard warm under both read modes. They need MinIO (make tools)
// and are skipped without it:
//
//	go test -run XXX -bench 4KiB ./internal/bench

func BenchmarkGetStore4KiB(b *testing.B)     { benchGet(b, "store", 4<<10) }
func BenchmarkGetWarm4KiB(b *testing.B)      { benchGet(b, cachelet.ReadVersionCheck, 4<<10) }
func BenchmarkGetWarmLocal4KiB(b *testing.B) { benchGet(b, cachelet.ReadLocal, 4<<10) }
func BenchmarkGetCold4KiB(b *testing.B)      { benchGet(b, "cold", 4<<10) }

// The miss path at larger sizes, next to the store direct (profile with
// -cpuprofile / -memprofile):
//
//	go test -run XXX -bench 'Get(Store|Cold)(1|16)MiB' ./internal/bench
func BenchmarkGetStore1MiB(b *testing.B)  { benchGet(b, "store", 1<<20) }
func BenchmarkGetCold1MiB(b *testing.B)   { benchGet(b, "cold", 1<<20) }
func BenchmarkGetStore16MiB(b *testing.B) { benchGet(b, "store", 16<<20) }
func BenchmarkGetCold16MiB(b *testing.B)  { benchGet(b, "cold", 16<<20) }

// startBenchStore starts MinIO with the bench bucket holding one object
// of size bytes, and returns the server, a client and the object's key;
// without the MinIO binary the benchmark is skipped.
func startBenchStore(b *testing.B, size int64) (*localstore.Server, *minio.Core, string) {
	ctx := context.Background()
	srv, err := localstore.StartMinIO(ctx, localstore.Config{DataDir: filepath.Join(b.TempDir(), "data"), Logger: slog.New(slog.DiscardHandler)})
	if errors.Is(err, localstore.ErrBinaryNotFound) {
		b.Skip(err)
	}
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.Close() })
	store, err := NewS3Client(srv.Endpoint(), srv.AccessKey(), srv.SecretKey(), benchRegion)
	if err != nil {
		b.Fatal(err)
	}
	if err := makeBucket(ctx, store); err != nil {
		b.Fatal(err)
	}
	key := objectKey(size)
	if _, err := store.PutObject(ctx, benchBucket, key, bytes.NewReader(make([]byte, size)), size, "", "",
		minio.PutObjectOptions{DisableMultipart: true}); err != nil {
		b.Fatal(err)
	}
	return srv, store, key
}

func benchGet(b *testing.B, mode cachelet.ReadMode, size int64) {
	ctx := context.Background()
	srv, store, key := startBenchStore(b, size)
	var err error
	g := NewS3Getter(store, benchBucket)
	var in *instance.Instance
	if mode != "store" {
		readMode := mode
		if mode == "cold" {
			readMode = cachelet.ReadVersionCheck
		}
		in, err = instance.Start(ctx, instance.Config{
			MetricsListen: "off", AccessKey: clientKey, SecretKey: clientSec,
			Store:    s3store.Config{Endpoint: srv.Endpoint(), AccessKey: srv.AccessKey(), SecretKey: srv.SecretKey(), Region: benchRegion},
			Cachelet: cachelet.Config{Cache: cache.Config{Budget: 64 << 20}, ReadMode: readMode},
		}, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = in.Close(context.Background()) })
		core, err := NewS3Client(in.Endpoint(), clientKey, clientSec, benchRegion)
		if err != nil {
			b.Fatal(err)
		}
		g = NewS3Getter(core, benchBucket)
		if _, err := g.Get(ctx, key); err != nil { // fill
			b.Fatal(err)
		}
		g.Expect = string(cachelet.LocalHit)
		if mode == "cold" {
			g.Expect = string(cachelet.LocalMiss)
		}
	}
	get := func() error {
		if mode == "cold" { // each read a local miss
			in.Cachelet().Invalidate(benchBucket, key)
		}
		_, err := g.Get(ctx, key)
		return err
	}
	for range 10 {
		if err := get(); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(size)
	for b.Loop() {
		if err := get(); err != nil {
			b.Fatal(err)
		}
	}
}
