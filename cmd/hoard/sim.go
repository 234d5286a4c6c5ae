package main

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/cacheconfig"
	"github.com/hoard-io/hoard/internal/sim"
)

// simOptions is what `hoard sim` was asked to do.
type simOptions struct {
	trace, format     string
	durations, memory string
	generate          bool
	gen               sim.GenConfig
	cfg               sim.Config
	jsonPath          string
	parallel          int
}

func parseSimFlags(args []string, stderr io.Writer) (*simOptions, error) {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: hoard sim --trace FILE [--format blob|access-log|azure-invocations|hoard-records] [flags]\n"+
			"       hoard sim --generate [--seed N] [--apps N] [--duration D] [--events N] [flags]\n\n"+
			"Replays a trace, or a generated workload, through hoard's cache eviction, ring placement\n"+
			"and keep-alive policies on a simulated clock, and prints hit ratios, bytes from the store,\n"+
			"cold starts, wasted memory-time and cost per policy and cache size; with --scale, --predict\n"+
			"and --erasure, also applied scale votes, memory prediction and erasure-coded placement.\n\nflags:")
		fs.PrintDefaults()
	}
	o := &simOptions{}
	var sizes, policies, keepAlives, access string
	fs.StringVar(&o.trace, "trace", "", "trace file to replay (.gz is read compressed)")
	fs.StringVar(&o.format, "format", "blob", "the trace's format: blob (Azure blob accesses, 2020), access-log (time,op,key,size[,offset,length,...] CSV), azure-invocations (Azure Functions invocations per function per minute), hoard-records (hoard's saved access metadata, prewarm records in unload order)")
	fs.StringVar(&o.durations, "durations", "", "with azure-invocations: the function durations file (Average ms per function)")
	fs.StringVar(&o.memory, "memory", "", "with azure-invocations: the application memory file (AverageAllocatedMb per application)")
	fs.BoolVar(&o.generate, "generate", false, "replay a generated workload with the Azure traces' published statistics instead of a trace")
	fs.Uint64Var(&o.gen.Seed, "seed", 1, "with --generate: the workload's seed")
	fs.IntVar(&o.gen.Apps, "apps", 100, "with --generate: applications")
	fs.DurationVar(&o.gen.Duration, "duration", 24*time.Hour, "with --generate: the workload's span")
	fs.Int64Var(&o.gen.MaxEvents, "events", 0, "with --generate: stop after this many events (0: the whole span)")
	fs.StringVar(&sizes, "cache-sizes", "1KiB,8KiB,64KiB,512KiB,4MiB,32MiB,128MiB", "per-instance cache budgets to compare, comma-separated")
	fs.StringVar(&policies, "policies", "lru", "eviction policies to compare, comma-separated: lru (owner-lru), size-aware, ttl:<duration>, gdsf, s3-fifo, w-tinylfu; all: every one but ttl")
	fs.StringVar(&keepAlives, "keep-alive", "fixed:10m,histogram", "keep-alive policies to compare, comma-separated: fixed:<duration>, histogram[:<fallback>]")
	fs.IntVar(&o.cfg.Instances, "instances", 1, "instances per application, objects placed on a ring among them")
	fs.BoolVar(&o.cfg.Admission, "admission", false, "replay admission by predicted benefit (cache.admission: benefit): per function, misses kept only while its data is over half of its run time")
	fs.BoolVar(&o.cfg.NoSizeCap, "no-size-cap", false, "let a cache admit objects up to its whole budget (hoard's cap: half of it)")
	fs.IntVar(&o.cfg.MemoryMB, "memory-mb", sim.DefaultMemoryMB, "memory of an instance whose invocations do not say (MB)")
	fs.BoolVar(&o.cfg.Lifecycle, "lifecycle", false, "caches live as long as their instances under the first --keep-alive policy (unloaded: emptied)")
	fs.BoolVar(&o.cfg.PreWarm, "prewarm", false, "fill a reloaded instance's cache with the pre-warm selection from its earlier lives (implies --lifecycle)")
	fs.DurationVar(&o.cfg.VoteInterval, "votes", 0, "run the scale controller's rounds every this often (the controller's round is 5s): the compute, cache-size and bandwidth policies' votes, tallied (0: none)")
	fs.BoolVar(&o.cfg.Scale, "scale", false, "apply the votes through scaling.Combine: add and remove instances as the controller does, and start one for an invocation that finds none free (implies --votes 5s when not given)")
	fs.IntVar(&o.cfg.Concurrency, "concurrency", 1, "with --votes: invocations an instance runs at once (the worker's: 1)")
	fs.DurationVar(&o.cfg.LoadTime, "load-time", sim.DefaultLoadTime, "with --votes: how long a new instance takes to load (the bandwidth plan's T_load, and the wait of an invocation that starts one)")
	fs.DurationVar(&o.cfg.LatencyTarget, "latency-target", 0, "with --votes: the applications' scaling.latency_target for the compute vote (0: none)")
	fs.IntVar(&o.cfg.MaxInstances, "max-instances", 0, "with --scale: the most instances per application (0: 16, or --instances if more)")
	var slack, erasureSpec, erasureThreshold string
	var lossRate float64
	var lease time.Duration
	var rebuildRate string
	fs.BoolVar(&o.cfg.Predict, "predict", false, "replay memory prediction over the invocations that carry a peak (generated workloads do): a model per function trained and asked as the controller does, peaks above the limit lent the slack pool or retried at the booked size")
	fs.StringVar(&slack, "slack-pool", "100MiB", "with --predict: each application's slack pool (0: none)")
	fs.StringVar(&erasureSpec, "erasure", "", "replay erasure-coded placement of large objects as K+R shards on each application's ring (needs --instances >= K+R), e.g. 10+2")
	fs.StringVar(&erasureThreshold, "erasure-threshold", "10MB", "with --erasure: the smallest object sharded")
	fs.Float64Var(&lossRate, "loss-rate", 0, "with --erasure: instances lost per instance per hour")
	fs.DurationVar(&lease, "lease", sim.DefaultLease, "with --erasure: how long a departed instance goes unnoticed (the membership lease)")
	fs.StringVar(&rebuildRate, "rebuild-rate", "64MiB", "with --erasure: the bytes a second one instance sends as it rebuilds shards (the cachelet's rebuild_rate)")
	fs.StringVar(&access, "access-model", "", "each read's modelled time by outcome, for the time saved against the store: local=LAT+RATE,remote=LAT+RATE,store=LAT+RATE (default "+sim.DefaultAccessModel.String()+")")
	sweep := sweepFlag{off: true}
	fs.Var(&sweep, "sweep", "sweep every cache this often with OFC's rule (a cachelet's default: 300s), or off; off by default here, as the reproduced figures (Faa$T Fig. 11) had no sweep")
	sweepReads := fs.Int("sweep-min-reads", cacheconfig.OFCSweepMinReads, "with --sweep: the fewest reads that keep an object")
	sweepIdle := fs.Duration("sweep-idle", cacheconfig.OFCSweepIdle, "with --sweep: the longest time without a read")
	fs.BoolVar(&o.cfg.SweepFromAdmission, "sweep-from-admission", false, "with --sweep: count every object's reads from its admission, pre-warmed and written ones too (as before they were spared until their first read), for comparison")
	fs.DurationVar(&o.cfg.HeldEvery, "held-every", time.Minute, "sample the bytes the caches hold this often, for their mean (0: not sampled)")
	fs.IntVar(&o.parallel, "parallel", runtime.GOMAXPROCS(0), "replay the cache configurations on this many cores (each event is read once)")
	fs.StringVar(&o.jsonPath, "json", "", "also write the report as JSON to this file (- for standard output, instead of the table)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	if o.generate == (o.trace != "") {
		return nil, fmt.Errorf("%w: give one of --trace FILE and --generate", errUsage)
	}
	if (o.durations != "" || o.memory != "") && o.format != "azure-invocations" {
		return nil, fmt.Errorf("%w: --durations and --memory go with --format azure-invocations", errUsage)
	}
	if n, err := parseBytes(slack); err != nil || n < 0 {
		return nil, fmt.Errorf("%w: --slack-pool: bad size %q", errUsage, slack)
	} else if n == 0 {
		o.cfg.SlackPool = -1
	} else {
		o.cfg.SlackPool = n
	}
	if erasureSpec != "" {
		k, r, err := cacheconfig.ParseShards(erasureSpec)
		if err != nil {
			return nil, fmt.Errorf("%w: --erasure: %v", errUsage, err)
		}
		th, err := parseBytes(erasureThreshold)
		if err != nil || th <= 0 {
			return nil, fmt.Errorf("%w: --erasure-threshold: bad size %q", errUsage, erasureThreshold)
		}
		if lease <= 0 {
			return nil, fmt.Errorf("%w: --lease must be positive", errUsage)
		}
		rate, err := parseBytes(rebuildRate)
		if err != nil || rate <= 0 {
			return nil, fmt.Errorf("%w: --rebuild-rate: bad rate %q", errUsage, rebuildRate)
		}
		o.cfg.Erasure = &sim.ErasureConfig{DataShards: k, ParityShards: r, Threshold: th, LossRate: lossRate, Lease: lease, RebuildRate: rate, Seed: o.gen.Seed}
	}
	if access != "" {
		m, err := sim.ParseAccessModel(access)
		if err != nil {
			return nil, fmt.Errorf("%w: --access-model: %v", errUsage, err)
		}
		o.cfg.Access = m
	}
	for _, s := range splitList(sizes) {
		n, err := parseBytes(s)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%w: --cache-sizes: bad size %q", errUsage, s)
		}
		o.cfg.CacheSizes = append(o.cfg.CacheSizes, n)
	}
	o.cfg.Policies = []sim.Eviction{}
	for _, s := range splitList(policies) {
		if s == "all" {
			o.cfg.Policies = append(o.cfg.Policies, sim.UntimedEvictions()...)
			continue
		}
		p, err := sim.ParseEviction(s)
		if err != nil {
			return nil, fmt.Errorf("%w: --policies: %v", errUsage, err)
		}
		o.cfg.Policies = append(o.cfg.Policies, p)
	}
	o.cfg.KeepAlives = []sim.KeepAlive{}
	for _, s := range splitList(keepAlives) {
		k, err := sim.ParseKeepAlive(s)
		if err != nil {
			return nil, fmt.Errorf("%w: --keep-alive: %v", errUsage, err)
		}
		o.cfg.KeepAlives = append(o.cfg.KeepAlives, k)
	}
	if o.cfg.PreWarm {
		o.cfg.Lifecycle = true
	}
	if !sweep.off {
		every := sweep.every
		if every == 0 {
			every = cacheconfig.OFCSweepInterval
		}
		o.cfg.Sweep = &cache.SweepRule{MinReads: *sweepReads, Idle: *sweepIdle, MinAge: every}
	}
	if o.cfg.Scale && o.cfg.VoteInterval == 0 {
		o.cfg.VoteInterval = 5 * time.Second
	}
	if o.parallel < 1 {
		return nil, fmt.Errorf("%w: --parallel must be at least 1", errUsage)
	}
	if o.cfg.CacheSizes == nil {
		o.cfg.CacheSizes = []int64{}
	}
	if err := o.cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	return o, nil
}

func runSim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseSimFlags(args, stderr)
	if err != nil {
		return err
	}
	var closers []io.Closer
	defer func() {
		for _, c := range closers {
			c.Close()
		}
	}()
	open := func(path string) (io.Reader, error) {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		closers = append(closers, f)
		var r io.Reader = bufio.NewReaderSize(f, 1<<20)
		if strings.HasSuffix(path, ".gz") {
			z, err := gzip.NewReader(r)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			closers = append(closers, z)
			r = z
		}
		return r, nil
	}
	var src sim.Source
	switch {
	case o.generate:
		if src, err = sim.NewGenerator(o.gen); err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
	default:
		r, err := open(o.trace)
		if err != nil {
			return err
		}
		switch o.format {
		case "blob":
			src, err = sim.NewBlobTrace(r)
		case "access-log":
			src, err = sim.NewAccessLog(r)
		case "hoard-records":
			src = sim.NewRecords(r)
		case "azure-invocations":
			var d, m io.Reader
			if o.durations != "" {
				if d, err = open(o.durations); err != nil {
					return err
				}
			}
			if o.memory != "" {
				if m, err = open(o.memory); err != nil {
					return err
				}
			}
			src, err = sim.NewAzureInvocations(r, d, m)
		default:
			return fmt.Errorf("%w: unknown --format %q (valid: blob, access-log, azure-invocations, hoard-records)", errUsage, o.format)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", o.trace, err)
		}
	}
	began := time.Now()
	report, err := replay(&ctxSource{ctx: ctx, src: src}, o.cfg, o.parallel)
	if err != nil {
		return err
	}
	took := time.Since(began)
	fmt.Fprintf(stderr, "replayed %d events in %s (%.0f events/s)\n", report.Events, took.Round(time.Millisecond), float64(report.Events)/max(took.Seconds(), 1e-9))
	if o.jsonPath == "-" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(report)
	}
	if err := report.WriteTable(stdout); err != nil {
		return err
	}
	if o.jsonPath != "" {
		b, err := json.MarshalIndent(report, "", "  ")
		if err != nil {
			return err
		}
		return os.WriteFile(o.jsonPath, append(b, '\n'), 0o644)
	}
	return nil
}

// replay is sim.Run with the cache configurations split over n
// goroutines (sim.Config.Split): one reads the events, in batches, and
// every part replays each batch.
func replay(src sim.Source, cfg sim.Config, n int) (sim.Report, error) {
	if err := cfg.Validate(); err != nil {
		return sim.Report{}, err
	}
	parts := cfg.Split(n)
	if len(parts) == 1 {
		return sim.Run(src, parts[0])
	}
	sims := make([]*sim.Simulator, len(parts))
	for i, p := range parts {
		s, err := sim.New(p)
		if err != nil {
			return sim.Report{}, err
		}
		sims[i] = s
	}
	var (
		wg     sync.WaitGroup
		failed atomic.Bool
		errs   = make([]error, len(parts))
		queues = make([]chan []sim.Event, len(parts))
	)
	for i := range parts {
		queues[i] = make(chan []sim.Event, 4)
		wg.Go(func() {
			for batch := range queues[i] {
				for j := 0; j < len(batch) && errs[i] == nil; j++ {
					if err := sims[i].Step(batch[j]); err != nil {
						errs[i] = err
						failed.Store(true)
					}
				}
			}
		})
	}
	var readErr error
	for done := false; !done && !failed.Load(); {
		batch := make([]sim.Event, 0, 4096)
		for len(batch) < cap(batch) {
			e, err := src.Next()
			if err != nil {
				if !errors.Is(err, io.EOF) {
					readErr = err
				}
				done = true
				break
			}
			batch = append(batch, e)
		}
		for _, q := range queues {
			q <- batch
		}
	}
	for _, q := range queues {
		close(q)
	}
	wg.Wait()
	if err := errors.Join(append([]error{readErr}, errs[0])...); err != nil {
		return sim.Report{}, err
	}
	reports := make([]sim.Report, len(sims))
	for i, s := range sims {
		reports[i] = s.Report()
	}
	return sim.Merge(reports), nil
}

// ctxSource stops a replay when ctx is cancelled (checked every 64Ki
// events, so it costs nothing).
type ctxSource struct {
	ctx context.Context
	src sim.Source
	n   int
}

func (c *ctxSource) Next() (sim.Event, error) {
	if c.n++; c.n&0xffff == 0 {
		if err := c.ctx.Err(); err != nil {
			return sim.Event{}, err
		}
	}
	return c.src.Next()
}
