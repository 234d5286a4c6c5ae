//go:build integration

package instance_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/hoard-io/hoard/internal/localstore"
	"github.com/hoard-io/hoard/internal/ring"
)

// TestDiskTierProcesses runs real `hoard serve` processes of one
// application over one disk tier directory, in front of MinIO:
//   - a cachelet stopped and started again on the node (an instance
//     reloaded) serves what it held as disk hits, with the right bytes,
//     and without moving them from the store;
//   - another cachelet of the application on the node, running beside
//     it, reads the same files;
//   - an attacker with access to the directory damages every file (bit
//     flips) and plants one object's file under another key's name: every
//     read is still the store's bytes (0 wrong bytes), served as a miss,
//     and the damaged files are counted and dropped.
func TestDiskTierProcesses(t *testing.T) {
	bin := hoardBinary(t)
	dir := t.TempDir()
	diskDir := filepath.Join(dir, "disk", "app")
	srv := startStore(t, localstore.StartMinIO, filepath.Join(dir, "data"), "127.0.0.1:0")
	t.Cleanup(func() { srv.Close() })
	direct := faultClient(t, srv.Endpoint(), storeAK, storeSK)
	ctx := context.Background()
	const bucket = "tiers"
	if err := direct.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	objs := map[string][]byte{}
	var keys []string
	for i := range 6 {
		k := fmt.Sprintf("input/part-%d", i)
		objs[k] = bytes.Repeat([]byte(fmt.Sprintf("%s:%d|", k, i)), 300<<10/16)
		if _, err := direct.PutObject(ctx, bucket, k, bytes.NewReader(objs[k]), int64(len(objs[k])), minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	start := func(i int) *hoardProc {
		p := newHoardProc(t, dir, "app", i)
		p.start(t, bin, "app", "", srv.Endpoint(), "--disk-dir", diskDir, "--disk-budget", "64MiB", "--budget", "1MiB")
		(&faultCluster{}).waitHealthy(t, p)
		return p
	}
	read := func(p *hoardProc, want string) {
		t.Helper()
		for _, k := range keys {
			got, how := getRead(t, p.endpoint(), bucket, k)
			if !bytes.Equal(got, objs[k]) {
				t.Fatalf("%s via %s: %d bytes, wrong (want %d)", k, p.id, len(got), len(objs[k]))
			}
			if want != "" && how != want {
				t.Errorf("%s via %s: x-hoard-read %q, want %q", k, p.id, how, want)
			}
		}
	}

	// Cold: every read from the store; 1 MiB of memory holds three.
	a := start(0)
	read(a, "local_miss")
	// Stopped as the agent stops an instance: what memory held is kept.
	a.signal(t, syscall.SIGTERM)
	select {
	case <-a.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("cachelet did not stop on SIGTERM")
	}

	// Reloaded on the node: warm from disk.
	a2 := start(1)
	read(a2, "disk_hit")
	if got := a2.metricReaches(t, `hoard_cachelet_reads_total{outcome="disk_hit"}`, float64(len(keys))); got != float64(len(keys)) {
		t.Errorf("disk hits counted %v, want %d", got, len(keys))
	}
	// Another instance of the application on the node, beside it.
	b := start(2)
	read(b, "disk_hit")

	// The attacker: every file damaged, and one object's file planted
	// under another key's name.
	var files []string
	filepath.WalkDir(filepath.Join(diskDir, "objects"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, p)
		}
		return nil
	})
	if len(files) != len(keys) {
		t.Fatalf("%d files in the disk tier, want %d", len(files), len(keys))
	}
	for i, f := range files[1:] {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		raw[(i*7919)%len(raw)] ^= 0x04
		if err := os.WriteFile(f, raw, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Rename(files[0], files[1]); err != nil { // files[1]'s key now finds files[0]'s object
		t.Fatal(err)
	}
	c := start(3) // a fresh instance: nothing in memory, all from disk or store
	for _, k := range keys {
		got, how := getRead(t, c.endpoint(), bucket, k)
		if !bytes.Equal(got, objs[k]) {
			t.Fatalf("%s after the attack: wrong bytes served", k)
		}
		if how == "disk_hit" {
			t.Errorf("%s after the attack: served from a damaged disk tier", k)
		}
	}
	if got := c.metric(t, `hoard_disk_reads_total{result="corrupt"}`); got < float64(len(keys)-1) {
		t.Errorf("corrupt files counted %v, want >= %d", got, len(keys)-1)
	}
}

// TestDiskTierPeerIntegrity: two cachelets of one application, each with
// its own node's disk tier. The owner of some keys holds them on disk
// (kept there when it restarted); an attacker damages all of those files
// but one. Reads through the other cachelet, which asks the owner, get
// the store's bytes every time: a remote hit for the intact file, served
// from the owner's disk, and remote misses (the owner read the store) for
// the damaged ones, which the owner counts and drops.
func TestDiskTierPeerIntegrity(t *testing.T) {
	bin := hoardBinary(t)
	dir := t.TempDir()
	srv, etcd := startStoreAndEtcd(t, dir)
	ctx := context.Background()
	eps := strings.Join(etcd.Endpoints(), ",")
	direct := faultClient(t, srv.Endpoint(), storeAK, storeSK)
	const app, bucket = "dpeer", "peers"
	if err := direct.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	start := func(i int) *hoardProc {
		p := newHoardProc(t, dir, app, i)
		p.start(t, bin, app, eps, srv.Endpoint(), "--disk-dir", filepath.Join(dir, fmt.Sprintf("node-%d", i), app),
			"--disk-budget", "64MiB", "--budget", "8MiB")
		(&faultCluster{}).waitHealthy(t, p)
		return p
	}
	members := watchMembers(t, etcd.Endpoints(), app)
	p0, p1 := start(0), start(1)
	rg, err := ring.New(ring.Config{}, []string{p0.id, p1.id})
	if err != nil {
		t.Fatal(err)
	}
	objs := map[string][]byte{}
	var owned []string // by p0
	for i := 0; len(owned) < 4; i++ {
		k := fmt.Sprintf("shared/obj-%d", i)
		if rg.Owner(bucket, k) != p0.id {
			continue
		}
		objs[k] = bytes.Repeat([]byte(k+"|"), 200<<10/len(k))
		if _, err := direct.PutObject(ctx, bucket, k, bytes.NewReader(objs[k]), int64(len(objs[k])), minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
		owned = append(owned, k)
	}
	for _, k := range owned {
		if got, how := getRead(t, p0.endpoint(), bucket, k); !bytes.Equal(got, objs[k]) || how != "local_miss" {
			t.Fatalf("%s via its owner: %q, bytes equal %v", k, how, bytes.Equal(got, objs[k]))
		}
	}
	// The owner restarts on its node: what it held is kept on disk.
	p0.signal(t, syscall.SIGTERM)
	<-p0.exited
	restarted := time.Now()
	p0 = start(0)
	both := func(ids []string) bool { return len(ids) == 2 }
	if _, ok := members.waitFor(restarted, 20*time.Second, both); !ok {
		t.Fatal("the owner never rejoined")
	}
	// The other cachelet learns of it through its own watch, within
	// milliseconds of etcd's event (as newFaultCluster waits).
	time.Sleep(300 * time.Millisecond)
	files := map[string]string{}
	for _, k := range owned {
		sum := sha256.Sum256([]byte(bucket + "\x00" + k))
		name := hex.EncodeToString(sum[:])
		files[k] = filepath.Join(dir, "node-0", app, "objects", name[:2], name)
		if _, err := os.Stat(files[k]); err != nil {
			t.Fatalf("%s not on the owner's disk: %v", k, err)
		}
	}
	for _, k := range owned[1:] {
		raw, err := os.ReadFile(files[k])
		if err != nil {
			t.Fatal(err)
		}
		raw[len(raw)/2] ^= 0x01
		if err := os.WriteFile(files[k], raw, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for i, k := range owned {
		got, how := getRead(t, p1.endpoint(), bucket, k)
		if !bytes.Equal(got, objs[k]) {
			t.Fatalf("%s via the other cachelet: wrong bytes", k)
		}
		want := "remote_miss"
		if i == 0 {
			want = "remote_hit" // from the owner's disk
		}
		if how != want {
			t.Errorf("%s via the other cachelet: x-hoard-read %q, want %q", k, how, want)
		}
	}
	if got := p0.metric(t, `hoard_disk_reads_total{result="corrupt"}`); got != float64(len(owned)-1) {
		t.Errorf("the owner counted %v damaged files, want %d", got, len(owned)-1)
	}
}
