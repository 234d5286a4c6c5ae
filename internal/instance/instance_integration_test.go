//go:build integration

package instance_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	s3v2 "github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/minio/minio-go/v7"
	mcreds "github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/hoard-io/hoard/internal/etcdembed"
	"github.com/hoard-io/hoard/internal/instance"
	"github.com/hoard-io/hoard/internal/localstore"
)

const (
	clientAK, clientSK = "hoardclient", "hoard-client-secret"
	storeAK, storeSK   = "hoardstore", "hoard-store-secret"
)

// env is one store server with a cachelet in front of it.
type env struct {
	store *localstore.Server
	in    *instance.Instance
	// minio is a minio-go client of the cachelet (streaming signatures
	// over plain HTTP); direct is one of the store itself.
	minio, direct *minio.Client
	sdk           *s3v2.Client // aws-sdk-go-v2 client of the cachelet
}

type startFunc func(context.Context, localstore.Config) (*localstore.Server, error)

var stores = []struct {
	name  string
	start startFunc
}{
	{"minio", localstore.StartMinIO},
	{"versitygw", localstore.StartVersitygw},
}

func startStore(t *testing.T, start startFunc, dir, addr string) *localstore.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	srv, err := start(ctx, localstore.Config{DataDir: dir, Addr: addr, AccessKey: storeAK, SecretKey: storeSK,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("start store: %v", err)
	}
	return srv
}

// startStoreAndEtcd starts MinIO (data in dir/data) and an embedded etcd
// (in dir), both closed when t ends.
func startStoreAndEtcd(t *testing.T, dir string) (*localstore.Server, *etcdembed.Server) {
	t.Helper()
	srv := startStore(t, localstore.StartMinIO, filepath.Join(dir, "data"), "127.0.0.1:0")
	t.Cleanup(func() { srv.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	etcd, err := etcdembed.Start(ctx, etcdembed.Config{Dir: dir})
	if err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	t.Cleanup(etcd.Close)
	return srv, etcd
}

func newEnv(t *testing.T, start startFunc, mutate func(*instance.Config)) *env {
	t.Helper()
	srv := startStore(t, start, filepath.Join(t.TempDir(), "data"), "127.0.0.1:0")
	t.Cleanup(func() { srv.Close() })
	cfg := instance.Config{AccessKey: clientAK, SecretKey: clientSK, MetricsListen: "off"}
	cfg.Store.Endpoint, cfg.Store.AccessKey, cfg.Store.SecretKey = srv.Endpoint(), storeAK, storeSK
	cfg.Cachelet.Cache.Budget = 256 << 20
	if mutate != nil {
		mutate(&cfg)
	}
	in, err := instance.Start(context.Background(), cfg, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		t.Fatalf("start instance: %v", err)
	}
	t.Cleanup(func() { in.Close(context.Background()) })
	e := &env{store: srv, in: in}
	e.minio = minioClient(t, in.Endpoint(), clientAK, clientSK)
	e.direct = minioClient(t, srv.Endpoint(), storeAK, storeSK)
	e.sdk = s3v2.New(s3v2.Options{
		BaseEndpoint: aws.String(in.Endpoint()), Region: "us-east-1", UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(clientAK, clientSK, ""),
	})
	return e
}

func minioClient(t *testing.T, endpoint, ak, sk string) *minio.Client {
	t.Helper()
	c, err := minio.New(strings.TrimPrefix(endpoint, "http://"), &minio.Options{
		Creds: mcreds.NewStaticV4(ak, sk, ""), Secure: false, Region: "us-east-1", BucketLookup: minio.BucketLookupPath,
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func get(t *testing.T, c *minio.Client, bucket, key string, opts minio.GetObjectOptions) []byte {
	t.Helper()
	obj, err := c.GetObject(context.Background(), bucket, key, opts)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer obj.Close()
	data, err := io.ReadAll(obj)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	return data
}

func TestClients(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			e := newEnv(t, st.start, nil)
			ctx := context.Background()
			const bucket = "clients"
			if err := e.minio.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
				t.Fatalf("make bucket: %v", err)
			}

			// minio-go signs uploads chunk by chunk over plain HTTP.
			small := randomBytes(t, 100<<10)
			if _, err := e.minio.PutObject(ctx, bucket, "small", bytes.NewReader(small), int64(len(small)),
				minio.PutObjectOptions{ContentType: "application/x-test", UserMetadata: map[string]string{"Color": "blue"}}); err != nil {
				t.Fatalf("minio-go put: %v", err)
			}
			if got := get(t, e.minio, bucket, "small", minio.GetObjectOptions{}); !bytes.Equal(got, small) {
				t.Fatal("minio-go get: bytes differ")
			}
			info, err := e.minio.StatObject(ctx, bucket, "small", minio.StatObjectOptions{})
			if err != nil || info.ContentType != "application/x-test" || info.UserMetadata["Color"] != "blue" {
				t.Fatalf("stat = %+v, %v", info, err)
			}
			var ro minio.GetObjectOptions
			_ = ro.SetRange(1000, 1999)
			if got := get(t, e.minio, bucket, "small", ro); !bytes.Equal(got, small[1000:2000]) {
				t.Fatal("minio-go ranged get: bytes differ")
			}

			// A multipart upload with minio-go's own part splitting.
			big := randomBytes(t, 12<<20)
			if _, err := e.minio.PutObject(ctx, bucket, "big", bytes.NewReader(big), int64(len(big)),
				minio.PutObjectOptions{PartSize: 5 << 20}); err != nil {
				t.Fatalf("minio-go multipart put: %v", err)
			}
			if got := get(t, e.minio, bucket, "big", minio.GetObjectOptions{}); !bytes.Equal(got, big) {
				t.Fatal("multipart object differs")
			}

			// aws-sdk-go-v2: put (with its default checksums), get, head, list, copy, delete.
			body := []byte("written by aws-sdk-go-v2")
			if _, err := e.sdk.PutObject(ctx, &s3v2.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String("dir/sdk.txt"),
				Body: bytes.NewReader(body), ChecksumAlgorithm: s3types.ChecksumAlgorithmCrc32c}); err != nil {
				t.Fatalf("sdk put: %v", err)
			}
			out, err := e.sdk.GetObject(ctx, &s3v2.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String("dir/sdk.txt"),
				ChecksumMode: s3types.ChecksumModeEnabled})
			if err != nil {
				t.Fatalf("sdk get: %v", err)
			}
			got, err := io.ReadAll(out.Body)
			out.Body.Close()
			if err != nil || !bytes.Equal(got, body) {
				t.Fatalf("sdk get = %q, %v", got, err)
			}
			if _, err := e.sdk.CopyObject(ctx, &s3v2.CopyObjectInput{Bucket: aws.String(bucket), Key: aws.String("dir/copy.txt"),
				CopySource: aws.String(bucket + "/dir/sdk.txt")}); err != nil {
				t.Fatalf("sdk copy: %v", err)
			}
			list, err := e.sdk.ListObjectsV2(ctx, &s3v2.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String("dir/")})
			if err != nil || len(list.Contents) != 2 {
				t.Fatalf("sdk list = %+v, %v", list, err)
			}
			if _, err := e.sdk.DeleteObjects(ctx, &s3v2.DeleteObjectsInput{Bucket: aws.String(bucket), Delete: &s3types.Delete{
				Objects: []s3types.ObjectIdentifier{{Key: aws.String("dir/sdk.txt")}, {Key: aws.String("dir/copy.txt")}}}}); err != nil {
				t.Fatalf("sdk delete objects: %v", err)
			}
			_, err = e.sdk.HeadObject(ctx, &s3v2.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String("dir/sdk.txt")})
			var apiErr smithy.APIError
			if !errors.As(err, &apiErr) || apiErr.ErrorCode() != "NotFound" {
				t.Fatalf("head after delete: %v, want NotFound", err)
			}
		})
	}
}

// TestVersionCheck: an object changed or deleted in the store behind the
// cachelet's back is never served from memory.
func TestVersionCheck(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			e := newEnv(t, st.start, nil)
			ctx := context.Background()
			const bucket = "consistency"
			if err := e.minio.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
				t.Fatal(err)
			}
			for i := range 5 {
				v := randomBytes(t, 4096+i)
				if _, err := e.direct.PutObject(ctx, bucket, "k", bytes.NewReader(v), int64(len(v)), minio.PutObjectOptions{}); err != nil {
					t.Fatal(err)
				}
				for range 2 { // a miss (or stale), then a hit: both current
					if got := get(t, e.minio, bucket, "k", minio.GetObjectOptions{}); !bytes.Equal(got, v) {
						t.Fatalf("round %d: served stale bytes", i)
					}
				}
			}
			if err := e.direct.RemoveObject(ctx, bucket, "k", minio.RemoveObjectOptions{}); err != nil {
				t.Fatal(err)
			}
			_, err := e.minio.StatObject(ctx, bucket, "k", minio.StatObjectOptions{})
			if minio.ToErrorResponse(err).StatusCode != http.StatusNotFound {
				t.Fatalf("stat after delete behind our back: %v", err)
			}
			obj, _ := e.minio.GetObject(ctx, bucket, "k", minio.GetObjectOptions{})
			if _, err := io.ReadAll(obj); minio.ToErrorResponse(err).Code != "NoSuchKey" {
				t.Fatalf("get after delete behind our back: %v, want NoSuchKey", err)
			}
		})
	}
}

// TestStoreDown: with the store gone, reads and writes fail with 503 and
// the cache is not poisoned; when the store returns, service resumes.
func TestStoreDown(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	srv := startStore(t, localstore.StartMinIO, dir, "127.0.0.1:0")
	addr := strings.TrimPrefix(srv.Endpoint(), "http://")
	cfg := instance.Config{AccessKey: clientAK, SecretKey: clientSK, MetricsListen: "off"}
	cfg.Store.Endpoint, cfg.Store.AccessKey, cfg.Store.SecretKey = srv.Endpoint(), storeAK, storeSK
	cfg.Store.MaxAttempts = 1
	cfg.Cachelet.Cache.Budget = 64 << 20
	in, err := instance.Start(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close(context.Background())
	c := minioClient(t, in.Endpoint(), clientAK, clientSK)
	ctx := context.Background()
	if err := c.MakeBucket(ctx, "down", minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	v := randomBytes(t, 8192)
	if _, err := c.PutObject(ctx, "down", "k", bytes.NewReader(v), int64(len(v)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	_ = get(t, c, "down", "k", minio.GetObjectOptions{}) // cached now

	srv.Close()
	obj, _ := c.GetObject(ctx, "down", "k", minio.GetObjectOptions{})
	_, err = io.ReadAll(obj)
	if code := minio.ToErrorResponse(err).StatusCode; code != http.StatusServiceUnavailable {
		t.Fatalf("get with store down: %v (status %d), want 503", err, code)
	}
	w := []byte("never stored")
	_, err = c.PutObject(ctx, "down", "k", bytes.NewReader(w), int64(len(w)), minio.PutObjectOptions{DisableMultipart: true})
	if code := minio.ToErrorResponse(err).StatusCode; code != http.StatusServiceUnavailable {
		t.Fatalf("put with store down: %v (status %d), want 503", err, code)
	}

	srv = startStore(t, localstore.StartMinIO, dir, addr)
	defer srv.Close()
	if got := get(t, c, "down", "k", minio.GetObjectOptions{}); !bytes.Equal(got, v) {
		t.Fatal("after the store returned, bytes differ from the last acknowledged write")
	}
}
