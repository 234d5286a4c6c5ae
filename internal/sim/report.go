package sim

import (
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/hoard-io/hoard/internal/bytesize"
)

// Report is what a replay found, per configuration.
type Report struct {
	Events     int64             `json:"events"`
	Start      time.Time         `json:"start"`
	End        time.Time         `json:"end"`
	Instances  int               `json:"instances"`
	Caches     []CacheResult     `json:"caches"`
	KeepAlives []KeepAliveResult `json:"keep_alives"`
	// Prediction, with Config.Predict; Erasure, with Config.Erasure.
	Prediction *PredictionResult `json:"prediction,omitempty"`
	Erasure    *ErasureResult    `json:"erasure,omitempty"`
}

// CacheResult is one (eviction policy, cache size) over every
// application's instances.
type CacheResult struct {
	Policy     string `json:"policy"`
	CacheBytes int64  `json:"cache_bytes"` // per instance
	Apps       int    `json:"apps"`
	// Reads in all and by Outcome (LH, RH, LM, RM, PT); bytes are those
	// the reads returned.
	Reads    Tally            `json:"reads"`
	Outcomes map[string]Tally `json:"outcomes"`
	Writes   Tally            `json:"writes"`
	// HitRatio and ByteHitRatio are the shares of reads, and of their
	// bytes, that were hits (LH or RH).
	HitRatio     float64 `json:"hit_ratio"`
	ByteHitRatio float64 `json:"byte_hit_ratio"`
	// StoreGets and StoreBytes are the reads the store served (every miss
	// fetches its whole object; a pass-through, what was asked), pre-warm
	// fetches included.
	StoreGets  int64  `json:"store_gets"`
	StoreBytes int64  `json:"store_bytes"`
	Evictions  uint64 `json:"evictions"`
	// With Config.Lifecycle: how many times an application's instances
	// were unloaded (their caches lost), and with Config.PreWarm, what
	// pre-warming fetched when they were loaded again.
	Unloads      int64 `json:"unloads,omitempty"`
	PreWarmGets  int64 `json:"pre_warm_gets,omitempty"`
	PreWarmBytes int64 `json:"pre_warm_bytes,omitempty"`
	// CacheVotes tallies the cache-size scaling policy's votes, with
	// Config.VoteInterval.
	CacheVotes *Votes `json:"cache_votes,omitempty"`
	// Compute is what the invocations met on the instances and the
	// compute and bandwidth policies' votes, with Config.VoteInterval.
	Compute *ComputeResult `json:"compute,omitempty"`
	// Admission is what admission by benefit did, with Config.Admission.
	Admission *AdmissionResult `json:"admission,omitempty"`
	// Scaling is what applying the votes did, with Config.Scale.
	Scaling *ScaleResult `json:"scaling,omitempty"`
	// CostUSD prices the store's requests (GETs and PUTs). CacheGBs is
	// the memory the caches booked, GB·s (every application's instances
	// times the size, from its first access), CacheCostUSD prices it as
	// function memory, and TotalCostUSD is the two: a larger cache reads
	// the store less and books more.
	CostUSD      float64 `json:"cost_usd"`
	CacheGBs     float64 `json:"cache_gb_s"`
	CacheCostUSD float64 `json:"cache_cost_usd"`
	TotalCostUSD float64 `json:"total_cost_usd"`
	// Improvement is the data-access time saved against reading the
	// store directly, by Config.Access (Faa$T Fig. 11).
	Improvement *Improvements `json:"improvement,omitempty"`
	// Swept is the objects the sweeps dropped, with Config.Sweep.
	Swept uint64 `json:"swept,omitempty"`
	// MeanHeldBytes is the bytes held by every cache together, averaged
	// over the samples taken every Config.HeldEvery.
	MeanHeldBytes float64 `json:"mean_held_bytes,omitempty"`
}

// KeepAliveResult is one keep-alive policy over every application.
type KeepAliveResult struct {
	Policy         string  `json:"policy"`
	Apps           int     `json:"apps"`
	Invocations    int64   `json:"invocations"`
	ColdStarts     int64   `json:"cold_starts"`
	ColdStartRatio float64 `json:"cold_start_ratio"`
	// AppsAlwaysCold counts applications whose every invocation was cold.
	AppsAlwaysCold int `json:"apps_always_cold"`
	// WastedGBs is the memory-time of loaded instances running nothing,
	// in GB-seconds; CostUSD prices it as function memory.
	WastedGBs float64 `json:"wasted_gb_s"`
	CostUSD   float64 `json:"cost_usd"`
}

// WriteTable writes the report as aligned text tables.
func (r Report) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "%d events over %s, %d instance(s) per application\n\n", r.Events, r.End.Sub(r.Start).Round(time.Second), r.Instances)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	if len(r.Caches) > 0 {
		fmt.Fprintln(tw, "policy\tcache\treads\thit ratio\tbyte hit ratio\tLH\tRH\tLM\tRM\tPT\tstore GETs\tstore bytes\tevictions\tunloads\tpre-warmed\tvotes +/0/-\tstore USD\tcache USD\ttime saved\t")
		for _, c := range r.Caches {
			saved := "-"
			if c.Improvement != nil && c.Improvement.DirectSeconds > 0 {
				saved = fmt.Sprintf("%.1f%% (apps' mean %.1f%%)", 100*c.Improvement.Overall, 100*c.Improvement.Mean)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%.4f\t%.4f\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%d\t%d\t%d\t%s\t%.6f\t%.6f\t%s\t\n",
				c.Policy, sizeLabel(c.CacheBytes), c.Reads.Count, c.HitRatio, c.ByteHitRatio,
				c.Outcomes["LH"].Count, c.Outcomes["RH"].Count, c.Outcomes["LM"].Count, c.Outcomes["RM"].Count, c.Outcomes["PT"].Count,
				c.StoreGets, bytesize.Human(c.StoreBytes), c.Evictions, c.Unloads, c.PreWarmGets, c.CacheVotes, c.CostUSD, c.CacheCostUSD, saved)
		}
		fmt.Fprintln(tw)
	}
	var invocations int64
	for _, k := range r.KeepAlives {
		invocations += k.Invocations
	}
	if len(r.KeepAlives) > 0 && invocations == 0 {
		fmt.Fprintln(tw, "no invocations in the trace: no keep-alive results")
	}
	if invocations > 0 {
		fmt.Fprintln(tw, "keep-alive\tapps\tinvocations\tcold starts\tcold ratio\talways cold\twasted GB-s\tcost USD\t")
		for _, k := range r.KeepAlives {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.4f\t%d\t%.1f\t%.6f\t\n",
				k.Policy, k.Apps, k.Invocations, k.ColdStarts, k.ColdStartRatio, k.AppsAlwaysCold, k.WastedGBs, k.CostUSD)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for i, c := range r.Caches {
		if i == 0 && (c.Scaling != nil || c.Compute != nil || c.Admission != nil || c.Swept > 0 || c.MeanHeldBytes > 0) {
			fmt.Fprintln(w)
		}
		if x := c.Compute; x != nil {
			fmt.Fprintf(w, "votes %s at %s: compute %s, cache %s, bandwidth %s (+/0/-); %d invocations, %d started an instance, %d queued (%.1f s waited), %d refused; %d downloads split\n",
				c.Policy, sizeLabel(c.CacheBytes), &x.ComputeVotes, c.CacheVotes, &x.BandwidthVotes, x.Invocations, x.Started, x.Queued, x.QueueSeconds, x.Refused, x.Splits)
		}
		if c.Swept > 0 || c.MeanHeldBytes > 0 {
			fmt.Fprintf(w, "memory %s at %s: %s held on average (all caches), %d objects swept\n",
				c.Policy, sizeLabel(c.CacheBytes), bytesize.Human(int64(c.MeanHeldBytes)), c.Swept)
		}
		if x := c.Admission; x != nil {
			fmt.Fprintf(w, "admission %s at %s: %d functions, %d not admitting at the end, %d changes; %d invocations kept none of their misses, %d reads not admitted\n",
				c.Policy, sizeLabel(c.CacheBytes), x.Functions, x.NotAdmitting, x.Changes, x.NoCacheInvocations, x.ReadsNotAdmitted)
		}
		if sc := c.Scaling; sc != nil {
			fmt.Fprintf(w, "scaling %s at %s: %d instances added, %d removed; %.2f instances per application on average, %d at most; caches booked %.1f GB-s (%d fixed instances: %.1f GB-s)\n",
				c.Policy, sizeLabel(c.CacheBytes), sc.Outs, sc.Ins, sc.MeanInstances, sc.PeakInstances, sc.CacheGBs, r.Instances, sc.FixedCacheGBs)
		}
	}
	if p := r.Prediction; p != nil {
		fmt.Fprintf(w, "\nmemory prediction: %d functions (%d mature), %d invocations with a peak, %d predicted, %d sized (%.1f%%), %d trainings\n",
			p.Functions, p.Mature, p.Invocations, p.Predicted, p.Sized, 100*p.SizedShare, p.Trainings)
		fmt.Fprintf(w, "  exact %.1f%%, exact or over %.1f%% of the predicted (OFC Table 1: 83.35%%, 92.73%%); under %d\n",
			100*p.ExactShare, 100*p.ExactOrOverShare, p.Under)
		fmt.Fprintf(w, "  memory-time booked %.1f GB-s, given %.1f GB-s, needed %.1f GB-s; cache gained %.1f GB-s\n",
			p.BookedGBs, p.GivenGBs, p.NeededGBs, p.CacheGainedGBs)
		fmt.Fprintf(w, "  slack pool lent %d times (%s), OOM retries %d\n", p.Lent, bytesize.Human(p.LentBytes), p.OOMRetries)
	}
	if x := r.Erasure; x != nil {
		fmt.Fprintf(w, "\nerasure coding %s from %s: %d objects, %d shards (%s); shards per instance min %d, mean %.1f, max %d (at most %s)\n",
			x.Shards, bytesize.Human(x.Threshold), x.Objects, x.ShardsPlaced, bytesize.Human(x.ShardBytes),
			x.ShardsPerInstance.Min, x.ShardsPerInstance.Mean, x.ShardsPerInstance.Max, bytesize.Human(x.MaxShardBytes))
		fmt.Fprintf(w, "  instances lost at %g per instance-hour: %d departures, %d shards rebuilt (lease %s, %s/s), %.1f s missing on average; %d objects lost (%.4f%%), %.2f expected (%.4f%%, erasure.LossProbability with a %s window)\n",
			x.LossRatePerHour, x.Departures, x.ShardsRebuilt, x.Lease, bytesize.Human(x.RebuildRate), x.MeanRepairSeconds, x.Lost, 100*x.LostShare, x.ExpectedLost, 100*x.ExpectedShare, x.Window)
	}
	return nil
}

// sizeLabel writes a cache size exactly, in binary units or, where
// shorter (sizes given as 1KB, 128MB), decimal ones.
func sizeLabel(n int64) string {
	best := bytesize.Format(n)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}} {
		if n > 0 && n%u.mult == 0 {
			if s := strconv.FormatInt(n/u.mult, 10) + u.suffix; len(s) < len(best) {
				best = s
			}
			break
		}
	}
	return best
}

func (v *Votes) String() string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%d/%d/%d", v.Up, v.Stay, v.Down)
}
