package cachelet

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/store"
)

// BenchmarkOwnerRemoteHit measures, under the owner settings, a remote hit
// at a cachelet that does not own the key (its copy dropped before each
// read: the owner sends the object from memory) against a local hit there
// (its copy confirmed with the owner, which answers not-modified), the
// two alternating in one loop over the real peer protocol on loopback, in
// process (no S3 client hop, which would dilute the ratio):
//
//	go test -run XXX -bench OwnerRemoteHit ./internal/cachelet
//
// It reports each p50 and their ratio (issue 14's target: <= 1.15x at
// 4 KiB).
func BenchmarkOwnerRemoteHit(b *testing.B) {
	for _, size := range []int{4 << 10, 64 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			s, _ := ParseConsistency("owner")
			g := newGroup(b, 2, s.Apply, func(cfg *Config) {
				cfg.Cache.Budget, cfg.Cache.MaxObjectSize = 64<<20, 16<<20
			})
			data := object("k", 1, size)
			if _, err := g.st.Put(b.Context(), testBucket, "k", bytes.NewReader(data), int64(size), store.PutOptions{}); err != nil {
				b.Fatal(err)
			}
			reader := g.members[1]
			read := func(want Outcome) time.Duration {
				start := time.Now()
				obj, err := reader.Get(b.Context(), testBucket, "k", nil)
				if err != nil {
					b.Fatal(err)
				}
				n, err := io.Copy(io.Discard, obj.Body)
				obj.Body.Close()
				d := time.Since(start)
				if err != nil || n != int64(size) || obj.Outcome != want {
					b.Fatalf("%s read: %d bytes, %v, outcome %s", want, n, err, obj.Outcome)
				}
				return d
			}
			if _, err := io.Copy(io.Discard, mustGet(b, g.members[0])); err != nil { // the owner holds it
				b.Fatal(err)
			}
			var remote, local []time.Duration
			b.SetBytes(int64(size))
			for b.Loop() {
				reader.Invalidate(testBucket, "k")
				remote = append(remote, read(RemoteHit))
				local = append(local, read(LocalHit))
			}
			r, l := p50(remote), p50(local)
			b.ReportMetric(float64(r.Nanoseconds())/1e3, "remote-p50-µs")
			b.ReportMetric(float64(l.Nanoseconds())/1e3, "local-p50-µs")
			b.ReportMetric(float64(r)/float64(l), "remote/local")
		})
	}
}

func mustGet(b *testing.B, c *Cachelet) io.Reader {
	obj, err := c.Get(b.Context(), testBucket, "k", nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { obj.Body.Close() })
	return obj.Body
}

func p50(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
