//go:build integration

package instance_test

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"path/filepath"
	"slices"
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
	"github.com/hoard-io/hoard/internal/netshape"
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

// TestExternalWritersNotified: the notification path itself, with a
// stream of filler writes to the bucket that pushes MinIO's change stream
// out of the server's buffers (the bundled build does not flush it; see
// docs/design/external-writers.md). Once the subscription is up, a
// cached copy is served without asking the store (no x-hoard-changes),
// and a write straight to MinIO is served once its notification dropped
// the copy, counted as invalidated. A stream that hangs without closing
// (toxiproxy holding its bytes) is taken down by the heartbeat, and comes
// back up once the link does.
func TestExternalWritersNotified(t *testing.T) {
	bin := hoardBinary(t)
	dir := t.TempDir()
	srv := startStore(t, localstore.StartMinIO, filepath.Join(dir, "data"), "127.0.0.1:0")
	t.Cleanup(func() { srv.Close() })
	direct := faultClient(t, srv.Endpoint(), storeAK, storeSK)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const bucket, key = "notified", "table/part-0"
	if err := direct.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := putValue(ctx, direct, bucket, key, []byte("version 1")); err != nil {
		t.Fatal(err)
	}
	// The cachelet reaches the store through a proxy that can hang the
	// stream without closing it.
	shaper, err := netshape.Start(ctx, netshape.Config{LogFile: filepath.Join(dir, "toxiproxy.log")})
	if err != nil {
		t.Fatalf("start toxiproxy: %v", err)
	}
	t.Cleanup(func() { shaper.Close() })
	proxy, err := shaper.Shape(ctx, "store", srv.Endpoint(), netshape.Link{}, netshape.Link{})
	if err != nil {
		t.Fatal(err)
	}
	p := newHoardProc(t, dir, "ntf", 0)
	p.start(t, bin, "ntf", "", proxy.Endpoint, "--consistency", "local", "--store-changes", "--store-changes-heartbeat", "3s")
	(&faultCluster{}).waitHealthy(t, p)
	p.client = faultClient(t, p.endpoint(), clientAK, clientSK)

	// The filler: about 130 KB of notifications a second.
	pad := strings.Repeat("f", 1800)
	filled := make(chan struct{})
	go func() {
		defer close(filled)
		for i := 0; ctx.Err() == nil; i++ {
			_, _ = direct.PutObject(ctx, bucket, fmt.Sprintf("filler/%d", i%8), strings.NewReader(""), 0,
				minio.PutObjectOptions{UserMetadata: map[string]string{"pad": pad}})
			time.Sleep(10 * time.Millisecond)
		}
	}()
	defer func() { cancel(); <-filled }()

	waitUp := func(want float64, read bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for p.metric(t, "hoard_cachelet_store_subscriptions_up") != want {
			if time.Now().After(deadline) {
				t.Fatalf("the subscription never %v", want)
			}
			if read {
				getValue(ctx, p.client, bucket, key) // the first read subscribes
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitUp(1, true)
	getValue(ctx, p.client, bucket, key) // cached again after the drop on subscribing
	got, how := getRead(t, p.endpoint(), bucket, key)
	if string(got) != "version 1" || how != "local_hit" {
		t.Fatalf("before the outside write: %q (%s), want version 1 as a local hit", got, how)
	}
	if h := readHeader(t, p.endpoint(), bucket, key, "X-Hoard-Changes"); h != "" {
		t.Errorf("a read with the subscription up marked x-hoard-changes: %q", h)
	}

	// Outside writes, one at a time: how long each stays unseen (from the
	// PUT's answer to the first read that returns it, reads every 5 ms).
	var delays []time.Duration
	for i := 2; i <= 11; i++ {
		want := fmt.Sprintf("version %d", i)
		if err := putValue(ctx, direct, bucket, key, []byte(want)); err != nil {
			t.Fatal(err)
		}
		written := time.Now()
		deadline := written.Add(30 * time.Second)
		for {
			got, _ := getRead(t, p.endpoint(), bucket, key)
			if string(got) == want {
				delays = append(delays, time.Since(written))
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("outside write %d never noticed", i)
			}
			time.Sleep(5 * time.Millisecond)
		}
		getRead(t, p.endpoint(), bucket, key) // cached again
	}
	slices.Sort(delays)
	t.Logf("outside writes unseen for: p50 %v, max %v (%d writes; all %v)", delays[len(delays)/2], delays[len(delays)-1], len(delays), delays)
	if n := p.metric(t, `hoard_cachelet_store_changes_total{action="invalidated"}`); n < float64(len(delays)) {
		t.Errorf("invalidations counted %v, want >= %d", n, len(delays))
	}

	// The stream hung, not closed: every byte from the store held 20 s.
	// The heartbeat takes the subscription down.
	losses := p.metric(t, "hoard_cachelet_store_subscription_losses_total")
	if err := proxy.Update(netshape.Link{Latency: 20 * time.Second}, netshape.Link{}); err != nil {
		t.Fatal(err)
	}
	waitUp(0, false)
	if got := p.metric(t, "hoard_cachelet_store_subscription_losses_total"); got <= losses {
		t.Errorf("losses counted %v after the hang, want > %v", got, losses)
	}
	// Back (the held toxic is updated in place, not removed mid-hold):
	// the subscription comes up again.
	if err := proxy.Update(netshape.Link{Latency: time.Millisecond}, netshape.Link{}); err != nil {
		t.Fatal(err)
	}
	waitUp(1, true)
	t.Logf("notification delay: %v s summed over %v notifications",
		p.metric(t, "hoard_cachelet_store_change_delay_seconds_sum"), p.metric(t, "hoard_cachelet_store_change_delay_seconds_count"))
}
