package writeback

import (
	"context"
	"strconv"
	"testing"
)

// BenchmarkEnqueuePersist measures the queue's own cost: enqueueing writes
// and handing them to a sink that does nothing.
func BenchmarkEnqueuePersist(b *testing.B) {
	noop := sinkFunc(func(context.Context, Write) error { return nil })
	keys := make([]string, 1<<16)
	for i := range keys {
		keys[i] = "key-" + strconv.Itoa(i)
	}
	data := make([]byte, 1<<10)

	// Many writes in flight, as under a write burst; Drain ends the timing
	// once all are persisted.
	b.Run("burst", func(b *testing.B) {
		q, err := New(Config{Sink: noop})
		if err != nil {
			b.Fatal(err)
		}
		defer q.Close(context.Background())
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			q.Enqueue(Write{Bucket: "b", Key: keys[i%len(keys)], Data: data})
		}
		if err := q.Drain(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		s := q.Stats()
		b.ReportMetric(float64(s.Superseded)/float64(b.N), "superseded/op")
	})

	// One write at a time, waiting for each: the latency of a round trip
	// through a worker.
	b.Run("one-by-one", func(b *testing.B) {
		q, err := New(Config{Sink: noop})
		if err != nil {
			b.Fatal(err)
		}
		defer q.Close(context.Background())
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if err := <-q.Enqueue(Write{Bucket: "b", Key: keys[i%len(keys)], Data: data}); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}
