package sim

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/cacheconfig"
	"github.com/hoard-io/hoard/internal/predict"
)

// Config says what to compare.
type Config struct {
	// CacheSizes are the per-instance cache budgets to try, in bytes.
	// Default (nil): DefaultCacheSizes.
	CacheSizes []int64
	// Policies are the eviction policies to try, each at every size.
	// Default (nil): plain LRU (cache.PolicyOwnerLRU) alone.
	Policies []Eviction
	// Runs are the (policy, size) pairs replayed. Default (nil): every
	// Policies × CacheSizes, policy by policy.
	Runs []CacheRun
	// KeepAlives are the keep-alive policies to try. Default (nil):
	// DefaultKeepAlives.
	KeepAlives []KeepAlive
	// Instances is how many instances each application has. Default (0): 1.
	Instances int
	// NoSizeCap lets a cache admit objects up to its whole budget, where
	// hoard's cap (the cache's default MaxObjectSize) is half of it.
	NoSizeCap bool
	// Admission replays admission by predicted benefit (cache.admission:
	// benefit): per function, whether its misses are kept, from its
	// recent invocations' modelled data time against their run time.
	Admission bool
	// MemoryMB is the memory of an instance whose invocations do not say.
	// Default (0): DefaultMemoryMB.
	MemoryMB int
	// Prices price the results. Default (zero): DefaultPrices.
	Prices Prices
	// Lifecycle ties each cache to its instance under the first of
	// KeepAlives: when the instance is unloaded its cache is lost, and
	// the instance that is loaded again starts empty. Without it, caches
	// outlive their instances (as a separate cache tier would). Needs
	// Invoke events (the blob and access-log formats have none: their
	// instances are never unloaded).
	Lifecycle bool
	// PreWarm, with Lifecycle, fills a reloaded instance's cache before
	// its first invocation runs with what package prewarm selects from
	// the access records saved at the application's earlier unloads, as
	// the controller does (prewarm's defaults, bounded by the cache's
	// size).
	PreWarm bool
	// VoteInterval, when positive, runs a round of the cache-size scaling
	// policy's votes (scaling.CacheVote) every so often, per application,
	// from its instances' reads and evictions of owned objects evicted
	// before, as the controller does (its default round is 5 s). The
	// votes are tallied and, with Scale, acted on. Default (0): no votes.
	VoteInterval time.Duration
	// With VoteInterval the compute policy (scaling.ComputeVote) votes
	// too, over invocations run on the instances Concurrency at a time
	// (0: 1, the worker's), an instance taking LoadTime (0:
	// DefaultLoadTime) to start, against LatencyTarget (0: none, the
	// spec's default); and a miss of a large object is planned by the
	// bandwidth policy (scaling.PlanBandwidth), whose scale-out is an
	// urgent vote.
	Concurrency   int
	LoadTime      time.Duration
	LatencyTarget time.Duration
	// Scale applies the votes (needs VoteInterval): each round, an
	// application's votes go through scaling.Combine, as the
	// controller's, and instances are added (an empty cache, a share of
	// the ring) or removed (the last, with its cache; never one running
	// an invocation), between 1 and MaxInstances (0:
	// DefaultMaxInstances). An invocation that finds no free slot starts
	// an instance below MaxInstances, as the controller's acquire does.
	Scale        bool
	MaxInstances int
	// Predict replays memory prediction over the invocations that carry a
	// peak (Event.Peak): Prediction configures the models (zero: the
	// controller's defaults), SlackPool is each application's slack pool
	// (0: DefaultSlackPool; negative: none).
	Predict    bool
	Prediction predict.Config
	SlackPool  int64
	// Erasure, when set, places objects of its threshold and up as coded
	// shards and replays instance losses (ErasureConfig).
	Erasure *ErasureConfig
	// Access models each read's time by its outcome, to report the share
	// of data-access time saved against reading the store directly
	// (CacheResult.Improvement). Default (zero): DefaultAccessModel.
	Access AccessModel
	// Sweep, when set, sweeps every cache every Sweep.MinAge with its
	// rule (cache.Sweep), as each cachelet's sweeper does; pre-warmed and
	// written objects are marked unread (cache.MarkUnread), as the
	// cachelet marks them. Default (nil): no sweep.
	Sweep *cache.SweepRule
	// SweepFromAdmission, with Sweep, marks nothing unread: every object
	// faces the read count a period after it came in, pre-warmed and
	// written ones too (the rule before they were spared until their
	// first read), to measure what sparing them does.
	SweepFromAdmission bool
	// HeldEvery, when positive, samples the bytes every cache holds that
	// often, for CacheResult.MeanHeldBytes. Default (0): not sampled.
	HeldEvery time.Duration
}

// CacheRun is one cache configuration: an eviction policy at a size.
type CacheRun struct {
	Policy Eviction
	Size   int64
}

// DefaultCacheSizes span Faa$T's Fig. 11, 1 KB to 128 MB, by factors of 8.
var DefaultCacheSizes = []int64{1 << 10, 8 << 10, 64 << 10, 512 << 10, 4 << 20, 32 << 20, 128 << 20}

// DefaultMemoryMB is the instance memory assumed when a trace gives none:
// the smallest Lambda size the cost model knows.
const DefaultMemoryMB = 128

// DefaultKeepAlives compare a fixed 10-minute keep-alive, the common
// platform default of Shahrad et al.'s comparison, with hoard's hybrid
// histogram falling back to it.
func DefaultKeepAlives() []KeepAlive {
	return []KeepAlive{{Fixed: 10 * time.Minute}, {Fixed: 10 * time.Minute, Histogram: true}}
}

// Eviction is one eviction policy of the cache under study.
type Eviction struct {
	Policy cache.Policy
	// TTL is PolicyTTL's lifetime; only with it.
	TTL time.Duration
}

func (e Eviction) String() string {
	if e.Policy == cache.PolicyTTL {
		return fmt.Sprintf("%s:%s", e.Policy, e.TTL)
	}
	return string(e.Policy)
}

// UntimedEvictions returns every eviction policy that needs no argument
// (all but ttl), the default first.
func UntimedEvictions() []Eviction {
	var out []Eviction
	for _, p := range cacheconfig.Policies() {
		if p != cache.PolicyTTL {
			out = append(out, Eviction{Policy: p})
		}
	}
	return out
}

// ParseEviction reads a policy name as cacheconfig knows it, "ttl:5m"
// for the TTL policy, or "lru" for owner-lru (plain LRU with one owner).
func ParseEviction(s string) (Eviction, error) {
	name, arg, hasArg := strings.Cut(strings.TrimSpace(s), ":")
	if name == "lru" {
		name = string(cache.PolicyOwnerLRU)
	}
	p, err := cacheconfig.ParsePolicy(name)
	if err != nil {
		return Eviction{}, fmt.Errorf("sim: eviction policy %q: %w", s, err)
	}
	e := Eviction{Policy: p}
	switch {
	case p == cache.PolicyTTL:
		if !hasArg {
			return Eviction{}, fmt.Errorf("sim: eviction policy %q: ttl needs a lifetime, as in ttl:10m", s)
		}
		if e.TTL, err = time.ParseDuration(arg); err != nil || e.TTL <= 0 {
			return Eviction{}, fmt.Errorf("sim: eviction policy %q: bad lifetime %q", s, arg)
		}
	case hasArg:
		return Eviction{}, fmt.Errorf("sim: eviction policy %q takes no argument", s)
	}
	return e, nil
}

// KeepAlive is one keep-alive policy under study.
type KeepAlive struct {
	// Fixed is the keep-alive after an invocation ends; with Histogram,
	// the fallback of the histogram's "fixed" modes.
	Fixed time.Duration
	// Histogram selects the hybrid histogram (package keepalive with its
	// defaults).
	Histogram bool
}

func (k KeepAlive) String() string {
	if k.Histogram {
		return "histogram:" + fmtDuration(k.Fixed)
	}
	return "fixed:" + fmtDuration(k.Fixed)
}

// ParseKeepAlive reads "fixed:10m" or "histogram" ("histogram:20m" names
// the fallback, default 10m).
func ParseKeepAlive(s string) (KeepAlive, error) {
	name, arg, hasArg := strings.Cut(strings.TrimSpace(s), ":")
	k := KeepAlive{Fixed: 10 * time.Minute}
	switch name {
	case "fixed":
		if !hasArg {
			return KeepAlive{}, fmt.Errorf("sim: keep-alive policy %q: fixed needs a duration, as in fixed:10m", s)
		}
	case "histogram":
		k.Histogram = true
	default:
		return KeepAlive{}, fmt.Errorf("sim: unknown keep-alive policy %q (valid: fixed:<duration>, histogram[:<fallback>])", s)
	}
	if hasArg {
		d, err := time.ParseDuration(arg)
		if err != nil || d <= 0 {
			return KeepAlive{}, fmt.Errorf("sim: keep-alive policy %q: bad duration %q", s, arg)
		}
		k.Fixed = d
	}
	return k, nil
}

// Validate checks the config and fills in defaults.
func (c *Config) Validate() error {
	if s := c.Sweep; s != nil && (s.MinAge <= 0 || s.MinReads < 0 || s.Idle <= 0) {
		return fmt.Errorf("sim: a sweep needs a positive period (MinAge) and idle time, and reads not negative")
	}
	if c.HeldEvery < 0 {
		return fmt.Errorf("sim: HeldEvery must not be negative")
	}
	if c.CacheSizes == nil {
		c.CacheSizes = DefaultCacheSizes
	}
	for _, s := range c.CacheSizes {
		if s <= 0 {
			return fmt.Errorf("sim: cache size %d must be positive", s)
		}
	}
	if c.Policies == nil {
		c.Policies = []Eviction{{Policy: cache.PolicyOwnerLRU}}
	}
	if c.Runs == nil {
		c.Runs = []CacheRun{}
		for _, p := range c.Policies {
			for _, s := range c.CacheSizes {
				c.Runs = append(c.Runs, CacheRun{p, s})
			}
		}
	}
	for _, r := range c.Runs {
		if r.Size <= 0 {
			return fmt.Errorf("sim: cache size %d must be positive", r.Size)
		}
	}
	if c.KeepAlives == nil {
		c.KeepAlives = DefaultKeepAlives()
	}
	for _, k := range c.KeepAlives {
		if k.Fixed <= 0 {
			return fmt.Errorf("sim: keep-alive %s: fixed keep-alive must be positive", k)
		}
	}
	if c.Instances == 0 {
		c.Instances = 1
	}
	if c.Instances < 0 || c.Instances > 1024 {
		return fmt.Errorf("sim: instances %d must be in [1, 1024]", c.Instances)
	}
	if c.MemoryMB == 0 {
		c.MemoryMB = DefaultMemoryMB
	}
	if c.MemoryMB < 0 {
		return errors.New("sim: memory must be positive")
	}
	if c.Lifecycle && len(c.KeepAlives) == 0 {
		return errors.New("sim: a cache's lifecycle follows a keep-alive policy; give one")
	}
	if c.PreWarm && !c.Lifecycle {
		return errors.New("sim: pre-warming needs the caches' lifecycle (Lifecycle)")
	}
	if c.VoteInterval < 0 {
		return errors.New("sim: the vote interval must not be negative")
	}
	if c.Concurrency == 0 {
		c.Concurrency = 1
	}
	if c.LoadTime == 0 {
		c.LoadTime = DefaultLoadTime
	}
	if c.Concurrency < 0 || c.Concurrency > 1024 || c.LoadTime < 0 || c.LatencyTarget < 0 {
		return fmt.Errorf("sim: concurrency %d must be in [1, 1024], load time and latency target not negative", c.Concurrency)
	}
	if c.Scale {
		if c.VoteInterval == 0 {
			return errors.New("sim: applying scale votes needs a vote interval")
		}
		if c.MaxInstances == 0 {
			c.MaxInstances = max(DefaultMaxInstances, c.Instances)
		}
	}
	if c.MaxInstances != 0 && (c.MaxInstances < c.Instances || c.MaxInstances > 1024) {
		return fmt.Errorf("sim: max instances %d must be in [instances %d, 1024]", c.MaxInstances, c.Instances)
	}
	if c.Predict {
		if err := c.Prediction.Validate(); err != nil {
			return fmt.Errorf("sim: %w", err)
		}
		if c.SlackPool == 0 {
			c.SlackPool = DefaultSlackPool
		}
	}
	if c.Erasure != nil {
		if err := c.Erasure.validate(c.Instances); err != nil {
			return err
		}
	}
	if c.Prices == (Prices{}) {
		c.Prices = DefaultPrices
	}
	if c.Access == (AccessModel{}) {
		c.Access = DefaultAccessModel
	}
	return c.Access.Validate()
}

// fmtDuration writes d without time.Duration's zero units ("10m", not
// "10m0s").
func fmtDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// Prices are the cost model's list prices, those of
// python/hoard_bench/cost.py (a test keeps them equal).
type Prices struct {
	LambdaGBSecond float64 // per GB-second of function memory
	S3Get          float64 // per GET
	S3Put          float64 // per PUT
}

// DefaultPrices are cost.py's DEFAULT_PRICES (AWS us-east-1 list prices).
var DefaultPrices = Prices{
	LambdaGBSecond: 0.0000166667,
	S3Get:          0.0004 / 1000,
	S3Put:          0.005 / 1000,
}
