//go:build integration && linux

package instance_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/hoard-io/hoard/internal/netshape"
)

// bigValue is makeValue's format (checkValue reads it) with a body of n
// bytes.
func bigValue(key string, seq int64, n int, rnd *rand.Rand) []byte {
	body := make([]byte, n)
	for i := range body {
		body[i] = byte(rnd.Uint32())
	}
	sum := sha256.Sum256(body)
	hdr := fmt.Sprintf("hoard-fault key=%s seq=%d len=%d sha256=%s\n", key, seq, len(body), hex.EncodeToString(sum[:]))
	return append([]byte(hdr), body...)
}

// TestDurableReplayYieldsToNewerWrites: a `hoard serve` cachelet with
// durable writes, in front of MinIO through a link too slow to deliver its
// writes, is SIGKILLed with every acknowledged write still queued; half of
// the keys are then written straight to MinIO (another route, while the
// cachelet is down); restarted on its directory, the cachelet replays its
// log: MinIO keeps the newer bytes of those keys, the others get the
// logged writes, and reads through hoard, from the moment it is back,
// return the store's newest version of every key, never the replayed
// older one.
func TestDurableReplayYieldsToNewerWrites(t *testing.T) {
	bin := hoardBinary(t)
	dir := t.TempDir()
	const bucket = "replay"
	srv, direct := durableStore(t, dir, bucket)
	ctx := context.Background()
	// 20 KB/s towards the store: a HEAD passes in a few milliseconds, a
	// 256 KiB PUT takes 13 s.
	proxy := storeProxy(t, dir, srv.Endpoint(), netshape.Link{Bandwidth: 20_000})

	diskDir := filepath.Join(dir, "disk", "app")
	flags := []string{"--consistency", "owner", "--durable-writes", "--disk-dir", diskDir, "--disk-budget", "64MiB"}
	const nKeys = 8
	keys := make([]string, nKeys)
	rnd := rand.New(rand.NewPCG(16, 2))
	p := serveAlone(t, bin, dir, "app", 0, proxy.Endpoint, flags...)
	c := faultClient(t, p.endpoint(), clientAK, clientSK)
	for i := range keys {
		keys[i] = fmt.Sprintf("out/k%02d", i)
		if err := putValue(ctx, c, bucket, keys[i], bigValue(keys[i], 1, 256<<10, rnd)); err != nil {
			t.Fatalf("write %s through hoard: %v", keys[i], err)
		}
	}
	p.signal(t, syscall.SIGKILL)
	<-p.exited
	// The dead process's connections through the link end with it, as
	// they would at a real crash: toxiproxy would otherwise go on
	// delivering a PUT the process had started (what the kernel and the
	// proxy had taken of its body), whole once the link is unshaped,
	// after the other route's writes below. The cachelet comes back
	// straight to the store.
	if err := proxy.Close(); err != nil {
		t.Fatal(err)
	}
	for _, key := range keys {
		if _, err := direct.StatObject(ctx, bucket, key, minio.StatObjectOptions{}); err == nil {
			t.Fatalf("%s reached the store before the kill: the test needs every write queued", key)
		}
	}
	// Another route writes the even keys while the cachelet is down.
	for i := 0; i < nKeys; i += 2 {
		if err := putValue(ctx, direct, bucket, keys[i], bigValue(keys[i], 2, 4<<10, rnd)); err != nil {
			t.Fatal(err)
		}
	}
	want := func(i int) int64 { return int64(2 - i%2) }

	p = serveAlone(t, bin, dir, "app", 1, srv.Endpoint(), flags...)
	c = faultClient(t, p.endpoint(), clientAK, clientSK)
	// Reads from the moment it is back: each key's newest version, never
	// the replayed older one; wrong bytes never.
	var wrong []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	reads := 0
	for round := range 5 {
		for i, key := range keys {
			wg.Add(1)
			reads++
			go func() {
				defer wg.Done()
				rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
				defer cancel()
				v, err := getValue(rctx, c, bucket, key)
				var seq int64
				if err == nil {
					seq, err = checkValue(key, v)
				}
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					wrong = append(wrong, fmt.Sprintf("round %d %s: %v", round, key, err))
				case seq != want(i):
					wrong = append(wrong, fmt.Sprintf("round %d %s: seq %d, the store's newest is %d", round, key, seq, want(i)))
				}
			}()
		}
		wg.Wait()
	}
	replayed := p.metric(t, "hoard_cachelet_durable_replayed_total")
	superseded := p.metric(t, "hoard_cachelet_durable_replay_superseded_total")
	unverified := p.metric(t, "hoard_cachelet_durable_replay_unverified_total")
	p.signal(t, syscall.SIGTERM)
	waitStopped(t, 40*time.Second, p)
	var lost []string
	for i, key := range keys {
		v, err := getValue(ctx, direct, bucket, key)
		var seq int64
		if err == nil {
			seq, err = checkValue(key, v)
		}
		if err != nil || seq != want(i) {
			lost = append(lost, fmt.Sprintf("%s: store has seq %d (%v), want %d", key, seq, err, want(i)))
		}
	}
	t.Logf("replayed %v, superseded %v, unverified %v; %d reads through hoard, %d wrong or older; store: %d keys not as wanted",
		replayed, superseded, unverified, reads, len(wrong), len(lost))
	for _, w := range wrong {
		t.Errorf("read: %s", w)
	}
	for _, l := range lost {
		t.Errorf("store: %s", l)
	}
	if replayed != nKeys || superseded != nKeys/2 || unverified != 0 {
		t.Errorf("replayed %v (want %d), superseded %v (want %d), unverified %v (want 0)", replayed, nKeys, superseded, nKeys/2, unverified)
	}
}
