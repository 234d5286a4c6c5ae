package sim

import (
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/erasure"
	"github.com/hoard-io/hoard/internal/ring"
)

// largeRead reads app's object key (size bytes) at t.
func largeRead(at time.Duration, app, key string, size int64) Event {
	return Event{Time: t0.Add(at), Kind: Read, App: app, Bucket: "b", Key: key, Size: size}
}

// The simulator places shards where a cachelet does: erasure.Place over a
// ring of the application's members, the threshold as the cachelet's.
func TestErasurePlacementAgreesWithTheCachelet(t *testing.T) {
	const instances = 7
	var events []Event
	for i := range 40 {
		events = append(events, largeRead(time.Duration(i)*time.Second, "app", "k"+strconv.Itoa(i), 30_000_000))
	}
	events = append(events, largeRead(41*time.Second, "app", "k0", 30_000_000), // read again: not placed twice
		largeRead(42*time.Second, "app", "small", DefaultErasureThreshold-1)) // under the threshold
	r := run(t, Config{CacheSizes: []int64{}, KeepAlives: []KeepAlive{}, Instances: instances,
		Erasure: &ErasureConfig{DataShards: 3, ParityShards: 2}}, events...)
	x := r.Erasure
	if x == nil || x.Objects != 40 || x.ShardsPlaced != 200 || x.Lost != 0 || x.ExpectedLost != 0 {
		t.Fatalf("erasure section %+v", x)
	}
	var names []string
	for i := range instances {
		names = append(names, "i"+strconv.Itoa(i))
	}
	rg, err := ring.New(ring.Config{}, names)
	if err != nil {
		t.Fatal(err)
	}
	held := map[string]int64{}
	for i := range 40 {
		ids := erasure.Place(rg, nil, "b", "k"+strconv.Itoa(i), 5)
		if len(ids) != 5 {
			t.Fatalf("Place gave %v", ids)
		}
		for _, id := range ids {
			held[id]++
		}
	}
	lo, hi := int64(math.MaxInt64), int64(0)
	for _, n := range names {
		lo, hi = min(lo, held[n]), max(hi, held[n])
	}
	if x.ShardsPerInstance.Min != lo || x.ShardsPerInstance.Max != hi || x.ShardsPerInstance.Mean != 200.0/instances {
		t.Fatalf("shards per instance %+v, Place gives min %d, max %d", x.ShardsPerInstance, lo, hi)
	}
	if want := int64(40 * 5 * 10_000_000); x.ShardBytes != want {
		t.Fatalf("shard bytes %d, want %d", x.ShardBytes, want)
	}
	if _, err := New(Config{Instances: 4, Erasure: &ErasureConfig{DataShards: 3, ParityShards: 2}}); err == nil {
		t.Fatal("3+2 over 4 instances was accepted")
	}
	if _, err := New(Config{Instances: 8, Erasure: &ErasureConfig{DataShards: 3, ParityShards: 2, LossRate: -1}}); err == nil {
		t.Fatal("a negative loss rate was accepted")
	}
	if _, err := New(Config{Instances: 8, Erasure: &ErasureConfig{DataShards: 3, ParityShards: 2, RebuildRate: -1}}); err == nil {
		t.Fatal("a negative rebuild rate was accepted")
	}
}

// Objects lost under a loss rate, with rebuilds replayed, follow
// erasure.LossProbability with the replay's repair window W (lease, delay,
// sending): each holder departs at rate λ, its shard is missing for W,
// and a rebuilder that departs hands its rebuilds to the next holder,
// which starts them again after its own lease and delay. Ten seeds of 600
// applications with one object each: the mean lost must be within 3
// standard deviations of the model's (the binomial's over 600 objects,
// over the ten seeds). The same rule without the restarts (independent
// shards, each missing W: stationary, (n-r)λ·C(n,r)π^r(1-π)^(n-r) with
// π = λW/(1+λW), whatever the repair time's distribution) falls short of
// the replay by more than 3 standard deviations: the restarts, not the
// repair time being fixed rather than exponential, are what it misses.
func TestErasureLossesFollowTheModel(t *testing.T) {
	const apps, seeds, k, r = 600, 10, 4, 2
	const n = k + r
	var events []Event
	for i := range apps {
		events = append(events, largeRead(0, "app"+strconv.Itoa(i), "k", 20_000_000))
	}
	events = append(events, largeRead(2*time.Hour, "app0", "k", 20_000_000))
	lambda := 3.0 / 3600
	horizon := 2 * time.Hour
	// W: the lease, the 1 s delay and a 5 MB shard at 64 MiB/s (a
	// second shard of one object may wait for the first).
	send := 5e6 / float64(64<<20)
	w := 26*time.Second + time.Duration(send*float64(time.Second))
	var lost, model float64
	for seed := uint64(1); seed <= seeds; seed++ {
		cfg := Config{CacheSizes: []int64{}, KeepAlives: []KeepAlive{}, Instances: k + r,
			Erasure: &ErasureConfig{DataShards: k, ParityShards: r, LossRate: 3, Lease: 25 * time.Second, Seed: seed}}
		x := run(t, cfg, events...).Erasure
		if x.Objects != apps || x.Departures == 0 || x.ShardsRebuilt == 0 {
			t.Fatalf("%d objects, %d departures, %d rebuilt", x.Objects, x.Departures, x.ShardsRebuilt)
		}
		if d := x.MeanRepairSeconds - w.Seconds(); d < -1e-6 || d > 0.01 {
			t.Fatalf("mean repair %.4f s, want %.4f", x.MeanRepairSeconds, w.Seconds())
		}
		window := time.Duration(x.MeanRepairSeconds * float64(time.Second))
		m := erasure.LossProbability(k, r, lambda, window, horizon)
		if math.Abs(x.ExpectedShare-m) > 1e-9 || x.Window != window.Round(time.Millisecond).String() {
			t.Fatalf("expected share %.6f over %s, LossProbability %.6f over %s", x.ExpectedShare, x.Window, m, window)
		}
		lost += float64(x.Lost)
		model += x.ExpectedLost
	}
	lost /= seeds
	model /= seeds
	p := model / apps
	sd := math.Sqrt(apps*p*(1-p)) / math.Sqrt(seeds)
	if p < 0.05 || p > 0.95 || math.Abs(lost-model) > 3*sd {
		t.Fatalf("%.1f of %d lost on average, LossProbability %.1f ± %.1f", lost, apps, model, sd)
	}
	pi := lambda * w.Seconds() / (1 + lambda*w.Seconds())
	rate := float64(n-r) * lambda * binom(n, r) * math.Pow(pi, r) * math.Pow(1-pi, n-r)
	independent := apps * -math.Expm1(-rate*horizon.Seconds())
	if lost-independent < 3*sd {
		t.Fatalf("replayed %.1f lost, independent shards %.1f: the restarts should show (sd %.1f)", lost, independent, sd)
	}
	t.Logf("%.1f of %d lost on average, LossProbability %.1f ± %.1f; independent shards, no restarts: %.1f", lost, apps, model, sd, independent)
	// No losses, none lost.
	cfg := Config{CacheSizes: []int64{}, KeepAlives: []KeepAlive{}, Instances: k + r, Erasure: &ErasureConfig{DataShards: k, ParityShards: r}}
	if x := run(t, cfg, events...).Erasure; x.Lost != 0 || x.ExpectedLost != 0 || x.Departures != 0 {
		t.Fatalf("lost %d (expected %.2f) with no losses", x.Lost, x.ExpectedLost)
	}
}

func binom(n, k int) float64 {
	v := 1.0
	for i := 1; i <= k; i++ {
		v = v * float64(n-k+i) / float64(i)
	}
	return v
}

// Departures replayed by hand: a shard is missing from its holder's
// departure until its rebuild completes (lease, delay, then the bytes at
// the rebuild rate, one shard after another per rebuilder); an object
// is lost only if more than r are missing at once; a rebuilder that
// departs hands its rebuilds to the next holder.
func TestErasureRebuildHandComputed(t *testing.T) {
	sec := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	setup := func(k, r int) (*erasureRun, *erasureApp, *codedObject) {
		t.Helper()
		cfg := ErasureConfig{DataShards: k, ParityShards: r, Lease: 5 * time.Second, RebuildRate: 10e6}
		if err := cfg.validate(k + r); err != nil {
			t.Fatal(err)
		}
		var names []string
		for i := range k + r {
			names = append(names, "i"+strconv.Itoa(i))
		}
		x, err := newErasureRun(cfg, names)
		if err != nil {
			t.Fatal(err)
		}
		e := largeRead(0, "app", "k", int64(k)*10_000_000) // 10 MB shards: 1 s to send
		x.read(&e)
		a := x.apps["app"]
		return x, a, a.objects["b/k"]
	}
	// 2+1: a departure at 0 s is rebuilt at 5 + 1 + 1 = 7 s.
	x, a, o := setup(2, 1)
	x.depart(a, o.holders[0], sec(0))
	if !o.missing[0].Equal(sec(7)) || o.by[0] != o.holders[1] {
		t.Fatalf("missing until %v by %d", o.missing[0].Sub(t0), o.by[0])
	}
	x.depart(a, o.holders[1], sec(8)) // the first is back: one missing
	if o.lost || x.lost != 0 {
		t.Fatal("lost with one shard missing at a time")
	}
	x.depart(a, o.holders[2], sec(14.5)) // the second is missing until 15 s
	if !o.lost || x.lost != 1 || len(a.live) != 0 {
		t.Fatalf("two of three missing at 14.5 s: lost %v", o.lost)
	}
	// 2+2: the rebuilder departs before it is done.
	x, a, o = setup(2, 2)
	x.depart(a, o.holders[0], sec(0)) // rebuilt by holder 1 at 7 s
	x.depart(a, o.holders[1], sec(3)) // both pass to holder 2: 10 s, then 11 s
	if !o.missing[0].Equal(sec(10)) || !o.missing[1].Equal(sec(11)) || o.by[0] != o.holders[2] || o.by[1] != o.holders[2] {
		t.Fatalf("missing until %v and %v", o.missing[0].Sub(t0), o.missing[1].Sub(t0))
	}
	x.depart(a, o.holders[2], sec(10.5)) // 1 and 2 missing: r = 2 survives
	if o.lost {
		t.Fatal("lost with two of four missing under 2+2")
	}
	x.depart(a, o.holders[3], sec(10.6)) // 1, 2 and 3 missing
	if !o.lost {
		t.Fatal("not lost with three of four missing")
	}
	if x.departures != 4 {
		t.Fatalf("%d departures", x.departures)
	}
}
