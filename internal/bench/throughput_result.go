package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// ThroughputReport is what `hoard bench throughput` measured.
type ThroughputReport struct {
	Benchmark string             `json:"benchmark"`
	Machine   Machine            `json:"machine"`
	Settings  ThroughputSettings `json:"settings"`
	Points    []ThroughputPoint  `json:"points"`
	Notes     []string           `json:"notes,omitempty"`
}

// ThroughputSettings records how the run was configured.
type ThroughputSettings struct {
	Quick        bool              `json:"quick"`
	Size         int64             `json:"size_bytes"`
	Connections  []int             `json:"connections"`
	Ops          []string          `json:"ops"`
	Targets      []string          `json:"targets"`
	DurationNS   int64             `json:"duration_ns"`
	WarmupNS     int64             `json:"warmup_ns"`
	Budget       int64             `json:"cache_budget_bytes,omitempty"`
	Descriptions map[string]string `json:"descriptions"`
	Method       string            `json:"method"`
}

// ThroughputPoint is one target at one connection count, for one
// operation.
type ThroughputPoint struct {
	Op          string  `json:"op"`
	Connections int     `json:"connections"`
	Target      string  `json:"target"`
	Ops         int     `json:"ops"`
	Rate        float64 `json:"ops_per_s"`
	P50NS       int64   `json:"p50_ns"`
	P99NS       int64   `json:"p99_ns"`
	// VsMinIO and VsBare are Rate over MinIO direct's and the bare HTTP
	// server's at the same operation and connections (nil when either
	// was not measured).
	VsMinIO *float64 `json:"vs_minio,omitempty"`
	VsBare  *float64 `json:"vs_bare_http,omitempty"`
	// VsBareProc is Rate over the bare server's as a process of its own
	// (bare-http-proc), which is what a hoard target is.
	VsBareProc *float64 `json:"vs_bare_http_proc,omitempty"`
	// ServerCPUNS is the CPU time (user and system) the target's server
	// process used in the timed window per operation answered, in
	// nanoseconds: for the targets that are processes of their own (hoard
	// serve, MinIO), nil for the others. Unlike ops/s and latency it is
	// hardly stretched by other load on the machine, so a change in the
	// server's work per request shows in it first.
	ServerCPUNS *float64 `json:"server_cpu_ns_per_op,omitempty"`
}

// ThroughputMethod says how the benchmark measures.
const ThroughputMethod = "a closed loop per point: N connections (one goroutine each, HTTP/1.1 keep-alive, one net/http client per target) " +
	"send their next request as soon as the last is answered, for a warm-up and then a timed window; " +
	"ops/s is the requests answered inside the window over its length, p50 and p99 their latencies. " +
	"Requests are built and presigned once per connection and bodies are read into a buffer of the connection's, " +
	"so the generator costs what net/http's client costs (the bare HTTP server's row is that ceiling). " +
	"Every hoard GET must be answered as a local hit (x-hoard-read), or the run fails. " +
	"Server CPU per op is the CPU time the target's server process used during the timed window (from /proc) over the operations answered in it, " +
	"for the targets that run as processes of their own. " +
	"The hoard targets are `hoard serve` processes; the bare HTTP server runs in the benchmark's own process (bare-http) " +
	"and as a process of its own (bare-http-proc, `hoard bench bare-server`), which is how the hoard targets run; " +
	"everything shares the machine's cores with the generator."

func newThroughputReport(cfg ThroughputConfig, notes []string) *ThroughputReport {
	rep := &ThroughputReport{
		Benchmark: "throughput",
		Machine:   DescribeMachine(),
		Settings: ThroughputSettings{
			Quick: cfg.Quick, Size: cfg.Size, Connections: cfg.Connections, Ops: cfg.Ops, Targets: cfg.Targets,
			DurationNS: cfg.Duration.Nanoseconds(), WarmupNS: cfg.Warmup.Nanoseconds(),
			Descriptions: map[string]string{}, Method: ThroughputMethod,
		},
		Notes: notes,
	}
	for _, t := range cfg.Targets {
		rep.Settings.Descriptions[t] = ThroughputTargetDescription(t)
	}
	rep.Machine.MinIOVersion = commandVersion(cfg.MinIOBinary, "--version")
	return rep
}

// point returns the point of target at op and conns, or nil.
func (r *ThroughputReport) point(op string, conns int, target string) *ThroughputPoint {
	for i := range r.Points {
		p := &r.Points[i]
		if p.Op == op && p.Connections == conns && p.Target == target {
			return p
		}
	}
	return nil
}

// computeRatios sets every point's ratios to the baselines of its row.
func (r *ThroughputReport) computeRatios() {
	for i := range r.Points {
		p := &r.Points[i]
		if m := r.point(p.Op, p.Connections, TPMinIO); m != nil && m.Rate > 0 {
			p.VsMinIO = F(p.Rate / m.Rate)
		}
		if b := r.point(p.Op, p.Connections, TPBare); b != nil && b.Rate > 0 {
			p.VsBare = F(p.Rate / b.Rate)
		}
		if b := r.point(p.Op, p.Connections, TPBareProc); b != nil && b.Rate > 0 {
			p.VsBareProc = F(p.Rate / b.Rate)
		}
	}
}

func fmtRate(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// WriteTable prints one table per operation: every target at every
// connection count, with its ratios to MinIO direct and the bare server.
func (r *ThroughputReport) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "throughput: %s objects, %v per point after a %v warm-up\n", FormatSize(r.Settings.Size),
		time.Duration(r.Settings.DurationNS), time.Duration(r.Settings.WarmupNS))
	for _, op := range r.Settings.Ops {
		fmt.Fprintf(w, "\n%s\n", strings.ToUpper(op))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "conns\ttarget\tops/s\tp50\tp99\tx minio\tx bare-http\tx bare-http-proc\tserver cpu/op\t")
		for _, n := range r.Settings.Connections {
			for _, t := range r.Settings.Targets {
				p := r.point(op, n, t)
				if p == nil {
					continue
				}
				cpu := "-"
				if p.ServerCPUNS != nil {
					cpu = FormatDuration(time.Duration(*p.ServerCPUNS))
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", n, t, fmtRate(p.Rate),
					FormatDuration(time.Duration(p.P50NS)), FormatDuration(time.Duration(p.P99NS)), fmtRatio(p.VsMinIO), fmtRatio(p.VsBare), fmtRatio(p.VsBareProc), cpu)
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "\nnote: %s\n", n)
	}
	return nil
}

// WriteJSONFile writes the report to path.
func (r *ThroughputReport) WriteJSONFile(path string) error {
	b, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// refFaasTTable3 is Faa$T's table of read/write settings, whose first row,
// strong (a version check per read, synchronous writes), the hot-key
// target measures under load; the paper gives it no throughput figure.
var refFaasTTable3 = Reference{Paper: "Faa$T", Figure: "Table 3 (strong: a version check before every read)", Section: "§3.2", Citation: CiteFaasT}

func throughputExperiment() Experiment {
	return Experiment{
		Name:       "throughput",
		Title:      "Throughput: ops/s of GETs and PUTs against connections, hoard next to MinIO, Redis and a bare HTTP server",
		Reproduces: []Reference{refFaasTTable3},
		Quick:      Options{},
		Full:       Options{},
		Run:        runThroughputExperiment,
	}
}

// runThroughputExperiment runs `hoard bench throughput` (a quick run: two
// connection counts, short points) with every target; Redis is left out
// when redis-server is missing.
func runThroughputExperiment(ctx context.Context, o Options) (*Result, error) {
	env := o.Env
	cfg := ThroughputConfig{
		Quick: o.Quick, HoardBinary: env.HoardBinary, MinIOBinary: env.MinIOBinary, RedisBinary: env.RedisBinary,
		TempDir: env.TempDir, Progress: env.Progress, Log: env.Log,
	}
	if len(o.Sizes) > 0 {
		cfg.Size = o.Sizes[0]
	}
	rep, err := RunThroughput(ctx, cfg)
	if err != nil {
		return nil, err
	}
	fmt.Fprintln(env.table())
	if err := rep.WriteTable(env.table()); err != nil {
		return nil, err
	}
	return rep.Result(), nil
}

// Result turns the report into the experiment's Result: a curve of ops/s
// against connections per operation, and the table of every point.
func (r *ThroughputReport) Result() *Result {
	res := &Result{
		Experiment: "throughput",
		Status:     StatusOK,
		Quick:      r.Settings.Quick,
		Machine:    r.Machine,
		Method:     r.Settings.Method,
		Settings: RunSettings{
			ObjectSizes: []int64{r.Settings.Size},
			Link:        LinkLoopback,
			Other: []Setting{
				{"connections", strings.Trim(fmt.Sprint(r.Settings.Connections), "[]")},
				{"each point", fmt.Sprintf("%v after a %v warm-up", time.Duration(r.Settings.DurationNS), time.Duration(r.Settings.WarmupNS))},
				{"targets", strings.Join(r.Settings.Targets, ", ")},
			},
		},
		Notes: slices.Clone(r.Notes),
	}
	for _, t := range r.Settings.Targets {
		res.Settings.Other = append(res.Settings.Other, Setting{t, r.Settings.Descriptions[t]})
	}
	table := Table{ID: "points", Title: "Every point", Columns: []string{"op", "connections", "target", "ops/s", "p50", "p99", "x MinIO", "x bare HTTP", "x bare HTTP process"}}
	for _, op := range r.Settings.Ops {
		p := Plot{Kind: PlotCurve, ID: "ops-" + op, Title: strings.ToUpper(op) + " ops/s against connections, " + FormatSize(r.Settings.Size),
			Unit: "ops/s", XLabel: "connections", YLabel: "ops/s", XLog: true,
			Caption: "Closed loop: each connection sends its next request when the last is answered."}
		for _, t := range r.Settings.Targets {
			s := Series{Label: t}
			for _, n := range r.Settings.Connections {
				if pt := r.point(op, n, t); pt != nil {
					s.X, s.Y = append(s.X, float64(n)), append(s.Y, pt.Rate)
					table.Rows = append(table.Rows, []string{op, fmt.Sprint(n), t, fmtRate(pt.Rate),
						FormatDuration(time.Duration(pt.P50NS)), FormatDuration(time.Duration(pt.P99NS)), fmtRatio(pt.VsMinIO), fmtRatio(pt.VsBare), fmtRatio(pt.VsBareProc)})
				}
			}
			if len(s.X) > 0 {
				p.Series = append(p.Series, s)
			}
		}
		if len(p.Series) > 0 {
			res.Plots = append(res.Plots, p)
		}
	}
	res.Tables = append(res.Tables, table)
	return res
}
