package cachelet

import (
	"context"
	"sync"
)

// byteGate bounds the bytes that requests in flight hold at once: a
// request takes its bytes before it holds them and gives them back when
// it is done, waiting meanwhile while others hold the rest. A request
// larger than the whole bound passes when nobody else holds any, so it
// waits but never forever. Safe for concurrent use.
type byteGate struct {
	mu   sync.Mutex
	max  int64
	used int64
	wake chan struct{} // closed, and replaced, whenever bytes come back
}

func newByteGate(limit int64) *byteGate {
	return &byteGate{max: limit, wake: make(chan struct{})}
}

// acquire takes n bytes, waiting until they fit; it fails only with
// ctx's error, taking nothing.
func (g *byteGate) acquire(ctx context.Context, n int64) error {
	for {
		g.mu.Lock()
		if g.used+n <= g.max || g.used == 0 {
			g.used += n
			g.mu.Unlock()
			return nil
		}
		wake := g.wake
		g.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// release gives back n bytes taken by acquire.
func (g *byteGate) release(n int64) {
	g.mu.Lock()
	g.used -= n
	close(g.wake)
	g.wake = make(chan struct{})
	g.mu.Unlock()
}
