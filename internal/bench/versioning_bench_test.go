package bench

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/hoard-io/hoard/internal/localstore"
)

// BenchmarkVersioningCosts measures what a versioned bucket costs under
// the owner and local settings, each next to what the same request costs
// where the cost is not paid (an unversioned bucket, nothing queued) and
// at the store directly, in the same run: a write to a versioned bucket
// goes to the store before it is acknowledged; a read of a missing key in
// a versioned bucket asks the store (HEAD) whether it is a delete marker;
// a listing first has the bucket's queued writes reach the store; and a
// bucket the store called unversioned is asked again (GetBucketVersioning)
// at most every 5 s, whose cost is that of one such call at the store.
// It runs `hoard serve` ($HOARD_BIN, or bin/hoard) in front of MinIO, a
// single cachelet (under owner, its own owner). Metrics, in µs per
// request: costed (the request that pays), free (the same request where
// it is not paid), store (the request at MinIO), and their ratios.
//
//	go test -run XXX -bench VersioningCosts -benchtime 200x ./internal/bench
func BenchmarkVersioningCosts(b *testing.B) {
	bin := benchHoardBinary(b)
	ctx := b.Context()
	tmp := b.TempDir()
	binary, err := localstore.FindBinary(localstore.MinIOBinary)
	if err != nil {
		b.Fatal(err)
	}
	srv, err := localstore.StartMinIO(ctx, localstore.Config{
		Binary: binary, DataDir: filepath.Join(tmp, "minio", "data"), LogFile: filepath.Join(tmp, "minio.log"),
	})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	direct, err := NewS3Client(srv.Endpoint(), srv.AccessKey(), srv.SecretKey(), benchRegion)
	if err != nil {
		b.Fatal(err)
	}
	const plain, versioned = "plain", "versioned"
	for _, bkt := range []string{plain, versioned} {
		if err := direct.MakeBucket(ctx, bkt, minio.MakeBucketOptions{Region: benchRegion}); err != nil {
			b.Fatal(err)
		}
	}
	if err := direct.SetBucketVersioning(ctx, versioned, minio.BucketVersioningConfiguration{Status: "Enabled"}); err != nil {
		b.Fatal(err)
	}
	body := bytes.Repeat([]byte("v"), 4<<10)
	put := func(c *minio.Core, bkt, key string) error {
		_, err := c.PutObject(ctx, bkt, key, bytes.NewReader(body), int64(len(body)), "", "", minio.PutObjectOptions{})
		return err
	}
	missing := func(c *minio.Core, bkt string) error {
		_, err := c.StatObject(ctx, bkt, "no-such-key", minio.StatObjectOptions{})
		if minio.ToErrorResponse(err).StatusCode == 404 {
			return nil
		}
		return fmt.Errorf("a missing key read as %v", err)
	}
	list := func(c *minio.Core, bkt string) error {
		_, err := c.ListObjectsV2(bkt, "", "", "", "", 100)
		return err
	}
	for _, setting := range []string{"local", "owner"} {
		p, err := startServe(ctx, MemoryConfig{HoardBinary: bin, Budget: 64 << 20}, srv,
			MemoryVariant{Name: setting, Args: []string{"--consistency", setting}}, filepath.Join(tmp, setting))
		if err != nil {
			b.Fatal(err)
		}
		hc, err := NewS3Client(p.ready.Endpoint, clientKey, clientSec, benchRegion)
		if err != nil {
			p.stop()
			b.Fatal(err)
		}
		n := 0
		key := func() string { n++; return fmt.Sprintf("k%d", n%50) }
		cases := []struct {
			name                string
			prepare             func() error // before costed, untimed
			costed, free, store func() error
		}{
			{name: "put", costed: func() error { return put(hc, versioned, key()) },
				free: func() error { return put(hc, plain, key()) }, store: func() error { return put(direct, versioned, key()) }},
			{name: "get-missing", costed: func() error { return missing(hc, versioned) },
				free: func() error { return missing(hc, plain) }, store: func() error { return missing(direct, versioned) }},
			{name: "list-after-put", prepare: func() error { return put(hc, plain, key()) },
				costed: func() error { return list(hc, plain) }, free: func() error { return list(hc, plain) },
				store: func() error { return list(direct, plain) }},
			{name: "versioning-check", costed: func() error {
				_, err := direct.GetBucketVersioning(ctx, plain)
				return err
			}, free: func() error { return put(hc, plain, key()) }, store: func() error { return put(direct, plain, key()) }},
		}
		for _, tc := range cases {
			b.Run(setting+"/"+tc.name, func(b *testing.B) {
				var costed, free, store time.Duration
				timed := func(f func() error, into *time.Duration) {
					start := time.Now()
					if err := f(); err != nil {
						b.Fatal(err)
					}
					*into += time.Since(start)
				}
				for b.Loop() {
					if tc.prepare != nil {
						if err := tc.prepare(); err != nil {
							b.Fatal(err)
						}
					}
					timed(tc.costed, &costed)
					// Settle what the costed request left queued, so the
					// free one finds nothing to flush.
					if tc.prepare != nil {
						timed(tc.free, new(time.Duration))
					}
					timed(tc.free, &free)
					timed(tc.store, &store)
				}
				per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N) }
				b.ReportMetric(per(costed), "costed-µs")
				b.ReportMetric(per(free), "free-µs")
				b.ReportMetric(per(store), "store-µs")
				b.ReportMetric(float64(costed)/float64(free), "costed/free")
				b.ReportMetric(float64(costed)/float64(store), "costed/store")
			})
		}
		p.stop()
	}
}

// benchHoardBinary is $HOARD_BIN, or bin/hoard at the module root.
func benchHoardBinary(b *testing.B) string {
	bin := os.Getenv("HOARD_BIN")
	if bin == "" {
		out, err := exec.Command("go", "env", "GOMOD").Output()
		if err != nil {
			b.Fatal(err)
		}
		bin = filepath.Join(filepath.Dir(string(out[:len(out)-1])), "bin", "hoard")
	}
	if _, err := os.Stat(bin); err != nil {
		b.Fatalf("hoard binary: %v (go build -o bin/hoard ./cmd/hoard, or set $HOARD_BIN)", err)
	}
	return bin
}
