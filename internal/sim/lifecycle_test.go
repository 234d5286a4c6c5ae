package sim

import (
	"errors"
	"testing"
	"time"
)

func TestLifecycleAndPreWarm(t *testing.T) {
	at := func(d time.Duration, e Event) Event { e.Time = t0.Add(d); return e }
	inv := Event{Kind: Invoke, App: "app", Duration: time.Second}
	rd := Event{Kind: Read, App: "app", Bucket: "b", Key: "a", Size: 10}
	events := []Event{
		at(0, inv), at(0, rd), // cold; LM
		at(30*time.Second, inv), at(30*time.Second, rd), // warm (unloaded at 91 s); LH
		at(5*time.Minute, inv), at(5*time.Minute, rd), // cold: the cache went with the instance
	}
	for _, tc := range []struct {
		name                       string
		lifecycle, preWarm         bool
		lh, lm, gets, pre, unloads int64
	}{
		{"caches outlive instances", false, false, 2, 1, 1, 0, 0},
		{"caches go with instances", true, false, 1, 2, 2, 0, 1},
		// The record saved at the unload has a read twice (MinReads):
		// pre-warming fetches it back before the invocation reads it.
		{"pre-warmed", true, true, 2, 1, 2, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, Config{CacheSizes: []int64{100}, KeepAlives: []KeepAlive{{Fixed: time.Minute}}, Lifecycle: tc.lifecycle, PreWarm: tc.preWarm}, events...)
			c := r.Caches[0]
			if c.Outcomes["LH"].Count != tc.lh || c.Outcomes["LM"].Count != tc.lm || c.StoreGets != tc.gets ||
				c.PreWarmGets != tc.pre || c.Unloads != tc.unloads {
				t.Fatalf("LH %d, LM %d, store GETs %d, pre-warm GETs %d, unloads %d; want %d, %d, %d, %d, %d",
					c.Outcomes["LH"].Count, c.Outcomes["LM"].Count, c.StoreGets, c.PreWarmGets, c.Unloads,
					tc.lh, tc.lm, tc.gets, tc.pre, tc.unloads)
			}
			if k := r.KeepAlives[0]; k.ColdStarts != 2 {
				t.Fatalf("cold starts %d, want 2", k.ColdStarts)
			}
		})
	}
}

// Under the histogram's pre-warm window the instance is unloaded when an
// invocation ends, so its cache is lost even though the next invocation
// is warm.
func TestLifecycleUnderPreWarmWindow(t *testing.T) {
	var events []Event
	for i := range 14 {
		at := t0.Add(time.Duration(i) * 30 * time.Minute)
		events = append(events,
			Event{Time: at, Kind: Invoke, App: "app"},
			Event{Time: at, Kind: Read, App: "app", Bucket: "b", Key: "a", Size: 10})
	}
	r := run(t, Config{CacheSizes: []int64{100}, KeepAlives: []KeepAlive{{Fixed: 10 * time.Minute, Histogram: true}}, Lifecycle: true}, events...)
	// Every gap (30 min) outlives the fixed 10 minutes, and from the 12th
	// invocation on the histogram unloads at each end: 13 unloads, every
	// read a miss.
	if c := r.Caches[0]; c.Unloads != 13 || c.Outcomes["LM"].Count != 14 {
		t.Fatalf("unloads %d, misses %d", c.Unloads, c.Outcomes["LM"].Count)
	}
	if k := r.KeepAlives[0]; k.ColdStarts != 11 {
		t.Fatalf("cold starts %d, want 11", k.ColdStarts)
	}
}

func TestLifecycleConfig(t *testing.T) {
	if _, err := New(Config{Lifecycle: true, KeepAlives: []KeepAlive{}}); err == nil {
		t.Error("a lifecycle without a keep-alive policy accepted")
	}
	if _, err := New(Config{PreWarm: true}); err == nil || errors.Is(err, ErrFormat) {
		t.Errorf("pre-warming without a lifecycle: %v", err)
	}
}
