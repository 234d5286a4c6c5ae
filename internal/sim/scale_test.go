package sim

import (
	"math"
	"testing"
	"time"
)

// Applied votes add and remove instances as scaling.Combine decides, and
// the instance-time follows the counts.
func TestScaleVotesApplied(t *testing.T) {
	cfg := Config{CacheSizes: []int64{100}, KeepAlives: []KeepAlive{}, VoteInterval: 10 * time.Second, Scale: true, MaxInstances: 2}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	step := func(e Event) {
		t.Helper()
		if err := s.Step(e); err != nil {
			t.Fatal(err)
		}
	}
	count := func() int { return len(s.caches[0].apps["app"]) }
	for _, from := range []int{0, 11} {
		for i, k := range []string{"a", "b", "c", "a", "b", "c"} {
			step(read(from+i, k, 45)) // the working set does not fit
		}
	}
	if count() != 1 {
		t.Fatalf("%d instances at 16 s, want 1 (the first round is a first reading)", count())
	}
	// Round at 10 s: a first reading, 0. At 20 s: objects evicted again:
	// +1 → 2 instances. At 30 s: the new instance's first reading: 0,
	// hold. At 40 s: no reads: -1 → 1 instance.
	step(read(25, "z", 10))
	if count() != 2 {
		t.Fatalf("%d instances after objects were evicted again, want 2", count())
	}
	step(read(45, "z", 10))
	if count() != 1 {
		t.Fatalf("%d instances after a rare round, want 1", count())
	}
	r := s.Report()
	c := r.Caches[0]
	sc := c.Scaling
	if sc == nil || sc.Outs != 1 || sc.Ins != 1 || sc.PeakInstances != 2 {
		t.Fatalf("scaling %+v", sc)
	}
	// 1 × 20 s + 2 × 20 s + 1 × 5 s over the application's 45 s.
	if sc.InstanceSeconds != 65 || math.Abs(sc.MeanInstances-65.0/45) > 1e-12 || math.Abs(sc.CacheGBs-65*100.0/(1<<30)) > 1e-15 {
		t.Fatalf("instance-seconds %.1f, mean %.4f, cache %.3g GB-s", sc.InstanceSeconds, sc.MeanInstances, sc.CacheGBs)
	}
	if *c.CacheVotes != (Votes{Up: 1, Stay: 2, Down: 1}) {
		t.Fatalf("votes %+v", *c.CacheVotes)
	}
	// Without Scale the votes are only tallied: one instance stays, and
	// its lack of reads votes -1 at 30 s and 40 s.
	cfg.Scale = false
	var again []Event
	for _, from := range []int{0, 11} {
		for i, k := range []string{"a", "b", "c", "a", "b", "c"} {
			again = append(again, read(from+i, k, 45))
		}
	}
	r = run(t, cfg, append(again, read(45, "z", 10))...)
	if r.Caches[0].Scaling != nil || *r.Caches[0].CacheVotes != (Votes{Up: 1, Down: 2, Stay: 1}) {
		t.Fatalf("without scale: %+v, votes %+v", r.Caches[0].Scaling, r.Caches[0].CacheVotes)
	}
	for _, bad := range []Config{
		{Scale: true},
		{Scale: true, VoteInterval: time.Second, Instances: 4, MaxInstances: 2},
		{Scale: true, VoteInterval: time.Second, MaxInstances: 2000},
	} {
		if _, err := New(bad); err == nil {
			t.Errorf("config %+v accepted", bad)
		}
	}
}
