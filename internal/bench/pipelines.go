package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/hoard-io/hoard/internal/appspec"
	"github.com/hoard-io/hoard/internal/bytesize"
	"github.com/hoard-io/hoard/internal/scaling"
)

var (
	refCacheFlowFig6 = Reference{Paper: "CacheFlow", Figure: "Fig. 6", Section: "§5", Citation: CiteCacheFlow}
	refCacheFlowFig7 = Reference{Paper: "CacheFlow", Figure: "Fig. 7", Section: "§5", Citation: CiteCacheFlow}
)

// CacheFlow's figures (§5, in the text on Fig. 6 (single node) and Fig. 7
// (multi-node); the per-stage bars are only plotted): the data-transfer
// time of the whole image-processing chain falls by 82.55% (also the
// abstract's "up to 82.55%"), that of the video-processing chain by
// 62.64%, and the video stages' best data-transfer speedup is 3.84x.
const (
	paperImageChainReduction = 82.55
	paperVideoChainReduction = 62.64
	paperVideoBestSpeedup    = 3.84
)

func pipelinesExperiment() Experiment {
	return Experiment{
		Name:       "pipelines",
		Title:      "Function chains: CacheFlow's image and video pipelines, data-transfer time per stage with and without hoard",
		Reproduces: []Reference{refCacheFlowFig6, refCacheFlowFig7},
		Quick:      Options{Iterations: 3, Sizes: []int64{25}},  // Sizes[0]: the data's scale, in percent
		Full:       Options{Iterations: 5, Sizes: []int64{100}}, // 2048x1536 JPEG, 36.9 MB video
		Run:        runPipelinesExperiment,
	}
}

// chainStage is one stage of a chain as CacheFlow reports it: the
// pipeline's stages (functions) whose transfer times add up to it.
type chainStage struct {
	Label  string
	Stages []string
}

// chainSpec is one of CacheFlow's two workflows as an example's pipeline.
type chainSpec struct {
	ID, Name          string // "image", "image processing"
	Example, Pipeline string
	Bucket            string
	// Source is the key of the prepared input at a scale; each run reads
	// a fresh copy of it.
	Source  func(scale float64) string
	Prepare map[string]any
	Stages  []chainStage
	// Paper is CacheFlow's reduction of the chain's transfer time, %.
	Paper float64
}

var pipelineChains = []chainSpec{
	{
		ID: "image", Name: "image processing", Example: "image-processing", Pipeline: "process", Bucket: "images",
		Source:  func(s float64) string { return scaledKey("originals/img-000.jpg", s) },
		Prepare: map[string]any{"count": 1},
		Stages: []chainStage{
			{"IS: scale (thumbnail)", []string{"thumbnail"}},
			{"IR stand-in: blur", []string{"blur"}},
		},
		Paper: paperImageChainReduction,
	},
	{
		ID: "video", Name: "video processing", Example: "video", Pipeline: "transcode", Bucket: "videos",
		Source:  func(s float64) string { return scaledKey("source/video.npy", s) },
		Prepare: map[string]any{},
		Stages: []chainStage{
			{"VS: split", []string{"split"}},
			{"VT: transcode x4", []string{"transcode0", "transcode1", "transcode2", "transcode3"}},
			{"VM: merge", []string{"merge"}},
		},
		Paper: paperVideoChainReduction,
	},
}

// chainVariant is one way of running a chain.
type chainVariant struct {
	ID, Label string
	// Consistency is the application's cache setting (hoard variants).
	Consistency string
	// Direct: the functions' boto3 talks to the store, not the cachelet.
	Direct bool
}

var chainVariants = []chainVariant{
	{ID: "vanilla", Label: "vanilla (boto3 to the store)", Direct: true},
	{ID: "owner", Label: "hoard (owner)", Consistency: "owner"},
	{ID: "strong", Label: "hoard (strong)", Consistency: "strong"},
}

// scaledKey is the examples' key of data prepared at a scale.
func scaledKey(key string, scale float64) string {
	if scale == 1 {
		return key
	}
	return "x" + strconv.FormatFloat(scale, 'g', -1, 64) + "/" + key
}

// stageMeasure is one chain stage's figures under one variant, summed
// over its functions: per timed run, the milliseconds in S3 GETs (body
// read included), in PUTs, and in the rest; the bytes one run moved; the
// reads through the cachelets by access type, over all timed runs.
type stageMeasure struct {
	Get, Put, Compute  []float64
	GetBytes, PutBytes int64
	Reads              map[string]int64
}

// chainMeasure is what the timed runs of one chain measured, by variant.
type chainMeasure struct {
	Stages map[string][]stageMeasure // [variant][chain stage]
	// Chain is, per run, the whole chain's transfer time (ms).
	Chain map[string][]float64
	// Persist is, per run, the ms from the run's end until the writes its
	// cachelets queued for the store were persisted.
	Persist map[string][]float64
}

// fnTiming is a function's own account of its time (its result's "timing").
type fnTiming struct {
	TransferMS float64 `json:"transfer_ms"`
	GetMS      float64 `json:"get_ms"`
	PutMS      float64 `json:"put_ms"`
	ComputeMS  float64 `json:"compute_ms"`
	GetBytes   int64   `json:"get_bytes"`
	PutBytes   int64   `json:"put_bytes"`
}

// runPipelinesExperiment runs CacheFlow's two workflows — the image
// example's process pipeline (thumbnail, then blur) and the video
// example's split, four parallel transcodes and merge — on the platform,
// the store behind the faast link, three ways: with the functions' boto3
// talking to the store directly (vanilla), and through hoard's cachelets
// under the owner and the strong settings. Every function reports the
// time it spent in S3 transfers; the experiment sums it per stage. Each
// run reads a fresh copy of its input, so the first stage reads from the
// store in every variant; runs of the variants alternate.
func runPipelinesExperiment(ctx context.Context, o Options) (*Result, error) {
	env := o.Env
	started := time.Now()
	scale := 1.0
	if len(o.Sizes) > 0 && o.Sizes[0] > 0 {
		scale = float64(o.Sizes[0]) / 100
	}
	iters := max(o.Iterations, 1)
	say := func(format string, args ...any) { fmt.Fprintf(env.progress(), "pipelines: "+format+"\n", args...) }
	r, err := startRig(ctx, env, "faast")
	if err != nil {
		return nil, err
	}
	defer r.Close()
	store, err := NewS3Client(r.minioURL, rigStoreAccessKey, rigStoreSecretKey, benchRegion)
	if err != nil {
		return nil, err
	}
	direct := map[string]any{"endpoint": r.storeURL, "access_key": rigStoreAccessKey, "secret_key": rigStoreSecretKey}

	measures := map[string]*chainMeasure{}
	for _, c := range pipelineChains {
		apps := map[string]string{}
		for _, v := range chainVariants {
			app, err := r.deploy(ctx, c.Example, func(s *appspec.Spec) {
				s.Name, s.KeepAlive = c.ID+"-"+v.ID, appspec.Duration(time.Hour)
				if v.Consistency != "" {
					s.Cache.Consistency = v.Consistency
				}
			})
			if err != nil {
				return nil, err
			}
			apps[v.ID] = app
		}
		say("%s: creating the data (scale %g) in the store", c.Name, scale)
		prep := map[string]any{"scale": scale, "store": direct}
		for k, v := range c.Prepare {
			prep[k] = v
		}
		if _, err := r.invoke(ctx, apps["vanilla"], "prepare", prep); err != nil {
			return nil, err
		}
		m := &chainMeasure{Stages: map[string][]stageMeasure{}, Chain: map[string][]float64{}, Persist: map[string][]float64{}}
		for _, v := range chainVariants {
			m.Stages[v.ID] = make([]stageMeasure, len(c.Stages))
			for i := range m.Stages[v.ID] {
				m.Stages[v.ID][i].Reads = map[string]int64{}
			}
		}
		// One untimed run per variant loads the instances and their clients.
		for run := -1; run < iters; run++ {
			for _, v := range chainVariants {
				if err := runChain(ctx, r, store, c, v, apps[v.ID], scale, direct, run, m); err != nil {
					return nil, fmt.Errorf("%s, %s: %w", c.Name, v.Label, err)
				}
			}
			if run >= 0 {
				var parts []string
				for _, v := range chainVariants {
					parts = append(parts, fmt.Sprintf("%s %.1f ms", v.ID, m.Chain[v.ID][run]))
				}
				say("%s run %d/%d: transfer %s", c.Name, run+1, iters, strings.Join(parts, ", "))
			}
		}
		measures[c.ID] = m
	}
	res := pipelinesResult(o, r.link, scale, iters, measures, time.Since(started))
	fmt.Fprintln(env.table())
	if err := writePipelinesTables(env.table(), res); err != nil {
		return res, err
	}
	return res, nil
}

// runChain runs chain c once under variant v on a fresh copy of its
// input and, for a timed run (run >= 0), adds what its functions measured
// to m.
func runChain(ctx context.Context, r *benchRig, store *minio.Core, c chainSpec, v chainVariant, app string, scale float64,
	direct map[string]any, run int, m *chainMeasure) error {
	src := c.Source(scale)
	key := fmt.Sprintf("bench-input/%s-%d-%s%s", v.ID, run+1, randSuffix(), path.Ext(src))
	if _, err := store.CopyObject(ctx, c.Bucket, src, c.Bucket, key, nil, minio.CopySrcOptions{}, minio.PutObjectOptions{}); err != nil {
		return fmt.Errorf("copying the input: %w", err)
	}
	input := map[string]any{"bucket": c.Bucket, "key": key, "scale": scale}
	if v.Direct {
		input["store"] = direct
	}
	raw, _ := json.Marshal(input)
	pr, err := r.p.Controller.RunPipeline(ctx, app, c.Pipeline, raw, "bench")
	if err != nil {
		return err
	}
	if !pr.OK {
		return fmt.Errorf("pipeline %s: %s", c.Pipeline, pr.Error)
	}
	ended := time.Now()
	if err := waitPersisted(ctx, r, app); err != nil {
		return err
	}
	persisted := float64(time.Since(ended).Microseconds()) / 1e3
	// Off the store go the run's input and outputs, and the intermediates
	// that background writes brought back after the controller deleted them.
	garbage := []string{key}
	for _, st := range pr.Stages {
		garbage = append(garbage, outputKeys(st.Result)...)
	}
	for _, k := range garbage {
		_ = store.RemoveObject(ctx, c.Bucket, k, minio.RemoveObjectOptions{})
	}
	if in := pr.Intermediate; in != nil {
		for obj := range store.Client.ListObjects(ctx, in.Bucket, minio.ListObjectsOptions{Prefix: in.Prefix, Recursive: true}) {
			if obj.Err == nil {
				_ = store.RemoveObject(ctx, in.Bucket, obj.Key, minio.RemoveObjectOptions{})
			}
		}
	}
	if run < 0 {
		return nil
	}
	var total float64
	for i, cs := range c.Stages {
		sm := &m.Stages[v.ID][i]
		var get, put, compute float64
		var getBytes, putBytes int64
		for _, name := range cs.Stages {
			inv := pr.Stages[name]
			if inv == nil {
				return fmt.Errorf("stage %s did not run", name)
			}
			var out struct {
				Timing *fnTiming `json:"timing"`
			}
			if err := json.Unmarshal(inv.Result, &out); err != nil || out.Timing == nil {
				return fmt.Errorf("stage %s returned no timing (%v): %.200s", name, err, inv.Result)
			}
			t := out.Timing
			get, put, compute = get+t.GetMS, put+t.PutMS, compute+t.ComputeMS
			getBytes, putBytes = getBytes+t.GetBytes, putBytes+t.PutBytes
			for k, rc := range inv.Reads {
				if rc.Count == 0 {
					continue
				}
				if v.Direct {
					return fmt.Errorf("stage %s: %d reads went through the cachelet (%s), not to the store", name, rc.Count, k)
				}
				sm.Reads[k] += rc.Count
			}
		}
		sm.Get, sm.Put, sm.Compute = append(sm.Get, get), append(sm.Put, put), append(sm.Compute, compute)
		sm.GetBytes, sm.PutBytes = getBytes, putBytes
		total += get + put
	}
	m.Chain[v.ID] = append(m.Chain[v.ID], total)
	m.Persist[v.ID] = append(m.Persist[v.ID], persisted)
	return nil
}

// outputKeys are the keys a stage's result names as its outputs
// ("output": {"key"}, or "outputs": [{"key"}]), in the chain's bucket.
func outputKeys(result json.RawMessage) []string {
	var out struct {
		Output  *struct{ Key string }  `json:"output"`
		Outputs []struct{ Key string } `json:"outputs"`
	}
	if json.Unmarshal(result, &out) != nil {
		return nil
	}
	var keys []string
	if out.Output != nil && out.Output.Key != "" {
		keys = append(keys, out.Output.Key)
	}
	for _, o := range out.Outputs {
		if o.Key != "" {
			keys = append(keys, o.Key)
		}
	}
	return keys
}

// waitPersisted waits until no cachelet of app has a background write
// queued (hoard_writeback_depth 0 on each instance's /metrics).
func waitPersisted(ctx context.Context, r *benchRig, app string) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		depth := 0.0
		for _, in := range r.p.Agent.Instances() {
			if in.App != app || in.MetricsURL == "" {
				continue
			}
			d, err := writebackDepth(ctx, in.MetricsURL)
			if err != nil {
				return err
			}
			depth += d
		}
		if depth == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %g background writes still queued after 2 minutes", app, depth)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// writebackDepth sums the hoard_writeback_depth gauges of a cachelet's
// metrics page.
func writebackDepth(ctx context.Context, url string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return parseGaugeSum(resp.Body, "hoard_writeback_depth")
}

// parseGaugeSum sums the samples of one metric in Prometheus' text format.
func parseGaugeSum(r io.Reader, name string) (float64, error) {
	sum := 0.0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		fields := strings.Fields(rest[strings.LastIndex(rest, "}")+1:])
		if len(fields) == 0 {
			return 0, fmt.Errorf("metric line %q: no value", line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return 0, fmt.Errorf("metric line %q: %w", line, err)
		}
		sum += v
	}
	return sum, sc.Err()
}

// medianF is the median of xs (the mean of the middle two for an even
// count); NaN for none.
func medianF(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// sumF adds two runs' series element by element.
func sumF(a, b []float64) []float64 {
	out := make([]float64, min(len(a), len(b)))
	for i := range out {
		out[i] = a[i] + b[i]
	}
	return out
}

// reduction is by how much, in %, hoard's figure is below vanilla's.
func reduction(vanilla, hoard float64) float64 { return 100 * (1 - hoard/vanilla) }

// chainFigures are one chain's medians, by variant id.
type chainFigures struct {
	stage [][]float64 // [chain stage] per variant (in chainVariants' order): transfer ms
	chain []float64   // per variant: the whole chain's transfer ms
	// reduction and best are per hoard variant (chainVariants[1:]): the
	// chain's transfer-time reduction against vanilla (%), and the
	// largest stage speedup (vanilla / hoard) with its stage.
	reduction, best []float64
	bestStage       []string
}

func figuresOf(c chainSpec, m *chainMeasure) chainFigures {
	f := chainFigures{}
	for i := range c.Stages {
		row := make([]float64, len(chainVariants))
		for j, v := range chainVariants {
			sm := m.Stages[v.ID][i]
			row[j] = medianF(sumF(sm.Get, sm.Put))
		}
		f.stage = append(f.stage, row)
	}
	for _, v := range chainVariants {
		f.chain = append(f.chain, medianF(m.Chain[v.ID]))
	}
	for j := 1; j < len(chainVariants); j++ {
		f.reduction = append(f.reduction, reduction(f.chain[0], f.chain[j]))
		best, at := math.NaN(), ""
		for i, cs := range c.Stages {
			if sp := f.stage[i][0] / f.stage[i][j]; f.stage[i][j] > 0 && (math.IsNaN(best) || sp > best) {
				best, at = sp, cs.Label
			}
		}
		f.best, f.bestStage = append(f.best, best), append(f.bestStage, at)
	}
	return f
}

func pipelinesResult(o Options, link string, scale float64, iters int, ms map[string]*chainMeasure, took time.Duration) *Result {
	frames := videoFrames(scale)
	videoBytes := int64(frames) * 240 * 320 * 3
	res := &Result{
		Experiment: "pipelines",
		Title:      "Function chains: CacheFlow's image and video pipelines, data-transfer time per stage with and without hoard",
		Reproduces: []Reference{refCacheFlowFig6, refCacheFlowFig7},
		Status:     StatusOK,
		Quick:      o.Quick,
		Machine:    DescribeMachine(),
		Seconds:    took.Seconds(),
		Method: "CacheFlow's two workflows run on the platform with the store behind netshape's faast link: image processing " +
			"(the image-processing example's process pipeline: a thumbnail, then a blur of the thumbnail) and video processing " +
			"(the video example: split a video of raw frames into 4 clips, transcode the clips to YUV 4:2:0 in parallel, merge). " +
			"Each runs three ways: vanilla, the functions' boto3 talking to the store directly; hoard under the owner setting " +
			"(writes acknowledged by the key's owner cachelet and persisted in the background, reads confirmed with the owner); " +
			"and hoard under strong, the default (writes reach the store before they are acknowledged, reads confirmed with the store). " +
			"Every function times its own S3 transfers (get_object with the body read, put_object) apart from the rest of its work; " +
			"a stage's transfer time is the sum over its functions (the four transcodes for VT), the chain's the sum over its stages. " +
			"Each run reads a fresh copy of its input, so the first stage reads it from the store in every variant, as in CacheFlow, " +
			"whose cache holds what the chain writes. Runs of the three variants alternate, after one untimed run each; the next run " +
			"starts once the cachelets' background writes have reached the store. Medians over the timed runs.",
		Settings: RunSettings{
			Link:       link,
			Iterations: []Count{{What: "timed runs per chain and variant", N: iters}},
			Other: []Setting{
				{"data scale", fmt.Sprint(scale)},
				{"image", fmt.Sprintf("one %dx%d JPEG per run, thumbnail 256 px", imageSide(2048, scale), imageSide(1536, scale))},
				{"video", fmt.Sprintf("%d frames of 240x320 RGB (%s), 4 clips", frames, fmtMB(videoBytes))},
				{"max instances", "4 (the image chain runs on one, the video chain's transcodes on up to four)"},
			},
		},
	}
	perStage := Table{ID: "transfer-per-stage", Title: "Data-transfer time per stage (median ms over the timed runs)",
		Columns: []string{"chain", "stage", "vanilla ms", "hoard (owner) ms", "reduction", "hoard (strong) ms", "reduction (strong)",
			"compute ms (vanilla / owner / strong)"},
		Caption: "Transfer: time in S3 get_object (body read included) and put_object, summed over the stage's functions; " +
			"whole chain: median of the runs' totals. Reduction: 1 - hoard / vanilla."}
	detail := Table{ID: "stage-detail", Title: "Per stage and variant: downloads, uploads, the rest, and how the cachelets served the reads",
		Columns: []string{"chain", "stage", "variant", "get ms", "put ms", "compute ms", "read", "written", "reads through the cachelets (all timed runs)"}}
	figs := map[string]chainFigures{}
	for _, c := range pipelineChains {
		m := ms[c.ID]
		if m == nil {
			continue
		}
		f := figuresOf(c, m)
		figs[c.ID] = f
		vals := make([][]*float64, len(chainVariants))
		for i, cs := range c.Stages {
			var compute []string
			for j, v := range chainVariants {
				sm := m.Stages[v.ID][i]
				compute = append(compute, fmtMillis(medianF(sm.Compute)))
				vals[j] = append(vals[j], F(f.stage[i][j]))
				detail.Rows = append(detail.Rows, []string{c.Name, cs.Label, v.Label, fmtMillis(medianF(sm.Get)), fmtMillis(medianF(sm.Put)),
					fmtMillis(medianF(sm.Compute)), fmtMB(sm.GetBytes), fmtMB(sm.PutBytes), fmtReadCounts(sm.Reads, v.Direct)})
			}
			st := f.stage[i]
			perStage.Rows = append(perStage.Rows, []string{c.Name, cs.Label, fmtMillis(st[0]), fmtMillis(st[1]), fmtPct(reduction(st[0], st[1])),
				fmtMillis(st[2]), fmtPct(reduction(st[0], st[2])), strings.Join(compute, " / ")})
		}
		perStage.Rows = append(perStage.Rows, []string{c.Name, "whole chain", fmtMillis(f.chain[0]), fmtMillis(f.chain[1]), fmtPct(f.reduction[0]),
			fmtMillis(f.chain[2]), fmtPct(f.reduction[1]), ""})
		plot := Plot{Kind: PlotBar, ID: c.ID + "-transfer", Title: "Data-transfer time per stage, " + c.Name + " (median)",
			Unit: "ms", YLabel: "ms", Categories: append(stageLabels(c), "whole chain"),
			Caption: fmt.Sprintf("CacheFlow §5 (Fig. 6-7): the whole %s chain's data-transfer time %.2f%% lower with its cache.", c.Name, c.Paper)}
		for j, v := range chainVariants {
			plot.Series = append(plot.Series, Series{Label: v.Label, Values: append(vals[j], F(f.chain[j]))})
		}
		res.Plots = append(res.Plots, plot)
	}
	res.Tables = []Table{perStage, detail}

	// The paper's figures next to hoard's, and a plot of the chains' reductions.
	src := map[string]string{
		"image": "CacheFlow §5, Fig. 6-7 (text: \"82.55% reduction\" over the entire function chain; abstract: up to 82.55%)",
		"video": "CacheFlow §5, Fig. 6-7 (text: the entire chain's total data transfer time \"decreased by 62.64%\")",
	}
	note := []string{
		"hoard (owner): writes stay in the cachelets' memory and reach the store in the background, as CacheFlow keeps intermediate " +
			"data on local disk; the store is behind Faa$T's link (90 MB/s, 10 ms each way), CacheFlow's MinIO 85/75 MB/s away, no latency given.",
		"hoard (strong), the default: every write reaches the store before it is acknowledged and every cached read is confirmed " +
			"with the store (a round trip), so nothing of a chain's transfers is taken off the link.",
	}
	reductions := Plot{Kind: PlotBar, ID: "chain-reduction", Title: "Whole chain: data-transfer time reduction against vanilla",
		Unit: "%", YLabel: "% less transfer time", Series: []Series{{Label: "CacheFlow (paper)"}},
		Caption: "CacheFlow §5: 82.55% (image processing) and 62.64% (video processing)."}
	for j := 1; j < len(chainVariants); j++ {
		reductions.Series = append(reductions.Series, Series{Label: chainVariants[j].Label})
	}
	for _, c := range pipelineChains {
		f, ok := figs[c.ID]
		if !ok {
			continue
		}
		reductions.Categories = append(reductions.Categories, c.Name+" chain")
		reductions.Series[0].Values = append(reductions.Series[0].Values, F(c.Paper))
		for j := 1; j < len(chainVariants); j++ {
			v := chainVariants[j]
			res.Rows = append(res.Rows, Compare(fmt.Sprintf("%s chain: data-transfer time reduction, %s", c.Name, v.Label), "%",
				F(c.Paper), F(f.reduction[j-1]), HigherIsBetter, 0.1, src[c.ID], note[j-1]))
			reductions.Series[j].Values = append(reductions.Series[j].Values, F(f.reduction[j-1]))
		}
	}
	if f, ok := figs["video"]; ok {
		for j := 1; j < len(chainVariants); j++ {
			res.Rows = append(res.Rows, Compare("video processing: best stage's data-transfer speedup, "+chainVariants[j].Label, "x",
				F(paperVideoBestSpeedup), F(f.best[j-1]), HigherIsBetter, 0.1,
				"CacheFlow §5, Fig. 6-7 (text: \"up to 3.84x faster data transfer time\")",
				"hoard's best stage: "+f.bestStage[j-1]+" (a stage's downloads plus uploads, summed over its functions)."))
		}
	}
	if len(reductions.Categories) > 0 {
		res.Plots = append(res.Plots, reductions)
	}

	var persisted []float64
	for _, m := range ms {
		persisted = append(persisted, m.Persist["owner"]...)
	}
	res.Notes = []string{
		"Setting: CacheFlow ran Knative on Kubernetes VMs, caching on each node's disk (NFS, 573 MB/s) in front of a MinIO 85 MB/s " +
			"(download) and 75 MB/s (upload) away; hoard caches in the memory of each function instance, all on one machine (closer to " +
			"Fig. 6's single node; the video chain's instances share data over loopback), the store behind Faa$T's link.",
		"The image chain's second stage is a Gaussian blur of the thumbnail, standing in for CacheFlow's image recognition (IR) " +
			"with a pre-trained model: the data flow is the same (download the scaled image, upload a small result); no model is read.",
		"Vanilla functions talk to the store directly (checked: none of their reads went through a cachelet). Every run's input " +
			"is a fresh copy, so the first stage (IS, VS) downloads it from the store in every variant. " + splitNote(videoBytes),
		"Under hoard (owner) an upload ends when the key's owner cachelet holds it; the store receives it in the background (all " +
			"of a run's writes were in the store " + fmtMillis(medianF(persisted)) + " ms after its end, median; not counted in any transfer " +
			"time). hoard persists the intermediate objects too, where CacheFlow keeps them off the store, and the background writes " +
			"share the machine's two CPUs with the chain's functions.",
		"Under hoard (strong) an upload also waits for the store to confirm the new version (one more round trip), so uploads " +
			"are slower than vanilla's, and a cached read still asks the store first (one round trip, no data).",
	}
	if scale != 1 {
		res.Notes = append(res.Notes, fmt.Sprintf("Data at %g of the full sizes: the link's round trips weigh more next to the bytes moved.", scale))
	}
	return res
}

// splitNote says whether the video's first download is large enough for
// the bandwidth policy, which splits a cachelet's miss of a large object
// into byte ranges fetched by several cachelets.
func splitNote(videoBytes int64) string {
	limit := int64(scaling.DefaultMinObjectSize)
	if videoBytes >= limit {
		return fmt.Sprintf("The %s video is at least the %s from which a cachelet that misses splits the download into byte "+
			"ranges fetched by several cachelets at once (the bandwidth policy, docs/platform.md), so hoard's VS download "+
			"beats vanilla's single boto3 connection through the same link; CacheFlow's first downloads gain nothing.",
			fmtMB(videoBytes), bytesize.Human(limit))
	}
	return fmt.Sprintf("The %s video is under the %s from which a cachelet splits a miss into byte ranges fetched by several "+
		"cachelets (the bandwidth policy), so these downloads take what vanilla's take, as in CacheFlow.", fmtMB(videoBytes), bytesize.Human(limit))
}

func stageLabels(c chainSpec) []string {
	var out []string
	for _, s := range c.Stages {
		out = append(out, s.Label)
	}
	return out
}

// imageSide is a side of the image example's pictures at a scale (the
// example scales their area).
func imageSide(full int, scale float64) int { return int(math.Round(float64(full) * math.Sqrt(scale))) }

// videoFrames is the video example's frame count at a scale.
func videoFrames(scale float64) int { return max(4, int(math.Round(160*scale))) }

func fmtMillis(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	return fmt.Sprintf("%.1f", v)
}

func fmtPct(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", v)
}

func fmtMB(n int64) string {
	if n < 1e5 {
		return fmt.Sprintf("%.1f KB", float64(n)/1e3)
	}
	return fmt.Sprintf("%.2f MB", float64(n)/1e6)
}

// fmtReadCounts says how reads were served, by access type.
func fmtReadCounts(m map[string]int64, direct bool) string {
	if direct {
		return "none (to the store)"
	}
	if len(m) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// writePipelinesTables prints the result's tables and paper rows.
func writePipelinesTables(w io.Writer, res *Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, t := range res.Tables {
		fmt.Fprintln(tw, t.Title)
		fmt.Fprintln(tw, strings.Join(t.Columns, "\t"))
		for _, row := range t.Rows {
			fmt.Fprintln(tw, strings.Join(row, "\t"))
		}
		fmt.Fprintln(tw)
	}
	fmt.Fprintln(tw, "paper vs hoard\tpaper\thoard\tsource")
	for _, c := range res.Rows {
		h := "-"
		if c.Hoard != nil {
			h = fmt.Sprintf("%.2f", *c.Hoard)
		}
		p := "-"
		if c.Paper != nil {
			p = fmt.Sprintf("%.2f", *c.Paper)
		}
		short := ""
		if c.Short {
			short = " (short)"
		}
		fmt.Fprintf(tw, "%s\t%s %s\t%s %s%s\t%s\n", c.Metric, p, c.Unit, h, c.Unit, short, c.Source)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(res.Notes) > 0 {
		_, err := fmt.Fprintln(w, "\n"+strings.Join(res.Notes, "\n"))
		return err
	}
	return nil
}
