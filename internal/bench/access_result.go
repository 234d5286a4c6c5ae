package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hoard-io/hoard/internal/appspec"
)

// The access experiment's references.
var (
	refFaasTFig9  = Reference{Paper: "Faa$T", Figure: "Fig. 9", Section: "§6.3", Citation: CiteFaasT}
	refFaasTFig10 = Reference{Paper: "Faa$T", Figure: "Fig. 10", Section: "§6.3", Citation: CiteFaasT}
	refOFCFig7    = Reference{Paper: "OFC", Figure: "Fig. 7", Section: "§7.2.1", Citation: CiteOFC}
)

// accessLabels name the targets as the papers name access types.
var accessLabels = map[string]string{
	TargetStore:          "store (MinIO direct)",
	TargetStore304:       "store 304 (conditional GET, MinIO direct)",
	TargetStoreFwd:       "store through a bare TCP forwarder",
	TargetStore304Fwd:    "store 304 through a bare TCP forwarder",
	TargetStoreHTTP:      "store through a bare HTTP proxy",
	TargetStore304HTTP:   "store 304 through a bare HTTP proxy",
	TargetCold:           "LM (cold)",
	TargetWarm:           "LH (warm, version-check)",
	TargetWarmLocal:      "LH (warm-local)",
	TargetRemoteHit:      "RH (remote-hit)",
	TargetRemoteMiss:     "RM (remote-miss)",
	TargetOwnerHit:       "LH under owner (owner-hit)",
	TargetOwnerRemoteHit: "RH under owner (owner-remote-hit)",
	TargetRedis:          "Redis",
	TargetTCP:            "TCP copy",
	TargetTCPFwd:         "TCP copy through a bare forwarder",
	TargetBoto3Store:     "boto3 store",
	TargetBoto3Warm:      "boto3 LH",
}

func accessExperiment() Experiment {
	return Experiment{
		Name:       "access",
		Title:      "Access types: LH, RH, LM, RM against the store and Redis by object size",
		Reproduces: []Reference{refFaasTFig9, refFaasTFig10, refOFCFig7},
		Quick:      Options{Sizes: QuickSizes},
		Full:       Options{Sizes: DefaultSizes},
		Run:        runAccessExperiment,
	}
}

// runAccessExperiment runs `hoard bench access` with every target (Redis
// left out, with a note, when it is not installed; boto3 when Env has a
// Python) and returns its Result.
func runAccessExperiment(ctx context.Context, o Options) (*Result, error) {
	env := o.Env
	cfg := AccessConfig{
		Quick: o.Quick, Sizes: o.Sizes, Targets: AllTargets(),
		MinIOBinary: env.MinIOBinary, RedisBinary: env.RedisBinary,
		TempDir: env.TempDir, Progress: env.Progress, Log: env.Log,
	}
	var notes []string
	if cfg.RedisBinary == "" {
		bin, err := FindRedisServer()
		switch {
		case errors.Is(err, ErrRedisNotFound):
			cfg.Targets = slices.DeleteFunc(slices.Clone(AllTargets()), func(t string) bool { return t == TargetRedis })
			notes = append(notes, "Redis was left out: "+err.Error())
		case err != nil:
			return nil, err
		}
		cfg.RedisBinary = bin
	}
	if env.Python != "" && env.ModuleRoot != "" {
		script := filepath.Join(env.ModuleRoot, "python", "hoard_bench", "access_boto3.py")
		if st, err := os.Stat(script); err == nil && !st.IsDir() {
			cfg.Boto3, cfg.Python, cfg.Boto3Script = true, env.Python, script
		}
	}
	rep, err := RunAccess(ctx, cfg)
	if err != nil {
		return nil, err
	}
	fmt.Fprintln(env.table())
	if err := rep.WriteTable(env.table()); err != nil {
		return nil, err
	}
	res := rep.Result()
	res.Notes = append(notes, res.Notes...)
	return res, nil
}

// Result turns the report into the experiment's Result: the papers'
// access-type figures next to hoard's, latency CDFs per size, p50 bars
// per access type, throughput curves, and the cost workload.
func (r *Report) Result() *Result {
	res := &Result{
		Experiment: "access",
		Reproduces: []Reference{refFaasTFig9, refFaasTFig10, refOFCFig7},
		Status:     StatusOK,
		Quick:      r.Settings.Quick,
		Machine:    r.Machine,
		Method: "Whole-object GETs, one at a time, on loopback, against MinIO read directly, hoard (local hit under " +
			"version-check and under local reads, local miss, remote hit and remote miss through a second cachelet " +
			"of one application), Redis holding the same bytes and a plain TCP copy. cold: " + r.Settings.ColdMethod +
			". remote: " + r.Settings.RemoteMethod + ".",
		Settings: RunSettings{
			ObjectSizes: r.Settings.Sizes,
			Link:        LinkLoopback,
			Other: []Setting{
				{"targets", strings.Join(r.Settings.Targets, ", ")},
				{"boto3", fmt.Sprint(r.Settings.Boto3)},
				{"cache budget", FormatSize(r.Settings.Budget)},
				{"percentiles", "exact, nearest rank over the timed GETs"},
			},
		},
	}
	if r.Settings.RemoteMethod == "" {
		res.Method = strings.TrimSuffix(res.Method, " remote: .")
	}
	for _, s := range r.Sizes {
		n := 0
		for _, t := range s.Targets {
			n = max(n, t.N)
		}
		res.Settings.Iterations = append(res.Settings.Iterations, Count{What: s.Label + " (per target)", N: n})
	}
	res.Rows = r.paperRows()
	res.Plots = r.plots()
	if w, ok := r.workload(); ok {
		res.Workloads = []CostWorkload{w}
	}
	for _, c := range r.Checks {
		note := fmt.Sprintf("hoard's own target, %s at %s: want %s, measured %s: %s",
			c.Name, FormatSize(c.Size), c.Want, fmtRatio(c.Measured), c.Status())
		if c.Floor != nil || c.HTTPFloor != nil {
			note += fmt.Sprintf(" (the same ratio through a bare TCP forwarder %s, through a bare HTTP proxy %s: the least one more hop and an HTTP proxy add)",
				fmtRatio(c.Floor), fmtRatio(c.HTTPFloor))
		}
		res.Notes = append(res.Notes, note)
	}
	res.Notes = append(res.Notes, r.Notes...)
	return res
}

// nearestSize returns the measured size closest to want on a log scale
// (the smaller one on a tie), or nil.
func (r *Report) nearestSize(want int64) *SizeResult {
	var best *SizeResult
	bestD := math.Inf(1)
	for i := range r.Sizes {
		d := math.Abs(math.Log2(float64(r.Sizes[i].Size)) - math.Log2(float64(want)))
		if d < bestD-1e-9 {
			best, bestD = &r.Sizes[i], d
		}
	}
	return best
}

// p50Ratio is a's p50 over b's at s, or nil.
func p50Ratio(s *SizeResult, a, b string) *float64 {
	if s == nil {
		return nil
	}
	x, y := s.Target(a), s.Target(b)
	if x == nil || y == nil || x.N == 0 || y.N == 0 || y.P50 == 0 {
		return nil
	}
	return F(float64(x.P50) / float64(y.P50))
}

func p50Of(s *SizeResult, name string) string {
	if s == nil {
		return "-"
	}
	if t := s.Target(name); t != nil && t.N > 0 {
		return FormatDuration(t.P50)
	}
	return "-"
}

func sizeLabel(s *SizeResult) string {
	if s == nil {
		return "(not measured)"
	}
	return s.Label
}

// paperRows sets the papers' access-type figures next to hoard's, each at
// the measured size nearest to the paper's.
func (r *Report) paperRows() []Comparison {
	small := r.nearestSize(1 << 10)
	kib16 := r.nearestSize(16 << 10)
	mb5 := r.nearestSize(5e6)
	mb30 := r.nearestSize(30e6)
	mb35 := r.nearestSize(35e6)
	mb239 := r.nearestSize(239e6)
	largest := r.nearestSize(math.MaxInt64)
	var rows []Comparison
	add := func(c Comparison) { rows = append(rows, c) }
	at := func(what string, s *SizeResult) string { return what + " at " + sizeLabel(s) }
	shortIf := func(c Comparison, why string) Comparison {
		if c.Short && why != "" {
			c.Note = strings.TrimSpace(c.Note + " Short: " + why)
		}
		return c
	}
	sizeDiff := func(s *SizeResult, paper string) string {
		return fmt.Sprintf("The paper's object is %s; hoard's nearest measured size is %s.", paper, sizeLabel(s))
	}

	// OFC §7.2.1, Fig. 7: remote hit against local hit.
	add(shortIf(Compare(at("RH/LH p50", small), "x", F(22.1/19.6), p50Ratio(small, TargetRemoteHit, TargetWarm), LowerIsBetter, 0.02,
		"OFC §7.2.1, Fig. 7 (text): remote access adds up to 12.76% (wand_denoise, 1 kB input: 19.6 ms to 22.1 ms)",
		"Paper: a whole function run; hoard: the GET alone, the stricter ratio. Both reads under strong pay the version check."),
		fmt.Sprintf("RH %s against LH %s: the peer hop (signed HTTP/1.1 on loopback) and the reader's copy of the object come on top of the version check both pay.",
			p50Of(small, TargetRemoteHit), p50Of(small, TargetWarm))))
	add(shortIf(Compare(at("RH/LH-local p50", small), "x", F(22.1/19.6), p50Ratio(small, TargetRemoteHit, TargetWarmLocal), LowerIsBetter, 0.02,
		"OFC §7.2.1, Fig. 7 (text): remote access adds up to 12.76% (wand_denoise, 1 kB: 19.6 ms to 22.1 ms)",
		"Against a local hit that asks no one (read mode local)."),
		"under strong the owner confirms its copy with the store before serving a peer, so a small remote hit costs a store round trip, which a local read skips."))
	add(shortIf(Compare(at("RH/LH p50", mb30), "x", F(6.57/6.52), p50Ratio(mb30, TargetRemoteHit, TargetWarm), LowerIsBetter, 0.02,
		"OFC §7.2.1, Fig. 7 (text): remote access adds up to 0.85% to multi-stage functions (map_reduce, 30 MB: 6.52 s to 6.57 s)",
		sizeDiff(mb30, "30 MB")+" Paper: seconds of computation around the read; hoard: the GET alone."),
		"the bytes cross two loopback connections (owner to reader, reader to client) and are copied into a new entry at the reader; with no computation around the read, nothing hides it."))

	// OFC §7.2.1, Fig. 7: local hit against the store.
	const storeNote = "The paper's Swift sits across a network; here MinIO answers on loopback, so a store read costs far less and there is less for a cache to save."
	add(shortIf(Compare(at("store/LH p50 (x faster than the store)", kib16), "x", F(180.0/32), p50Ratio(kib16, TargetStore, TargetWarm), HigherIsBetter, 0.05,
		"OFC §7.2.1, Fig. 7 (text): LH up to ≈82% faster than OWK-Swift (wand_edge, 16 kB: 180 ms to 32 ms)",
		storeNote+" "+sizeDiff(kib16, "16 kB")),
		"under version-check every local hit first sends a conditional GET to the store, which at small sizes costs what the whole GET does."))
	add(shortIf(Compare(at("store/LH-local p50 (x faster than the store)", kib16), "x", F(180.0/32), p50Ratio(kib16, TargetStore, TargetWarmLocal), HigherIsBetter, 0.05,
		"OFC §7.2.1, Fig. 7 (text): LH up to ≈82% faster than OWK-Swift (wand_edge, 16 kB: 180 ms to 32 ms)",
		storeNote+" "+sizeDiff(kib16, "16 kB")),
		"the store on loopback answers a small GET in well under a millisecond, so a local hit has little to save."))

	// OFC §7.2.1, Fig. 7: local hit against Redis.
	add(shortIf(Compare(at("LH/Redis p50", kib16), "x", F(1.02), p50Ratio(kib16, TargetWarm, TargetRedis), LowerIsBetter, 0.05,
		"OFC §7.2.1, Fig. 7 (text): OFC within −3% to +2% of OWK-Redis in completion time",
		"Paper: whole functions, whose run dwarfs the read; hoard: the GET alone."),
		"the version check sends every local hit to the store first; Redis answers from memory."))
	add(shortIf(Compare(at("LH-local/Redis p50", kib16), "x", F(1.02), p50Ratio(kib16, TargetWarmLocal, TargetRedis), LowerIsBetter, 0.05,
		"OFC §7.2.1, Fig. 7 (text): OFC within −3% to +2% of OWK-Redis in completion time",
		"Paper: whole functions; hoard: the GET alone."),
		"an S3 GET is an HTTP/1.1 request with SigV4 verification and S3 headers, against a RESP GET."))

	// Faa$T §6.3, Fig. 9: local hit against Vanilla (every object from
	// remote storage, the performance of LM).
	const fig9Note = "Paper: a whole inference (model read and inference) against Vanilla, which reads remote storage at ~90 MB/s (§6.1); hoard: the GET alone against MinIO on loopback."
	for _, x := range []struct {
		s           *SizeResult
		model, size string
		pct         float64
	}{{mb239, "AlexNet", "239 MB", 0.87}, {mb5, "SqueezeNet", "5 MB", 0.60}} {
		src := fmt.Sprintf("Faa$T §6.3, Fig. 9 (text): LH %.0f%% faster than Vanilla for %s (%s model), i.e. 1/(1−%.2f)", x.pct*100, x.model, x.size, x.pct)
		add(shortIf(Compare(at("store/LH p50 (x faster than the store)", x.s), "x", F(1/(1-x.pct)), p50Ratio(x.s, TargetStore, TargetWarm), HigherIsBetter, 0.05,
			src, fig9Note+" "+sizeDiff(x.s, x.size)),
			"a store on loopback delivers GB/s, not the paper's ~90 MB/s remote storage, so reading from memory saves a smaller share."))
		add(shortIf(Compare(at("store/LH-local p50 (x faster than the store)", x.s), "x", F(1/(1-x.pct)), p50Ratio(x.s, TargetStore, TargetWarmLocal), HigherIsBetter, 0.05,
			src, fig9Note+" "+sizeDiff(x.s, x.size)),
			"a store on loopback delivers GB/s, not the paper's ~90 MB/s remote storage, so reading from memory saves a smaller share."))
	}

	// Faa$T §6.3, Fig. 9a: RH against a Redis VM (Pocket).
	add(shortIf(Compare(at("RH/Redis p50", largest), "x", F(1), p50Ratio(largest, TargetRemoteHit, TargetRedis), LowerIsBetter, 0.1,
		"read off Faa$T Fig. 9a, approx.: for the AMBER Alert pipeline \"Faa$T RH is equivalent to using a manually managed Redis VM (Pocket)\" (§6.3)",
		"Pipeline time is dominated by its models (5–97 MB), so the largest measured size stands for it."),
		"a remote hit streams the object over two connections and copies it into the reader's cache; Redis over one."))

	// Faa$T §6.3, Fig. 10: notebook, 350 MB column read in chunks.
	const fig10Note = "Paper: summing a 350 MB DataFrame column in a notebook (in 10 chunks of ~35 MB, DESIGN.md §10), Vanilla reading remote storage; hoard: one GET."
	add(shortIf(Compare(at("store/LH p50 (x faster than the store)", mb35), "x", F(1/(1-0.62)), p50Ratio(mb35, TargetStore, TargetWarm), HigherIsBetter, 0.05,
		"Faa$T §6.3, Fig. 10 (text): LH 62% faster than Vanilla, i.e. 1/(1−0.62)", fig10Note+" "+sizeDiff(mb35, "~35 MB")),
		"a store on loopback delivers GB/s, not remote storage's ~90 MB/s."))
	add(shortIf(Compare(at("store/RH p50 (x faster than the store)", mb35), "x", F(1/(1-0.29)), p50Ratio(mb35, TargetStore, TargetRemoteHit), HigherIsBetter, 0.05,
		"Faa$T §6.3, Fig. 10 (text): RH 29% faster than Vanilla, i.e. 1/(1−0.29)", fig10Note+" "+sizeDiff(mb35, "~35 MB")),
		"on loopback the store is about as fast as a peer: both are one local TCP stream away, and the remote hit adds the reader's copy."))

	// Faa$T §6.3: LM and RM alike.
	for _, s := range uniqueSizes(small, largest) {
		add(shortIf(Compare(at("RM/LM p50", s), "x", F(1), p50Ratio(s, TargetRemoteMiss, TargetCold), LowerIsBetter, 0.1,
			"Faa$T §6.3 (text, no figure given): \"LM and RM exhibit similar latencies\"; 1.0 stands for it",
			"Both fetch from the store; RM adds the hop through the owner."),
			"the owner's fetch is streamed on to the reader through one more loopback connection, which shows when the store is this close."))
	}
	return rows
}

func uniqueSizes(ss ...*SizeResult) []*SizeResult {
	var out []*SizeResult
	for _, s := range ss {
		if s != nil && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// targetOrder is the order targets appear in plots.
var targetOrder = []string{TargetWarmLocal, TargetWarm, TargetOwnerHit, TargetRemoteHit, TargetOwnerRemoteHit, TargetCold, TargetRemoteMiss, TargetStore, TargetStore304, TargetStoreFwd, TargetStore304Fwd, TargetStoreHTTP, TargetStore304HTTP, TargetRedis, TargetTCP, TargetTCPFwd, TargetBoto3Warm, TargetBoto3Store}

// measuredTargets lists the targets measured at some size, in plot order.
func (r *Report) measuredTargets() []string {
	var out []string
	for _, name := range targetOrder {
		for _, s := range r.Sizes {
			if t := s.Target(name); t != nil && t.N > 0 {
				out = append(out, name)
				break
			}
		}
	}
	return out
}

func label(name string) string {
	if l, ok := accessLabels[name]; ok {
		return l
	}
	return name
}

func plotID(s string) string {
	var b strings.Builder
	for _, c := range strings.ToLower(s) {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
			b.WriteRune(c)
		case b.Len() > 0 && !strings.HasSuffix(b.String(), "-"):
			b.WriteByte('-')
		}
	}
	return strings.TrimSuffix(b.String(), "-")
}

// plots: a latency CDF per size, p50 bars per access type, throughput
// curves by size.
func (r *Report) plots() []Plot {
	targets := r.measuredTargets()
	var plots []Plot
	for _, s := range r.Sizes {
		p := Plot{Kind: PlotCDF, ID: "cdf-" + plotID(s.Label), Title: "GET latency CDF, " + s.Label, Unit: "ms",
			XLabel: "latency (ms)", YLabel: "fraction of GETs", XLog: true}
		for _, name := range targets {
			if t := s.Target(name); t != nil && len(t.SamplesNS) > 0 {
				p.Series = append(p.Series, CDFSeries(label(name), t.SamplesNS, time.Millisecond))
			}
		}
		if len(p.Series) > 0 {
			plots = append(plots, p)
		}
	}
	bars := Plot{Kind: PlotBar, ID: "p50-by-access-type", Title: "GET p50 by access type and object size", Unit: "ms",
		XLabel: "object size", YLabel: "p50 latency (ms)", YLog: true,
		Caption: "LH: local hit, RH: remote hit, LM: local miss, RM: remote miss (Faa$T's names)."}
	for _, s := range r.Sizes {
		bars.Categories = append(bars.Categories, s.Label)
	}
	for _, name := range targets {
		ser := Series{Label: label(name)}
		for _, s := range r.Sizes {
			var v *float64
			if t := s.Target(name); t != nil && t.N > 0 {
				v = F(float64(t.P50) / float64(time.Millisecond))
			}
			ser.Values = append(ser.Values, v)
		}
		bars.Series = append(bars.Series, ser)
	}
	if len(bars.Series) > 0 {
		plots = append(plots, bars)
	}
	tput := Plot{Kind: PlotCurve, ID: "throughput", Title: "GET throughput by object size", Unit: "MB/s",
		XLabel: "object size (bytes)", YLabel: "MB/s (10^6 bytes/s)", XLog: true, YLog: true}
	for _, name := range targets {
		ser := Series{Label: label(name)}
		for _, s := range r.Sizes {
			if t := s.Target(name); t != nil && t.N > 0 && t.MBps > 0 {
				ser.X = append(ser.X, float64(s.Size))
				ser.Y = append(ser.Y, t.MBps)
			}
		}
		if len(ser.X) > 0 {
			tput.Series = append(tput.Series, ser)
		}
	}
	if len(tput.Series) > 0 {
		plots = append(plots, tput)
	}
	return plots
}

// workload is the cost model's application: one invocation reads the
// largest measured object, from the instance's cache (warm, under the
// default version-check: one conditional GET to the store) or from the
// store (cold).
func (r *Report) workload() (CostWorkload, bool) {
	s := r.nearestSize(math.MaxInt64)
	if s == nil {
		return CostWorkload{}, false
	}
	warm, cold := s.Target(TargetWarm), s.Target(TargetCold)
	if warm == nil || cold == nil || warm.N == 0 || cold.N == 0 {
		return CostWorkload{}, false
	}
	return CostWorkload{
		Name:             "read one " + s.Label + " object",
		Description:      "one invocation GETs one " + s.Label + " object; warm: a local hit under version-check (one conditional GET to the store), cold: a local miss",
		WarmSeconds:      warm.P50.Seconds(),
		ColdSeconds:      cold.P50.Seconds(),
		MemoryBytes:      DefaultFunctionMemory,
		CacheBytes:       s.Size,
		StoreGetsWarm:    1,
		StoreGetsCold:    1,
		KeepAliveSeconds: appspec.DefaultKeepAlive.Seconds(),
		Source:           "warm_s: p50 of the warm target, cold_s: p50 of the cold target, at " + s.Label,
	}, true
}
