package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hoard-io/hoard/internal/appspec"
)

var refFaasTTable6 = Reference{Paper: "Faa$T", Figure: "Table 6", Section: "§6.7", Citation: CiteFaasT}

func consistencyExperiment() Experiment {
	return Experiment{
		Name:       "consistency",
		Title:      "Consistency settings: five cachelets count to 1,000",
		Reproduces: []Reference{refFaasTTable6},
		Quick:      Options{Iterations: QuickIncrements},
		Full:       Options{Iterations: DefaultIncrements},
		Run:        runConsistencyExperiment,
	}
}

// runConsistencyExperiment runs `hoard bench consistency` with every
// setting. A strongly consistent setting that loses an increment fails
// the experiment, with its Result kept.
func runConsistencyExperiment(ctx context.Context, o Options) (*Result, error) {
	env := o.Env
	rep, err := RunConsistency(ctx, ConsistencyConfig{
		Increments: o.Iterations, Quick: o.Quick,
		MinIOBinary: env.MinIOBinary, TempDir: env.TempDir, Progress: env.Progress, Log: env.Log,
	})
	if err != nil {
		return nil, err
	}
	fmt.Fprintln(env.table())
	if err := rep.WriteTable(env.table()); err != nil {
		return nil, err
	}
	res := rep.Result()
	if l := rep.StrongLosses(); len(l) > 0 {
		return res, fmt.Errorf("a strongly consistent setting lost increments: %s", strings.Join(l, "; "))
	}
	return res, nil
}

// Result turns the report into the experiment's Result: Table 6's lost
// increments and latencies next to hoard's, per setting.
func (r *ConsistencyReport) Result() *Result {
	res := &Result{
		Experiment: "consistency",
		Reproduces: []Reference{refFaasTTable6},
		Status:     StatusOK,
		Quick:      r.Quick,
		Machine:    r.Machine,
		Method:     r.Method,
		Settings: RunSettings{
			Link:       LinkLoopback,
			Iterations: []Count{{What: "increments per setting", N: r.Increments}},
			Other: []Setting{
				{"cachelets", fmt.Sprint(r.Cachelets)},
				{"pause after each increment", pauseText(r.GapNS)},
			},
		},
	}
	var settings []string
	for _, row := range r.Rows {
		settings = append(settings, row.Setting)
	}
	res.Settings.Other = append(res.Settings.Other, Setting{"settings", strings.Join(settings, ", ")})
	scale := 1.0
	if r.Increments > 0 {
		scale = float64(DefaultIncrements) / float64(r.Increments)
	}
	scaled := ""
	if r.Increments != DefaultIncrements {
		scaled = fmt.Sprintf(" hoard counted to %d; its count is scaled by %.2f to the paper's 1,000.", r.Increments, scale)
	}
	const src = "Faa$T §6.7, Table 6 (mean of 3 runs, five instances counting to 1K)"
	for _, row := range r.Rows {
		p, ok := paperTable6[row.Setting]
		var paperLost *float64
		if ok {
			paperLost = F(p.Lost)
		}
		better, note := "", fmt.Sprintf("%s/%s writes, %s reads; paper ± %s.", row.Target, row.Mode, row.Read, fmtNum(p.LostSD))
		switch {
		case row.Strong:
			better = LowerIsBetter
			note += " Strongly consistent: must lose none."
		case row.Setting == "owner-async":
			note += " A race: the next increment, on another cachelet, may ask the owner before the previous write reached it; the count depends on the pause between increments (the paper's requests are tens of ms apart)."
		default:
			note += " Reads of a cachelet's own copy: each of the five counts its own 200, so ~800 are lost by design."
		}
		c := Compare("lost increments per 1,000, "+row.Setting, "increments", paperLost, F(float64(row.Lost)*scale), better, 0, src, note+scaled)
		if c.Short {
			c.Note += fmt.Sprintf(" Short: lost %d of %d increments.", row.Lost, row.Increments)
		}
		res.Rows = append(res.Rows, c)
	}
	for _, row := range r.Rows {
		var paperX *float64
		if row.PaperRatioToStrong != nil {
			paperX = F(*row.PaperRatioToStrong)
		}
		var hoardX *float64
		if row.RatioToStrong != nil {
			hoardX = F(*row.RatioToStrong)
		}
		res.Rows = append(res.Rows, Compare("per-request mean / strong's, "+row.Setting, "x", paperX, hoardX, "", 0, src,
			"The shape of the table: how much each relaxation saves. The paper's rows share ~30 ms per request that no setting removes (the local rows still take 30 ms), which flattens its ratios; here every setting but strong touches only memory over loopback."))
	}
	for _, row := range r.Rows {
		var paperMS *float64
		if p, ok := paperTable6[row.Setting]; ok {
			paperMS = F(p.PerRequestMS)
		}
		c := Compare("per-request latency (mean), "+row.Setting, "ms", paperMS, F(ms(row.PerRequest.Mean)), LowerIsBetter, 0.05, src,
			fmt.Sprintf("hoard: mean ± sd %s ms, p50 %s ms. Paper: FaaS instances on a public cloud with remote storage; hoard: in-process cachelets over MinIO on loopback.",
				fmtSD(row.PerRequest.Mean, row.PerRequest.Stddev), fmtMS(row.PerRequest.P50)))
		if c.Short {
			c.Note += " Short: every increment waits for MinIO to write the object to disk before it answers."
		}
		res.Rows = append(res.Rows, c)
	}
	res.Plots = r.plots(scale)
	if w, ok := r.workload(); ok {
		res.Workloads = []CostWorkload{w}
	}
	if r.Increments != DefaultIncrements {
		res.Notes = append(res.Notes, fmt.Sprintf("the paper counted to %d; this run to %d, so its lost counts are scaled by %.2f", DefaultIncrements, r.Increments, scale))
	}
	for _, row := range r.Rows {
		res.Notes = append(res.Notes, fmt.Sprintf("%s: GETs served as %s; drain %s", row.Setting, fmtReads(row.Reads), FormatDuration(row.Drain)))
	}
	res.Notes = append(res.Notes, r.Notes...)
	return res
}

func pauseText(d time.Duration) string {
	if d <= 0 {
		return "none (back to back)"
	}
	return FormatDuration(d)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func fmtNum(v float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.1f", v), "0"), ".")
}

func (r *ConsistencyReport) plots(scale float64) []Plot {
	lost := Plot{Kind: PlotBar, ID: "lost-increments", Title: "Lost increments per 1,000 by setting", Unit: "increments",
		XLabel: "setting", YLabel: "lost increments (per 1,000)",
		Caption: "Faa$T Table 6's inconsistencies (mean ± stddev of 3 runs) next to hoard's lost increments."}
	lat := Plot{Kind: PlotBar, ID: "per-request-latency", Title: "Per-request latency by setting (mean ± stddev)", Unit: "ms",
		XLabel: "setting", YLabel: "per-request latency (ms)", YLog: true,
		Caption: "One increment: a GET and a PUT through one cachelet."}
	paperLost, hoardLost := Series{Label: "Faa$T Table 6"}, Series{Label: "hoard"}
	paperLat, hoardLat := Series{Label: "Faa$T Table 6"}, Series{Label: "hoard"}
	cdf := Plot{Kind: PlotCDF, ID: "per-request-cdf", Title: "Per-request latency CDF by setting", Unit: "ms",
		XLabel: "per-request latency (ms)", YLabel: "fraction of increments", XLog: true}
	for _, row := range r.Rows {
		lost.Categories = append(lost.Categories, row.Setting)
		lat.Categories = append(lat.Categories, row.Setting)
		if p, ok := paperTable6[row.Setting]; ok {
			paperLost.Values, paperLost.Errors = append(paperLost.Values, F(p.Lost)), append(paperLost.Errors, F(p.LostSD))
			paperLat.Values, paperLat.Errors = append(paperLat.Values, F(p.PerRequestMS)), append(paperLat.Errors, F(p.PerRequestSD))
		} else {
			paperLost.Values, paperLost.Errors = append(paperLost.Values, nil), append(paperLost.Errors, nil)
			paperLat.Values, paperLat.Errors = append(paperLat.Values, nil), append(paperLat.Errors, nil)
		}
		hoardLost.Values = append(hoardLost.Values, F(float64(row.Lost)*scale))
		var m, sd *float64
		if row.PerRequest.N > 0 {
			m, sd = F(ms(row.PerRequest.Mean)), F(ms(row.PerRequest.Stddev))
		}
		hoardLat.Values, hoardLat.Errors = append(hoardLat.Values, m), append(hoardLat.Errors, sd)
		if len(row.SamplesNS) > 0 {
			cdf.Series = append(cdf.Series, CDFSeries(row.Setting, row.SamplesNS, time.Millisecond))
		}
	}
	lost.Series = []Series{paperLost, hoardLost}
	lat.Series = []Series{paperLat, hoardLat}
	plots := []Plot{lost, lat}
	if len(cdf.Series) > 0 {
		plots = append(plots, cdf)
	}
	if len(r.Rows) == 0 {
		return nil
	}
	return plots
}

// workload is the cost model's application: one invocation is one
// increment under the default setting, strong (a version-checked GET and
// a PUT that reaches the store).
func (r *ConsistencyReport) workload() (CostWorkload, bool) {
	row := r.Row("strong")
	if row == nil || row.PerRequest.N == 0 {
		return CostWorkload{}, false
	}
	d := row.PerRequest.Mean.Seconds()
	return CostWorkload{
		Name:             "one counter increment (strong)",
		Description:      "one invocation reads the counter through its cachelet and writes it back, under the default setting strong",
		WarmSeconds:      d,
		ColdSeconds:      d,
		MemoryBytes:      DefaultFunctionMemory,
		CacheBytes:       0,
		StoreGetsWarm:    1,
		StoreGetsCold:    1,
		StorePuts:        1,
		KeepAliveSeconds: appspec.DefaultKeepAlive.Seconds(),
		Source:           "warm_s and cold_s: mean per-request latency of the strong row (its reads are version-checked either way)",
	}, true
}
