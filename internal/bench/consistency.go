package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/cachelet"
	"github.com/hoard-io/hoard/internal/localstore"
)

// Defaults of ConsistencyConfig.
const (
	DefaultIncrements       = 1000
	QuickIncrements         = 200
	DefaultCounterCachelets = 5
)

// ConsistencyMethod says what `hoard bench consistency` does.
const ConsistencyMethod = "Faa$T Table 6: the cachelets of one application (in-process instances over MinIO, embedded etcd, membership/etcd registry; a fresh application per setting) increment one counter object round-robin through minio-go: increment n GETs the counter through cachelet n mod N, parses it and PUTs the value plus one through the same cachelet. per-request = one increment (GET + PUT), timed at the client. lost = increments - the final value, read from MinIO after every cachelet drained its queued writes (Cachelet.Drain)"

// PaperRow is one row of Faa$T's Table 6 (mean ± stddev of 3 runs,
// five cachelets counting to 1,000 on a public cloud).
type PaperRow struct {
	EndToEndS    float64 `json:"e2e_s"`
	EndToEndSD   float64 `json:"e2e_sd_s"`
	PerRequestMS float64 `json:"per_request_ms"`
	PerRequestSD float64 `json:"per_request_sd_ms"`
	Lost         float64 `json:"lost"`
	LostSD       float64 `json:"lost_sd"`
}

// paperTable6 is Faa$T's Table 6 by hoard's name of each setting.
var paperTable6 = map[string]PaperRow{
	"strong":           {74.4, 0.2, 80.0, 29.5, 0, 0},
	"owner":            {42.6, 0.2, 41.6, 12.8, 0, 0},
	"owner-async":      {39.7, 0.6, 38.5, 11.4, 1.3, 1.9},
	"owner-local-read": {32.7, 0.3, 32.7, 9.0, 800, 0},
	"local":            {31.1, 0.3, 30.3, 13.1, 800, 0},
	"local-async":      {31.0, 0.3, 30.3, 13.2, 800, 0},
}

// strongSettings are the settings Faa$T's Table 3 calls strongly
// consistent: they must lose no increment.
var strongSettings = []string{"strong", "owner"}

// ConsistencyConfig configures RunConsistency.
type ConsistencyConfig struct {
	// Increments per setting; default DefaultIncrements (QuickIncrements
	// when Quick).
	Increments int
	Quick      bool
	// Cachelets of the application; default DefaultCounterCachelets.
	Cachelets int
	// Settings to run, names of cachelet.Consistencies; default all six.
	Settings []string
	// Gap is a pause after each increment, standing in for the work a
	// function does between its requests (Faa$T's requests are tens of
	// milliseconds apart); it counts in the end-to-end time, not in the
	// per-request latency. Default 0: increments back to back.
	Gap time.Duration
	// MinIOBinary; default localstore.FindBinary("minio").
	MinIOBinary string
	// TempDir is where the run's scratch directory is made.
	TempDir string
	// Progress receives one line per setting; nil discards.
	Progress io.Writer
	// Log receives the servers' logs; nil discards.
	Log *slog.Logger
}

// Moments summarises latencies: mean ± sample stddev and percentiles.
type Moments struct {
	N      int           `json:"n"`
	Mean   time.Duration `json:"mean_ns"`
	Stddev time.Duration `json:"stddev_ns"`
	Min    time.Duration `json:"min_ns"`
	P50    time.Duration `json:"p50_ns"`
	P99    time.Duration `json:"p99_ns"`
	Max    time.Duration `json:"max_ns"`
}

// Describe computes the Moments of samples (not modified).
func Describe(samples []time.Duration) Moments {
	m := Moments{N: len(samples)}
	if len(samples) == 0 {
		return m
	}
	m.Mean, m.Stddev = MeanStddev(samples)
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	m.Min, m.Max = sorted[0], sorted[len(sorted)-1]
	m.P50, m.P99 = Percentile(sorted, 50), Percentile(sorted, 99)
	return m
}

// ConsistencyRow is one setting's run.
type ConsistencyRow struct {
	Setting string `json:"setting"`
	Target  string `json:"write_target"`
	Mode    string `json:"write_mode"`
	Read    string `json:"read_mode"`
	Strong  bool   `json:"strong"`
	// EndToEnd is the time from the first increment's GET to the last
	// increment's PUT answer (the drain is not in it).
	EndToEnd time.Duration `json:"e2e_ns"`
	// Drain is how long the cachelets took to persist what they queued.
	Drain      time.Duration `json:"drain_ns"`
	PerRequest Moments       `json:"per_request"`
	Get        Moments       `json:"get"`
	Put        Moments       `json:"put"`
	Increments int           `json:"increments"`
	Final      int           `json:"final"`
	Lost       int           `json:"lost"`
	// Reads counts the x-hoard-read of the increments' GETs.
	Reads map[string]int `json:"reads"`
	// RatioToStrong is this row's mean per-request latency over the
	// strong row's; PaperRatioToStrong the same in the paper.
	RatioToStrong      *float64  `json:"ratio_to_strong,omitempty"`
	PaperRatioToStrong *float64  `json:"paper_ratio_to_strong,omitempty"`
	Paper              *PaperRow `json:"paper,omitempty"`
	// SamplesNS are the increments' durations in order.
	SamplesNS []int64 `json:"samples_ns,omitempty"`
}

// ConsistencyReport is everything one `hoard bench consistency` measured.
type ConsistencyReport struct {
	Benchmark  string           `json:"benchmark"`
	Machine    Machine          `json:"machine"`
	Method     string           `json:"method"`
	Quick      bool             `json:"quick"`
	Increments int              `json:"increments"`
	Cachelets  int              `json:"cachelets"`
	GapNS      time.Duration    `json:"gap_ns"`
	Rows       []ConsistencyRow `json:"rows"`
	Notes      []string         `json:"notes,omitempty"`
}

// Row returns the named setting's row, or nil.
func (r *ConsistencyReport) Row(setting string) *ConsistencyRow {
	for i := range r.Rows {
		if r.Rows[i].Setting == setting {
			return &r.Rows[i]
		}
	}
	return nil
}

// ComputeRatios fills every row's ratios to the strong row and the
// paper's figures.
func (r *ConsistencyReport) ComputeRatios() {
	strong := r.Row("strong")
	ps := paperTable6["strong"]
	for i := range r.Rows {
		row := &r.Rows[i]
		if p, ok := paperTable6[row.Setting]; ok {
			row.Paper = &p
			v := p.PerRequestMS / ps.PerRequestMS
			row.PaperRatioToStrong = &v
		}
		row.RatioToStrong = nil
		if strong != nil && strong.PerRequest.Mean > 0 && row.PerRequest.N > 0 {
			v := float64(row.PerRequest.Mean) / float64(strong.PerRequest.Mean)
			row.RatioToStrong = &v
		}
	}
}

// StrongLosses lists the strongly consistent rows that lost increments.
func (r *ConsistencyReport) StrongLosses() []string {
	var out []string
	for _, row := range r.Rows {
		if row.Strong && row.Lost != 0 {
			out = append(out, fmt.Sprintf("%s lost %d of %d increments", row.Setting, row.Lost, row.Increments))
		}
	}
	return out
}

// fmtMS prints a duration in milliseconds with one decimal ("80.0").
func fmtMS(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond)) }

// fmtSD prints "mean ± sd" in milliseconds.
func fmtSD(mean, sd time.Duration) string { return fmtMS(mean) + " ± " + fmtMS(sd) }

// fmtReads prints read counts in a fixed order: "local_hit 800, remote_hit 200".
func fmtReads(m map[string]int) string {
	order := []string{string(cachelet.LocalHit), string(cachelet.LocalMiss), string(cachelet.RemoteHit), string(cachelet.RemoteMiss), string(cachelet.PassThrough)}
	var parts []string
	for _, k := range order {
		if n := m[k]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, n))
		}
	}
	var rest []string
	for k := range m {
		if !slices.Contains(order, k) {
			rest = append(rest, k)
		}
	}
	slices.Sort(rest)
	for _, k := range rest {
		name := k
		if name == "" {
			name = "(none)"
		}
		parts = append(parts, fmt.Sprintf("%s %d", name, m[k]))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// WriteTable prints the report next to the paper's Table 6.
func (r *ConsistencyReport) WriteTable(w io.Writer) error {
	var b strings.Builder
	m := r.Machine
	fmt.Fprintf(&b, "hoard bench %s — %d CPUs, %.1f GiB memory, %s, kernel %s", r.Benchmark, m.NumCPU, float64(m.MemoryBytes)/(1<<30), m.GoVersion, m.Kernel)
	if m.CPUModel != "" {
		fmt.Fprintf(&b, ", %s", m.CPUModel)
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "%d cachelets, %d increments per setting", r.Cachelets, r.Increments)
	if r.GapNS > 0 {
		fmt.Fprintf(&b, ", %s pause after each (in e2e, not in per-request)", FormatDuration(r.GapNS))
	} else {
		b.WriteString(", back to back")
	}
	fmt.Fprintf(&b, "; %s\n", r.Method)
	b.WriteString("latencies in ms; per-req: mean ± stddev (sample), p50; x strong: per-request mean over the strong row's\n\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "setting\twrite\tread\te2e s\tper-req ms\tp50\tlost\tx strong\t|\tpaper e2e s\tpaper per-req ms\tpaper lost\tpaper x strong")
	for _, row := range r.Rows {
		p := "-\t-\t-\t-"
		if row.Paper != nil {
			x := row.Paper
			p = fmt.Sprintf("%.1f ± %.1f\t%.1f ± %.1f\t%s ± %s\t%s", x.EndToEndS, x.EndToEndSD, x.PerRequestMS, x.PerRequestSD,
				strconv.FormatFloat(x.Lost, 'f', -1, 64), strconv.FormatFloat(x.LostSD, 'f', -1, 64), fmtRatio(row.PaperRatioToStrong))
		}
		fmt.Fprintf(tw, "%s\t%s/%s\t%s\t%.2f\t%s\t%s\t%d\t%s\t|\t%s\n", row.Setting, row.Target, row.Mode, row.Read,
			row.EndToEnd.Seconds(), fmtSD(row.PerRequest.Mean, row.PerRequest.Stddev), fmtMS(row.PerRequest.P50),
			row.Lost, fmtRatio(row.RatioToStrong), p)
	}
	tw.Flush()
	b.WriteString("\nper setting: GET and PUT p50 (ms), how the GETs were served, drain time\n")
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "setting\tGET p50\tPUT p50\tfinal\treads\tdrain")
	for _, row := range r.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", row.Setting, fmtMS(row.Get.P50), fmtMS(row.Put.P50), row.Final, fmtReads(row.Reads), FormatDuration(row.Drain))
	}
	tw.Flush()
	if r.Increments != DefaultIncrements {
		fmt.Fprintf(&b, "note: the paper counted to %d; this run to %d, so its lost counts scale by %.2f\n",
			DefaultIncrements, r.Increments, float64(r.Increments)/DefaultIncrements)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	if l := r.StrongLosses(); len(l) > 0 {
		fmt.Fprintf(&b, "FAIL: a strongly consistent setting lost increments: %s\n", strings.Join(l, "; "))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSONFile writes the whole report to path.
func (r *ConsistencyReport) WriteJSONFile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// RunConsistency runs the counter of Faa$T's Table 6 under each setting.
func RunConsistency(ctx context.Context, cfg ConsistencyConfig) (*ConsistencyReport, error) {
	if cfg.Increments == 0 {
		cfg.Increments = DefaultIncrements
		if cfg.Quick {
			cfg.Increments = QuickIncrements
		}
	}
	if cfg.Gap < 0 {
		return nil, fmt.Errorf("bench: gap must not be negative, got %s", cfg.Gap)
	}
	if cfg.Increments < 0 {
		return nil, fmt.Errorf("bench: increments must be positive, got %d", cfg.Increments)
	}
	if cfg.Cachelets == 0 {
		cfg.Cachelets = DefaultCounterCachelets
	}
	if cfg.Cachelets < 2 {
		return nil, fmt.Errorf("bench: the counter needs at least 2 cachelets, got %d", cfg.Cachelets)
	}
	var settings []cachelet.Consistency
	if len(cfg.Settings) == 0 {
		settings = cachelet.Consistencies()
	}
	for _, name := range cfg.Settings {
		s, err := cachelet.ParseConsistency(name)
		if err != nil {
			return nil, err
		}
		settings = append(settings, s)
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	progress := func(format string, args ...any) { fmt.Fprintf(cfg.Progress, format+"\n", args...) }
	if cfg.MinIOBinary == "" {
		bin, err := localstore.FindBinary(localstore.MinIOBinary)
		if err != nil {
			return nil, err
		}
		cfg.MinIOBinary = bin
	}
	rep := &ConsistencyReport{
		Benchmark: "consistency", Machine: DescribeMachine(), Method: ConsistencyMethod,
		Quick: cfg.Quick, Increments: cfg.Increments, Cachelets: cfg.Cachelets, GapNS: cfg.Gap,
	}
	rep.Machine.MinIOVersion = commandVersion(cfg.MinIOBinary, "--version")

	tmp, err := os.MkdirTemp(cfg.TempDir, "hoard-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	progress("starting MinIO (%s) in %s", cfg.MinIOBinary, tmp)
	srv, storeCore, err := startStore(ctx, cfg.MinIOBinary, tmp, cfg.Log)
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	etcd, err := startEtcd(ctx, filepath.Join(tmp, "etcd"))
	if err != nil {
		return nil, err
	}
	defer etcd.Close()
	st := storeEndpoint{srv.Endpoint(), srv.AccessKey(), srv.SecretKey()}

	for _, s := range settings {
		row, err := runCounter(ctx, storeCore, etcd.Endpoints(), st, s, cfg)
		if err != nil {
			return nil, fmt.Errorf("bench: %s: %w", s.Name, err)
		}
		progress("%-16s e2e %6.2fs  per-request %s ms (p50 %s)  lost %d", s.Name, row.EndToEnd.Seconds(),
			fmtSD(row.PerRequest.Mean, row.PerRequest.Stddev), fmtMS(row.PerRequest.P50), row.Lost)
		rep.Rows = append(rep.Rows, row)
	}
	rep.ComputeRatios()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return rep, nil
}

// runCounter counts to cfg.Increments under setting s with a fresh
// application and a fresh counter object.
func runCounter(ctx context.Context, storeCore *minio.Core, etcdEndpoints []string, st storeEndpoint, s cachelet.Consistency, cfg ConsistencyConfig) (ConsistencyRow, error) {
	row := ConsistencyRow{
		Setting: s.Name, Target: string(s.Target), Mode: string(s.Mode), Read: string(s.Read),
		Strong: slices.Contains(strongSettings, s.Name), Increments: cfg.Increments, Reads: map[string]int{},
	}
	key := "table6/" + s.Name + "/counter"
	// The counter starts at 0 in the store, before any cachelet runs, so
	// every setting starts from the same state whatever its write path.
	if err := putValue(ctx, storeCore, key, 0); err != nil {
		return row, fmt.Errorf("initial value: %w", err)
	}
	ccfg := cachelet.Config{Cache: cache.Config{Budget: 64 << 20}}
	s.Apply(&ccfg)
	app, err := startAppCluster(ctx, etcdEndpoints, st, "table6-"+s.Name, cfg.Cachelets, ccfg, cfg.Log)
	if err != nil {
		return row, err
	}
	defer app.Close()

	buf := make([]byte, 64)
	samples := make([]time.Duration, 0, cfg.Increments)
	gets := make([]time.Duration, 0, cfg.Increments)
	puts := make([]time.Duration, 0, cfg.Increments)
	began := time.Now()
	for n := range cfg.Increments {
		if err := ctx.Err(); err != nil {
			return row, err
		}
		core := app.cores[n%len(app.cores)]
		t0 := time.Now()
		v, read, err := getValue(ctx, core, key, buf)
		if err != nil {
			return row, fmt.Errorf("increment %d: GET through cachelet %d: %w", n, n%len(app.cores), err)
		}
		t1 := time.Now()
		if err := putValue(ctx, core, key, v+1); err != nil {
			return row, fmt.Errorf("increment %d: PUT through cachelet %d: %w", n, n%len(app.cores), err)
		}
		t2 := time.Now()
		row.Reads[read]++
		gets = append(gets, t1.Sub(t0))
		puts = append(puts, t2.Sub(t1))
		samples = append(samples, t2.Sub(t0))
		if cfg.Gap > 0 && n < cfg.Increments-1 {
			select {
			case <-time.After(cfg.Gap):
			case <-ctx.Done():
				return row, ctx.Err()
			}
		}
	}
	row.EndToEnd = time.Since(began)

	dctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	d0 := time.Now()
	err = app.drain(dctx)
	cancel()
	row.Drain = time.Since(d0)
	if err != nil {
		return row, err
	}
	final, _, err := getValue(ctx, storeCore, key, buf)
	if err != nil {
		return row, fmt.Errorf("final value from the store: %w", err)
	}
	row.Final, row.Lost = final, cfg.Increments-final
	row.PerRequest, row.Get, row.Put = Describe(samples), Describe(gets), Describe(puts)
	row.SamplesNS = make([]int64, len(samples))
	for i, d := range samples {
		row.SamplesNS[i] = d.Nanoseconds()
	}
	return row, nil
}

// getValue reads the counter and how it was served (x-hoard-read).
func getValue(ctx context.Context, core *minio.Core, key string, buf []byte) (int, string, error) {
	body, _, hdr, err := core.GetObject(ctx, benchBucket, key, minio.GetObjectOptions{})
	if err != nil {
		return 0, "", err
	}
	defer body.Close()
	var out bytes.Buffer
	if _, err := io.CopyBuffer(&out, body, buf); err != nil {
		return 0, "", err
	}
	v, err := strconv.Atoi(out.String())
	if err != nil {
		return 0, "", fmt.Errorf("counter holds %q", out.String())
	}
	return v, hdr.Get("x-hoard-read"), nil
}

// putValue writes the counter.
func putValue(ctx context.Context, core *minio.Core, key string, v int) error {
	data := []byte(strconv.Itoa(v))
	_, err := core.PutObject(ctx, benchBucket, key, bytes.NewReader(data), int64(len(data)), "", "",
		minio.PutObjectOptions{DisableMultipart: true, ContentType: "text/plain"})
	return err
}
