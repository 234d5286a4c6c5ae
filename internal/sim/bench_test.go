package sim

import (
	"testing"
	"time"
)

// BenchmarkReplay measures events replayed per second, streamed from the
// generator (BenchmarkGenerate measures it alone) as a trace file would
// be: one cache size and both keep-alives, the seven default sizes at once
// (each event is replayed once per cache), and four instances per
// application on a ring, and the scale votes applied.
func BenchmarkReplay(b *testing.B) {
	const events = 1 << 20
	for _, bc := range []struct {
		name string
		cfg  Config
	}{
		{"1cache", Config{CacheSizes: []int64{64 << 20}}},
		{"7caches", Config{}},
		{"1cache-4instances", Config{CacheSizes: []int64{64 << 20}, Instances: 4}},
		// The scale controller's rounds and applied votes: invocations
		// on instances, compute, cache and bandwidth votes every 5 s.
		{"1cache-scale", Config{CacheSizes: []int64{64 << 20}, Instances: 2, VoteInterval: 5 * time.Second, Scale: true}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				g, err := NewGenerator(GenConfig{Seed: 1, Apps: 1000, MaxEvents: events})
				if err != nil {
					b.Fatal(err)
				}
				r, err := Run(g, bc.cfg)
				if err != nil {
					b.Fatal(err)
				}
				n += int(r.Events)
			}
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkGenerate measures the generator alone.
func BenchmarkGenerate(b *testing.B) {
	n := 0
	for b.Loop() {
		g, err := NewGenerator(GenConfig{Seed: 1, Apps: 1000, MaxEvents: 1 << 18})
		if err != nil {
			b.Fatal(err)
		}
		for {
			if _, err := g.Next(); err != nil {
				break
			}
			n++
		}
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "events/s")
}
