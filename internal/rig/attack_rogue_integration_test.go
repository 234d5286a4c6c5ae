//go:build integration

package rig

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/membership"
	etcdmembership "github.com/hoard-io/hoard/internal/membership/etcd"
	"github.com/hoard-io/hoard/internal/peer"
	"github.com/hoard-io/hoard/internal/ring"
)

// TestAttacker's last part: rogue members of A's ring.

// rogueServer is a member that never knew A's peer secret: it answers
// every object fetch with answer and counts what it was asked.
type rogueServer struct {
	*httptest.Server
	asked atomic.Int64
}

func newRogue(t *testing.T, answer func(w http.ResponseWriter, bucket, key string)) *rogueServer {
	r := &rogueServer{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		rest, ok := strings.CutPrefix(req.URL.Path, "/v1/o/")
		bucket, key, _ := strings.Cut(rest, "/")
		if !ok || key == "" {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		r.asked.Add(1)
		answer(w, bucket, key)
	}))
	t.Cleanup(r.Close)
	return r
}

// rogueMembers plants two members in A's ring with the admin's etcd
// user: one that answers with its own bytes under the store's real ETag
// and size, one that replays a genuine answer of A's cachelet (captured
// with A's peer secret) for other keys. A's function reads uncached keys
// until both have been asked, then again after they are gone; it returns
// how many reads returned bytes the store does not hold.
func rogueMembers(t *testing.T, ctx context.Context, e *env, log *attackLog, a api.InstanceInfo, credsA api.Credentials, keys []string, readA func([]string) map[string]string) int {
	t.Helper()
	authA, err := peer.NewAuth("ta", []byte(credsA.PeerSecret), nil)
	if err != nil {
		t.Fatal(err)
	}
	// A genuine answer of A's cachelet, and its request.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a.PeerAddr+"/v1/o/ta-data/replay-src", nil)
	authA.Sign(req)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	captured, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || resp.Header.Get("X-Hoard-Peer-Answer") == "" || resp.Header.Get("X-Hoard-Peer-Answer-Body") != "stream-v2" {
		t.Fatalf("capturing a signed answer: %v %d %v", err, resp.StatusCode, resp.Header)
	}
	// The captured request, sent again.
	again := req.Clone(ctx)
	log.refusedBy("peer replay", "a signed request of A's, replayed", peerStatus(again))

	forge := newRogue(t, func(w http.ResponseWriter, bucket, key string) {
		st, err := e.st.Stat(context.Background(), bucket, key)
		if err != nil {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.Header().Set("ETag", `"`+st.ETag+`"`)
		w.Header().Set("X-Hoard-Peer-Size", strconv.FormatInt(st.Size, 10))
		w.Header().Set("X-Hoard-Read", "remote_hit")
		w.Header().Set("Last-Modified", st.LastModified.UTC().Format(time.RFC3339Nano))
		w.Header().Set("Content-Type", st.ContentType)
		w.Header().Set("Content-Length", strconv.FormatInt(st.Size, 10))
		_, _ = w.Write(bytes.Repeat([]byte("rogue!"), int(st.Size)/6+1)[:st.Size])
	})
	replay := newRogue(t, func(w http.ResponseWriter, _, _ string) {
		for k, v := range resp.Header {
			switch k {
			case "Content-Length", "Transfer-Encoding", "Date", "Trailer":
				continue
			}
			w.Header()[k] = v
		}
		for k := range resp.Trailer {
			w.Header().Add("Trailer", k)
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(captured)
		for k, v := range resp.Trailer {
			w.Header()[k] = v
		}
	})

	reg, err := etcdmembership.New(etcdmembership.Config{Client: e.p.etcd})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	var sessions []membership.Session
	for id, srv := range map[string]*rogueServer{"rogue-forge": forge, "rogue-replay": replay} {
		s, err := reg.Join(ctx, membership.Member{ID: id, App: "ta", PeerAddr: srv.Listener.Addr().String(), S3Addr: "127.0.0.1:1"})
		if err != nil {
			t.Fatal(err)
		}
		sessions = append(sessions, s)
	}
	want := map[string]string{}
	for _, k := range keys {
		want[k] = sha256Hex(objectBytes(k, attackObjectSize))
	}
	rg, err := ring.New(ring.Config{}, []string{a.ID, "rogue-forge", "rogue-replay"})
	if err != nil {
		t.Fatal(err)
	}
	wrong, failed := map[string]int{}, 0
	check := func(got map[string]string) {
		for k, sum := range got {
			switch {
			case strings.HasPrefix(sum, "error"):
				failed++
				t.Errorf("A's read of %s with rogues in its ring: %s", k, sum)
			case sum != want[k]:
				wrong[rg.Owner("ta-data", k)]++
			}
		}
	}
	// Batches of uncached keys until A's cachelet, which follows its
	// ring, has asked both rogues.
	const batch = 6
	read := 0
	for read < len(keys) && (forge.asked.Load() == 0 || replay.asked.Load() == 0) {
		check(readA(keys[read : read+batch]))
		read += batch
	}
	if forge.asked.Load() == 0 || replay.asked.Load() == 0 {
		t.Fatalf("after %d keys, the rogues were asked %d and %d times: the test tests nothing", read, forge.asked.Load(), replay.asked.Load())
	}
	for _, s := range sessions {
		if err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Gone from the ring, what they answered must not linger as local
	// hits.
	check(readA(keys[:read]))
	total := 0
	for _, n := range wrong {
		total += n
	}
	t.Logf("rogue members asked %d (forged bytes) and %d (replayed answer) times over %d keys: %d reads of wrong bytes, %d failed",
		forge.asked.Load(), replay.asked.Load(), read, total, failed)
	log.add("rogue ring members", fmt.Sprintf("forged bytes under the store's ETag (asked %d times)", forge.asked.Load()),
		wrong["rogue-forge"] > 0, fmt.Sprintf("%d reads of wrong bytes", wrong["rogue-forge"]))
	log.add("rogue ring members", fmt.Sprintf("a signed answer replayed for other keys (asked %d times)", replay.asked.Load()),
		wrong["rogue-replay"] > 0, fmt.Sprintf("%d reads of wrong bytes", wrong["rogue-replay"]))
	if n := total - wrong["rogue-forge"] - wrong["rogue-replay"]; n > 0 {
		log.add("rogue ring members", "reads of keys A's own cachelet owns", true, fmt.Sprintf("%d reads of wrong bytes", n))
	}
	return total
}
