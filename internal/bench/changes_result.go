package bench

import (
	"context"
	"fmt"
	"time"
)

var refChanges = Reference{Paper: "OFC", Figure: "§6 (external readers and writers); issue 16's trace replay (strong 24.7 ms, local 2.7 ms p50 on a 20 ms link)", Section: "§6", Citation: CiteOFC}

func changesExperiment() Experiment {
	return Experiment{
		Name:       "changes",
		Title:      "Writers outside hoard: the notification delay under `owner` with --store-changes, and its hits against `strong` behind a 20 ms store link",
		Reproduces: []Reference{refChanges},
		Quick:      Options{Iterations: 20},
		Full:       Options{Iterations: 50},
		Run:        runChangesExperiment,
	}
}

func changesRelayExperiment() Experiment {
	return Experiment{
		Name:       "changes-relay",
		Title:      "Writers outside hoard through the change relay: MinIO's webhook to the relay, the relay to an `owner` cachelet (ADR 33), against `strong` behind a 20 ms store link",
		Reproduces: []Reference{refChanges},
		Quick:      Options{Iterations: 20},
		Full:       Options{Iterations: 100},
		Run: func(ctx context.Context, o Options) (*Result, error) {
			return runChanges(ctx, o, FeedRelay)
		},
	}
}

// runChangesExperiment runs `hoard bench changes` (20 writes and 100
// reads each with --quick).
func runChangesExperiment(ctx context.Context, o Options) (*Result, error) {
	return runChanges(ctx, o, FeedListen)
}

func runChanges(ctx context.Context, o Options, feed string) (*Result, error) {
	env := o.Env
	cfg := ChangesConfig{MinIOBinary: env.MinIOBinary, TempDir: env.TempDir, Progress: env.progress(), Log: env.Log, Writes: o.Iterations, Feed: feed}
	if o.Quick {
		cfg.Reads = 100
	}
	if len(o.Sizes) > 0 {
		cfg.Size = o.Sizes[0]
	}
	began := time.Now()
	rep, err := RunChanges(ctx, cfg)
	if rep == nil {
		return nil, err
	}
	res := rep.Result()
	res.Quick, res.StartedAt = o.Quick, began
	if err == nil && rep.StrongStale > 0 {
		err = fmt.Errorf("strong served the older version %d times after an outside write", rep.StrongStale)
	}
	return res, err
}

// Result turns the report into the experiment's Result.
func (r *ChangesReport) Result() *Result {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	name, method := "changes", "MinIO behind a shaped link; two in-process cachelets over it: one under `owner` following the store's change "+
		"notifications (--store-changes), one under `strong`. "
	if r.Feed == FeedRelay {
		name, method = "changes-relay", "MinIO behind a shaped link, its webhook target posting (at once, no on-disk queue) to an in-process change "+
			"relay (ADR 33: the controller's changerelay.Hub, with its probes); two in-process cachelets over the link: one under `owner` "+
			"following the relay (--store-changes relay), one under `strong`. "
	}
	res := &Result{
		Experiment: name,
		Status:     StatusOK,
		Machine:    DescribeMachine(),
		Method: method + "Once the owner's subscription is up, one object is read through " +
			"each alternately (hits). Then new versions are written straight to MinIO one at a time; after each write's answer the " +
			"owner cachelet is read every 2 ms until it returns the new bytes (the delay), and `strong` is read once (it must " +
			"return them at once). The bundled MinIO never flushes its listen stream, so with `listen` filler writes to other keys push it out.",
		Settings: RunSettings{ObjectSizes: []int64{r.Size}, Link: r.Link, Other: []Setting{
			{"feed", r.Feed},
			{"filler", r.Filler},
			{"outside writes", fmt.Sprint(r.Delay.N)},
			{"reads per cachelet", fmt.Sprint(r.Owner.N)},
		}},
	}
	if r.Delay.N > 0 {
		res.Rows = append(res.Rows,
			Compare("outside write unseen, p50", "ms", nil, F(ms(r.Delay.P50)), LowerIsBetter, 0, "", "from the PUT's answer to the first owner read returning it"),
			Compare("outside write unseen, p99", "ms", nil, F(ms(r.Delay.P99)), LowerIsBetter, 0, "", ""),
			Compare("strong reads of the older version after a write", "reads", F(0), F(float64(r.StrongStale)), LowerIsBetter, 0, "strong checks every read", ""),
		)
	}
	if r.Owner.N > 0 && r.Strong.N > 0 {
		ratio := float64(r.Owner.P50) / float64(r.Strong.P50)
		paper := 2.7 / 24.7
		res.Rows = append(res.Rows,
			Compare("hit p50, owner + changes / strong", "x", &paper, &ratio, LowerIsBetter, 0.05,
				"issue 16's trace replay: --read-mode local 2.7 ms vs strong 24.7 ms p50 on a 20 ms link",
				fmt.Sprintf("owner %s, strong %s", FormatDuration(r.Owner.P50), FormatDuration(r.Strong.P50))))
	}
	table := Table{ID: "reads", Title: "Reads, one run", Columns: []string{"what", "n", "p50", "p99", "max", "served as"}}
	table.Rows = append(table.Rows,
		[]string{"hit, owner + " + r.Feed, fmt.Sprint(r.Owner.N), FormatDuration(r.Owner.P50), FormatDuration(r.Owner.P99), FormatDuration(r.Owner.Max), fmt.Sprint(r.OwnerOutcomes)},
		[]string{"hit, strong", fmt.Sprint(r.Strong.N), FormatDuration(r.Strong.P50), FormatDuration(r.Strong.P99), FormatDuration(r.Strong.Max), fmt.Sprint(r.StrongOutcomes)},
		[]string{"outside write unseen (owner)", fmt.Sprint(r.Delay.N), FormatDuration(r.Delay.P50), FormatDuration(r.Delay.P99), FormatDuration(r.Delay.Max),
			fmt.Sprintf("%d stale reads while waiting, %v copies invalidated", r.StaleReads, r.Invalidated)},
	)
	res.Tables = append(res.Tables, table)
	if r.StoreToDrop > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("store event time to the copy dropped (hoard_cachelet_store_change_delay_seconds), mean: %s", FormatDuration(r.StoreToDrop)))
	}
	if r.Unfollowed > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("%d owner hits were validated with the store (subscription down)", r.Unfollowed))
	}
	return res
}
