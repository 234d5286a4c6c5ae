package cachelet

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/disktier"
	"github.com/hoard-io/hoard/internal/store"
)

// diskEnv is an env whose cachelet has a disk tier in dir, with a memory
// budget that holds two 200 KiB objects.
func diskEnv(t *testing.T, dir string) (*env, *disktier.Tier) {
	t.Helper()
	tier, err := disktier.New(disktier.Config{Dir: dir, Budget: 64 << 20, CleanInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tier.Close() })
	e := newEnv(t, func(c *Config) {
		c.Cache = cache.Config{Budget: 450 << 10, MaxObjectSize: 256 << 10}
		c.Disk = tier
	})
	return e, tier
}

// evictAll reads keys in turn, so that the memory tier evicts the first
// ones, and waits for their spills.
func (e *env) fillAndEvict(tier *disktier.Tier, data map[string][]byte, keys ...string) {
	e.t.Helper()
	for _, k := range keys {
		e.mustRead(k, data[k], LocalMiss)
		e.settle() // added in this order: the first ones are evicted
	}
	tier.Settle()
}

func diskData(e *env, n int) (map[string][]byte, []string) {
	data := map[string][]byte{}
	var keys []string
	for i := range n {
		k := fmt.Sprintf("obj-%d", i)
		data[k] = object(k, 1, 200<<10)
		e.storePut(k, data[k])
		keys = append(keys, k)
	}
	return data, keys
}

func TestDiskHitAfterEviction(t *testing.T) {
	e, tier := diskEnv(t, t.TempDir())
	data, keys := diskData(e, 4)
	e.fillAndEvict(tier, data, keys...)
	if tier.Stats().Objects < 2 {
		t.Fatalf("disk holds %d objects after evictions, want >= 2", tier.Stats().Objects)
	}
	before := e.st.GetCounts()
	e.mustRead("obj-0", data["obj-0"], DiskHit)
	after := e.st.GetCounts()
	if after.NotModified != before.NotModified+1 || after.FullBodies != before.FullBodies {
		t.Errorf("a disk hit asked the store %+v -> %+v, want one conditional GET answered 304", before, after)
	}
	// Back in memory: the next read is a local hit.
	e.settle()
	e.mustRead("obj-0", data["obj-0"], LocalHit)
	if got := e.c.Counters().Reads.DiskHit.Count; got != 1 {
		t.Errorf("disk hits counted %d, want 1", got)
	}
	if md := e.c.AccessMetadata(); md[0].Key != "obj-0" || md[0].DH != 1 {
		t.Errorf("access metadata %+v, want obj-0 with one disk hit", md[0])
	}
}

// TestDiskCopyChanged: an object changed in the store behind hoard's back
// is read from the store, and the old disk copy dropped.
func TestDiskCopyChanged(t *testing.T) {
	e, tier := diskEnv(t, t.TempDir())
	data, keys := diskData(e, 4)
	e.fillAndEvict(tier, data, keys...)
	v2 := object("obj-0", 2, 150<<10)
	e.storePut("obj-0", v2)
	e.mustRead("obj-0", v2, LocalMiss)
	e.settle()
	if _, _, err := tier.Open(testBucket, "obj-0"); err == nil {
		t.Error("the old disk copy is still there")
	}
}

// TestDiskWriteInvalidates: a write through the cachelet drops the disk
// copy.
func TestDiskWriteInvalidates(t *testing.T) {
	e, tier := diskEnv(t, t.TempDir())
	data, keys := diskData(e, 4)
	e.fillAndEvict(tier, data, keys...)
	v2 := object("obj-0", 2, 100<<10)
	if _, err := e.c.Put(t.Context(), testBucket, "obj-0", bytes.NewReader(v2), int64(len(v2)), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := tier.Open(testBucket, "obj-0"); err == nil {
		t.Error("disk copy kept after a write")
	}
}

// TestDiskBitFlips: damaged disk files are misses served from the store
// (0 wrong bytes), to clients and to peers alike.
func TestDiskBitFlips(t *testing.T) {
	dir := t.TempDir()
	e, tier := diskEnv(t, dir)
	data, keys := diskData(e, 6)
	e.fillAndEvict(tier, data, keys...)
	var files []string
	filepath.WalkDir(filepath.Join(dir, "objects"), func(p string, d os.DirEntry, err error) error {
		if d != nil && !d.IsDir() {
			files = append(files, p)
		}
		return nil
	})
	if len(files) < 3 {
		t.Fatalf("%d files on disk, want >= 3", len(files))
	}
	for i, f := range files {
		b, _ := os.ReadFile(f)
		b[len(b)/(i+2)] ^= 0x10 // the header, the bytes, wherever
		os.WriteFile(f, b, 0o600)
	}
	for i, k := range keys[:4] {
		if i%2 == 0 {
			e.mustRead(k, data[k], LocalMiss) // never disk_hit: every file is damaged
			continue
		}
		obj, err := e.c.PeerGet(t.Context(), testBucket, k, "")
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(obj.Body)
		obj.Body.Close()
		if err != nil || !bytes.Equal(got, data[k]) {
			t.Fatalf("peer read of %s: %v, bytes equal %v", k, err, bytes.Equal(got, data[k]))
		}
	}
	if got := e.c.Counters().Reads.DiskHit.Count; got != 0 {
		t.Errorf("%d disk hits from damaged files", got)
	}
}

// TestDiskWarmRestart: a cachelet closed and started again over the same
// directory (an instance reloaded on its node) serves what the first held
// in memory as disk hits.
func TestDiskWarmRestart(t *testing.T) {
	dir := t.TempDir()
	e, tier := diskEnv(t, dir)
	data, keys := diskData(e, 2)
	e.fillAndEvict(tier, data, keys...) // both fit in memory
	if err := e.c.Close(); err != nil {
		t.Fatal(err)
	}
	tier.Close()
	tier2, err := disktier.New(disktier.Config{Dir: dir, Budget: 64 << 20, CleanInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer tier2.Close()
	c2, err := New(Config{Cache: cache.Config{Budget: 450 << 10, MaxObjectSize: 256 << 10}, Disk: tier2}, e.st, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	mustReadDiskHits(t, c2, data, keys)
}

// TestDiskPrewarm: pre-warming takes what the disk tier holds from disk,
// moving no data from the store.
func TestDiskPrewarm(t *testing.T) {
	e, tier := diskEnv(t, t.TempDir())
	data, keys := diskData(e, 4)
	e.fillAndEvict(tier, data, keys...)
	before := e.st.GetCounts()
	res, err := e.c.Prewarm(t.Context(), []cache.Key{{Bucket: testBucket, Object: "obj-0"}})
	if err != nil || res.Fetched != 1 {
		t.Fatalf("prewarm: %+v, %v", res, err)
	}
	if after := e.st.GetCounts(); after.FullBodies != before.FullBodies || after.NotModified != before.NotModified+1 {
		t.Errorf("pre-warming from disk asked the store %+v -> %+v, want one 304", before, after)
	}
	e.settle()
	e.mustRead("obj-0", data["obj-0"], LocalHit)
}

// TestDiskDropPrefix: dropping a pipeline run's intermediate objects
// drops their disk copies too, and only theirs.
func TestDiskDropPrefix(t *testing.T) {
	e, tier := diskEnv(t, t.TempDir())
	data := map[string][]byte{}
	keys := []string{"tmp/run1/a", "tmp/run1/b", "out/c", "out/d"}
	for _, k := range keys {
		data[k] = object(k, 1, 200<<10)
		e.storePut(k, data[k])
	}
	e.fillAndEvict(tier, data, keys...) // the first two go to disk
	if _, _, err := tier.Open(testBucket, "tmp/run1/a"); err != nil {
		t.Fatalf("tmp/run1/a not on disk: %v", err)
	}
	e.c.DropPrefix(testBucket, "tmp/run1/")
	for _, k := range keys[:2] {
		if _, _, err := tier.Open(testBucket, k); err == nil {
			t.Errorf("%s still on disk after the drop", k)
		}
	}
	e.mustRead("tmp/run1/a", data["tmp/run1/a"], LocalMiss)
	e.settle()
	tier.Settle()
	if got := e.c.Counters().Reads.DiskHit.Count; got != 0 {
		t.Errorf("%d disk hits", got)
	}
}

// TestLargeObjectsWrittenAhead: objects larger than what the disk tier
// lets wait in memory for its write once evicted (SpillMax) are written
// to disk when they are admitted, so that memory misses of them are disk
// hits, and an instance started again over the tier finds them there.
// Without the write-ahead none of them reaches the disk.
func TestLargeObjectsWrittenAhead(t *testing.T) {
	dir := t.TempDir()
	newTier := func() *disktier.Tier {
		tier, err := disktier.New(disktier.Config{Dir: dir, Budget: 64 << 20, CleanInterval: time.Hour, PendingBytes: 100 << 10})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tier.Close() })
		return tier
	}
	tier := newTier()
	e := newEnv(t, func(c *Config) {
		c.Cache = cache.Config{Budget: 450 << 10, MaxObjectSize: 256 << 10}
		c.Disk = tier
	})
	data, keys := diskData(e, 4) // 200 KiB each, over the 100 KiB SpillMax
	written := func() float64 { return toFloat64(e.c.m.writeAhead.WithLabelValues("written")) }
	for i, k := range keys {
		e.mustRead(k, data[k], LocalMiss)
		e.settle()
		// Written before the next read can evict it: the writer skips
		// an object evicted before its turn (that bound is not what is
		// tested here, and a busy machine would otherwise decide).
		deadline := time.Now().Add(10 * time.Second)
		for written() < float64(i+1) {
			if time.Now().After(deadline) {
				t.Fatalf("%v of %d objects written ahead; disk holds %d", written(), i+1, tier.Stats().Objects)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	// The first ones were evicted: memory misses, disk hits.
	e.mustRead("obj-0", data["obj-0"], DiskHit)
	e.settle()

	// An instance started again over the tier (the first one gone
	// without writing its memory to disk, as a crash): every object a
	// disk hit, the evicted ones included.
	tier.Close()
	c2, err := New(Config{Cache: cache.Config{Budget: 450 << 10, MaxObjectSize: 256 << 10}, Disk: newTier()}, e.st, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	mustReadDiskHits(t, c2, data, keys)
}

// mustReadDiskHits reads keys through c, a cachelet started again over a
// disk tier, and checks each is a disk hit of its bytes.
func mustReadDiskHits(t *testing.T, c *Cachelet, data map[string][]byte, keys []string) {
	t.Helper()
	for _, k := range keys {
		got, obj, err := readWith(t.Context(), c, k, nil)
		if err != nil {
			t.Fatalf("after restart %s: %v", k, err)
		}
		if !bytes.Equal(got, data[k]) || obj.Outcome != DiskHit {
			t.Fatalf("after restart %s: outcome %v, bytes equal %v", k, obj.Outcome, bytes.Equal(got, data[k]))
		}
		c.wg.Wait() // its fill admitted: the next read evicts in order
	}
}
