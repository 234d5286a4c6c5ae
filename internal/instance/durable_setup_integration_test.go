//go:build integration && linux

package instance_test

// The setup the end-to-end durable tests share (durable_*_test.go): MinIO
// with the run's bucket and a client that reaches it directly, a slow
// link to it (toxiproxy), `hoard serve` cachelets alone or as members of
// one application in an embedded etcd, their stop, and the writes of the
// load.

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/hoard-io/hoard/internal/etcdembed"
	"github.com/hoard-io/hoard/internal/localstore"
	"github.com/hoard-io/hoard/internal/netshape"
	"github.com/hoard-io/hoard/internal/ring"
)

// durableStore starts MinIO on dir/data, closed at cleanup, makes bucket
// and returns the server and a client that reaches it directly (the
// store's own keys: another route than hoard, and the end-of-run check's).
func durableStore(t *testing.T, dir, bucket string) (*localstore.Server, *minio.Client) {
	t.Helper()
	srv := startStore(t, localstore.StartMinIO, filepath.Join(dir, "data"), "127.0.0.1:0")
	t.Cleanup(func() { srv.Close() })
	direct := faultClient(t, srv.Endpoint(), storeAK, storeSK)
	if err := direct.MakeBucket(context.Background(), bucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	return srv, direct
}

// storeProxy starts toxiproxy (its log in dir, stopped at cleanup) and
// returns a proxy to the store at endpoint whose link towards the store
// is up and the other way unshaped: the cachelets' writes are held up,
// their HEADs and GETs are not. proxy.Update lifts it.
func storeProxy(t *testing.T, dir, endpoint string, up netshape.Link) *netshape.Proxy {
	t.Helper()
	ctx := context.Background()
	shaper, err := netshape.Start(ctx, netshape.Config{LogFile: filepath.Join(dir, "toxiproxy.log")})
	if err != nil {
		t.Fatalf("start toxiproxy: %v", err)
	}
	t.Cleanup(func() { shaper.Close() })
	proxy, err := shaper.Shape(ctx, "store", endpoint, netshape.Link{}, up)
	if err != nil {
		t.Fatal(err)
	}
	return proxy
}

// serveAlone starts cachelet i of app (no etcd: alone) in front of the
// store at storeEndpoint with flags, its log in dir, and returns it once
// it is healthy.
func serveAlone(t *testing.T, bin, dir, app string, i int, storeEndpoint string, flags ...string) *hoardProc {
	t.Helper()
	p := newHoardProc(t, dir, app, i)
	p.start(t, bin, app, "", storeEndpoint, flags...)
	(&faultCluster{}).waitHealthy(t, p)
	return p
}

// waitStopped waits up to d for each of procs, signalled to stop, to
// exit.
func waitStopped(t *testing.T, d time.Duration, procs ...*hoardProc) {
	t.Helper()
	for _, p := range procs {
		select {
		case <-p.exited:
		case <-time.After(d):
			t.Fatalf("%s did not stop on SIGTERM", p.id)
		}
	}
}

// memberSet is n `hoard serve` members of one application, joined
// through an embedded etcd.
type memberSet struct {
	eps     string     // etcd's endpoints, as --etcd-endpoints takes them
	members *memberLog // etcd's membership of the application, watched
	procs   []*hoardProc
	ids     []string
	ring    *ring.Ring // the ring of all n, as every member computes it
}

// startMemberSet starts an embedded etcd in dir and n members of app in
// front of the store at storeEndpoint, member i with flags flagsOf(i)
// and its log in logDir. It returns once every member is healthy and
// etcd lists them all.
func startMemberSet(t *testing.T, bin, dir, logDir, app string, n int, storeEndpoint string, flagsOf func(i int) []string) *memberSet {
	t.Helper()
	ectx, cancel := context.WithTimeout(context.Background(), time.Minute)
	etcd, err := etcdembed.Start(ectx, etcdembed.Config{Dir: dir})
	cancel()
	if err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	t.Cleanup(etcd.Close)
	s := &memberSet{eps: strings.Join(etcd.Endpoints(), ","), members: watchMembers(t, etcd.Endpoints(), app)}
	for i := range n {
		p := newHoardProc(t, logDir, app, i)
		p.start(t, bin, app, s.eps, storeEndpoint, flagsOf(i)...)
		s.procs = append(s.procs, p)
		s.ids = append(s.ids, p.id)
	}
	for _, p := range s.procs {
		(&faultCluster{}).waitHealthy(t, p)
	}
	if _, ok := s.members.waitFor(time.Time{}, 20*time.Second, func(got []string) bool { return slices.Equal(got, s.ids) }); !ok {
		t.Fatalf("etcd never listed members %v", s.ids)
	}
	if s.ring, err = ring.New(ring.Config{}, s.ids); err != nil {
		t.Fatal(err)
	}
	return s
}

// write writes the key's next value (makeValue of its next sequence
// number) through c, waiting up to d for the answer, and records the
// outcome: acknowledged, or unknown (it may or may not have landed).
// Writes of one key are serialized.
func (ks *keyState) write(ctx context.Context, c *minio.Client, bucket, key string, rnd *rand.Rand, d time.Duration) error {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	seq := ks.next
	ks.next++
	octx, cancel := context.WithTimeout(ctx, d)
	err := putValue(octx, c, bucket, key, makeValue(key, seq, rnd))
	cancel()
	if err == nil {
		ks.acked.Store(seq)
	} else {
		ks.unknown = append(ks.unknown, seq)
	}
	return err
}
