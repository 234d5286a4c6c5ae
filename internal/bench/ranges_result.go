package bench

import (
	"context"
	"fmt"
	"time"
)

// refFaaSNetOnDemand: FaaSNet's on-demand I/O reads whole blocks around
// the bytes asked for, trading read amplification for fewer requests, as
// pages do; it gives the trade no figure for object ranges.
var refFaaSNetOnDemand = Reference{Paper: "FaaSNet", Figure: "§3.5 (on-demand I/O: block-aligned reads and their amplification)", Section: "§3.5, §4.6", Citation: CiteFaaSNet}

func rangesExperiment() Experiment {
	return Experiment{
		Name:       "ranges",
		Title:      "Ranged reads of large objects: hoard's pages cold and warm against the store behind a shaped link",
		Reproduces: []Reference{refFaaSNetOnDemand},
		// A quick run reads smaller objects and fewer ranges: its figures
		// keep their shape (one ranged store GET per cold read) at a
		// fraction of the upload.
		Quick: Options{Iterations: 8},
		Full:  Options{},
		Run:   runRangesExperiment,
	}
}

// runRangesExperiment runs `hoard bench ranges`: the default objects
// (100-160 MiB) in a full run, 24-32 MiB objects and 8 ranges in a quick
// one.
func runRangesExperiment(ctx context.Context, o Options) (*Result, error) {
	env := o.Env
	cfg := RangesConfig{
		MinIOBinary: env.MinIOBinary, TempDir: env.TempDir, Progress: env.progress(), Log: env.Log,
		Ranges: o.Iterations, Seed: 1,
	}
	if o.Quick {
		cfg.MinSize, cfg.MaxSize, cfg.MaxRange, cfg.MaxObject = 24<<20, 32<<20, 4<<20, 16<<20
	}
	began := time.Now()
	rep, err := RunRanges(ctx, cfg)
	if rep == nil {
		return nil, err
	}
	res := rep.Result()
	res.Quick, res.StartedAt = o.Quick, began
	return res, err
}

// target returns the named target, or nil.
func (r *RangesReport) target(name string) *RangesTarget {
	for i := range r.Targets {
		if r.Targets[i].Name == name {
			return &r.Targets[i]
		}
	}
	return nil
}

// Result turns the report into the experiment's Result: the cold read's
// p50 and store bytes against the bounds (the papers give no
// figure for ranges), a bar of each target's p50 and time to first byte,
// and the table `hoard bench ranges` prints.
func (r *RangesReport) Result() *Result {
	c := r.Config
	res := &Result{
		Experiment: "ranges",
		Status:     StatusOK,
		Machine:    DescribeMachine(),
		Method: "Random ranges of large objects read from MinIO behind the shaped link, straight and through one cachelet, " +
			"one after the other so both see the same load; the cachelet forgets the object before each cold read. " +
			"Objects are larger than the largest kept whole, so only pages (fixed-size cache entries) keep them. " +
			"Every byte read is checked.",
		Settings: RunSettings{ObjectSizes: []int64{c.MinSize, c.MaxSize}, Link: r.Link, Other: []Setting{
			{"objects", fmt.Sprintf("%d of %s-%s", c.Objects, FormatSize(c.MinSize), FormatSize(c.MaxSize))},
			{"ranges", fmt.Sprintf("%d of %s-%s per target", c.Ranges, FormatSize(c.MinRange), FormatSize(c.MaxRange))},
			{"page size", FormatSize(c.PageSize)},
			{"memory budget", FormatSize(c.Budget)},
		}},
	}
	direct, cold := r.target(RangesDirect), r.target(RangesCold)
	if direct != nil && cold != nil && direct.Total.P50 > 0 {
		bound, ratio := 1.10, float64(cold.Total.P50)/float64(direct.Total.P50)
		res.Rows = append(res.Rows, Compare("cold range p50 ÷ store direct", "x", &bound, &ratio, LowerIsBetter, 0,
			"hoard's own bound (no paper figure): at most 1.10x the store's", "one ranged store GET per cold read, widened to whole pages"))
		if cold.StoreBytes >= 0 && r.RequestedBytes > 0 {
			bytesBound := 1.5
			got := float64(cold.StoreBytes) / float64(r.RequestedBytes)
			res.Rows = append(res.Rows, Compare("store bytes ÷ requested, cold", "x", &bytesBound, &got, LowerIsBetter, 0,
				"hoard's own bound (no paper figure): at most 1.5x the range, plus a page", ""))
		}
	}
	table := Table{ID: "targets", Title: "Every target, one run",
		Columns: []string{"target", "p50", "p99", "first byte p50", "p50 ÷ direct", "first byte ÷ direct", "store bytes ÷ requested"}}
	bars := Plot{Kind: PlotBar, ID: "p50", Title: "Ranged read p50 and time to first byte", Unit: "ms", YLabel: "ms"}
	total, first := Series{Label: "p50, last byte"}, Series{Label: "p50, first byte"}
	for _, t := range r.Targets {
		ratio, fbRatio, bytesRatio := "-", "-", "-"
		if direct != nil && direct.Total.P50 > 0 && direct.FirstByte.P50 > 0 {
			ratio = fmt.Sprintf("%.2f", float64(t.Total.P50)/float64(direct.Total.P50))
			fbRatio = fmt.Sprintf("%.2f", float64(t.FirstByte.P50)/float64(direct.FirstByte.P50))
		}
		if t.StoreBytes >= 0 && r.RequestedBytes > 0 {
			bytesRatio = fmt.Sprintf("%.2f", float64(t.StoreBytes)/float64(r.RequestedBytes))
		}
		table.Rows = append(table.Rows, []string{t.Name, FormatDuration(t.Total.P50), FormatDuration(t.Total.P99),
			FormatDuration(t.FirstByte.P50), ratio, fbRatio, bytesRatio})
		ms := func(d time.Duration) *float64 { return F(float64(d) / float64(time.Millisecond)) }
		bars.Categories = append(bars.Categories, t.Name)
		total.Values = append(total.Values, ms(t.Total.P50))
		first.Values = append(first.Values, ms(t.FirstByte.P50))
	}
	bars.Series = []Series{total, first}
	res.Plots = append(res.Plots, bars)
	res.Tables = append(res.Tables, table)
	return res
}
