package sim

import (
	"errors"
	"math"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/cache"
)

var t0 = time.Date(2020, 11, 30, 5, 0, 0, 0, time.UTC)

func read(sec int, key string, size int64) Event {
	return Event{Time: t0.Add(time.Duration(sec) * time.Second), Kind: Read, App: "app", Bucket: "b", Key: key, Size: size}
}

func run(t *testing.T, cfg Config, events ...Event) Report {
	t.Helper()
	r, err := Run(&SliceSource{Events: events}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestLRUHandComputed(t *testing.T) {
	v := func(e Event, version string) Event { e.Version = version; return e }
	w := read(12, "a", 40)
	w.Kind, w.Version = Write, "v3"
	r := run(t, Config{CacheSizes: []int64{100}, KeepAlives: []KeepAlive{}},
		read(1, "a", 40),           // LM
		read(2, "b", 40),           // LM
		read(3, "a", 40),           // LH; b is now the least recently used
		read(4, "c", 50),           // LM, evicts b
		read(5, "b", 40),           // LM, evicts a (c was used later)
		read(6, "c", 50),           // LH
		read(7, "d", 60),           // PT: above MaxObjectSize, budget/2
		v(read(8, "e", 10), "v1"),  // LM
		v(read(9, "e", 10), "v2"),  // LM: the cached version is stale
		v(read(10, "e", 10), "v2"), // LH
		w,                          // write a v3: cached at its owner
		v(read(13, "a", 40), "v3"), // LH
	)
	if len(r.Caches) != 1 || len(r.KeepAlives) != 0 {
		t.Fatalf("report has %d cache and %d keep-alive results", len(r.Caches), len(r.KeepAlives))
	}
	c := r.Caches[0]
	want := map[string]Tally{
		"LH": {4, 40 + 50 + 10 + 40},
		"LM": {6, 40 + 40 + 50 + 40 + 10 + 10},
		"PT": {1, 60},
		"RH": {}, "RM": {},
	}
	for k, w := range want {
		if c.Outcomes[k] != w {
			t.Errorf("%s: got %+v, want %+v", k, c.Outcomes[k], w)
		}
	}
	if c.Reads != (Tally{11, 390}) || c.Writes != (Tally{1, 40}) {
		t.Errorf("reads %+v, writes %+v", c.Reads, c.Writes)
	}
	if c.HitRatio != 4.0/11 || c.ByteHitRatio != 140.0/390 {
		t.Errorf("hit ratio %v, byte hit ratio %v", c.HitRatio, c.ByteHitRatio)
	}
	if c.StoreGets != 7 || c.StoreBytes != 250 {
		t.Errorf("store: %d GETs, %d bytes; want 7, 250", c.StoreGets, c.StoreBytes)
	}
	// b by c, a by b; e v1 was removed as stale, not evicted; a's write
	// of 40 bytes evicts nothing (b 40 + c 50 + e 10 = 100, a was gone).
	if c.Evictions != 3 {
		t.Errorf("evictions %d, want 3", c.Evictions)
	}
	wantCost := 7*DefaultPrices.S3Get + 1*DefaultPrices.S3Put
	if c.CostUSD != wantCost {
		t.Errorf("cost %v, want %v", c.CostUSD, wantCost)
	}
	// The cache's memory: 100 bytes from the first access (1 s) to the
	// last (13 s), priced as function memory.
	if wantGBs := 100.0 / (1 << 30) * 12; math.Abs(c.CacheGBs-wantGBs) > 1e-18 || c.CacheCostUSD != c.CacheGBs*DefaultPrices.LambdaGBSecond || c.TotalCostUSD != c.CostUSD+c.CacheCostUSD {
		t.Errorf("cache %.3g GB-s ($%g), total $%g; want %.3g GB-s", c.CacheGBs, c.CacheCostUSD, c.TotalCostUSD, wantGBs)
	}
}

// Without hoard's size cap an object up to the whole budget is cached:
// the 60-byte read that passes through a 100-byte cache is filled, and
// pushes out what it needs.
func TestNoSizeCap(t *testing.T) {
	events := []Event{read(0, "a", 40), read(1, "d", 60), read(2, "d", 60), read(3, "a", 40)}
	capped := run(t, Config{CacheSizes: []int64{100}, KeepAlives: []KeepAlive{}}, events...).Caches[0]
	open := run(t, Config{CacheSizes: []int64{100}, KeepAlives: []KeepAlive{}, NoSizeCap: true}, events...).Caches[0]
	if capped.Outcomes["PT"].Count != 2 || capped.Outcomes["LH"].Count != 1 {
		t.Fatalf("capped: %+v", capped.Outcomes)
	}
	// d fits beside a (40 + 60 = 100): a miss, then a hit, and a stays.
	if open.Outcomes["PT"].Count != 0 || open.Outcomes["LH"].Count != 2 || open.Outcomes["LM"].Count != 2 {
		t.Fatalf("no cap: %+v", open.Outcomes)
	}
}

func TestTTLPolicyExpiresOnTheSimulatedClock(t *testing.T) {
	r := run(t, Config{CacheSizes: []int64{1000}, Policies: []Eviction{{Policy: cache.PolicyTTL, TTL: time.Minute}}, KeepAlives: []KeepAlive{}},
		read(0, "a", 10),  // LM
		read(30, "a", 10), // LH
		read(61, "a", 10), // LM: expired at 60 s
	)
	c := r.Caches[0]
	if c.Outcomes["LH"].Count != 1 || c.Outcomes["LM"].Count != 2 {
		t.Fatalf("outcomes %+v", c.Outcomes)
	}
}

func TestRingPlacement(t *testing.T) {
	s, err := New(Config{CacheSizes: []int64{1 << 20}, Instances: 2, KeepAlives: []KeepAlive{}})
	if err != nil {
		t.Fatal(err)
	}
	// Invocation identifiers served by instance 0 and 1.
	var on [2]uint64
	for id := uint64(1); on[0] == 0 || on[1] == 0; id++ {
		if i := s.instance(id, 2); on[i] == 0 {
			on[i] = id
		}
	}
	// Keys owned by instance 0 and 1.
	var owned [2]string
	for n := 0; owned[0] == "" || owned[1] == ""; n++ {
		k := "k" + strconv.Itoa(n)
		if o := s.owner(2, "b", k); owned[o] == "" {
			owned[o] = k
		}
	}
	step := func(sec int, inst int, key string) {
		t.Helper()
		e := read(sec, key, 100)
		e.Invocation = on[inst]
		if err := s.Step(e); err != nil {
			t.Fatal(err)
		}
	}
	step(1, 0, owned[1])     // RM: the owner fetches, the reader keeps a copy
	step(2, 1, owned[1])     // LH at the owner
	step(3, 0, owned[1])     // LH: the copy
	step(4, 1, owned[1])     // LH
	step(5, 1, owned[0])     // RM
	step(6, 0, owned[0])     // LH at the owner
	step(7, 0, owned[0]+"x") // a fresh key: whoever owns it, one miss
	c := s.Report().Caches[0]
	if got := c.Outcomes["RM"].Count + c.Outcomes["LM"].Count; got != 3 {
		t.Errorf("misses %d, want 3 (%+v)", got, c.Outcomes)
	}
	if c.Outcomes["LH"].Count != 4 || c.Outcomes["RH"].Count != 0 {
		t.Errorf("outcomes %+v", c.Outcomes)
	}
}

func TestRemoteHit(t *testing.T) {
	s, err := New(Config{CacheSizes: []int64{1 << 20}, Instances: 2, KeepAlives: []KeepAlive{}})
	if err != nil {
		t.Fatal(err)
	}
	var key string
	for n := 0; key == ""; n++ {
		if k := "k" + strconv.Itoa(n); s.owner(2, "b", k) == 1 {
			key = k
		}
	}
	var on [2]uint64
	for id := uint64(1); on[0] == 0 || on[1] == 0; id++ {
		if i := s.instance(id, 2); on[i] == 0 {
			on[i] = id
		}
	}
	for i, inst := range []int{1, 0, 0} { // LM at the owner, RH, then LH from the copy
		e := read(i, key, 100)
		e.Invocation = on[inst]
		if err := s.Step(e); err != nil {
			t.Fatal(err)
		}
	}
	c := s.Report().Caches[0]
	if c.Outcomes["LM"].Count != 1 || c.Outcomes["RH"].Count != 1 || c.Outcomes["LH"].Count != 1 || c.StoreGets != 1 {
		t.Fatalf("outcomes %+v, store GETs %d", c.Outcomes, c.StoreGets)
	}
}

func invoke(at time.Duration, dur time.Duration) Event {
	return Event{Time: t0.Add(at), Kind: Invoke, App: "f", Duration: dur, MemoryMB: 1024}
}

func TestFixedKeepAliveHandComputed(t *testing.T) {
	r := run(t, Config{CacheSizes: []int64{}, KeepAlives: []KeepAlive{{Fixed: 10 * time.Minute}}},
		invoke(0, time.Minute),              // cold
		invoke(5*time.Minute, time.Minute),  // warm: idle 4 min, loaded
		invoke(5*time.Minute, time.Minute),  // warm: one is running
		invoke(30*time.Minute, time.Minute), // cold: unloaded at 16 min after 10 idle ones
	)
	k := r.KeepAlives[0]
	if k.Invocations != 4 || k.ColdStarts != 2 || k.Apps != 1 || k.AppsAlwaysCold != 0 {
		t.Fatalf("%+v", k)
	}
	if want := (4 + 10) * 60.0; k.WastedGBs != want {
		t.Fatalf("wasted %v GB-s, want %v", k.WastedGBs, want)
	}
	if k.CostUSD != k.WastedGBs*DefaultPrices.LambdaGBSecond {
		t.Fatalf("cost %v", k.CostUSD)
	}
}

func TestHistogramKeepAliveHandComputed(t *testing.T) {
	// Invoked every 30 minutes, for no time: idle times of 30 minutes.
	var events []Event
	for i := range 20 {
		events = append(events, invoke(time.Duration(i)*30*time.Minute, 0))
	}
	r := run(t, Config{CacheSizes: []int64{}, KeepAlives: []KeepAlive{{Fixed: 10 * time.Minute}, {Fixed: 10 * time.Minute, Histogram: true}}}, events...)
	fixed, hist := r.KeepAlives[0], r.KeepAlives[1]
	if fixed.ColdStarts != 20 || fixed.WastedGBs != 19*10*60 || fixed.AppsAlwaysCold != 1 {
		t.Errorf("fixed: %+v", fixed)
	}
	// The histogram needs 10 idle times (MinSamples), which the 11th
	// invocation completes; from the 12th on the instance is loaded from
	// 27 to 33 minutes after each end (the 30th minute's bin, 10% margin)
	// and the invocation finds it warm, 3 minutes into the window.
	if hist.ColdStarts != 11 {
		t.Errorf("histogram: %d cold starts, want 11", hist.ColdStarts)
	}
	if want := (10*10 + 9*3) * 60.0; hist.WastedGBs != want {
		t.Errorf("histogram: wasted %v GB-s, want %v", hist.WastedGBs, want)
	}
}

func TestStepErrors(t *testing.T) {
	s, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Step(read(10, "a", 1)); err != nil {
		t.Fatal(err)
	}
	if err := s.Step(read(5, "a", 1)); !errors.Is(err, ErrOutOfOrder) {
		t.Errorf("earlier event: %v", err)
	}
	if err := s.Step(Event{Time: t0.Add(time.Hour)}); err == nil {
		t.Error("event of no kind accepted")
	}
	if err := s.Step(read(3600, "a", -1)); err == nil {
		t.Error("negative size accepted")
	}
}

func TestParsePolicies(t *testing.T) {
	for in, want := range map[string]string{"lru": "owner-lru", "size-aware": "size-aware", "ttl:5m": "ttl:5m0s",
		"gdsf": "gdsf", "s3-fifo": "s3-fifo", "w-tinylfu": "w-tinylfu"} {
		e, err := ParseEviction(in)
		if err != nil || e.String() != want {
			t.Errorf("ParseEviction(%q) = %v, %v; want %s", in, e, err, want)
		}
	}
	var names []string
	for _, e := range UntimedEvictions() {
		names = append(names, e.String())
	}
	if got := strings.Join(names, ","); got != "owner-lru,size-aware,gdsf,s3-fifo,w-tinylfu" {
		t.Errorf("UntimedEvictions = %s", got)
	}
	for _, bad := range []string{"fifo", "ttl", "ttl:-1s", "lru:3", "gdsf:2"} {
		if _, err := ParseEviction(bad); err == nil {
			t.Errorf("ParseEviction(%q) accepted", bad)
		}
	}
	for in, want := range map[string]string{"fixed:10m": "fixed:10m", "histogram": "histogram:10m", "histogram:1h": "histogram:1h"} {
		k, err := ParseKeepAlive(in)
		if err != nil || k.String() != want {
			t.Errorf("ParseKeepAlive(%q) = %v, %v; want %s", in, k, err, want)
		}
	}
	for _, bad := range []string{"fixed", "always", "fixed:0s", "histogram:x"} {
		if _, err := ParseKeepAlive(bad); err == nil {
			t.Errorf("ParseKeepAlive(%q) accepted", bad)
		}
	}
}

// The prices are cost.py's: the simulator and hoard bench's cost model
// must not drift apart.
func TestPricesAreTheCostModels(t *testing.T) {
	src, err := os.ReadFile("../../python/hoard_bench/cost.py")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]float64{
		"lambda_gb_s": DefaultPrices.LambdaGBSecond, "s3_get": DefaultPrices.S3Get, "s3_put": DefaultPrices.S3Put,
	} {
		m := regexp.MustCompile(`(?m)^\s*` + name + `: float = ([0-9.e-]+)(?: / ([0-9.e]+))?`).FindSubmatch(src)
		if m == nil {
			t.Fatalf("cost.py has no %s", name)
		}
		got, _ := strconv.ParseFloat(string(m[1]), 64)
		if len(m[2]) > 0 {
			d, _ := strconv.ParseFloat(string(m[2]), 64)
			got /= d
		}
		if math.Abs(got-want) > 1e-12*want {
			t.Errorf("%s: cost.py says %v, sim %v", name, got, want)
		}
	}
}

// Replaying a split config part by part and merging gives Run's report.
func TestSplitMerge(t *testing.T) {
	g := func() Source {
		g, err := NewGenerator(GenConfig{Seed: 5, Apps: 100, MaxEvents: 30_000})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	for _, lifecycle := range []bool{false, true} {
		cfg := Config{Policies: []Eviction{{Policy: cache.PolicyOwnerLRU}, {Policy: cache.PolicySizeAware}}, Instances: 2, Lifecycle: lifecycle, PreWarm: lifecycle}
		whole, err := Run(g(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		parts := cfg.Split(3)
		if len(parts) != 3 {
			t.Fatalf("%d parts", len(parts))
		}
		var reports []Report
		for _, p := range parts {
			r, err := Run(g(), p)
			if err != nil {
				t.Fatal(err)
			}
			reports = append(reports, r)
		}
		merged := Merge(reports)
		if !reflect.DeepEqual(merged, whole) {
			t.Fatalf("lifecycle %v: merged report differs:\n%+v\nwhole:\n%+v", lifecycle, merged, whole)
		}
		if len(whole.Caches) != 14 || whole.Caches[13].Policy != "size-aware" || whole.Caches[13].CacheBytes != 128<<20 {
			t.Fatalf("caches out of order: %+v", whole.Caches[13])
		}
	}
}
