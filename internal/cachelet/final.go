package cachelet

import (
	"github.com/hoard-io/hoard/internal/cache"
)

// Final outputs (OFC §6): objects the application's functions write and
// none of them reads, declared as locations (Config.FinalOutputs). Keeping
// their bytes would take memory from inputs that are read again, so a
// write under one leaves memory once the store has it: under the store
// write target it is never kept (putThrough); under owner and local the
// bytes stay while they are the only copy and go when the write is
// persisted (hold). A later read is a miss and is cached as any
// other read: the declaration is about writes, never a reason to serve
// wrong or no bytes.

// finalOutput reports whether bucket/key lies under a final-outputs
// location.
func (c *Cachelet) finalOutput(bucket, key string) bool {
	for _, l := range c.cfg.FinalOutputs {
		if l.Contains(bucket, key) {
			return true
		}
	}
	return false
}

// dropWhenPersisted drops e, a final output's write kept until it is
// persisted, once done says the queue delivered it (nil). A write that
// failed, was given up or superseded keeps what the cache holds: a
// superseding write is judged on its own, and a failed one is left as it
// would be for any other key. One goroutine per queued final output,
// bounded by the queue's own bound.
func (c *Cachelet) dropWhenPersisted(k cache.Key, e *cache.Entry, done <-chan error) {
	go func() {
		if err := <-done; err != nil {
			return
		}
		if c.cache.RemoveIf(k, e) {
			c.m.finalOutputs.WithLabelValues("persisted").Inc()
		}
	}()
}
