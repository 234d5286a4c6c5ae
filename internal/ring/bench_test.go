package ring

import (
	"fmt"
	"strconv"
	"testing"
)

func benchMembers(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("cachelet-%d@10.0.%d.%d:9200", i, i/256, i%256)
	}
	return ids
}

// benchKeys are object names of a realistic length, cycled through so the
// lookups do not all hit one cache line.
func benchKeys() []string {
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "user" + strconv.Itoa(i%97) + "/2024/06/part-" + strconv.Itoa(i) + ".parquet"
	}
	return keys
}

func BenchmarkOwner(b *testing.B) {
	for _, n := range []int{5, 100} {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			r := mustNew(b, Config{}, benchMembers(n)...)
			keys := benchKeys()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				r.Owner("datasets", keys[i%len(keys)])
				i++
			}
		})
	}
}

func BenchmarkOwners3(b *testing.B) {
	r := mustNew(b, Config{}, benchMembers(20)...)
	keys := benchKeys()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		r.Owners("datasets", keys[i%len(keys)], 3)
		i++
	}
}

func BenchmarkNew(b *testing.B) {
	for _, n := range []int{5, 100} {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			ids := benchMembers(n)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := New(Config{}, ids); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkWith and BenchmarkWithout are the incremental rebuilds a
// membership change costs, against BenchmarkNew's full ones.
func BenchmarkWith(b *testing.B) {
	for _, n := range []int{5, 100} {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			r := mustNew(b, Config{}, benchMembers(n)...)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.With("cachelet-new@10.9.9.9:9200"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkWithout(b *testing.B) {
	for _, n := range []int{5, 100} {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			ids := benchMembers(n)
			r := mustNew(b, Config{}, ids...)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.Without(ids[n/2]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
