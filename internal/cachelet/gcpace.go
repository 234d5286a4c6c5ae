package cachelet

import (
	"os"
	"runtime"
	"runtime/debug"
	runtimemetrics "runtime/metrics"
	"slices"
	"sync"
)

// The collector's pace where the cachelet keeps the process's memory limit
// (Config.MemoryLimitOverhead; ADR 0039).
//
// The Go runtime collects when the heap has grown by GOGC percent of what
// the last collection found live (its stacks and globals included): with
// the default 100 and a few MiB live — a cache that holds little yet, or
// small objects — a server allocating ~100 MB/s collects ~30 times a
// second, and every collection scans every goroutine's stack and shrinks
// the stacks it finds large, which their connections then grow again. The
// memory the budget reserves is not used meanwhile. So while the live heap
// is smaller than the memory overhead, the pacer sets GOGC so the heap may
// grow by the overhead (up to the soft memory limit, which still bounds
// everything: budget plus overhead); once the live heap is larger, GOGC is
// the runtime's 100 again, as before. It recomputes after every
// collection (a cleanup of an object made to die in it). Where $GOGC is
// set, the operator chose the pace: the pacer leaves it alone.

// gcPaceMax bounds the GOGC the pacer sets (a heap of a few KiB live would
// otherwise ask for a percentage in the millions).
const gcPaceMax = 100_000

// gcPercentFor is the GOGC that lets a heap whose collector scans scanned
// bytes (live heap, stacks and globals) grow by headroom before the next
// collection, and never below the runtime's default 100.
func gcPercentFor(headroom, scanned int64) int {
	if headroom <= 0 {
		return 100
	}
	if scanned <= 0 {
		return gcPaceMax
	}
	p := headroom * 100 / scanned
	switch {
	case p < 100:
		return 100
	case p > gcPaceMax:
		return gcPaceMax
	}
	return int(p)
}

// gcPacer is the process's pacer: one however many cachelets keep the
// memory limit (each Acquire its Release), with the largest headroom
// asked. The GOGC found when the first started is restored when the last
// stops.
var gcPacer gcPace

// gcPace is gcPacer's type.
type gcPace struct {
	mu        sync.Mutex
	headrooms []int64 // one per holder
	found     int     // GOGC before the first holder
	set       int     // what the pacer set last (0: nothing yet)
	gen       int     // bumped at each start, so an old chain of cleanups ends
	samples   []runtimemetrics.Sample
}

// startGCPacer paces the collector with headroom bytes until the returned
// function is called (once).
func startGCPacer(headroom int64) (stop func()) {
	if os.Getenv("GOGC") != "" {
		return func() {}
	}
	p := &gcPacer
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.headrooms) == 0 {
		p.found = debug.SetGCPercent(100) // read it (and it is the floor anyway)
		debug.SetGCPercent(p.found)
		p.set = 0
		p.gen++
		p.samples = []runtimemetrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/scan/stack:bytes"}, {Name: "/gc/scan/globals:bytes"}}
		armGCPace(p.gen)
	}
	p.headrooms = append(p.headrooms, headroom)
	p.paceLocked()
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			for i, h := range p.headrooms {
				if h == headroom {
					p.headrooms = append(p.headrooms[:i], p.headrooms[i+1:]...)
					break
				}
			}
			if len(p.headrooms) == 0 {
				debug.SetGCPercent(p.found)
				p.set = 0
				p.gen++ // the pending cleanup finds itself stale
				return
			}
			p.paceLocked()
		})
	}
}

// gcSentinel is made to die at the next collection: its cleanup paces the
// collector and makes the next. Its size keeps it out of the tiny
// allocator, whose blocks hold several objects (and outlive them).
type gcSentinel [32]byte

// armGCPace makes the next collection pace the collector, for the pacer's
// generation gen.
func armGCPace(gen int) {
	runtime.AddCleanup(new(gcSentinel), afterGC, gen)
}

// afterGC runs after a collection: it paces the collector and arms the
// next, unless the pacer stopped (or restarted) since gen.
func afterGC(gen int) {
	p := &gcPacer
	p.mu.Lock()
	defer p.mu.Unlock()
	if gen != p.gen || len(p.headrooms) == 0 {
		return
	}
	p.paceLocked()
	armGCPace(gen)
}

// paceLocked sets GOGC for the largest headroom asked and what the last
// collection found, when it changed by more than a tenth. p.mu is held.
func (p *gcPace) paceLocked() {
	runtimemetrics.Read(p.samples)
	var scanned int64
	for _, s := range p.samples {
		if s.Value.Kind() == runtimemetrics.KindUint64 {
			scanned += int64(s.Value.Uint64())
		}
	}
	want := gcPercentFor(slices.Max(p.headrooms), scanned)
	if p.set != 0 && want*10 > p.set*9 && want*10 < p.set*11 {
		return // within a tenth: no change worth making
	}
	debug.SetGCPercent(want)
	p.set = want
}
