package scaling

import (
	"fmt"
	"time"
)

// CacheStats is what one cachelet saw since the controller last asked it.
type CacheStats struct {
	// EvictedMoreThanOnce is the number of objects evicted more than once
	// since the last query.
	EvictedMoreThanOnce int
	// Accesses is the number of reads and writes since the last query.
	Accesses int
	// Window is the time since the last query.
	Window time.Duration
}

// CacheVote is the cache-size policy [Faa$T §4], one cachelet's vote:
//
//   - +1 if any object was evicted more than once since the last query:
//     the working set does not fit, and an object that came back after an
//     eviction will come back again. One instance at a time, because each
//     adds a whole cache budget.
//   - 0 while traffic is substantial: Accesses/Window at or above
//     RareAccessRate. The cache is earning its memory.
//   - -1 when accesses are rare (below RareAccessRate): the cache holds
//     memory that hardly serves anything.
//
// With no window (Window <= 0) there is no rate to judge, and the vote is
// 0 unless something was evicted twice: no data is no reason to scale in.
func CacheVote(s CacheStats, cfg Config) Vote {
	cfg = cfg.withDefaults()
	v := Vote{Policy: PolicyCache}
	switch {
	case s.EvictedMoreThanOnce > 0:
		v.Delta = 1
		v.Reason = fmt.Sprintf("%d evicted more than once", s.EvictedMoreThanOnce)
	case s.Window <= 0:
		v.Reason = "no window"
	default:
		rate := float64(max(s.Accesses, 0)) / s.Window.Seconds()
		if rate < cfg.RareAccessRate {
			v.Delta = -1
			v.Reason = fmt.Sprintf("%.3g accesses/s, rare", rate)
		} else {
			v.Reason = fmt.Sprintf("%.3g accesses/s", rate)
		}
	}
	return v
}
