//go:build integration

package instance_test

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/credentials"
	s3v2 "github.com/aws/aws-sdk-go-v2/service/s3"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/minio/minio-go/v7"

	"github.com/hoard-io/hoard/internal/etcdembed"
	"github.com/hoard-io/hoard/internal/localstore"
)

// TestExternalWriters: cachelets following MinIO's change notifications
// (--store-changes), under a setting that reads locally (`local`: one
// cachelet) and under `owner` (two: reads of keys the other owns ask it).
// A write made straight to MinIO stops being served once its notification
// is in, or at once while the subscription is not up (reads are then
// validated, and counted so); while the subscription is cut (MinIO
// stopped, then started again, and written to before the cachelet listens
// again) no read serves the older version: reads fail or are validated
// with the store.
func TestExternalWriters(t *testing.T) {
	for _, tc := range []struct {
		consistency string
		n           int
	}{{"local", 1}, {"owner", 2}} {
		t.Run(fmt.Sprintf("%s-%d", tc.consistency, tc.n), func(t *testing.T) { testExternalWriters(t, tc.consistency, tc.n) })
	}
}

func testExternalWriters(t *testing.T, consistency string, n int) {
	bin := hoardBinary(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	srv := startStore(t, localstore.StartMinIO, data, "127.0.0.1:0")
	t.Cleanup(func() { srv.Close() })
	direct := faultClient(t, srv.Endpoint(), storeAK, storeSK)
	ctx := context.Background()
	const bucket, key = "outside", "table/part-0"
	if err := direct.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	version := func(i int) []byte { return []byte(fmt.Sprintf("version %d of %s", i, key)) }
	if err := putValue(ctx, direct, bucket, key, version(1)); err != nil {
		t.Fatal(err)
	}
	eps := ""
	if n > 1 {
		ectx, cancel := context.WithTimeout(ctx, time.Minute)
		etcd, err := etcdembed.Start(ectx, etcdembed.Config{Dir: dir})
		cancel()
		if err != nil {
			t.Fatalf("start etcd: %v", err)
		}
		t.Cleanup(etcd.Close)
		eps = strings.Join(etcd.Endpoints(), ",")
	}
	var procs []*hoardProc
	for i := range n {
		p := newHoardProc(t, dir, "ext", i)
		p.start(t, bin, "ext", eps, srv.Endpoint(), "--consistency", consistency,
			"--store-changes", "--store-changes-heartbeat", "3s")
		(&faultCluster{}).waitHealthy(t, p)
		p.client = faultClient(t, p.endpoint(), clientAK, clientSK)
		procs = append(procs, p)
	}
	// Which version each read sees; it must never be older than the
	// newest one written before the read began (once noticed).
	readAll := func(floor int) (newest int, failures int) {
		t.Helper()
		newest = 1 << 30
		for _, p := range procs {
			got, err := getValue(ctx, p.client, bucket, key)
			if err != nil {
				failures++
				continue
			}
			v := 0
			if _, err := fmt.Sscanf(string(got), "version %d of", &v); err != nil {
				t.Fatalf("%s: unexpected bytes %q", p.id, got)
			}
			if v < floor {
				t.Fatalf("%s served version %d after version %d was in the store and its cachelets had been told", p.id, v, floor)
			}
			newest = min(newest, v)
		}
		return newest, failures
	}
	sum := func(name string) (n float64) {
		for _, p := range procs {
			n += p.metric(t, name)
		}
		return n
	}
	up := func(want float64) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			all := true
			for _, p := range procs {
				if p.metric(t, "hoard_cachelet_store_subscriptions_up") != want {
					all = false
				}
			}
			if all {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("subscriptions never %v", want)
			}
			readAll(0) // a first read subscribes
			time.Sleep(50 * time.Millisecond)
		}
	}
	if v, f := readAll(1); v != 1 || f != 0 {
		t.Fatalf("version %d, %d failures; want 1", v, f)
	}
	readAll(1) // cached everywhere now
	following := sum("hoard_cachelet_store_subscriptions_up")
	t.Logf("subscriptions up before the outside write: %v of %d", following, len(procs))
	if following < float64(len(procs)) {
		if sum("hoard_cachelet_unsubscribed_validations_total") == 0 {
			t.Error("a subscription was not up, yet no read was validated in its stead")
		}
		marked := 0
		for _, p := range procs {
			if readHeader(t, p.endpoint(), bucket, key, "X-Hoard-Changes") == "unfollowed" {
				marked++
			}
		}
		if marked == 0 {
			t.Error("no read said (x-hoard-changes: unfollowed) that it was checked because the bucket's changes were not followed")
		}
	}

	// A writer outside hoard.
	if err := putValue(ctx, direct, bucket, key, version(2)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if v, _ := readAll(1); v == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the outside write was never noticed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	readAll(2)
	t.Logf("cached copies invalidated by notifications: %v", sum(`hoard_cachelet_store_changes_total{action="invalidated"}`))

	// The subscription cut: MinIO stopped. Every cachelet notices (the
	// stream ends), and reads validate (they fail while the store is
	// down: nothing unconfirmed is served).
	u, _ := url.Parse(srv.Endpoint())
	srv.Close()
	up(0)
	if _, f := readAll(2); f != len(procs) {
		t.Errorf("%d of %d reads answered with the store down and no subscription", len(procs)-f, len(procs))
	}
	// Back, and written to at once, before any cachelet listens again:
	// that change is never told, yet no read may serve version 2.
	srv = startStore(t, localstore.StartMinIO, data, u.Host)
	t.Cleanup(func() { srv.Close() })
	direct = faultClient(t, srv.Endpoint(), storeAK, storeSK)
	if err := putValue(ctx, direct, bucket, key, version(3)); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(4 * time.Second); time.Now().Before(end); {
		readAll(3) // across the subscriptions' return, when they come back
		time.Sleep(20 * time.Millisecond)
	}
	if losses := sum("hoard_cachelet_store_subscription_losses_total"); losses < float64(len(procs)) {
		t.Errorf("subscription losses counted %v, want >= %d", losses, len(procs))
	}
}

// readHeader reads bucket/key through the cachelet at endpoint and
// returns the answer's header name.
func readHeader(t *testing.T, endpoint, bucket, key, name string) string {
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
	_, _ = io.Copy(io.Discard, out.Body)
	if raw, ok := awsmiddleware.GetRawResponse(out.ResultMetadata).(*smithyhttp.Response); ok {
		return raw.Header.Get(name)
	}
	return ""
}
