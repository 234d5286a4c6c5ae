//go:build integration

package instance_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/hoard-io/hoard/internal/cachelet"
	"github.com/hoard-io/hoard/internal/instance"
)

// TestClusterPassThroughOwner: under the owner read mode, where readers
// trust the key's owner, a versioned delete passed through to the store
// by one cachelet drops the copies the owner and the others hold, so
// every cachelet serves the store's current version afterwards.
func TestClusterPassThroughOwner(t *testing.T) {
	e := newClusterEnv(t, 3, func(c *instance.Config) { c.Cachelet.ReadMode = cachelet.ReadOwner })
	ctx := context.Background()
	const bucket, key = "versions", "k"
	if err := e.cs[0].MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatalf("make bucket: %v", err)
	}
	// Passed through: versioning is the store's.
	if err := e.cs[0].EnableVersioning(ctx, bucket); err != nil {
		t.Fatalf("enable versioning: %v", err)
	}
	o := e.owner(t, bucket, key)
	w, r := (o+1)%3, (o+2)%3
	put := func(data string) string {
		t.Helper()
		info, err := e.cs[w].PutObject(ctx, bucket, key, bytes.NewReader([]byte(data)), int64(len(data)), minio.PutObjectOptions{})
		if err != nil {
			t.Fatalf("put %s: %v", data, err)
		}
		if info.VersionID == "" {
			t.Fatalf("put %s: no version id: is versioning on?", data)
		}
		return info.VersionID
	}
	put("one")
	v2 := put("two")
	for _, i := range []int{r, o, r} {
		if got, _ := getRead(t, e.ins[i].Endpoint(), bucket, key); string(got) != "two" {
			t.Fatalf("cachelet %d read %q before the delete, want two", i, got)
		}
	}
	// A versioned read passes through and is never cached as the key.
	obj, err := e.cs[r].GetObject(ctx, bucket, key, minio.GetObjectOptions{VersionID: v2})
	if err != nil {
		t.Fatal(err)
	}
	obj.Close()

	if err := e.cs[w].RemoveObject(ctx, bucket, key, minio.RemoveObjectOptions{VersionID: v2}); err != nil {
		t.Fatalf("delete version: %v", err)
	}
	for _, i := range []int{r, o, w} {
		if got, read := getRead(t, e.ins[i].Endpoint(), bucket, key); string(got) != "one" {
			t.Errorf("cachelet %d read %q (%s) after the version was deleted, want one", i, got, read)
		}
	}
}
