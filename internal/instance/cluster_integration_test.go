//go:build integration

package instance_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/credentials"
	s3v2 "github.com/aws/aws-sdk-go-v2/service/s3"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/minio/minio-go/v7"

	"github.com/hoard-io/hoard/internal/instance"
	"github.com/hoard-io/hoard/internal/localstore"
	etcdmembership "github.com/hoard-io/hoard/internal/membership/etcd"
)

// clusterEnv is one store, an embedded etcd, and cachelets of one application.
type clusterEnv struct {
	store *localstore.Server
	ins   []*instance.Instance
	cs    []*minio.Client // S3 clients of each cachelet

	etcd []string // the etcd endpoints
	log  *slog.Logger
	opts []func(*instance.Config)
}

func newClusterEnv(t *testing.T, n int, opts ...func(*instance.Config)) *clusterEnv {
	t.Helper()
	dir := t.TempDir()
	srv, etcd := startStoreAndEtcd(t, dir)

	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	e := &clusterEnv{store: srv, etcd: etcd.Endpoints(), log: log, opts: opts}
	for range n {
		e.add(t)
	}
	e.waitRings(t, n)
	return e
}

// add starts one more cachelet of the application (it joins the ring;
// the caller waits for the rings with waitRings).
func (e *clusterEnv) add(t *testing.T) *instance.Instance {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	i := len(e.ins)
	// One registry (one etcd client) per cachelet, as in separate
	// processes.
	reg, err := etcdmembership.New(etcdmembership.Config{Endpoints: e.etcd})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	cfg := instance.Config{
		AccessKey: clientAK, SecretKey: clientSK, MetricsListen: "off",
		Registry: reg, App: "shop", ID: fmt.Sprintf("shop-%d", i),
		Secret: []byte("0123456789abcdef-shop-secret"),
	}
	cfg.Store.Endpoint, cfg.Store.AccessKey, cfg.Store.SecretKey = e.store.Endpoint(), storeAK, storeSK
	cfg.Cachelet.Cache.Budget = 64 << 20
	for _, o := range e.opts {
		o(&cfg)
	}
	in, err := instance.Start(ctx, cfg, e.log.With("cachelet", i))
	if err != nil {
		t.Fatalf("start cachelet %d: %v", i, err)
	}
	// Cleanups run last-in first-out: cachelets close before their
	// registries, etcd and the store.
	t.Cleanup(func() { _ = in.Close(context.Background()) })
	e.ins = append(e.ins, in)
	e.cs = append(e.cs, minioClient(t, in.Endpoint(), clientAK, clientSK))
	return in
}

// waitRings waits until every cachelet's ring has n members, and checks
// that they agree.
func (e *clusterEnv) waitRings(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		done := true
		for _, in := range e.ins {
			done = done && in.Cluster().Ring().Len() == n
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			for i, in := range e.ins {
				t.Logf("cachelet %d sees %v", i, in.Cluster().Ring().Members())
			}
			t.Fatalf("cachelets did not all see %d members", n)
		}
		time.Sleep(20 * time.Millisecond) // etcd watches deliver asynchronously
	}
	want := e.ins[0].Cluster().Ring().Members()
	for i, in := range e.ins {
		if got := in.Cluster().Ring().Members(); !slices.Equal(got, want) {
			t.Fatalf("cachelet %d's ring %v, cachelet 0's %v", i, got, want)
		}
		for _, m := range in.Cluster().Members() {
			if m.App != "shop" || m.PeerAddr == "" || m.S3Addr == "" {
				t.Errorf("cachelet %d sees member %+v", i, m)
			}
		}
	}
}

// owner returns the index of the cachelet that owns bucket/key.
func (e *clusterEnv) owner(t *testing.T, bucket, key string) int {
	t.Helper()
	addr, _ := e.ins[0].Cluster().Owner(bucket, key)
	for i, in := range e.ins {
		if in.PeerAddr() == addr {
			return i
		}
	}
	t.Fatalf("owner %q of %s/%s is none of the cachelets", addr, bucket, key)
	return -1
}

// getRead GETs bucket/key through the cachelet at endpoint and returns the
// bytes and how the cachelet served it (x-hoard-read).
func getRead(t *testing.T, endpoint, bucket, key string) ([]byte, string) {
	t.Helper()
	c := s3v2.New(s3v2.Options{
		BaseEndpoint: aws.String(endpoint), Region: "us-east-1", UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(clientAK, clientSK, ""),
	})
	out, err := c.GetObject(context.Background(), &s3v2.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer out.Body.Close()
	data, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	var read string
	if raw, ok := awsmiddleware.GetRawResponse(out.ResultMetadata).(*smithyhttp.Response); ok {
		read = raw.Header.Get("X-Hoard-Read")
	}
	return data, read
}

func TestCluster(t *testing.T) {
	e := newClusterEnv(t, 3)
	ctx := context.Background()
	const bucket = "coop"
	if err := e.cs[0].MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatalf("make bucket: %v", err)
	}

	// Every key written through cachelet 0 reads back the same through
	// every cachelet, whoever owns it.
	objs := map[string][]byte{}
	for i := range 12 {
		key := fmt.Sprintf("obj-%d", i)
		objs[key] = randomBytes(t, 10<<10+i)
		if _, err := e.cs[0].PutObject(ctx, bucket, key, bytes.NewReader(objs[key]), int64(len(objs[key])), minio.PutObjectOptions{}); err != nil {
			t.Fatalf("put %s: %v", key, err)
		}
	}
	for key, want := range objs {
		for _, i := range []int{1, 2, 1, 2} {
			if got, _ := getRead(t, e.ins[i].Endpoint(), bucket, key); !bytes.Equal(got, want) {
				t.Fatalf("get %s through cachelet %d: bytes differ", key, i)
			}
		}
	}

	// Reads of objects written behind the cache's back: through a
	// non-owner first (the owner fetches it from the store: a remote
	// miss), then through the owner (it kept it: a local hit), then
	// through the third cachelet (a remote hit).
	direct := minioClient(t, e.store.Endpoint(), storeAK, storeSK)
	for i := range 3 {
		key := fmt.Sprintf("behind-%d", i)
		want := randomBytes(t, 64<<10+i)
		if _, err := direct.PutObject(ctx, bucket, key, bytes.NewReader(want), int64(len(want)), minio.PutObjectOptions{}); err != nil {
			t.Fatalf("put behind the cache: %v", err)
		}
		own := e.owner(t, bucket, key)
		first, third := (own+1)%len(e.ins), (own+2)%len(e.ins)
		for _, step := range []struct {
			via  int
			read string
		}{
			{first, "remote_miss"},
			{own, "local_hit"},
			{third, "remote_hit"},
		} {
			got, read := getRead(t, e.ins[step.via].Endpoint(), bucket, key)
			if !bytes.Equal(got, want) {
				t.Fatalf("%s through cachelet %d (owner %d): bytes differ", key, step.via, own)
			}
			if read != step.read {
				t.Errorf("%s through cachelet %d (owner %d): x-hoard-read %q, want %q", key, step.via, own, read, step.read)
			}
		}
	}
}
