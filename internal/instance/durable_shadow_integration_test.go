//go:build integration && linux

package instance_test

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/hoard-io/hoard/internal/netshape"
)

// pendingMeta returns the version a placeholder's metadata names ("" for
// none), however the client spells the metadata's name.
func pendingMeta(info minio.ObjectInfo) string {
	for k, v := range info.UserMetadata {
		if strings.EqualFold(k, "hoard-pending") || strings.EqualFold(k, "x-amz-meta-hoard-pending") {
			return v
		}
	}
	return ""
}

// TestDurableShadowPlaceholder: a `hoard serve` cachelet with durable
// writes and --durable-shadow, in front of MinIO through a link too slow
// to deliver its writes: right after each PUT's 200 MinIO holds the
// write's placeholder (empty, naming the write's version); SIGKILLed
// with every write still queued and started again on its directory, it
// delivers them over their placeholders, and reads through hoard return
// the writes, never the empty placeholder.
func TestDurableShadowPlaceholder(t *testing.T) {
	bin := hoardBinary(t)
	dir := t.TempDir()
	const bucket = "shadow"
	srv, direct := durableStore(t, dir, bucket)
	ctx := context.Background()
	// 20 KB/s towards the store: a HEAD or a placeholder passes in a
	// few milliseconds, a 256 KiB PUT takes 13 s.
	proxy := storeProxy(t, dir, srv.Endpoint(), netshape.Link{Bandwidth: 20_000})
	diskDir := filepath.Join(dir, "disk", "app")
	flags := []string{"--consistency", "owner", "--durable-writes", "--durable-shadow", "--disk-dir", diskDir, "--disk-budget", "64MiB"}
	const nKeys = 4
	keys := make([]string, nKeys)
	values := make([][]byte, nKeys)
	rnd := rand.New(rand.NewPCG(16, 3))
	p := serveAlone(t, bin, dir, "app", 0, proxy.Endpoint, flags...)
	c := faultClient(t, p.endpoint(), clientAK, clientSK)
	for i := range keys {
		keys[i] = fmt.Sprintf("out/k%02d", i)
		values[i] = bigValue(keys[i], 1, 256<<10, rnd)
		if err := putValue(ctx, c, bucket, keys[i], values[i]); err != nil {
			t.Fatalf("write %s through hoard: %v", keys[i], err)
		}
		info, err := direct.StatObject(ctx, bucket, keys[i], minio.StatObjectOptions{})
		sum := md5.Sum(values[i])
		if err != nil || info.Size != 0 || pendingMeta(info) != hex.EncodeToString(sum[:]) {
			t.Fatalf("%s right after its 200: %d bytes, metadata %v (%v); want the placeholder of %x", keys[i], info.Size, info.UserMetadata, err, sum)
		}
		// Through hoard: the write, never the placeholder.
		if v, err := getValue(ctx, c, bucket, keys[i]); err != nil || string(v) != string(values[i]) {
			t.Fatalf("read of %s through hoard while pending: %d bytes (%v)", keys[i], len(v), err)
		}
	}
	p.signal(t, syscall.SIGKILL)
	<-p.exited
	for _, key := range keys {
		info, err := direct.StatObject(ctx, bucket, key, minio.StatObjectOptions{})
		if err != nil || info.Size != 0 || pendingMeta(info) == "" {
			t.Fatalf("%s after the kill: %d bytes (%v): the test needs every write pending", key, info.Size, err)
		}
	}
	if err := proxy.Update(netshape.Link{}, netshape.Link{}); err != nil {
		t.Fatal(err)
	}
	p = serveAlone(t, bin, dir, "app", 1, proxy.Endpoint, flags...)
	c = faultClient(t, p.endpoint(), clientAK, clientSK)
	for i, key := range keys {
		rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		v, err := getValue(rctx, c, bucket, key)
		cancel()
		if err != nil || string(v) != string(values[i]) {
			t.Errorf("read of %s through hoard after the restart: %d bytes (%v)", key, len(v), err)
		}
	}
	replayed := p.metric(t, "hoard_cachelet_durable_replayed_total")
	superseded := p.metric(t, "hoard_cachelet_durable_replay_superseded_total")
	p.signal(t, syscall.SIGTERM)
	waitStopped(t, 40*time.Second, p)
	for i, key := range keys {
		info, err := direct.StatObject(ctx, bucket, key, minio.StatObjectOptions{})
		v, gerr := getValue(ctx, direct, bucket, key)
		if err != nil || gerr != nil || pendingMeta(info) != "" || string(v) != string(values[i]) {
			t.Errorf("%s in MinIO after the restart: %d bytes, metadata %v (%v, %v); want the write", key, len(v), info.UserMetadata, err, gerr)
		}
	}
	if replayed != nKeys || superseded != 0 {
		t.Errorf("replayed %v (want %d), superseded %v (want 0)", replayed, nKeys, superseded)
	}
}

// TestShadowForgedPlaceholder: an empty object carrying placeholder
// metadata that no cachelet of the application signed (none, or a wrong
// MAC), put through hoard or straight to the store, is an ordinary
// object: read through hoard it is the empty object it is (200), not a
// pending write (503).
func TestShadowForgedPlaceholder(t *testing.T) {
	bin := hoardBinary(t)
	dir := t.TempDir()
	const bucket = "forged"
	srv, direct := durableStore(t, dir, bucket)
	ctx := context.Background()
	diskDir := filepath.Join(dir, "disk", "app")
	flags := []string{"--consistency", "owner", "--durable-writes", "--durable-shadow", "--disk-dir", diskDir, "--disk-budget", "64MiB"}
	sum := md5.Sum([]byte("a version never written"))
	forged := map[string]map[string]string{
		"no-mac":    {"hoard-pending": hex.EncodeToString(sum[:]), "hoard-pending-seq": "1"},
		"wrong-mac": {"hoard-pending": hex.EncodeToString(sum[:]), "hoard-pending-seq": "1", "hoard-pending-mac": strings.Repeat("5a", 32)},
	}
	p := serveAlone(t, bin, dir, "app", 0, srv.Endpoint(), flags...)
	c := faultClient(t, p.endpoint(), clientAK, clientSK)
	var keys []string
	for name, meta := range forged {
		for route, cl := range map[string]*minio.Client{"hoard": c, "store": direct} {
			key := route + "/" + name
			keys = append(keys, key)
			if _, err := cl.PutObject(ctx, bucket, key, strings.NewReader(""), 0, minio.PutObjectOptions{UserMetadata: meta}); err != nil {
				t.Fatalf("put %s: %v", key, err)
			}
		}
	}
	// Every write delivered, and the next cachelet reads from the store.
	p.signal(t, syscall.SIGTERM)
	waitStopped(t, 40*time.Second, p)
	for _, key := range keys {
		if info, err := direct.StatObject(ctx, bucket, key, minio.StatObjectOptions{}); err != nil || info.Size != 0 || pendingMeta(info) == "" {
			t.Fatalf("%s in MinIO: %d bytes, metadata %v (%v); want the forged placeholder", key, info.Size, info.UserMetadata, err)
		}
	}
	p = serveAlone(t, bin, dir, "app", 1, srv.Endpoint(), flags...)
	c = faultClient(t, p.endpoint(), clientAK, clientSK)
	for _, key := range keys {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		info, serr := c.StatObject(rctx, bucket, key, minio.StatObjectOptions{})
		v, gerr := getValue(rctx, c, bucket, key)
		cancel()
		if serr != nil || gerr != nil || info.Size != 0 || len(v) != 0 {
			t.Errorf("%s through hoard: HEAD %d bytes (%v), GET %d bytes (%v); want the empty object", key, info.Size, serr, len(v), gerr)
		}
	}
	if n := p.metric(t, `hoard_cachelet_durable_shadows_total{result="read"}`); n != 0 {
		t.Errorf("%v reads took a forged placeholder for a pending write", n)
	}
	p.signal(t, syscall.SIGTERM)
	waitStopped(t, 40*time.Second, p)
}
