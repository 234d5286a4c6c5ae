//go:build integration

package instance_test

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/hoard-io/hoard/internal/localstore"
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
	if got := a2.metric(t, `hoard_cachelet_reads_total{outcome="disk_hit"}`); got != float64(len(keys)) {
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
