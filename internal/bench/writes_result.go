package bench

import (
	"context"
	"fmt"
	"time"
)

var refOFCShadow = Reference{Paper: "OFC", Figure: "§7.2 (shadow object persisted in the Load phase)", Section: "§6.2, §7.2", Citation: CiteOFC}

func writesExperiment() Experiment {
	return Experiment{
		Name:       "writes",
		Title:      "Write-back: PUT latency under strong, background persistence and durable writes (4 KiB, 1 MiB, 16 MiB)",
		Reproduces: []Reference{refOFCShadow},
		Quick:      Options{Iterations: 30},
		Full:       Options{},
		Run:        runWritesExperiment,
	}
}

func runWritesExperiment(ctx context.Context, o Options) (*Result, error) {
	env := o.Env
	cfg := WritesConfig{MinIOBinary: env.MinIOBinary, TempDir: env.TempDir, Progress: env.progress(), Log: env.Log,
		Writes: o.Iterations, Sizes: o.Sizes}
	began := time.Now()
	rep, err := RunWrites(ctx, cfg)
	if rep == nil {
		return nil, err
	}
	res := rep.Result()
	res.Quick, res.StartedAt = o.Quick, began
	return res, err
}

// Result turns the report into the experiment's Result.
func (r *WritesReport) Result() *Result {
	res := &Result{
		Experiment: "writes",
		Status:     StatusOK,
		Machine:    DescribeMachine(),
		Method: "One cachelet in front of MinIO takes PUTs one at a time, under strong (acknowledged once the store has the " +
			"write), under owner with background persistence (acknowledged once held in memory) and under owner with durable " +
			"writes (acknowledged once appended and fsynced to the log on the disk tier's directory), and, in an application of two " +
			"cachelets each PUT sent to its key's owner, under owner with replicated durable writes (acknowledged once the owner " +
			"and the other member both appended and fsynced it), in one run.",
		Settings: RunSettings{Link: r.Link},
	}
	seen := map[int64]bool{}
	for _, c := range r.Cells {
		if !seen[c.Size] {
			seen[c.Size] = true
			res.Settings.ObjectSizes = append(res.Settings.ObjectSizes, c.Size)
		}
	}
	table := Table{ID: "puts", Title: "PUT latency, one run", Columns: []string{"setting", "size", "PUTs", "p50", "p99", "p50 vs strong"}}
	shadows := false
	for _, c := range r.Cells {
		shadows = shadows || c.Setting == WritesShadow
	}
	if shadows {
		table.Columns = append(table.Columns, "p50 vs durable")
	}
	ratioTo := func(setting string, c WritesCell) string {
		if s := r.cell(setting, c.Size); s != nil && c.Puts.P50 > 0 && s.Puts.P50 > 0 {
			return fmt.Sprintf("%.2fx", float64(c.Puts.P50)/float64(s.Puts.P50))
		}
		return "-"
	}
	for _, c := range r.Cells {
		row := []string{c.Setting, FormatSize(c.Size), fmt.Sprint(c.Puts.N),
			FormatDuration(c.Puts.P50), FormatDuration(c.Puts.P99), ratioTo(WritesStrong, c)}
		if shadows {
			row = append(row, ratioTo(WritesDurable, c))
		}
		table.Rows = append(table.Rows, row)
	}
	if d := r.cell(WritesDurable, 4<<10); d != nil {
		size, paper := int64(4<<10), 11.0
		ms := float64(d.Puts.P50) / float64(time.Millisecond)
		res.Rows = append(res.Rows, Compare("durable write acknowledged, p50, "+FormatSize(size), "ms", &paper, &ms, LowerIsBetter, 0.05,
			"OFC §7.2: a write's shadow object takes about 11 ms to persist, whatever its size",
			"OFC pays a synchronous store round trip per write; hoard's durable write pays an fsync on the node's disk"))
	}
	res.Tables = append(res.Tables, table)
	res.Notes = append(res.Notes, r.OFC)
	return res
}
