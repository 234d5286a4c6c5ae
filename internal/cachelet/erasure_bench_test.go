package cachelet

import (
	"bytes"
	"crypto/rand"
	"io"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/erasure"
	"github.com/hoard-io/hoard/internal/store"
)

// BenchmarkErasureRead reads a 3 MiB object from its RS(3+2) shards at a
// cachelet holding none (memstore, loopback peers): the CPU a read from
// shards costs, version check included.
func BenchmarkErasureRead(b *testing.B) {
	g := newGroup(b, 6, func(c *Config) {
		c.Cache.Budget = 16 << 20
		c.Cache.MaxObjectSize = 2 << 20
		c.Router = placeRouter{c.Router.(*staticRouter)}
		c.Erasure = &ErasureConfig{Config: erasure.Config{DataShards: 3, ParityShards: 2, Threshold: 64 << 10, ChunkSize: 64 << 10}, Memory: 8 << 20}
	})
	want := make([]byte, 3<<20)
	_, _ = rand.Read(want)
	if _, err := g.st.Put(b.Context(), testBucket, "big", bytes.NewReader(want), int64(len(want)), store.PutOptions{}); err != nil {
		b.Fatal(err)
	}
	info, _ := g.st.Stat(b.Context(), testBucket, "big")
	read := func() Outcome {
		obj, err := g.members[5].Get(b.Context(), testBucket, "big", nil)
		if err != nil {
			b.Fatal(err)
		}
		defer obj.Body.Close()
		if n, err := io.Copy(io.Discard, obj.Body); err != nil || n != int64(len(want)) {
			b.Fatalf("read %d bytes: %v", n, err)
		}
		return obj.Outcome
	}
	read()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := 0
		for _, c := range g.members[:5] {
			if c.ec.shards.Get(testBucket, "big", info.ETag) != nil {
				n++
			}
		}
		if n == 5 {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of 5 shards held", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	b.SetBytes(int64(len(want)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if o := read(); o != ErasureHit {
			b.Fatalf("outcome %s", o)
		}
	}
}
