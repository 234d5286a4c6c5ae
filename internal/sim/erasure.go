package sim

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/hoard-io/hoard/internal/cacheconfig"
	"github.com/hoard-io/hoard/internal/erasure"
	"github.com/hoard-io/hoard/internal/ring"
)

// ErasureConfig replays erasure-coded placement and instance losses.
type ErasureConfig struct {
	// DataShards and ParityShards: k+r (cacheconfig.ParseShards).
	DataShards, ParityShards int
	// Threshold is the smallest object sharded; 0: 10 MB, the cachelet's
	// default.
	Threshold int64
	// LossRate is how often one instance is lost, per instance per hour
	// (a reclaimed or crashed function instance). 0: no losses.
	LossRate float64
	// Window is the repair window: how long a lost holder's shard stays
	// missing. 0: 1 minute (the rebuild after a departure).
	Window time.Duration
	// Seed picks the losses.
	Seed uint64
}

// DefaultErasureThreshold is the cachelet's default threshold (10 MB).
const DefaultErasureThreshold = 10_000_000

func (e *ErasureConfig) validate(instances int) error {
	if e.DataShards < 1 || e.ParityShards < 1 || e.DataShards+e.ParityShards > cacheconfig.MaxErasureShards {
		return fmt.Errorf("sim: erasure %d+%d: want K, R >= 1 and K+R <= %d", e.DataShards, e.ParityShards, cacheconfig.MaxErasureShards)
	}
	if e.DataShards+e.ParityShards > instances {
		return fmt.Errorf("sim: erasure %d+%d needs at least %d instances per application (--instances), have %d",
			e.DataShards, e.ParityShards, e.DataShards+e.ParityShards, instances)
	}
	if e.Threshold < 0 || e.Window < 0 || e.Window > 0 && e.Window < time.Second || e.LossRate < 0 || e.LossRate > 3600 {
		return errors.New("sim: erasure threshold must not be negative, the repair window at least 1s, the loss rate in [0, 3600] per instance per hour")
	}
	if e.Threshold == 0 {
		e.Threshold = DefaultErasureThreshold
	}
	if e.Window == 0 {
		e.Window = time.Minute
	}
	return nil
}

// erasureRun places every application's large objects on its ring with
// erasure.Place, as each cachelet does, and loses instances window by
// window: in each repair window every instance is lost with probability
// 1 - exp(-rate * window), independently, the model
// erasure.LossProbability assumes.
type erasureRun struct {
	cfg    ErasureConfig
	ring   *ring.Ring
	index  map[string]int // member name → instance
	n      int            // instances per application
	rng    *rand.Rand
	p      float64 // one instance lost within a window
	apps   map[string]*erasureApp
	order  []*erasureApp // apps in order of their first sharded object: the losses' draws follow it
	window int64         // windows begun so far
	next   time.Time

	objects, shards, lost int64
	shardBytes            int64
	windows               int64
}

type erasureApp struct {
	objects map[string]*codedObject // bucket + "/" + key
	held    []int64                 // shards per instance
	bytes   []int64                 // shard bytes per instance
	live    []*codedObject
}

type codedObject struct {
	holders []int
	from    int64 // the first window it lived through whole
	lost    bool
}

func newErasureRun(cfg ErasureConfig, names []string) (*erasureRun, error) {
	r, err := ring.New(ring.Config{}, names)
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	x := &erasureRun{cfg: cfg, ring: r, index: map[string]int{}, n: len(names),
		rng:  rand.New(rand.NewPCG(cfg.Seed, 0x65726173)),
		p:    lossInWindow(cfg.LossRate, cfg.Window),
		apps: map[string]*erasureApp{}}
	for i, n := range names {
		x.index[n] = i
	}
	return x, nil
}

func lossInWindow(perHour float64, w time.Duration) float64 {
	return -math.Expm1(-perHour / 3600 * w.Seconds())
}

// advance runs the loss windows that ended by t.
func (x *erasureRun) advance(t time.Time) {
	if x.next.IsZero() {
		x.next = t.Add(x.cfg.Window)
		return
	}
	lostNow := make([]bool, x.n)
	for !x.next.After(t) {
		x.next = x.next.Add(x.cfg.Window)
		x.window++
		x.windows++
		if x.p == 0 {
			continue
		}
		for _, a := range x.order {
			if len(a.live) == 0 {
				continue
			}
			down := 0
			for i := range lostNow {
				lostNow[i] = x.rng.Float64() < x.p
				if lostNow[i] {
					down++
				}
			}
			if down <= x.cfg.ParityShards {
				continue
			}
			keep := a.live[:0]
			for _, o := range a.live {
				gone := 0
				for _, h := range o.holders {
					if lostNow[h] {
						gone++
					}
				}
				if gone > x.cfg.ParityShards {
					o.lost = true
					x.lost++
					continue
				}
				keep = append(keep, o)
			}
			clear(a.live[len(keep):])
			a.live = keep
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
		a = &erasureApp{objects: map[string]*codedObject{}, held: make([]int64, x.n), bytes: make([]int64, x.n)}
		x.apps[e.App] = a
		x.order = append(x.order, a)
	}
	id := e.Bucket + "/" + e.Key
	if a.objects[id] != nil {
		return
	}
	k, r := x.cfg.DataShards, x.cfg.ParityShards
	ids := erasure.Place(x.ring, nil, e.Bucket, e.Key, k+r)
	o := &codedObject{from: x.window + 1}
	shard := (e.Size + int64(k) - 1) / int64(k)
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
		LossRatePerHour: x.cfg.LossRate, Window: x.cfg.Window.String(), Windows: x.windows,
		Objects: x.objects, ShardsPlaced: x.shards, ShardBytes: x.shardBytes, Lost: x.lost}
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
		for _, o := range a.objects {
			if w := x.window - o.from + 1; w > 0 {
				res.ExpectedLost += erasure.LossProbability(k, r, x.cfg.LossRate/3600, x.cfg.Window, time.Duration(w)*x.cfg.Window)
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
	Window          string  `json:"repair_window"`
	Windows         int64   `json:"windows"`
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
	// Lost: objects that lost more than r shards within one window;
	// ExpectedLost: the sum of erasure.LossProbability over the objects,
	// each over the windows it lived through.
	Lost          int64   `json:"lost"`
	LostShare     float64 `json:"lost_share"`
	ExpectedLost  float64 `json:"expected_lost"`
	ExpectedShare float64 `json:"expected_share"`
}
