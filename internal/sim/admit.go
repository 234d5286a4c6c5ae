package sim

import (
	"container/heap"
	"time"

	"github.com/hoard-io/hoard/internal/admission"
)

// Admission by predicted benefit (Config.Admission, an application's
// cache.admission: benefit; package admission, OFC §5.2), as the
// controller and the cachelets run it: per function, a Decider over its
// recent invocations says, before each one runs, whether its misses are
// kept. An invocation whose function is not admitting reads what its
// instance holds and otherwise goes to the store directly (a
// pass-through, as the cachelet serves it under the default store write
// target), keeping nothing. When the invocation ends, its times teach
// the Decider: its run time (the trace's duration), its reads' time as
// served and as the store alone would have served them, both modelled by
// Config.Access. Reads of no known invocation (traces without Invoke
// events) are always admitted.

// maxAdmitInFlight bounds the invocations whose reads are being summed;
// beyond it, an invocation is admitted and teaches nothing.
const maxAdmitInFlight = 1 << 20

// admitInv is one invocation in flight.
type admitInv struct {
	fn             fnKey
	run            time.Duration
	noCache        bool
	served, direct float64 // seconds
}

type admitEnd struct {
	at  time.Time
	inv uint64
}

type admitHeap []admitEnd

func (h admitHeap) Len() int           { return len(h) }
func (h admitHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h admitHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *admitHeap) Push(x any)        { *h = append(*h, x.(admitEnd)) }
func (h *admitHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// admitRun is one configuration's admission state.
type admitRun struct {
	deciders map[fnKey]*admission.Decider
	admits   map[fnKey]bool // the last decision, to count changes
	inFlight map[uint64]*admitInv
	ends     admitHeap
	res      AdmissionResult
}

// AdmissionResult is what admission by benefit did (Config.Admission).
type AdmissionResult struct {
	// Functions seen; NotAdmitting: not admitting at the end; Changes:
	// decisions that flipped.
	Functions    int   `json:"functions"`
	NotAdmitting int   `json:"not_admitting"`
	Changes      int64 `json:"changes"`
	// Invocations run without keeping their misses, and their reads
	// that missed and were not kept.
	NoCacheInvocations int64 `json:"no_cache_invocations"`
	ReadsNotAdmitted   int64 `json:"reads_not_admitted"`
}

func newAdmitRun() *admitRun {
	return &admitRun{deciders: map[fnKey]*admission.Decider{}, admits: map[fnKey]bool{}, inFlight: map[uint64]*admitInv{}}
}

// invoked decides before e runs whether its misses are kept.
func (a *admitRun) invoked(e *Event) {
	if e.Invocation == 0 || len(a.inFlight) >= maxAdmitInFlight {
		return
	}
	k := fnKey{e.App, e.Function}
	d := a.deciders[k]
	if d == nil {
		d = &admission.Decider{}
		a.deciders[k] = d
		a.admits[k] = true
	}
	inv := &admitInv{fn: k, run: e.Duration, noCache: !d.Decide().Admit}
	if inv.noCache {
		a.res.NoCacheInvocations++
	}
	a.inFlight[e.Invocation] = inv
	heap.Push(&a.ends, admitEnd{at: e.Time.Add(e.Duration), inv: e.Invocation})
}

// noCache reports whether a read of invocation keeps nothing it misses.
func (a *admitRun) noCache(invocation uint64) bool {
	inv := a.inFlight[invocation]
	return inv != nil && inv.noCache
}

// read adds a read's modelled times to its invocation's.
func (a *admitRun) read(invocation uint64, served, direct float64) {
	if inv := a.inFlight[invocation]; inv != nil {
		inv.served += served
		inv.direct += direct
	}
}

// advance ends the invocations due by t: each teaches its function's
// Decider, as controller.observeAdmission does.
func (a *admitRun) advance(t time.Time) {
	for len(a.ends) > 0 && !a.ends[0].at.After(t) {
		x := heap.Pop(&a.ends).(admitEnd)
		inv := a.inFlight[x.inv]
		delete(a.inFlight, x.inv)
		if inv == nil {
			continue
		}
		d := a.deciders[inv.fn]
		secs := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
		if d.Observe(admission.Sample{Run: inv.run, Served: secs(inv.served), Store: secs(inv.direct)}) != nil {
			continue
		}
		if now := d.Decide().Admit; now != a.admits[inv.fn] {
			a.admits[inv.fn] = now
			a.res.Changes++
		}
	}
}

func (a *admitRun) result() *AdmissionResult {
	r := a.res
	r.Functions = len(a.deciders)
	for _, ok := range a.admits {
		if !ok {
			r.NotAdmitting++
		}
	}
	return &r
}
