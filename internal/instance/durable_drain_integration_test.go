//go:build integration && linux

package instance_test

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/hoard-io/hoard/internal/instance"
	"github.com/hoard-io/hoard/internal/netshape"
)

// TestDrainLog: the log of a `hoard serve --durable-writes
// --durable-shadow` cachelet SIGKILLed with every write queued (its
// placeholders in MinIO) is delivered by instance.DrainLog, which serves
// nothing: with the store unreachable it fails and keeps the log; once
// the store answers, every write reaches MinIO over its placeholder and
// the log is empty.
func TestDrainLog(t *testing.T) {
	bin := hoardBinary(t)
	dir := t.TempDir()
	const bucket = "drain"
	srv, direct := durableStore(t, dir, bucket)
	ctx := context.Background()
	proxy := storeProxy(t, dir, srv.Endpoint(), netshape.Link{Bandwidth: 20_000})
	diskDir := filepath.Join(dir, "disk", "app")
	p := serveAlone(t, bin, dir, "app", 0, proxy.Endpoint, "--consistency", "owner", "--durable-writes", "--durable-shadow",
		"--disk-dir", diskDir, "--disk-budget", "64MiB")
	c := faultClient(t, p.endpoint(), clientAK, clientSK)
	rnd := rand.New(rand.NewPCG(16, 4))
	keys := []string{"d/k0", "d/k1", "d/k2"}
	values := make([][]byte, len(keys))
	for i, key := range keys {
		values[i] = bigValue(key, 1, 256<<10, rnd)
		if err := putValue(ctx, c, bucket, key, values[i]); err != nil {
			t.Fatalf("write %s: %v", key, err)
		}
	}
	p.signal(t, syscall.SIGKILL)
	<-p.exited
	for _, key := range keys {
		if info, err := direct.StatObject(ctx, bucket, key, minio.StatObjectOptions{}); err != nil || pendingMeta(info) == "" {
			t.Fatalf("%s after the kill: %d bytes (%v): the test needs every write pending", key, info.Size, err)
		}
	}
	cfg := instance.Config{DurableWrites: true, ID: "local"}
	cfg.Disk.Dir = diskDir
	cfg.Store.Endpoint, cfg.Store.AccessKey, cfg.Store.SecretKey = "http://127.0.0.1:1", storeAK, storeSK
	dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	n, err := instance.DrainLog(dctx, cfg, nil)
	cancel()
	if err == nil || n != len(keys) {
		t.Fatalf("drain with the store unreachable: %d writes, %v; want %d and an error", n, err, len(keys))
	}
	if err := proxy.Update(netshape.Link{}, netshape.Link{}); err != nil {
		t.Fatal(err)
	}
	cfg.Store.Endpoint = proxy.Endpoint
	dctx, cancel = context.WithTimeout(ctx, 30*time.Second)
	n, err = instance.DrainLog(dctx, cfg, nil)
	cancel()
	if err != nil || n != len(keys) {
		t.Fatalf("drain: %d writes, %v; want %d delivered", n, err, len(keys))
	}
	for i, key := range keys {
		info, err := direct.StatObject(ctx, bucket, key, minio.StatObjectOptions{})
		v, gerr := getValue(ctx, direct, bucket, key)
		if err != nil || gerr != nil || pendingMeta(info) != "" || string(v) != string(values[i]) {
			t.Errorf("%s in MinIO after the drain: %d bytes (%v, %v); want the write", key, len(v), err, gerr)
		}
	}
	if n, err := instance.DrainLog(ctx, cfg, nil); n != 0 || err != nil {
		t.Errorf("second drain: %d writes, %v; want an empty log", n, err)
	}
}
