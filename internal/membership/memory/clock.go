package memory

import (
	"slices"
	"sync"
	"time"
)

// Clock schedules lease expiry. Implementations must be safe for concurrent
// use.
type Clock interface {
	// AfterFunc calls f once d has passed, unless the returned stop is
	// called first; stop reports whether it prevented the call. f may be
	// called from any goroutine.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

type realClock struct{}

func (realClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

// FakeClock is a Clock that moves only when Advance is called, so tests
// expire leases without sleeping. Its methods are safe for concurrent use.
type FakeClock struct {
	mu     sync.Mutex
	now    time.Duration
	seq    int
	timers []*fakeTimer
}

type fakeTimer struct {
	at  time.Duration
	seq int // breaks ties between timers due at the same time: first set, first run
	f   func()
}

// NewFakeClock returns a FakeClock at time zero.
func NewFakeClock() *FakeClock { return &FakeClock{} }

// AfterFunc implements Clock.
func (c *FakeClock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	t := &fakeTimer{at: c.now + d, seq: c.seq, f: f}
	c.timers = append(c.timers, t)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		i := slices.Index(c.timers, t)
		if i < 0 {
			return false
		}
		c.timers = slices.Delete(c.timers, i, i+1)
		return true
	}
}

// Advance moves the clock forward by d and runs the functions that fall due,
// in time order, in the calling goroutine, before returning. Functions a
// due function schedules within the advanced span run too.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	end := c.now + d
	c.mu.Unlock()
	for {
		c.mu.Lock()
		var next *fakeTimer
		for _, t := range c.timers {
			if t.at <= end && (next == nil || t.at < next.at || t.at == next.at && t.seq < next.seq) {
				next = t
			}
		}
		if next == nil {
			c.now = end
			c.mu.Unlock()
			return
		}
		c.timers = slices.DeleteFunc(c.timers, func(t *fakeTimer) bool { return t == next })
		c.now = max(c.now, next.at)
		c.mu.Unlock()
		next.f()
	}
}
