//go:build integration

package rig

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/loadgen"
	"github.com/hoard-io/hoard/internal/sim"
)

// agreementSpec: one instance, a 2 MiB cache (twelve of the trace's 160 KiB
// objects), a 3 s keep-alive (the trace pauses 10 s, and the hybrid
// histogram falls back on it with fewer than ten idle times).
const agreementSpec = `
name: agree
memory: 96MiB
timeout: 20s
keep_alive: 3s
max_instances: 1
buckets: {data: read-write}
cache: {budget: 2MiB, consistency: strong}
functions:
  read: {handler: fns.read}
`

// Agreement tolerances: the hit ratios may differ by this much (absolute);
// cold starts must be equal.
const agreementHitTolerance = 0.05

// TestSimulatorAgreesWithThePlatform replays one small trace live, with
// `hoard load --trace` against the platform, and through `hoard sim`'s
// simulator, and checks they agree on the hit ratio (within 5 points) and
// the cold starts (exactly). The trace (testdata/agreement/trace.csv) reads
// 30 objects, Zipf-like, more than the cache holds, in two bursts with an
// unload between them.
func TestSimulatorAgreesWithThePlatform(t *testing.T) {
	tracePath := filepath.Join("testdata", "agreement", "trace.csv")
	f, err := os.Open(tracePath)
	if err != nil {
		t.Fatal(err)
	}
	arrivals, err := loadgen.ParseTrace(f, tracePath)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	const objectSize = 160 << 10

	e := start(t)
	e.deploy(t, agreementSpec)
	for i := range 30 {
		e.put(t, "data", "obj"+twoDigits(i), strings.Repeat(string(rune('a'+i%26)), objectSize))
	}

	// Live: the CLI, reading the controller's address and token from a
	// state directory as after `hoard up`.
	dir := t.TempDir()
	env := "HOARD_CONTROLLER_URL=" + e.p.ControllerURL + "\nHOARD_CONTROLLER_TOKEN=" + e.cfg.ControllerToken + "\n"
	if err := os.WriteFile(filepath.Join(dir, "env"), []byte(env), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, hoardBinary(t), "load", "--trace", tracePath, "--dir", dir, "--concurrency", "1").CombinedOutput()
	if err != nil {
		t.Fatalf("hoard load: %v\n%s", err, out)
	}
	stats, err := e.p.Controller.Stats("agree")
	if err != nil {
		t.Fatal(err)
	}
	fs := stats["read"]
	if fs.Invocations != int64(len(arrivals)) || fs.Errors != 0 {
		t.Fatalf("live: %d invocations, %d errors; want %d, 0\n%s", fs.Invocations, fs.Errors, len(arrivals), out)
	}
	var liveReads, liveHits int64
	for access, rc := range fs.Reads {
		liveReads += rc.Count
		if access == "local_hit" || access == "remote_hit" {
			liveHits += rc.Count
		}
	}

	// Simulated: the same arrivals as events.
	var events []sim.Event
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, a := range arrivals {
		var ev struct {
			Bucket string   `json:"bucket"`
			Keys   []string `json:"keys"`
		}
		if err := json.Unmarshal(a.Event, &ev); err != nil {
			t.Fatal(err)
		}
		at := t0.Add(a.At)
		events = append(events, sim.Event{Time: at, Kind: sim.Invoke, App: a.Target.App, Duration: 100 * time.Millisecond, MemoryMB: 96})
		for _, k := range ev.Keys {
			events = append(events, sim.Event{Time: at, Kind: sim.Read, App: a.Target.App, Bucket: ev.Bucket, Key: k, Size: objectSize})
		}
	}
	rep, err := sim.Run(&sim.SliceSource{Events: events}, sim.Config{
		CacheSizes: []int64{2 << 20}, Policies: []sim.Eviction{{Policy: cache.PolicyOwnerLRU}},
		KeepAlives: []sim.KeepAlive{{Fixed: 3 * time.Second, Histogram: true}}, Lifecycle: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	c, k := rep.Caches[0], rep.KeepAlives[0]
	simHits := c.Outcomes["LH"].Count + c.Outcomes["RH"].Count

	liveRatio := float64(liveHits) / float64(liveReads)
	t.Logf("live: %d reads, %d hits (%.3f), %d cold starts; simulated: %d reads, %d hits (%.3f), %d cold starts",
		liveReads, liveHits, liveRatio, fs.ColdStarts, c.Reads.Count, simHits, c.HitRatio, k.ColdStarts)
	if liveReads != c.Reads.Count {
		t.Errorf("live read %d objects, the simulator %d", liveReads, c.Reads.Count)
	}
	if math.Abs(liveRatio-c.HitRatio) > agreementHitTolerance {
		t.Errorf("hit ratio: live %.3f, simulated %.3f: more than %.2f apart", liveRatio, c.HitRatio, agreementHitTolerance)
	}
	if fs.ColdStarts != k.ColdStarts {
		t.Errorf("cold starts: live %d, simulated %d", fs.ColdStarts, k.ColdStarts)
	}
	if k.ColdStarts < 2 || c.Evictions == 0 {
		t.Errorf("the trace should unload the instance once and overflow the cache: %d cold starts, %d evictions", k.ColdStarts, c.Evictions)
	}
}

func twoDigits(i int) string { return string(rune('0'+i/10)) + string(rune('0'+i%10)) }
