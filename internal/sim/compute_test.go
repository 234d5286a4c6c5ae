package sim

import (
	"math"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/scaling"
)

// invokeAt is an invocation of "app" at ms milliseconds running dur.
func invokeAt(ms int, dur time.Duration) Event {
	return Event{Time: t0.Add(time.Duration(ms) * time.Millisecond), Kind: Invoke, App: "app", Duration: dur}
}

// Invocations start instances while below the maximum and queue at it;
// each round's compute vote is scaling.ComputeVote over the stats the
// controller would read (hand-computed here and fed to the same
// function), and scale-in removes idle instances only.
func TestComputeVotesHandComputed(t *testing.T) {
	cfg := Config{CacheSizes: []int64{100}, KeepAlives: []KeepAlive{}, VoteInterval: 10 * time.Second, Scale: true, MaxInstances: 3, LoadTime: time.Second}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	count := func() int { return len(s.caches[0].apps["app"]) }
	for _, e := range []Event{
		invokeAt(0, 25*time.Second),   // A: the first instance, ends at 25 s
		invokeAt(1000, 5*time.Second), // B: starts a second instance: runs 2-7 s
		invokeAt(2000, 5*time.Second), // C: starts a third: runs 3-8 s
		invokeAt(3000, 2*time.Second), // D: at the maximum, queued; B's slot at 7 s: 7-9 s
	} {
		if err := s.Step(e); err != nil {
			t.Fatal(err)
		}
	}
	if count() != 3 {
		t.Fatalf("%d instances after three invocations at once, want 3", count())
	}
	// Rounds: at 10 s, B, C and D ended (6 s each from arrival), A runs:
	// 3 instances, 1 busy, rate 0.3/s, p50 6 s: demand 1.8 on 2 left is
	// 90% busy, 0; the cache's first reading, 0: hold. At 20 s nothing
	// started in the window: demand 1 (A) on 2 is 50%: -1, the cache -1
	// (no reads): 2 instances. At 30 s (A ended at 25 s) -1 and -1: 1.
	// At 40 s one instance: compute 0, cache -1: hold.
	want := []scaling.ComputeStats{
		{Instances: 3, Busy: 1, P50: 6 * time.Second, RequestRate: 0.3},
		{Instances: 3, Busy: 1},
		{Instances: 2},
		{Instances: 1},
	}
	var wantVotes Votes
	for _, st := range want {
		wantVotes.add(scaling.ComputeVote(st, scaling.Config{}))
	}
	if wantVotes != (Votes{Stay: 2, Down: 2}) {
		t.Fatalf("hand-computed votes %+v", wantVotes)
	}
	if err := s.Step(invokeAt(45000, time.Second)); err != nil {
		t.Fatal(err)
	}
	if count() != 1 {
		t.Fatalf("%d instances at 45 s, want 1", count())
	}
	c := s.Report().Caches[0]
	x := c.Compute
	if x.ComputeVotes != wantVotes || *c.CacheVotes != (Votes{Stay: 1, Down: 3}) {
		t.Fatalf("compute votes %+v, cache votes %+v; want %+v", x.ComputeVotes, *c.CacheVotes, wantVotes)
	}
	if x.Invocations != 5 || x.Started != 2 || x.Queued != 1 || x.QueueSeconds != 4 || x.Refused != 0 {
		t.Fatalf("compute %+v", *x)
	}
	// 1 instance for 1 s, 2 for 1 s, 3 for 18 s, 2 for 10 s, 1 for 15 s.
	sc := c.Scaling
	if sc.Outs != 0 || sc.Ins != 2 || sc.PeakInstances != 3 || sc.InstanceSeconds != 92 {
		t.Fatalf("scaling %+v", *sc)
	}
}

// Without Scale the instances are fixed: invocations queue beyond them,
// and the compute vote asks for more, over the latency target, as
// scaling.ComputeVote does with the stats the controller would read.
func TestComputeVotesQueueAndTarget(t *testing.T) {
	cfg := Config{CacheSizes: []int64{100}, KeepAlives: []KeepAlive{}, VoteInterval: 10 * time.Second, LatencyTarget: 2 * time.Second}
	events := []Event{
		invokeAt(0, 3*time.Second),    // A: 0-3 s
		invokeAt(1000, 3*time.Second), // B: waits for A, 3-6 s (5 s)
		invokeAt(2000, 3*time.Second), // C: 6-9 s (7 s)
		invokeAt(8000, 5*time.Second), // D: 9-14 s, running at 10 s
		invokeAt(9500, time.Second),   // E: queued at 10 s, 14-15 s (5.5 s)
		invokeAt(21000, time.Second),  // after the round at 20 s, with nothing in its window
	}
	c := run(t, cfg, events...).Caches[0]
	rounds := []scaling.ComputeStats{
		{Instances: 1, Busy: 1, Queued: 1, P50: 5 * time.Second, Target: 2 * time.Second, RequestRate: 0.3},
		{Instances: 1, Target: 2 * time.Second},
	}
	var want Votes
	for _, st := range rounds {
		want.add(scaling.ComputeVote(st, scaling.Config{}))
	}
	x := c.Compute
	if want != (Votes{Up: 1, Stay: 1}) || x.ComputeVotes != want {
		t.Fatalf("compute votes %+v, want %+v", x.ComputeVotes, want)
	}
	if x.Queued != 4 || math.Abs(x.QueueSeconds-11.5) > 1e-9 || x.Started != 0 || c.Scaling != nil {
		t.Fatalf("compute %+v", *x)
	}
	// The slow rule alone: no queue, every instance busy, p50 above
	// the target.
	if v := scaling.ComputeVote(scaling.ComputeStats{Instances: 1, Busy: 1, P50: 5 * time.Second, Target: 2 * time.Second}, scaling.Config{}); v.Delta != 1 {
		t.Fatalf("slow vote %v", v)
	}
}

// A miss of a large object is planned by scaling.PlanBandwidth with the
// measurements the simulator models; a plan that scales out is an
// urgent round, after which the download is split, and the read takes
// the plan's T(N).
func TestBandwidthVotesAgreeWithThePlan(t *testing.T) {
	const size = 200 << 20
	cfg := Config{CacheSizes: []int64{1 << 30}, KeepAlives: []KeepAlive{}, VoteInterval: 5 * time.Second, Scale: true, MaxInstances: 8, LoadTime: 100 * time.Millisecond}
	small := read(1, "small", 10<<20)
	big := read(2, "big", size)
	r := run(t, cfg, small, big)
	c := r.Caches[0]

	acc := DefaultAccessModel
	m := scaling.Measurements{LoadTime: cfg.LoadTime, StoreBW: acc.Store.BytesPerSecond, PeerBW: acc.Remote.BytesPerSecond}
	plan, err := scaling.PlanBandwidth(size-8<<20, 1, 8, m, scaling.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if !plan.ScaleOut || plan.N < 2 {
		t.Fatalf("the plan %v does not scale out: pick another size", plan)
	}
	x := c.Compute
	if x.BandwidthVotes != (Votes{Up: 1}) || x.Splits != 1 || c.Scaling.Outs != int64(plan.N-1) || len(r.Caches) != 1 {
		t.Fatalf("bandwidth votes %+v, splits %d, instances added %d; the plan %v", x.BandwidthVotes, x.Splits, c.Scaling.Outs, plan)
	}
	// The big read's time: the prefix from the store, then T(N); the
	// small one, read first, is an ordinary local miss.
	wantSecs := acc.Store.seconds(8<<20) + plan.T.Seconds() + acc.seconds(LocalMiss, 10<<20)
	if got := c.Improvement.HoardSeconds; math.Abs(got-wantSecs) > 1e-6 {
		t.Fatalf("modelled time %.6f s, want %.6f", got, wantSecs)
	}
	// Below the bandwidth policy's smallest object, or without the
	// rounds, nothing is planned.
	cfg.VoteInterval, cfg.Scale = 0, false
	if c := run(t, cfg, big).Caches[0]; c.Compute != nil || c.Scaling != nil {
		t.Fatalf("planned without votes: %+v", c.Compute)
	}
}
