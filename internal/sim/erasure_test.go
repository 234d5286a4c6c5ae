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
	if _, err := New(Config{Instances: 8, Erasure: &ErasureConfig{DataShards: 3, ParityShards: 2, Window: time.Millisecond}}); err == nil {
		t.Fatal("a 1 ms repair window was accepted (a day would be 86 million windows)")
	}
}

// Objects lost under a loss rate are those erasure.LossProbability
// predicts, within sampling error: 600 applications with one object
// each lose independently.
func TestErasureLossesFollowTheModel(t *testing.T) {
	const apps = 600
	var events []Event
	for i := range apps {
		events = append(events, largeRead(0, "app"+strconv.Itoa(i), "k", 20_000_000))
	}
	events = append(events, largeRead(2*time.Hour, "app0", "k", 20_000_000))
	cfg := Config{CacheSizes: []int64{}, KeepAlives: []KeepAlive{}, Instances: 6,
		Erasure: &ErasureConfig{DataShards: 4, ParityShards: 2, LossRate: 3, Window: time.Minute, Seed: 1}}
	x := run(t, cfg, events...).Erasure
	if x.Objects != apps || x.Windows != 120 {
		t.Fatalf("%d objects over %d windows", x.Objects, x.Windows)
	}
	p := erasure.LossProbability(4, 2, 3.0/3600, time.Minute, 2*time.Hour)
	if math.Abs(x.ExpectedShare-p) > 1e-12 {
		t.Fatalf("expected share %.6f, LossProbability %.6f", x.ExpectedShare, p)
	}
	sd := math.Sqrt(apps * p * (1 - p))
	if p < 0.05 || p > 0.95 || math.Abs(float64(x.Lost)-apps*p) > 4*sd {
		t.Fatalf("%d of %d lost, model %.1f ± %.1f", x.Lost, apps, apps*p, sd)
	}
	t.Logf("%d of %d lost, model %.1f ± %.1f", x.Lost, apps, apps*p, sd)
	// No losses, none lost.
	cfg.Erasure = &ErasureConfig{DataShards: 4, ParityShards: 2}
	if x := run(t, cfg, events...).Erasure; x.Lost != 0 || x.ExpectedLost != 0 {
		t.Fatalf("lost %d (expected %.2f) with no losses", x.Lost, x.ExpectedLost)
	}
}
