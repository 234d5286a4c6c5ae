package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/cacheconfig"
	"github.com/hoard-io/hoard/internal/sim"
)

var (
	refFaasTFig11 = Reference{Paper: "Faa$T", Figure: "Fig. 11", Section: "§6.2", Citation: CiteFaasT}
	refKeepAlive  = Reference{Paper: "Serverless in the Wild", Figure: "hybrid histogram against fixed keep-alive", Section: "§4", Citation: CiteShahrad}
)

// Faa$T §6.2, Fig. 11: with a 128 MB cache and pre-warm, an average
// improvement over blob storage of over 40%, and 50% or more for about 35%
// of applications.
const (
	paperFig11MeanAt128MB = 40
	paperFig11AtLeastHalf = 35
)

func simulationExperiment() Experiment {
	return Experiment{
		Name:       "simulation",
		Title:      "Simulated: improvement over the store against cache size, and the keep-alive trade-off",
		Reproduces: []Reference{refFaasTFig11, refKeepAlive},
		// Iterations: applications; Sizes[0]: hours of workload.
		Quick: Options{Iterations: 200, Sizes: []int64{6}},
		Full:  Options{Iterations: 400, Sizes: []int64{12}},
		Run:   runSimulationExperiment,
	}
}

// simMode is one line of Fig. 11: caches that live as long as their
// instances, unloaded after an idle period, with or without pre-warm.
type simMode struct {
	label   string
	unload  time.Duration
	prewarm bool
}

var simModes = []simMode{
	{"pre-warm, unload after 10 min", 10 * time.Minute, true},
	{"no pre-warm, unload after 30 s", 30 * time.Second, false},
	{"no pre-warm, unload after 10 min", 10 * time.Minute, false},
	{"no pre-warm, unload after 20 min", 20 * time.Minute, false},
}

// simLossRate is the instance loss rate of the simulated erasure-coding
// run, per instance per hour: high enough that losses happen within the
// workload's hours.
const simLossRate = 2.0

// simKeepAlives are the fixed keep-alives the histogram is compared with.
var simKeepAlives = []time.Duration{time.Minute, 5 * time.Minute, 10 * time.Minute, 20 * time.Minute, 30 * time.Minute, time.Hour, 2 * time.Hour}

// runSimulationExperiment replays a generated workload with the Azure
// traces' statistics through hoard's own cache, ring, pre-warm and
// keep-alive code (package sim) on a simulated clock: Faa$T Fig. 11 (the
// data-access time saved against reading the store directly, by cache
// size, with and without pre-warm) and Shahrad et al.'s trade-off (cold
// starts against wasted memory-time, fixed keep-alives against the hybrid
// histogram).
func runSimulationExperiment(ctx context.Context, o Options) (*Result, error) {
	started := time.Now()
	apps := max(o.Iterations, 10)
	hours := int64(6)
	if len(o.Sizes) > 0 && o.Sizes[0] > 0 {
		hours = o.Sizes[0]
	}
	say := func(format string, args ...any) {
		fmt.Fprintf(o.Env.progress(), "simulation: "+format+"\n", args...)
	}
	gen := sim.GenConfig{Seed: 1, Apps: apps, Duration: time.Duration(hours) * time.Hour}
	replay := func(cfg sim.Config) (sim.Report, error) {
		if err := ctx.Err(); err != nil {
			return sim.Report{}, err
		}
		src, err := sim.NewGenerator(gen)
		if err != nil {
			return sim.Report{}, err
		}
		return sim.Run(src, cfg)
	}

	sizes := sim.DefaultCacheSizes
	xs := make([]float64, len(sizes))
	for i, s := range sizes {
		xs[i] = float64(s) / 1e6 // MB, as Fig. 11
	}
	var curves, cdfs []Series
	var tableRows [][]string
	var meanPrewarm128, halfPrewarm128 float64
	var events int64
	for _, m := range simModes {
		// No sweep (Sweep nil), unlike a cachelet's default: Faa$T's
		// Fig. 11 caches had none. The sweep's effect is measured apart
		// below.
		r, err := replay(sim.Config{CacheSizes: sizes, Policies: []sim.Eviction{{Policy: cache.PolicyOwnerLRU}},
			KeepAlives: []sim.KeepAlive{{Fixed: m.unload}}, Lifecycle: true, PreWarm: m.prewarm, Sweep: nil})
		if err != nil {
			return nil, fmt.Errorf("simulating %s: %w", m.label, err)
		}
		events = r.Events
		ys := make([]float64, len(r.Caches))
		for i, c := range r.Caches {
			ys[i] = 100 * c.Improvement.Mean
			tableRows = append(tableRows, []string{m.label, sizeLabelMB(c.CacheBytes), fmt.Sprintf("%.1f%%", 100*c.HitRatio),
				fmt.Sprintf("%.1f%%", 100*c.Improvement.Mean), fmt.Sprintf("%.1f%%", 100*c.Improvement.AtLeastHalf),
				fmt.Sprintf("%.1f%%", 100*c.Improvement.Overall)})
		}
		curves = append(curves, Series{Label: m.label, X: xs, Y: ys})
		last := r.Caches[len(r.Caches)-1].Improvement
		q := make([]float64, len(last.Quantiles))
		for i, v := range last.Quantiles {
			q[i] = 100 * v
		}
		cdfs = append(cdfs, Series{Label: m.label, Samples: q, N: max(r.Caches[len(r.Caches)-1].Apps, len(q)+1)})
		if m.prewarm {
			meanPrewarm128, halfPrewarm128 = 100*last.Mean, 100*last.AtLeastHalf
		}
		say("%s: mean improvement %.1f%% at 128 MB", m.label, 100*last.Mean)
	}

	// OFC's periodic sweep (a cachelet's default) against none, on the
	// same workload at 128 MB, pre-warm and unload after 10 min: hit
	// ratio and the bytes the caches hold; and the sweep counting every
	// object from its admission (pre-warmed and written ones too).
	ofc := cache.SweepRule{MinReads: cacheconfig.OFCSweepMinReads, Idle: cacheconfig.OFCSweepIdle, MinAge: cacheconfig.OFCSweepInterval}
	var sweepRows [][]string
	var sweepRes []sim.CacheResult
	for _, v := range []struct {
		label string
		rule  *cache.SweepRule
		naive bool
	}{{"no sweep", nil, false}, {"OFC's sweep (the default)", &ofc, false}, {"OFC's sweep, counted from admission", &ofc, true}} {
		r, err := replay(sim.Config{CacheSizes: []int64{128 << 20}, KeepAlives: []sim.KeepAlive{{Fixed: 10 * time.Minute}},
			Lifecycle: true, PreWarm: true, Sweep: v.rule, SweepFromAdmission: v.naive, HeldEvery: time.Minute})
		if err != nil {
			return nil, fmt.Errorf("simulating the sweep: %w", err)
		}
		c := r.Caches[0]
		sweepRes = append(sweepRes, c)
		base := sweepRes[0]
		sweepRows = append(sweepRows, []string{v.label, fmt.Sprintf("%.4f", c.HitRatio), fmt.Sprintf("%.3f", c.HitRatio/base.HitRatio),
			fmt.Sprintf("%.0f MiB", c.MeanHeldBytes/(1<<20)), fmt.Sprintf("%.3f", c.MeanHeldBytes/base.MeanHeldBytes),
			fmt.Sprint(c.Swept), fmt.Sprintf("%.1f%%", 100*c.Improvement.Mean)})
	}
	say("sweep: hit ratio %.3f× and bytes held %.3f× no sweep", sweepRes[1].HitRatio/sweepRes[0].HitRatio, sweepRes[1].MeanHeldBytes/sweepRes[0].MeanHeldBytes)

	var kas []sim.KeepAlive
	for _, d := range simKeepAlives {
		kas = append(kas, sim.KeepAlive{Fixed: d})
	}
	kas = append(kas, sim.KeepAlive{Fixed: 10 * time.Minute, Histogram: true})
	kr, err := replay(sim.Config{CacheSizes: []int64{}, KeepAlives: kas})
	if err != nil {
		return nil, fmt.Errorf("simulating keep-alives: %w", err)
	}
	var ref sim.KeepAliveResult
	for _, k := range kr.KeepAlives {
		if k.Policy == "fixed:10m" {
			ref = k
		}
	}
	if ref.WastedGBs <= 0 {
		return nil, fmt.Errorf("the workload wasted no memory under a fixed 10-minute keep-alive: nothing to compare")
	}
	var fx, fy []float64
	var hist sim.KeepAliveResult
	var kaRows [][]string
	for _, k := range kr.KeepAlives {
		kaRows = append(kaRows, []string{k.Policy, fmt.Sprintf("%.2f%%", 100*k.ColdStartRatio), fmt.Sprintf("%.0f", k.WastedGBs),
			fmt.Sprintf("%.2f", k.WastedGBs/ref.WastedGBs), fmt.Sprint(k.AppsAlwaysCold)})
		if len(k.Policy) > 9 && k.Policy[:9] == "histogram" {
			hist = k
			continue
		}
		fx, fy = append(fx, k.WastedGBs/ref.WastedGBs), append(fy, 100*k.ColdStartRatio)
	}
	say("keep-alive: histogram %.2f%% cold at %.2f× fixed 10 min's wasted memory; fixed 10 min %.2f%% cold",
		100*hist.ColdStartRatio, hist.WastedGBs/ref.WastedGBs, 100*ref.ColdStartRatio)

	// Memory prediction and erasure-coded placement, replayed through
	// the controller's models and erasure.Place (one pass), and the
	// scale votes (compute, cache size, bandwidth) applied against fixed instances.
	px, err := replay(sim.Config{CacheSizes: []int64{}, KeepAlives: []sim.KeepAlive{}, Predict: true, Instances: 12,
		Erasure: &sim.ErasureConfig{DataShards: 10, ParityShards: 2, LossRate: simLossRate, Seed: 1}})
	if err != nil {
		return nil, fmt.Errorf("simulating prediction and erasure coding: %w", err)
	}
	p, x := px.Prediction, px.Erasure
	say("prediction: %d of %d invocations sized, exact %.1f%%, exact or over %.1f%%; erasure: %d of %d objects lost, %.1f expected",
		p.Sized, p.Invocations, 100*p.ExactShare, 100*p.ExactOrOverShare, x.Lost, x.Objects, x.ExpectedLost)
	scaleSizes := []int64{64 << 10, 1 << 20, 16 << 20}
	fixed, err := replay(sim.Config{CacheSizes: scaleSizes, KeepAlives: []sim.KeepAlive{}, Instances: 2})
	if err != nil {
		return nil, fmt.Errorf("simulating fixed instances: %w", err)
	}
	scaled, err := replay(sim.Config{CacheSizes: scaleSizes, KeepAlives: []sim.KeepAlive{}, Instances: 2, VoteInterval: 5 * time.Second, Scale: true})
	if err != nil {
		return nil, fmt.Errorf("simulating applied scale votes: %w", err)
	}
	var scaleRows [][]string
	for i, f := range fixed.Caches {
		sc := scaled.Caches[i]
		scaleRows = append(scaleRows, []string{sizeLabelMB(f.CacheBytes), fmt.Sprintf("%.3f → %.3f", f.HitRatio, sc.HitRatio),
			fmt.Sprintf("%.1f%% → %.1f%%", 100*f.Improvement.Overall, 100*sc.Improvement.Overall),
			fmt.Sprintf("%d / %d", sc.Scaling.Outs, sc.Scaling.Ins), fmt.Sprintf("%.2f", sc.Scaling.MeanInstances),
			fmt.Sprintf("%.2f", sc.Scaling.CacheGBs/sc.Scaling.FixedCacheGBs)})
	}
	last := len(scaled.Caches) - 1
	scaleRatio := scaled.Caches[last].Scaling.CacheGBs / scaled.Caches[last].Scaling.FixedCacheGBs
	say("scale votes applied at %s: cache memory-time %.2f× two fixed instances, hit ratio %.3f against %.3f",
		sizeLabelMB(scaleSizes[last]), scaleRatio, scaled.Caches[last].HitRatio, fixed.Caches[last].HitRatio)

	src := "Faa$T §6.2 (text), Fig. 11"
	res := &Result{
		Experiment: "simulation",
		Title:      "Simulated: improvement over the store against cache size, and the keep-alive trade-off",
		Reproduces: []Reference{refFaasTFig11, refKeepAlive, refOFCTable1},
		Status:     StatusOK,
		Quick:      o.Quick,
		Machine:    DescribeMachine(),
		Seconds:    time.Since(started).Seconds(),
		Method: fmt.Sprintf("hoard sim replays a generated workload (%d applications over %d h, %d events, seeded, with the Azure traces' "+
			"published statistics) through hoard's own cache (LRU), pre-warm selection and keep-alive code on a simulated clock. Each read "+
			"costs a modelled time by its outcome (%s); an application's improvement is 1 − its reads' time through hoard ÷ their time read "+
			"from the store directly. Caches live as long as their instances: an instance unloaded after the idle period loses its cache; "+
			"with pre-warm, a reloaded instance is first filled with what the controller's pre-warm selection picks from its earlier lives.",
			apps, hours, events, sim.DefaultAccessModel),
		Settings: RunSettings{Link: "simulated (" + sim.DefaultAccessModel.Store.String() + " store)",
			Iterations: []Count{{What: "applications", N: apps}},
			Other:      []Setting{{"workload", fmt.Sprintf("%d h, seed 1", hours)}, {"cache sizes", "1 KB to 128 MB by factors of 8"}}},
		Rows: []Comparison{
			Compare("mean improvement over the store at 128 MB, pre-warm", "%", F(paperFig11MeanAt128MB), F(meanPrewarm128), HigherIsBetter, 0.1, src+" (\"over 40%\")",
				"The paper's applications are Azure's production functions; these are generated with the published statistics of its blob trace."),
			Compare("applications improved by 50% or more at 128 MB, pre-warm", "%", F(paperFig11AtLeastHalf), F(halfPrewarm128), HigherIsBetter, 0.1, src+" (\"about 35%\")", ""),
			Compare("cold starts, hybrid histogram", "%", nil, F(100*hist.ColdStartRatio), LowerIsBetter, 0, "",
				fmt.Sprintf("fixed 10 min: %.2f%%", 100*ref.ColdStartRatio)),
			Compare("wasted memory-time, hybrid histogram ÷ fixed 10 min", "x", nil, F(hist.WastedGBs/ref.WastedGBs), LowerIsBetter, 0, "",
				"Shahrad et al. show the histogram below the fixed keep-alives' curve: fewer cold starts for the same wasted memory."),
			Compare("simulated prediction: exact, of the predicted", "%", F(83.35), F(100*p.ExactShare), HigherIsBetter, 0.05, "OFC Table 1, J48 at 16 MB",
				fmt.Sprintf("%d of %d functions mature; %d of %d invocations sized", p.Mature, p.Functions, p.Sized, p.Invocations)),
			Compare("simulated prediction: exact or over, of the predicted", "%", F(92.73), F(100*p.ExactOrOverShare), HigherIsBetter, 0.05, "OFC Table 1, J48 at 16 MB",
				fmt.Sprintf("slack-pool loans %d, OOM retries %d", p.Lent, p.OOMRetries)),
			Compare("simulated prediction: function memory-time given ÷ booked", "x", nil, F(p.GivenGBs/p.BookedGBs), LowerIsBetter, 0, "",
				fmt.Sprintf("needed (the peaks) %.2f× booked; the caches gained %.0f GB-s", p.NeededGBs/p.BookedGBs, p.CacheGainedGBs)),
			Compare(fmt.Sprintf("simulated RS(10+2) over 12 instances: objects lost at %g losses per instance-hour", simLossRate), "%", nil, F(100*x.LostShare), LowerIsBetter, 0, "",
				fmt.Sprintf("departures and rebuilds replayed (lease 5 s, delay 1 s, 64 MiB/s): %d departures, %d shards rebuilt, %.1f s missing on average; the loss model (erasure.LossProbability over that window): %.2f%%", x.Departures, x.ShardsRebuilt, x.MeanRepairSeconds, 100*x.ExpectedShare)),
			Compare("simulated scale votes applied: cache memory-time ÷ two fixed instances, 16 MB", "x", nil, F(scaleRatio), LowerIsBetter, 0, "",
				fmt.Sprintf("hit ratio %.3f against %.3f fixed", scaled.Caches[last].HitRatio, fixed.Caches[last].HitRatio)),
			Compare("simulated OFC sweep (300 s, 5 reads, 30 min): bytes held ÷ no sweep, 128 MB, pre-warm", "x", nil, F(sweepRes[1].MeanHeldBytes/sweepRes[0].MeanHeldBytes), LowerIsBetter, 0, "",
				fmt.Sprintf("hit ratio %.4f against %.4f (%.3f×)", sweepRes[1].HitRatio, sweepRes[0].HitRatio, sweepRes[1].HitRatio/sweepRes[0].HitRatio)),
		},
		Plots: []Plot{
			{Kind: PlotCurve, ID: "fig11-size", Title: "Mean improvement over the store against cache size (Faa$T Fig. 11 right)",
				XLabel: "cache size per instance (MB)", YLabel: "mean improvement (%)", Unit: "%", XLog: true, Series: curves},
			{Kind: PlotCDF, ID: "fig11-cdf", Title: "Improvement over the store per application at 128 MB (Faa$T Fig. 11 left)",
				XLabel: "improvement (%)", Unit: "%", Series: cdfs},
			{Kind: PlotCurve, ID: "keepalive", Title: "Cold starts against wasted memory-time",
				XLabel: "wasted memory-time ÷ fixed 10 min", YLabel: "cold starts (%)", Unit: "%",
				Series: []Series{{Label: "fixed keep-alive (1 min to 2 h)", X: fx, Y: fy},
					{Label: "hybrid histogram (fallback 10 min)", X: []float64{hist.WastedGBs / ref.WastedGBs}, Y: []float64{100 * hist.ColdStartRatio}}}},
		},
		Tables: []Table{
			{ID: "fig11", Title: "Improvement over the store by cache size", Columns: []string{"mode", "cache", "hit ratio", "mean improvement", "apps ≥ 50%", "overall"}, Rows: tableRows},
			{ID: "keepalive", Title: "Keep-alive policies", Columns: []string{"policy", "cold starts", "wasted GB-s", "÷ fixed 10 min", "apps always cold"}, Rows: kaRows},
			{ID: "prediction", Title: "Memory prediction, simulated (the controller's models, the agent's 100 MiB slack pool)",
				Columns: []string{"functions (mature)", "invocations", "predicted", "sized", "exact", "exact or over", "booked GB-s", "given GB-s", "needed GB-s", "cache gained GB-s", "loans", "OOM retries"},
				Rows: [][]string{{fmt.Sprintf("%d (%d)", p.Functions, p.Mature), fmt.Sprint(p.Invocations), fmt.Sprint(p.Predicted), fmt.Sprint(p.Sized),
					fmt.Sprintf("%.1f%%", 100*p.ExactShare), fmt.Sprintf("%.1f%%", 100*p.ExactOrOverShare), fmt.Sprintf("%.0f", p.BookedGBs),
					fmt.Sprintf("%.0f", p.GivenGBs), fmt.Sprintf("%.0f", p.NeededGBs), fmt.Sprintf("%.0f", p.CacheGainedGBs), fmt.Sprint(p.Lent), fmt.Sprint(p.OOMRetries)}}},
			{ID: "erasure", Title: "Erasure-coded placement, simulated: RS(10+2) over 12 instances per application, objects from 10 MB",
				Columns: []string{"objects", "shards per instance (min / mean / max)", "losses per instance-hour", "departures", "shards rebuilt", "mean repair", "lost", "expected (model)"},
				Rows: [][]string{{fmt.Sprint(x.Objects), fmt.Sprintf("%d / %.1f / %d", x.ShardsPerInstance.Min, x.ShardsPerInstance.Mean, x.ShardsPerInstance.Max),
					fmt.Sprint(x.LossRatePerHour), fmt.Sprint(x.Departures), fmt.Sprint(x.ShardsRebuilt), fmt.Sprintf("%.1f s", x.MeanRepairSeconds),
					fmt.Sprintf("%d (%.2f%%)", x.Lost, 100*x.LostShare), fmt.Sprintf("%.2f (%.2f%%)", x.ExpectedLost, 100*x.ExpectedShare)}}},
			{ID: "sweep", Title: "OFC's periodic sweep against none, 128 MB, pre-warm, unload after 10 min (ratios: ÷ no sweep)",
				Columns: []string{"sweep", "hit ratio", "÷", "mean bytes held (all caches)", "÷", "swept", "apps' mean improvement"}, Rows: sweepRows},
			{ID: "scaling", Title: "Scale votes applied (compute, cache size, bandwidth), from two instances per application (fixed → scaled)",
				Columns: []string{"cache", "hit ratio", "time saved", "added / removed", "mean instances", "cache GB-s ÷ fixed"}, Rows: scaleRows},
		},
	}
	return res, nil
}

// sizeLabelMB writes a cache size as Fig. 11 does (1 KB ... 128 MB).
func sizeLabelMB(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%d MB", n>>20)
	default:
		return fmt.Sprintf("%d KB", n>>10)
	}
}
