package sim

import (
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/admission"
)

// Admission by benefit replayed: a function whose data is a sliver of
// its run time stops keeping its misses once its Decider has seen
// enough invocations, fed the samples the controller would take (the
// same Decider, fed by hand here, decides the same); a data-bound
// function keeps admitting.
func TestAdmissionByBenefit(t *testing.T) {
	var events []Event
	inv := uint64(0)
	call := func(at time.Duration, fn string, dur time.Duration, key string, size int64) {
		inv++
		e := Event{Time: t0.Add(at), Kind: Invoke, App: "app", Function: fn, Invocation: inv, Duration: dur}
		r := read(0, key, size)
		r.Time, r.Invocation = t0.Add(at), inv
		events = append(events, e, r)
	}
	hand := &admission.Decider{}
	acc := DefaultAccessModel
	for i := range admission.DefaultMinSamples {
		call(time.Duration(i)*20*time.Second, "compute", 10*time.Second, "c"+string(rune('0'+i)), 1024)
		// Each reads a new object: a local miss, modelled as the store's read.
		miss := time.Duration(acc.Store.seconds(1024) * float64(time.Second))
		if err := hand.Observe(admission.Sample{Run: 10 * time.Second, Served: miss, Store: miss}); err != nil {
			t.Fatal(err)
		}
	}
	if hand.Decide().Admit {
		t.Fatalf("the hand-fed Decider admits: %s", hand.Decide().Reason)
	}
	call(200*time.Second, "compute", 10*time.Second, "x", 1024) // not admitted: a pass-through
	call(220*time.Second, "compute", 10*time.Second, "x", 1024) // and again: nothing was kept
	call(240*time.Second, "data", 10*time.Millisecond, "y", 10<<20)
	call(260*time.Second, "data", 10*time.Millisecond, "y", 10<<20) // learning: admitted, a hit
	c := run(t, Config{CacheSizes: []int64{64 << 20}, KeepAlives: []KeepAlive{}, Admission: true}, events...).Caches[0]
	x := c.Admission
	if x == nil || x.Functions != 2 || x.NotAdmitting != 1 || x.Changes != 1 || x.NoCacheInvocations != 2 || x.ReadsNotAdmitted != 2 {
		t.Fatalf("admission %+v", x)
	}
	if c.Outcomes["PT"].Count != 2 || c.Outcomes["LM"].Count != 6 || c.Outcomes["LH"].Count != 1 {
		t.Fatalf("outcomes %+v", c.Outcomes)
	}
	// Without admission the second read of x hits.
	if c := run(t, Config{CacheSizes: []int64{64 << 20}, KeepAlives: []KeepAlive{}}, events...).Caches[0]; c.Admission != nil || c.Outcomes["LH"].Count != 2 {
		t.Fatalf("without admission: %+v", c.Outcomes)
	}
}
