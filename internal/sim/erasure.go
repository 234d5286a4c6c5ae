package sim

import (
	"container/heap"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/hoard-io/hoard/internal/cacheconfig"
	"github.com/hoard-io/hoard/internal/erasure"
	"github.com/hoard-io/hoard/internal/ring"
)

// ErasureConfig replays erasure-coded placement, instance losses and the
// rebuilds that follow them.
type ErasureConfig struct {
	// DataShards and ParityShards: k+r (cacheconfig.ParseShards).
	DataShards, ParityShards int
	// Threshold is the smallest object sharded; 0: 10 MB, the cachelet's
	// default.
	Threshold int64
	// LossRate is how often one instance is lost, per instance per hour
	// (a reclaimed or crashed function instance): each instance of an
	// application holding shards departs at exponential intervals of this
	// mean rate, and a replacement takes its place on the ring at once,
	// holding none. 0: no losses.
	LossRate float64
	// Lease is how long a departure goes unnoticed (the membership's
	// lease); 0: DefaultLease.
	Lease time.Duration
	// RebuildDelay is how long a rebuild waits after the departure is
	// noticed (the cachelet's rebuild_delay); 0: 1 s.
	RebuildDelay time.Duration
	// RebuildRate bounds the bytes a second one cachelet sends as it
	// rebuilds (the cachelet's rebuild_rate); 0: 64 MiB/s.
	RebuildRate int64
	// Seed picks the losses.
	Seed uint64
}

// DefaultErasureThreshold is the cachelet's default threshold (10 MB).
const DefaultErasureThreshold = 10_000_000

// DefaultLease is membership's lease (membership.DefaultTTL): a departed
// member leaves the ring when its lease runs out.
const DefaultLease = 5 * time.Second

func (e *ErasureConfig) validate(instances int) error {
	if e.DataShards < 1 || e.ParityShards < 1 || e.DataShards+e.ParityShards > cacheconfig.MaxErasureShards {
		return fmt.Errorf("sim: erasure %d+%d: want K, R >= 1 and K+R <= %d", e.DataShards, e.ParityShards, cacheconfig.MaxErasureShards)
	}
	if e.DataShards+e.ParityShards > instances {
		return fmt.Errorf("sim: erasure %d+%d needs at least %d instances per application (--instances), have %d",
			e.DataShards, e.ParityShards, e.DataShards+e.ParityShards, instances)
	}
	if e.Threshold < 0 || e.Lease < 0 || e.RebuildDelay < 0 || e.RebuildRate < 0 || e.LossRate < 0 || e.LossRate > 3600 {
		return errors.New("sim: erasure threshold, lease, rebuild delay and rate must not be negative, the loss rate in [0, 3600] per instance per hour")
	}
	if e.Threshold == 0 {
		e.Threshold = DefaultErasureThreshold
	}
	if e.Lease == 0 {
		e.Lease = DefaultLease
	}
	if e.RebuildDelay == 0 {
		e.RebuildDelay = time.Second
	}
	if e.RebuildRate == 0 {
		e.RebuildRate = 64 << 20
	}
	return nil
}

// erasureRun places every application's large objects on its ring with
// erasure.Place, as each cachelet does, and replays departures and
// rebuilds as events. When an instance departs, each of its shards is
// missing until rebuilt: after the lease and the rebuild delay, the first
// holder of the object's placement still holding its shard rebuilds it,
// one shard after another at the rebuild rate, as the cachelet's rebuild
// pass does; a rebuilder that departs hands its unfinished rebuilds to
// the next holder. An object is lost when more than r of its shards are
// missing at once.
type erasureRun struct {
	cfg    ErasureConfig
	ring   *ring.Ring
	index  map[string]int // member name → instance
	n      int            // instances per application
	rng    *rand.Rand
	rate   float64 // losses per instance-second
	apps   map[string]*erasureApp
	order  []*erasureApp // apps in order of their first sharded object
	losses lossHeap      // each instance's next departure
	now    time.Time

	objects, shards, lost int64
	shardBytes            int64
	departures, rebuilt   int64
	repairSeconds         float64 // the rebuilt shards' time missing
}

type erasureApp struct {
	idx     int                     // in order
	objects map[string]*codedObject // bucket + "/" + key
	held    []int64                 // shards per instance
	bytes   []int64                 // shard bytes per instance
	live    []*codedObject
	busy    []time.Time // per instance: when its rebuilds queued so far end
}

type codedObject struct {
	holders []int
	missing []time.Time // per holder: missing until (zero: held)
	by      []int       // per holder: who rebuilds it while missing
	lostAt  []time.Time // per holder: when it went missing
	shard   int64
	since   time.Time
	lost    bool
}

// unscheduled marks a shard missing with no rebuild planned yet.
var unscheduled = time.Unix(1<<62, 0)

type loss struct {
	at   time.Time
	app  *erasureApp
	inst int
}

type lossHeap []loss

func (h lossHeap) Len() int { return len(h) }
func (h lossHeap) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	if h[i].app.idx != h[j].app.idx {
		return h[i].app.idx < h[j].app.idx
	}
	return h[i].inst < h[j].inst
}
func (h lossHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *lossHeap) Push(x any)   { *h = append(*h, x.(loss)) }
func (h *lossHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func newErasureRun(cfg ErasureConfig, names []string) (*erasureRun, error) {
	r, err := ring.New(ring.Config{}, names)
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	x := &erasureRun{cfg: cfg, ring: r, index: map[string]int{}, n: len(names),
		rng:  rand.New(rand.NewPCG(cfg.Seed, 0x65726173)),
		rate: cfg.LossRate / 3600,
		apps: map[string]*erasureApp{}}
	for i, n := range names {
		x.index[n] = i
	}
	return x, nil
}

// nextLoss schedules instance i of a's next departure after t.
func (x *erasureRun) nextLoss(a *erasureApp, i int, t time.Time) {
	if x.rate <= 0 {
		return
	}
	d := x.rng.ExpFloat64() / x.rate
	if d > 1e9 { // beyond any trace: never
		return
	}
	heap.Push(&x.losses, loss{at: t.Add(time.Duration(d * float64(time.Second))), app: a, inst: i})
}

// advance replays the departures due by t, in time order.
func (x *erasureRun) advance(t time.Time) {
	for len(x.losses) > 0 && !x.losses[0].at.After(t) {
		l := heap.Pop(&x.losses).(loss)
		x.depart(l.app, l.inst, l.at)
		x.nextLoss(l.app, l.inst, l.at)
	}
	x.now = t
}

// depart replays instance i of a departing at t: its shards go missing,
// the rebuilds it was to do pass to the next holder, and objects with
// more than r shards missing are lost.
func (x *erasureRun) depart(a *erasureApp, i int, t time.Time) {
	x.departures++
	a.busy[i] = time.Time{} // its replacement starts with no rebuilds queued
	r := x.cfg.ParityShards
	keep := a.live[:0]
	for _, o := range a.live {
		touched := false
		for q, h := range o.holders {
			switch {
			case h == i && !o.missing[q].After(t):
				o.missing[q], o.lostAt[q] = unscheduled, t
				touched = true
			case o.missing[q].After(t) && o.by[q] == i:
				o.missing[q] = unscheduled
				touched = true
			}
		}
		if !touched {
			keep = append(keep, o)
			continue
		}
		gone := 0
		for _, m := range o.missing {
			if m.After(t) {
				gone++
			}
		}
		if gone > r {
			o.lost = true
			x.lost++
			continue
		}
		// The rebuilder: the first holder of the placement with its shard.
		rb := -1
		for q, m := range o.missing {
			if !m.After(t) {
				rb = o.holders[q]
				break
			}
		}
		for q, m := range o.missing {
			if m != unscheduled {
				continue
			}
			start := t.Add(x.cfg.Lease + x.cfg.RebuildDelay)
			if a.busy[rb].After(start) {
				start = a.busy[rb]
			}
			done := start.Add(time.Duration(float64(o.shard) / float64(x.cfg.RebuildRate) * float64(time.Second)))
			a.busy[rb] = done
			o.missing[q], o.by[q] = done, rb
		}
		keep = append(keep, o)
	}
	clear(a.live[len(keep):])
	a.live = keep
	// Count each rebuild as it is planned, over its whole time missing.
	for _, o := range a.live {
		for q, m := range o.missing {
			if m.After(t) && o.lostAt[q].Equal(t) && o.holders[q] == i {
				x.rebuilt++
				x.repairSeconds += m.Sub(t).Seconds()
			}
		}
	}
}

// read shards e's object at its first read, if it is large enough.
func (x *erasureRun) read(e *Event) {
	if e.Size < x.cfg.Threshold {
		return
	}
	a := x.apps[e.App]
	if a == nil {
		a = &erasureApp{idx: len(x.order), objects: map[string]*codedObject{}, held: make([]int64, x.n), bytes: make([]int64, x.n), busy: make([]time.Time, x.n)}
		x.apps[e.App] = a
		x.order = append(x.order, a)
		for i := range x.n {
			x.nextLoss(a, i, e.Time)
		}
	}
	id := e.Bucket + "/" + e.Key
	if a.objects[id] != nil {
		return
	}
	k, r := x.cfg.DataShards, x.cfg.ParityShards
	ids := erasure.Place(x.ring, nil, e.Bucket, e.Key, k+r)
	shard := (e.Size + int64(k) - 1) / int64(k)
	o := &codedObject{missing: make([]time.Time, k+r), by: make([]int, k+r), lostAt: make([]time.Time, k+r), shard: shard, since: e.Time}
	for _, m := range ids {
		i := x.index[m]
		o.holders = append(o.holders, i)
		a.held[i]++
		a.bytes[i] += shard
	}
	a.objects[id] = o
	a.live = append(a.live, o)
	x.objects++
	x.shards += int64(len(ids))
	x.shardBytes += shard * int64(len(ids))
}

func (x *erasureRun) result() *ErasureResult {
	k, r := x.cfg.DataShards, x.cfg.ParityShards
	res := &ErasureResult{Shards: strconv.Itoa(k) + "+" + strconv.Itoa(r), Threshold: x.cfg.Threshold,
		LossRatePerHour: x.cfg.LossRate, Lease: x.cfg.Lease.String(), RebuildRate: x.cfg.RebuildRate,
		Objects: x.objects, ShardsPlaced: x.shards, ShardBytes: x.shardBytes, Lost: x.lost,
		Departures: x.departures, ShardsRebuilt: x.rebuilt}
	// The model's repair window is the mean time a shard was missing,
	// or, with none rebuilt, the lease and the delay.
	window := x.cfg.Lease + x.cfg.RebuildDelay
	if x.rebuilt > 0 {
		res.MeanRepairSeconds = x.repairSeconds / float64(x.rebuilt)
		window = time.Duration(res.MeanRepairSeconds * float64(time.Second))
	}
	res.Window = window.Round(time.Millisecond).String()
	first := true
	var instances int64
	for _, a := range x.order {
		for i := range a.held {
			instances++
			if first || a.held[i] < res.ShardsPerInstance.Min {
				res.ShardsPerInstance.Min = a.held[i]
			}
			if first || a.held[i] > res.ShardsPerInstance.Max {
				res.ShardsPerInstance.Max = a.held[i]
			}
			res.MaxShardBytes = max(res.MaxShardBytes, a.bytes[i])
			first = false
		}
	}
	// One chain for every object's life (the same code, rate and window).
	var longest time.Duration
	for _, a := range x.order {
		for _, o := range a.objects {
			longest = max(longest, x.now.Sub(o.since))
		}
	}
	curve := erasure.NewLossCurve(k, r, x.rate, window, longest)
	for _, a := range x.order {
		for _, o := range a.objects {
			if life := x.now.Sub(o.since); life > 0 {
				res.ExpectedLost += curve.At(life)
			}
		}
	}
	if instances > 0 {
		res.ShardsPerInstance.Mean = float64(x.shards) / float64(instances)
	}
	res.LostShare = ratio(res.Lost, res.Objects)
	if res.Objects > 0 {
		res.ExpectedShare = res.ExpectedLost / float64(res.Objects)
	}
	return res
}

// ErasureResult is what erasure-coded placement did over the trace.
type ErasureResult struct {
	Shards          string  `json:"shards"`
	Threshold       int64   `json:"threshold_bytes"`
	LossRatePerHour float64 `json:"loss_rate_per_instance_hour"`
	Lease           string  `json:"lease"`
	RebuildRate     int64   `json:"rebuild_rate"`
	// Departures of instances holding shards, the shards rebuilt after
	// them, and the mean time one was missing (lease, delay, queue and
	// sending): the repair window Window gives erasure.LossProbability.
	Departures        int64   `json:"departures"`
	ShardsRebuilt     int64   `json:"shards_rebuilt"`
	MeanRepairSeconds float64 `json:"mean_repair_s"`
	Window            string  `json:"repair_window"`
	// Objects sharded (each application's objects of the threshold and
	// up, at their first read) and their shards.
	Objects      int64 `json:"objects"`
	ShardsPlaced int64 `json:"shards_placed"`
	ShardBytes   int64 `json:"shard_bytes"`
	// ShardsPerInstance over every application's instances; MaxShardBytes
	// is the most shard bytes one instance held.
	ShardsPerInstance struct {
		Min  int64   `json:"min"`
		Mean float64 `json:"mean"`
		Max  int64   `json:"max"`
	} `json:"shards_per_instance"`
	MaxShardBytes int64 `json:"max_shard_bytes"`
	// Lost: objects that had more than r shards missing at once;
	// ExpectedLost: the sum of erasure.LossProbability over the objects,
	// each over its life, with the repair window Window (the model of
	// the same rule with every shard's repair taking Window; rebuilds
	// queued behind others take longer than the mean, and objects that
	// share holders are lost together, which it leaves out).
	Lost          int64   `json:"lost"`
	LostShare     float64 `json:"lost_share"`
	ExpectedLost  float64 `json:"expected_lost"`
	ExpectedShare float64 `json:"expected_share"`
}
