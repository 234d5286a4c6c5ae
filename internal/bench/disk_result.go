package bench

import (
	"context"
	"fmt"
	"time"
)

var refCacheFlow = Reference{Paper: "CacheFlow", Figure: "Fig. 6-8 (data transfer time with the node's disk cache)", Section: "§4", Citation: CiteCacheFlow}

func diskExperiment() Experiment {
	return Experiment{
		Name:       "disk",
		Title:      "Disk tier: disk hits against store reads, memory-only against the disk tier with a budget below the working set, a reloaded instance",
		Reproduces: []Reference{refCacheFlow},
		Quick:      Options{Iterations: 1},
		Full:       Options{},
		Run:        runDiskExperiment,
	}
}

// runDiskExperiment runs `hoard bench disk` (smaller objects and one warm
// pass with --quick).
func runDiskExperiment(ctx context.Context, o Options) (*Result, error) {
	env := o.Env
	cfg := DiskConfig{MinIOBinary: env.MinIOBinary, TempDir: env.TempDir, Progress: env.progress(), Log: env.Log, Passes: o.Iterations}
	if o.Quick {
		cfg.Objects, cfg.Size = 12, 1<<20
	}
	if len(o.Sizes) > 0 {
		cfg.Size = o.Sizes[0]
	}
	began := time.Now()
	rep, err := RunDisk(ctx, cfg)
	if rep == nil {
		return nil, err
	}
	res := rep.Result()
	res.Quick, res.StartedAt = o.Quick, began
	return res, err
}

// variant returns the named variant's mean read time, or 0.
func (r *DiskReport) mean(name string) time.Duration {
	for _, v := range r.Variants {
		if v.Name == name {
			return v.Reads.Mean
		}
	}
	return 0
}

// Result turns the report into the experiment's Result.
func (r *DiskReport) Result() *Result {
	res := &Result{
		Experiment: "disk",
		Status:     StatusOK,
		Machine:    DescribeMachine(),
		Method: "One cachelet reads a working set three times its memory budget in order, again and again (LRU's worst case), " +
			"with MinIO behind the shaped link; the same reads straight from the store are the baseline. Every disk hit is " +
			"confirmed by the store with a conditional GET, which moves no data.",
		Settings: RunSettings{ObjectSizes: []int64{r.Size}, Link: r.Link, Other: []Setting{
			{"working set", fmt.Sprintf("%d objects, %s", r.Objects, FormatSize(int64(r.Objects)*r.Size))},
			{"memory budget", FormatSize(r.Budget)},
			{"warm passes", fmt.Sprint(r.Passes)},
		}},
	}
	store := r.mean("store direct")
	disk := r.mean("disk tier: warm passes")
	if store > 0 && disk > 0 {
		speedup := float64(store) / float64(disk)
		saved := 100 * (1 - float64(disk)/float64(store))
		paperX, paperSaved := 3.84, 62.64
		res.Rows = append(res.Rows,
			Compare("disk hit vs store read, mean", "x", &paperX, &speedup, HigherIsBetter, 0.05,
				"CacheFlow §4: \"up to 3.84x faster data transfer time\" (video chain)",
				"CacheFlow's network: 85 MB/s, its disk: NFS at 573 MB/s; hoard's disk hits also pay the store's round trip (version check)"),
			Compare("transfer time saved by the disk tier", "%", &paperSaved, &saved, HigherIsBetter, 0.05,
				"CacheFlow §4: -62.64% over the video chain (-82.55% over the image chain)", ""),
		)
	}
	table := Table{ID: "variants", Title: "Every variant, one run", Columns: []string{"variant", "reads", "p50", "p99", "mean", "MB/s", "served as"}}
	bars := Plot{Kind: PlotBar, ID: "mean", Title: "Mean read time of a " + FormatSize(r.Size) + " object", Unit: "ms", YLabel: "ms"}
	s := Series{Label: "mean"}
	for _, v := range r.Variants {
		table.Rows = append(table.Rows, []string{v.Name, fmt.Sprint(v.Reads.N), FormatDuration(v.Reads.P50), FormatDuration(v.Reads.P99),
			FormatDuration(v.Reads.Mean), FormatMBps(v.Reads.MBps), fmt.Sprint(v.Outcomes)})
		ms := float64(v.Reads.Mean) / float64(time.Millisecond)
		bars.Categories = append(bars.Categories, v.Name)
		s.Values = append(s.Values, &ms)
	}
	bars.Series = []Series{s}
	res.Plots = append(res.Plots, bars)
	res.Tables = append(res.Tables, table)
	res.Notes = append(res.Notes, r.CacheFlow)
	return res
}
