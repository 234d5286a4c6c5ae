//go:build integration && linux

package instance_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/hoard-io/hoard/internal/membership"
	etcdmembership "github.com/hoard-io/hoard/internal/membership/etcd"
	"github.com/hoard-io/hoard/internal/ring"
)

// TestRogueMemberRecord: a member record written straight to etcd points
// the application's ring at a server that never knew the peer secret. It
// answers every fetch of the keys it owns with bytes of its own under the
// store's real ETag and size, as a member would. A real `hoard serve`
// cachelet reading 20 uncached keys, about half of them owned by the
// rogue, serves the store's bytes for every one, and keeps serving them as
// local hits (confirmed with the store) after the record is gone.
func TestRogueMemberRecord(t *testing.T) {
	const (
		app    = "rogue"
		bucket = "rogue"
		nKeys  = 20
	)
	bin := hoardBinary(t)
	dir := t.TempDir()
	srv, etcd := startStoreAndEtcd(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	direct := faultClient(t, srv.Endpoint(), storeAK, storeSK)
	if err := direct.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}

	// The rogue: the object's real ETag and size, its own bytes.
	var asked atomic.Int64
	rogueSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rest, _ := strings.CutPrefix(r.URL.Path, "/v1/o/")
		b, key, _ := strings.Cut(rest, "/")
		st, err := direct.StatObject(r.Context(), b, key, minio.StatObjectOptions{})
		if err != nil {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		asked.Add(1)
		bad := bytes.Repeat([]byte("rogue!"), int(st.Size)/6+1)[:st.Size]
		w.Header().Set("ETag", `"`+st.ETag+`"`)
		w.Header().Set("X-Hoard-Peer-Size", strconv.FormatInt(st.Size, 10))
		w.Header().Set("X-Hoard-Read", "remote_hit")
		w.Header().Set("Last-Modified", st.LastModified.UTC().Format(time.RFC3339Nano))
		w.Header().Set("Content-Type", st.ContentType)
		w.Header().Set("Content-Length", strconv.FormatInt(st.Size, 10))
		_, _ = w.Write(bad)
	}))
	t.Cleanup(rogueSrv.Close)

	p := newHoardProc(t, dir, app, 0)
	p.start(t, bin, app, strings.Join(etcd.Endpoints(), ","), srv.Endpoint())
	p.client = faultClient(t, p.endpoint(), clientAK, clientSK)
	fc := &faultCluster{app: app, store: srv, direct: direct, members: watchMembers(t, etcd.Endpoints(), app), procs: []*hoardProc{p}}
	fc.waitHealthy(t, p)

	// The forged record, with a lease of its own like any member's.
	reg, err := etcdmembership.New(etcdmembership.Config{Endpoints: etcd.Endpoints()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	sess, err := reg.Join(ctx, membership.Member{ID: "rogue-x", App: app, PeerAddr: rogueSrv.Listener.Addr().String(), S3Addr: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{p.id, "rogue-x"}
	slices.Sort(ids)
	if _, ok := fc.members.waitFor(time.Time{}, 20*time.Second, func(got []string) bool { return slices.Equal(got, ids) }); !ok {
		t.Fatalf("etcd never listed members %v", ids)
	}
	rg, err := ring.New(ring.Config{}, ids)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the cachelet's own watch

	keys := map[string][]byte{}
	rogueOwns := 0
	for i := range nKeys {
		key := fmt.Sprintf("key-%02d", i)
		data := bytes.Repeat([]byte(key+"-the-store's-bytes/"), 1+i*300)
		if _, err := direct.PutObject(ctx, bucket, key, bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
		keys[key] = data
		if rg.Owner(bucket, key) == "rogue-x" {
			rogueOwns++
		}
	}
	readAll := func() (wrong, failed int) {
		for key, want := range keys {
			got, err := getValue(ctx, p.client, bucket, key)
			switch {
			case err != nil:
				failed++
				t.Logf("read %s: %v", key, err)
			case !bytes.Equal(got, want):
				wrong++
			}
		}
		return wrong, failed
	}
	wrong, failed := readAll()
	t.Logf("rogue owning %d of %d keys, asked %d times: %d reads of wrong bytes, %d failed", rogueOwns, nKeys, asked.Load(), wrong, failed)
	if rogueOwns == 0 || asked.Load() == 0 {
		t.Fatalf("the rogue owned %d keys and was asked %d times: the test tests nothing", rogueOwns, asked.Load())
	}
	if wrong != 0 || failed != 0 {
		t.Errorf("with the rogue in the ring: %d reads of wrong bytes, %d failed", wrong, failed)
	}
	if n := p.metric(t, "hoard_cachelet_peer_fallbacks_total"); int(n) < rogueOwns {
		t.Errorf("fallbacks to the store: %v, want at least %d", n, rogueOwns)
	}
	// The first refused answer has the rogue skipped for a while
	// (cachelet.DistrustFor): the rest of its keys go to the store.
	if n := p.metric(t, "hoard_cachelet_peer_answers_refused_total"); n != 1 || asked.Load() != 1 {
		t.Errorf("answers refused: %v, rogue asked %d times; want 1 and 1", n, asked.Load())
	}

	if err := sess.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := fc.members.waitFor(time.Time{}, 20*time.Second, func(got []string) bool { return slices.Equal(got, []string{p.id}) }); !ok {
		t.Fatal("the rogue's record never went away")
	}
	time.Sleep(300 * time.Millisecond)
	wrong, failed = readAll()
	t.Logf("after the rogue left: %d reads of wrong bytes, %d failed", wrong, failed)
	if wrong != 0 || failed != 0 {
		t.Fatalf("after the rogue left: %d reads of wrong bytes, %d failed", wrong, failed)
	}
}
