package sim

import (
	"testing"
	"time"
)

func TestCacheVotesHandComputed(t *testing.T) {
	r := run(t, Config{CacheSizes: []int64{100}, KeepAlives: []KeepAlive{}, VoteInterval: 10 * time.Second},
		read(0, "a", 45), // LM
		read(1, "b", 45), // LM
		read(2, "c", 45), // LM, evicts a
		read(3, "a", 45), // LM, evicts b
		read(4, "b", 45), // LM, evicts c
		read(5, "c", 45), // LM, evicts a again
		// Round at 10 s: a first reading, but an object was evicted
		// again: +1. Round at 20 s: no reads: -1.
		read(25, "c", 45), // LH
		// Round at 30 s: one read in 10 s, 0.1/s, not rare: 0.
		read(35, "c", 45),
	)
	v := r.Caches[0].CacheVotes
	if v == nil || *v != (Votes{Up: 1, Stay: 1, Down: 1}) {
		t.Fatalf("votes %+v, want one of each", v)
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
