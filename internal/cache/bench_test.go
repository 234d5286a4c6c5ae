package cache

import (
	"fmt"
	"testing"

	"github.com/hoard-io/hoard/internal/store"
)

const benchEntries = 100_000

func infoOf(k Key) store.ObjectInfo { return store.ObjectInfo{Bucket: k.Bucket, Key: k.Object} }

// benchOwns owns about two keys in three, as a cachelet of a small ring.
func benchOwns(k Key) bool { return k.Object[len(k.Object)-1]%3 != 0 }

// fullCache returns a cache of p holding benchEntries entries, half of them
// above the size-aware threshold, with a budget that fits them exactly,
// and their keys. Evicted entries are appended to *evicted.
func fullCache(b *testing.B, p Policy, evicted *[]*Entry) (*Cache, []Key) {
	b.Helper()
	small := make([]byte, 1<<10)
	large := make([]byte, 16<<10) // shared: the cache never reads the bytes
	var budget int64
	entries := make([]*Entry, benchEntries)
	keys := make([]Key, benchEntries)
	for i := range entries {
		data := small
		if i%2 == 0 {
			data = large
		}
		keys[i] = Key{Bucket: "bench", Object: fmt.Sprint("obj-", i)}
		entries[i] = NewCompleteEntry(keys[i], infoOf(keys[i]), data)
		budget += entries[i].Size()
	}
	c, _ := newPolicyCache(b, p, Config{Budget: budget, Owns: benchOwns,
		OnEvict: func(e *Entry) { *evicted = append(*evicted, e) }})
	for _, e := range entries {
		admit(b, c, e)
	}
	if s := c.Stats(); s.Evictions != 0 || s.Objects != benchEntries {
		b.Fatalf("setup: %+v", s)
	}
	return c, keys
}

// BenchmarkPolicy measures, for each policy at 100k entries, a Get hit and
// an Add into a full cache (evicting about one entry each): the evicted
// entries are added back in turn, so nothing is allocated per operation.
func BenchmarkPolicy(b *testing.B) {
	for _, p := range everyPolicy() {
		b.Run(string(p)+"/get-hit", func(b *testing.B) {
			var evicted []*Entry
			c, keys := fullCache(b, p, &evicted)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if c.Get(keys[i%len(keys)]) == nil {
					b.Fatal("miss")
				}
				i += 7919 // a prime stride, so hits do not walk memory in order
			}
		})
		b.Run(string(p)+"/add-evict", func(b *testing.B) {
			// spare holds the entries out of the cache, to be added next: a
			// few to start with, then whatever was evicted.
			spare := make([]*Entry, 0, 256)
			c, _ := fullCache(b, p, &spare)
			for i := range 64 {
				k := Key{Bucket: "bench", Object: fmt.Sprint("spare-", i)}
				spare = append(spare, NewCompleteEntry(k, infoOf(k), make([]byte, (1+15*(i%2))<<10)))
			}
			before := c.Stats().Evictions
			b.ReportAllocs()
			for b.Loop() {
				e := spare[len(spare)-1]
				spare = spare[:len(spare)-1]
				if !c.Reserve(e.Size()) || !c.Add(e) {
					b.Fatal("refused")
				}
			}
			s := c.Stats()
			if s.Bytes+s.Reserved > s.Budget {
				b.Fatalf("over budget: %+v", s)
			}
			b.ReportMetric(float64(s.Evictions-before)/float64(b.N), "evictions/op")
		})
	}
}

// BenchmarkOwnershipChanged measures re-classifying 100k entries after a
// ring change; every other call on the cache waits this long.
func BenchmarkOwnershipChanged(b *testing.B) {
	for _, p := range everyPolicy() {
		b.Run(string(p), func(b *testing.B) {
			var evicted []*Entry
			c, _ := fullCache(b, p, &evicted)
			b.ReportAllocs()
			for b.Loop() {
				c.OwnershipChanged()
			}
		})
	}
}
