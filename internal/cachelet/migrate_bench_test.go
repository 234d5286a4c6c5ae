package cachelet

import (
	"bytes"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/store"
)

// BenchmarkOffer measures, under the owner settings, one offer of a hot
// object to its owner (the peer call, the owner's metadata request to
// the store, its checks of the body's CRC32C and MD5, and the install)
// against a remote hit of the same object (the owner sending it from
// memory over the same peer protocol), the two alternating in one loop on
// loopback, in process, over a store in memory (so the metadata request
// costs nothing here; against S3 it is one HEAD):
//
//	go test -run XXX -bench Offer ./internal/cachelet
//
// It reports each p50 and their ratio, for objects stored with a
// CRC64NVME checksum (the owner checks the bytes against it) and without
// one (it checks their MD5, the ETag).
func BenchmarkOffer(b *testing.B) {
	for _, tc := range []struct {
		name string
		algo string
	}{{"crc64nvme", "CRC64NVME"}, {"md5", ""}} {
		for _, size := range []int{64 << 10, 1 << 20, 8 << 20} {
			b.Run(fmt.Sprintf("%s/%dKiB", tc.name, size>>10), func(b *testing.B) { benchOffer(b, size, tc.algo) })
		}
	}
}

func benchOffer(b *testing.B, size int, algo string) {
	{
		{
			s, _ := ParseConsistency("owner")
			g := newGroup(b, 2, s.Apply, func(cfg *Config) {
				cfg.Cache.Budget, cfg.Cache.MaxObjectSize = 64<<20, 16<<20
			})
			for _, r := range g.routers {
				r.set(g.addrs[1])
			}
			for _, c := range g.members {
				c.OwnershipChanged()
				if err := c.waitHandoff(b.Context()); err != nil {
					b.Fatal(err)
				}
			}
			data := object("k", 1, size)
			if _, err := g.st.Put(b.Context(), testBucket, "k", bytes.NewReader(data), int64(size), store.PutOptions{ChecksumAlgorithm: algo}); err != nil {
				b.Fatal(err)
			}
			sender, owner := g.members[0], g.members[1]
			if _, err := io.Copy(io.Discard, mustGet(b, sender)); err != nil { // a copy at the sender
				b.Fatal(err)
			}
			sender.wg.Wait()
			k := cache.Key{Bucket: testBucket, Object: "k"}
			e := sender.cache.Peek(k)
			if e == nil || !e.Acquire() {
				b.Fatal("the sender holds no copy")
			}
			defer e.Release()
			inst := sender.cfg.Peers.(installer)
			var offers, hits []time.Duration
			b.SetBytes(int64(size))
			for b.Loop() {
				owner.Invalidate(testBucket, "k")
				e.Acquire() // offerOne's, released by it
				start := time.Now()
				if res := sender.offerOne(b.Context(), inst, g.addrs[1], e); res != 0 {
					b.Fatalf("offer: %s", migrateResults[res])
				}
				offers = append(offers, time.Since(start))
				sender.Invalidate(testBucket, "k")
				start = time.Now()
				obj, err := sender.Get(b.Context(), testBucket, "k", nil)
				if err != nil {
					b.Fatal(err)
				}
				n, err := io.Copy(io.Discard, obj.Body)
				obj.Body.Close()
				hits = append(hits, time.Since(start))
				if err != nil || n != int64(size) || obj.Outcome != RemoteHit {
					b.Fatalf("read: %d bytes, %v, outcome %s", n, err, obj.Outcome)
				}
				sender.wg.Wait()
			}
			o, h := p50(offers), p50(hits)
			b.ReportMetric(float64(o.Nanoseconds())/1e3, "offer-p50-µs")
			b.ReportMetric(float64(h.Nanoseconds())/1e3, "remote-hit-p50-µs")
			b.ReportMetric(float64(o)/float64(h), "offer/remote-hit")
		}
	}
}
