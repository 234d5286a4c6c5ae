package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hoard-io/hoard/internal/appspec"
	"github.com/hoard-io/hoard/internal/bytesize"
	"github.com/hoard-io/hoard/internal/store"
	s3store "github.com/hoard-io/hoard/internal/store/s3"
)

var refFaasTFig14 = Reference{Paper: "Faa$T", Figure: "Fig. 14", Section: "§6.6", Citation: CiteFaasT}

// The paper's figures (Faa$T §6.6, Figure 14): an 800 MB object arrives
// 60% faster with four warm instances than with one; a 400 KB object gets
// slower with more instances.
const paperBandwidth800MB4Warm = 60.0

func bandwidthExperiment() Experiment {
	return Experiment{
		Name:       "bandwidth",
		Title:      "Bandwidth scaling: large objects downloaded by 1-4 instances, warm and cold",
		Reproduces: []Reference{refFaasTFig14},
		// Sizes are the objects'; Iterations the runs per point.
		Quick: Options{Iterations: 1, Sizes: []int64{400_000, 40_000_000, 200_000_000}},
		Full:  Options{Iterations: 2, Sizes: []int64{400_000, 40_000_000, 400_000_000, 800_000_000}},
		Run:   runBandwidthExperiment,
	}
}

// bwFunctions is the experiment's application code: read one object,
// counting its bytes, and report how long that took; hold keeps an
// instance busy so that concurrent holds load several.
const bwFunctions = `
import time
import boto3

s3 = boto3.client("s3")

def read(event, context):
    t = time.perf_counter()
    body = s3.get_object(Bucket=event["bucket"], Key=event["key"])["Body"]
    n = 0
    for chunk in iter(lambda: body.read(1 << 20), b""):
        n += len(chunk)
    return {"seconds": time.perf_counter() - t, "size": n}

def hold(event, context):
    time.sleep(event.get("seconds", 1))
    return "ok"
`

const bwSpec = `
name: %s
memory: 128MiB
timeout: 300s
keep_alive: 1h
max_instances: %d
buckets: {bw-objects: read-only}
cache: {budget: %dMiB}
functions:
  read: {handler: fns.read}
  hold: {handler: fns.hold}
`

// bwModes: warm has the N instances loaded before the read; cold has one,
// and the policy scales out during the read (paying the load time).
var bwModes = []string{"warm", "cold"}

// runBandwidthExperiment reads objects of each size through the platform
// with the store behind Faa$T's link (90 MB/s and 10 ms each way per
// connection), in a fresh application per run whose instance limit is N
// (1-4), so the bandwidth policy may use up to N cachelets: "warm" with N
// instances loaded and idle before the read, "cold" with one, the policy
// voting for the others during the read. The time is the function's own
// get_object and read of the whole body.
func runBandwidthExperiment(ctx context.Context, o Options) (*Result, error) {
	env := o.Env
	started := time.Now()
	sizes := o.Sizes
	if len(sizes) == 0 {
		sizes = bandwidthExperiment().Full.Sizes
	}
	iters := max(o.Iterations, 1)
	say := func(format string, args ...any) { fmt.Fprintf(env.progress(), "bandwidth: "+format+"\n", args...) }
	r, err := startRig(ctx, env, "faast")
	if err != nil {
		return nil, err
	}
	defer r.Close()
	log := env.Log
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	st, err := s3store.New(s3store.Config{Endpoint: r.minioURL, AccessKey: rigStoreAccessKey, SecretKey: rigStoreSecretKey}, log)
	if err != nil {
		return nil, err
	}
	const bucket = "bw-objects"
	if err := st.CreateBucket(ctx, bucket, ""); err != nil {
		return nil, err
	}
	var biggest int64
	for _, s := range sizes {
		biggest = max(biggest, s)
		if _, err := st.Put(ctx, bucket, objName(s), &patternReader{n: s}, s, store.PutOptions{}); err != nil {
			return nil, fmt.Errorf("uploading %s: %w", bytesize.Human(s), err)
		}
	}
	// Room for the largest object as one cached object (the cache admits
	// objects up to half its budget).
	budgetMiB := 2*biggest>>20 + 64

	// times[size][mode][n-1]
	times := map[int64]map[string][]time.Duration{}
	seq := 0
	for _, size := range sizes {
		times[size] = map[string][]time.Duration{}
		for _, mode := range bwModes {
			times[size][mode] = make([]time.Duration, 4)
			for n := 1; n <= 4; n++ {
				var runs []time.Duration
				for range iters {
					seq++
					d, err := bandwidthRun(ctx, r, fmt.Sprintf("bw-%d", seq), bucket, objName(size), n, mode, budgetMiB)
					if err != nil {
						return nil, fmt.Errorf("%s, %d %s: %w", bytesize.Human(size), n, mode, err)
					}
					runs = append(runs, d)
				}
				times[size][mode][n-1] = median(runs)
				say("%-8s %d instance(s) %-4s %v", bytesize.Human(size), n, mode, times[size][mode][n-1].Round(time.Millisecond))
			}
		}
	}
	return bandwidthResult(o, r.link, sizes, iters, times, time.Since(started)), nil
}

func objName(size int64) string { return fmt.Sprintf("object-%d", size) }

// bandwidthRun deploys a fresh application limited to n instances, loads
// n of them (warm) or one (cold), reads the object once, and removes the
// application.
func bandwidthRun(ctx context.Context, r *benchRig, app, bucket, key string, n int, mode string, budgetMiB int64) (time.Duration, error) {
	dir := filepath.Join(r.tmp, "apps", app)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	if err := os.WriteFile(filepath.Join(dir, appspec.FileName), []byte(fmt.Sprintf(bwSpec, app, n, budgetMiB)), 0o644); err != nil {
		return 0, err
	}
	if err := os.WriteFile(filepath.Join(dir, "fns.py"), []byte(bwFunctions), 0o644); err != nil {
		return 0, err
	}
	pkg, err := appspec.Pack(dir)
	if err != nil {
		return 0, err
	}
	c := r.p.Controller
	if _, err := c.Deploy(ctx, pkg.Data); err != nil {
		return 0, err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_ = c.Remove(rctx, app)
	}()
	load := 1
	if mode == "warm" {
		load = n
	}
	// Concurrent holds load that many instances.
	var wg sync.WaitGroup
	errs := make([]error, load)
	for i := range load {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = r.invoke(ctx, app, "hold", map[string]any{"seconds": 0.5})
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return 0, err
		}
	}
	ev, _ := json.Marshal(map[string]any{"bucket": bucket, "key": key})
	rec, err := c.Invoke(ctx, app, "read", ev, "bench")
	if err != nil {
		return 0, err
	}
	if !rec.OK {
		return 0, fmt.Errorf("read: %s: %s\n%s", rec.Error.Type, rec.Error.Message, rec.Log)
	}
	var out struct {
		Seconds float64 `json:"seconds"`
		Size    int64   `json:"size"`
	}
	if err := json.Unmarshal(rec.Result, &out); err != nil {
		return 0, err
	}
	if !strings.HasSuffix(key, fmt.Sprint(out.Size)) {
		return 0, fmt.Errorf("read %d bytes of %s", out.Size, key)
	}
	return time.Duration(out.Seconds * float64(time.Second)), nil
}

// patternReader yields n bytes of a fixed pattern without holding them.
type patternReader struct{ n, off int64 }

func (p *patternReader) Read(b []byte) (int, error) {
	if p.off >= p.n {
		return 0, io.EOF
	}
	k := min(int64(len(b)), p.n-p.off)
	for i := range k {
		x := uint64(p.off + i)
		b[i] = byte(x*2654435761>>13 ^ x>>7)
	}
	p.off += k
	return int(k), nil
}

func bandwidthResult(o Options, link string, sizes []int64, iters int, times map[int64]map[string][]time.Duration, took time.Duration) *Result {
	var rows []Comparison
	var plots []Plot
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }
	for _, size := range sizes {
		var series []Series
		for _, mode := range bwModes {
			s := Series{Label: mode}
			for n := 1; n <= 4; n++ {
				s.X = append(s.X, float64(n))
				s.Y = append(s.Y, ms(times[size][mode][n-1]))
			}
			series = append(series, s)
		}
		plots = append(plots, Plot{Kind: PlotCurve, ID: fmt.Sprintf("size-%d", size), Title: bytesize.Human(size) + ": download time by instances",
			XLabel: "instances", YLabel: "ms", Unit: "ms", Series: series})
		one := times[size]["warm"][0]
		for _, mode := range bwModes {
			four := times[size][mode][3]
			gain := 0.0
			if one > 0 {
				gain = 100 * (1 - float64(four)/float64(one))
			}
			var paper *float64
			note := ""
			if size >= 800_000_000 && mode == "warm" {
				v := paperBandwidth800MB4Warm
				paper = &v
			}
			if size < 1_000_000 {
				note = "The paper's 400 KB object gets slower with more instances; hoard never splits objects under 16 MiB, so its time does not depend on them."
			}
			rows = append(rows, Compare(fmt.Sprintf("%s, 4 %s instances vs 1: faster by", bytesize.Human(size), mode), "%", paper, F(gain), HigherIsBetter, 0, "", note))
		}
	}
	return &Result{
		Experiment: "bandwidth",
		Title:      "Bandwidth scaling: large objects downloaded by 1-4 instances, warm and cold",
		Reproduces: []Reference{refFaasTFig14},
		Status:     StatusOK,
		Quick:      o.Quick,
		Machine:    DescribeMachine(),
		Seconds:    took.Seconds(),
		Method: "Each run deploys a fresh application limited to N instances (1-4) and reads one object through its cachelet: warm with N " +
			"instances loaded before the read, cold with one (the bandwidth policy votes for the others during the read and waits for them). " +
			"The owner reads the first 8 MiB alone (measuring the store), models T(N) = T_load + (S/N)/BW_BS + (S - S/N)/BW_inst with the " +
			"controller's measured load time and a probe of the instance network, and splits the rest into N ranges that the cachelets " +
			"download from the store into it. The time is the function's get_object and read of the whole body. Peers talk over loopback, " +
			"unshaped (faster than the paper's 500 MB/s between instances).",
		Settings: RunSettings{Link: link, Iterations: []Count{{What: "runs per point (median)", N: iters}}},
		Rows:     rows,
		Plots:    plots,
	}
}
