package sim

import (
	"testing"
	"time"
)

func TestCacheVotesHandComputed(t *testing.T) {
	cycle := func(from int) []Event {
		var out []Event
		for i, k := range []string{"a", "b", "c", "a", "b", "c"} {
			out = append(out, read(from+i, k, 45)) // LM each: a, b, c evicted in turn
		}
		return out
	}
	events := append(cycle(0), cycle(11)...)
	events = append(events, read(35, "c", 45), read(45, "c", 45))
	// Round at 10 s: the controller's first reading of the instance, so
	// no vote on what it saw before: 0. At 20 s: objects evicted again:
	// +1. At 30 s: no reads: -1. At 40 s: one read in 10 s, 0.1/s, not
	// rare: 0.
	r := run(t, Config{CacheSizes: []int64{100}, KeepAlives: []KeepAlive{}, VoteInterval: 10 * time.Second}, events...)
	v := r.Caches[0].CacheVotes
	if v == nil || *v != (Votes{Up: 1, Stay: 2, Down: 1}) {
		t.Fatalf("votes %+v, want 1 up, 2 stay, 1 down", v)
	}
	// Without evictions the first reading is no reason to move.
	r = run(t, Config{CacheSizes: []int64{100}, KeepAlives: []KeepAlive{}, VoteInterval: 10 * time.Second},
		read(0, "a", 10), read(11, "a", 10))
	if v := r.Caches[0].CacheVotes; *v != (Votes{Stay: 1}) {
		t.Fatalf("votes %+v, want one stay", v)
	}
	if r := run(t, Config{CacheSizes: []int64{100}}, read(0, "a", 10)); r.Caches[0].CacheVotes != nil {
		t.Fatal("votes without a vote interval")
	}
}
