//go:build integration

package instance_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/hoard-io/hoard/internal/cachelet"
	"github.com/hoard-io/hoard/internal/instance"
)

// counter sums the counter name's series whose labels include want.
func counter(in *instance.Instance, name string, want map[string]string) float64 {
	mfs, err := in.Registry().Gather()
	if err != nil {
		return 0
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for k, v := range want {
				found := false
				for _, l := range m.GetLabel() {
					found = found || (l.GetName() == k && l.GetValue() == v)
				}
				if !found {
					continue series
				}
			}
			n += m.GetCounter().GetValue()
		}
	}
	return n
}

// counters sums counter over instances.
func counters(name string, want map[string]string, ins ...*instance.Instance) float64 {
	var n float64
	for _, in := range ins {
		n += counter(in, name, want)
	}
	return n
}

// waitUntil polls cond for up to 20 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func migrationOpts(setting string) func(*instance.Config) {
	return func(cfg *instance.Config) {
		c, err := cachelet.ParseConsistency(setting)
		if err != nil {
			panic(err)
		}
		c.Apply(&cfg.Cachelet)
		cfg.Cachelet.Migrate.HotReads = 2
	}
}

// TestJoinMigratesHotObjects: two cachelets hold hot objects as their
// owners; a third joins, and the keys the ring gives it arrive in its
// memory from their old owners, so that it serves them as local hits
// (x-hoard-read) instead of reading the store.
func TestJoinMigratesHotObjects(t *testing.T) {
	for _, setting := range []string{"owner", "strong"} {
		t.Run(setting, func(t *testing.T) {
			e := newClusterEnv(t, 2, migrationOpts(setting))
			ctx := context.Background()
			const bucket = "hot"
			if err := e.cs[0].MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
				t.Fatal(err)
			}
			direct := minioClient(t, e.store.Endpoint(), storeAK, storeSK)
			objs := map[string][]byte{}
			for i := range 24 {
				key := fmt.Sprintf("obj-%d", i)
				objs[key] = randomBytes(t, 32<<10+i)
				if _, err := direct.PutObject(ctx, bucket, key, bytes.NewReader(objs[key]), int64(len(objs[key])), minio.PutObjectOptions{}); err != nil {
					t.Fatal(err)
				}
				own := e.owner(t, bucket, key)
				for _, want := range []string{"local_miss", "local_hit"} {
					got, read := getRead(t, e.ins[own].Endpoint(), bucket, key)
					if !bytes.Equal(got, objs[key]) || read != want {
						t.Fatalf("%s through its owner %d: x-hoard-read %q (want %q), bytes equal %v", key, own, read, want, bytes.Equal(got, objs[key]))
					}
				}
			}

			joined := e.add(t)
			e.waitRings(t, 3)
			var moved []string
			for key := range objs {
				if e.owner(t, bucket, key) == 2 {
					moved = append(moved, key)
				}
			}
			if len(moved) == 0 {
				t.Fatal("the ring gave the new cachelet none of 24 keys")
			}
			waitUntil(t, "the offers", func() bool {
				return counter(e.ins[0], "hoard_cachelet_migrated_objects_total", map[string]string{"result": "installed"})+
					counter(e.ins[1], "hoard_cachelet_migrated_objects_total", map[string]string{"result": "installed"}) >= float64(len(moved))
			})
			for _, key := range moved {
				got, read := getRead(t, joined.Endpoint(), bucket, key)
				if !bytes.Equal(got, objs[key]) {
					t.Fatalf("%s through the new owner: bytes differ", key)
				}
				if read != "local_hit" {
					t.Errorf("%s through the new owner: x-hoard-read %q, want local_hit", key, read)
				}
			}
			if n := counter(joined, "hoard_cachelet_migrations_received_total", map[string]string{"result": "installed"}); n != float64(len(moved)) {
				t.Errorf("the new owner installed %v objects, want %d", n, len(moved))
			}
			t.Logf("%s: %d of 24 keys moved to the new cachelet, all installed", setting, len(moved))
		})
	}
}

// TestShrinkMigratesAHotObject: a cachelet whose budget shrinks offers
// the hot objects it evicts to their owner, which then serves them from
// memory (a local hit) though it had given up its own copies.
func TestShrinkMigratesAHotObject(t *testing.T) {
	e := newClusterEnv(t, 2, migrationOpts("strong"))
	ctx := context.Background()
	const bucket = "shrink"
	if err := e.cs[0].MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	direct := minioClient(t, e.store.Endpoint(), storeAK, storeSK)
	var key string
	for i := 0; key == ""; i++ { // a key cachelet 1 owns
		if k := fmt.Sprintf("obj-%d", i); e.owner(t, bucket, k) == 1 {
			key = k
		}
	}
	want := randomBytes(t, 100<<10)
	if _, err := direct.PutObject(ctx, bucket, key, bytes.NewReader(want), int64(len(want)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, read := range []string{"remote_miss", "local_hit"} {
		if got, r := getRead(t, e.ins[0].Endpoint(), bucket, key); !bytes.Equal(got, want) || r != read {
			t.Fatalf("read through cachelet 0: x-hoard-read %q, want %q", r, read)
		}
	}
	owner := e.ins[1].Cachelet()
	b, _ := owner.Budget()
	owner.SetBudget(0) // the owner gives its memory back first...
	owner.SetBudget(b)
	b0, _ := e.ins[0].Cachelet().Budget()
	e.ins[0].Cachelet().SetBudget(0) // ...then cachelet 0, whose copy is hot
	waitUntil(t, "the offer", func() bool {
		return counter(e.ins[0], "hoard_cachelet_migrated_objects_total", map[string]string{"why": "shrink", "result": "installed"}) == 1
	})
	e.ins[0].Cachelet().SetBudget(b0)
	if got, r := getRead(t, e.ins[1].Endpoint(), bucket, key); !bytes.Equal(got, want) || r != "local_hit" {
		t.Fatalf("read through the owner after the shrink: x-hoard-read %q, want local_hit", r)
	}
}
