package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/hoard-io/hoard/internal/bytesize"
	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/cachelet"
	"github.com/hoard-io/hoard/internal/erasure"
	"github.com/hoard-io/hoard/internal/instance"
	"github.com/hoard-io/hoard/internal/localstore"
	etcdmembership "github.com/hoard-io/hoard/internal/membership/etcd"
	"github.com/hoard-io/hoard/internal/store"
	s3store "github.com/hoard-io/hoard/internal/store/s3"
)

// The availability experiment [InfiniCache: instances reclaimed]: an
// application of 14 cachelets with RS(10+2) holds 16 objects of 10 MB; a
// reader reads them at random while, every interval, a cachelet other
// than the reader is reclaimed (closed: it leaves at once and its shards
// are gone) and a new one joins. Rebuild restores what a loss took. It
// counts reads decoded from shards, reads that found fewer than k (the
// object lost from the cache: the store served it, and it is sharded
// again), and shards rebuilt, next to the loss probability that
// erasure.LossProbability computes for the run's loss rate. Each interval
// runs twice: backups off, and on at InfiniCache's 5 min compressed as
// the intervals are (15 s).

func erasureAvailabilityExperiment() Experiment {
	return Experiment{
		Name:       "erasure-availability",
		Title:      "Erasure-coded objects while instances are reclaimed: hits, objects lost, shards rebuilt",
		Reproduces: []Reference{refInfiniCache},
		// Iterations: seconds of reads per reclaim interval and backup
		// setting.
		Quick: Options{Iterations: 20},
		Full:  Options{Iterations: 60},
		Run:   runErasureAvailability,
	}
}

// availIntervals are the reclaim intervals, one run each: InfiniCache's
// one every 60 s, 30 s and 10 s, compressed 20-fold so that a run takes
// seconds; the loss rate per second is what the probability takes.
var availIntervals = []time.Duration{3 * time.Second, 1500 * time.Millisecond, 500 * time.Millisecond}

// availBackup is InfiniCache's backup interval (5 min) compressed as the
// reclaim intervals are.
const availBackup = 15 * time.Second

const (
	availMembers = 14
	availObjects = 16
	availSize    = 10_000_000
)

type availRun struct {
	interval                    time.Duration
	backups                     bool
	restored                    int64   // shards restored from backups
	backedUp                    float64 // share of the shards held backed up, at the end
	reads, hits, misses, wrong  int64
	lost                        int // distinct objects that missed
	rebuilt, reclaimed          int64
	computed, window            float64 // P(an object lost during the run), the repair window in s
	readSeconds, lossesPerInstS float64
}

func runErasureAvailability(ctx context.Context, o Options) (*Result, error) {
	env := o.Env
	started := time.Now()
	secs := max(o.Iterations, 1)
	say := func(format string, args ...any) {
		fmt.Fprintf(env.progress(), "erasure-availability: "+format+"\n", args...)
	}
	log := env.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tmp, err := os.MkdirTemp(env.TempDir, "hoard-bench-ecavail-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	startCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	ms, err := localstore.StartMinIO(startCtx, localstore.Config{Binary: env.MinIOBinary, DataDir: filepath.Join(tmp, "minio"),
		Addr: "127.0.0.1:0", AccessKey: "benchstore", SecretKey: "benchstore-secret", Logger: log})
	if err != nil {
		return nil, err
	}
	defer ms.Close()
	etcd, err := startEtcd(startCtx, tmp)
	if err != nil {
		return nil, err
	}
	defer etcd.Close()
	stEP := storeEndpoint{Endpoint: ms.Endpoint(), AccessKey: "benchstore", SecretKey: "benchstore-secret"}
	st, err := s3store.New(s3store.Config{Endpoint: ms.Endpoint(), AccessKey: stEP.AccessKey, SecretKey: stEP.SecretKey}, log)
	if err != nil {
		return nil, err
	}
	const bucket = "ec-avail"
	if err := st.CreateBucket(ctx, bucket, ""); err != nil {
		return nil, err
	}
	for i := range availObjects {
		if _, err := st.Put(ctx, bucket, fmt.Sprintf("blob-%02d", i), &patternReader{n: availSize}, availSize, store.PutOptions{}); err != nil {
			return nil, err
		}
	}
	var runs []availRun
	for ri, interval := range availIntervals {
		for _, backups := range []bool{false, true} {
			run, err := availabilityRun(ctx, etcd.Endpoints(), stEP, fmt.Sprintf("ec-avail-%d-%v", ri, backups), bucket, interval, backups, time.Duration(secs)*time.Second, log)
			if err != nil {
				return nil, fmt.Errorf("reclaim every %v (backups %v): %w", interval, backups, err)
			}
			say("reclaim every %-6v backups %-5v reads %d, decoded %d, missed %d (%d objects), rebuilt %d shards, restored %d; objects lost expected %.2f",
				interval, backups, run.reads, run.hits, run.misses, run.lost, run.rebuilt, run.restored, run.computed*availObjects)
			runs = append(runs, run)
		}
	}
	return availabilityResult(o, secs, runs, time.Since(started)), nil
}

// availabilityRun runs one reclaim interval in a fresh application.
func availabilityRun(ctx context.Context, etcdEndpoints []string, st storeEndpoint, app, bucket string, interval time.Duration, backups bool, length time.Duration, log *slog.Logger) (availRun, error) {
	run := availRun{interval: interval, backups: backups}
	backup := time.Duration(-1)
	if backups {
		backup = availBackup
	}
	var regs []*etcdmembership.Registry
	ins := map[int]*instance.Instance{}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, in := range ins {
			_ = in.Close(cctx)
		}
		for _, r := range regs {
			_ = r.Close()
		}
	}()
	start := func(i int) error {
		reg, err := etcdmembership.New(etcdmembership.Config{Endpoints: etcdEndpoints})
		if err != nil {
			return err
		}
		regs = append(regs, reg)
		ec := &cachelet.ErasureConfig{Memory: 96 << 20, Backup: backup}
		in, err := instance.Start(ctx, instance.Config{
			MetricsListen: "off", Region: benchRegion, AccessKey: clientKey, SecretKey: clientSec,
			Store:    s3store.Config{Endpoint: st.Endpoint, AccessKey: st.AccessKey, SecretKey: st.SecretKey, Region: benchRegion},
			Cachelet: cachelet.Config{Cache: cache.Config{Budget: 256 << 20}, Erasure: ec},
			Registry: reg, App: app, ID: fmt.Sprintf("%s-%d", app, i), Secret: benchSecret,
		}, log.With("cachelet", i))
		if err != nil {
			return err
		}
		ins[i] = in
		return nil
	}
	for i := range availMembers {
		if err := start(i); err != nil {
			return run, err
		}
	}
	reader := ins[0]
	rc, err := NewS3Client(reader.Endpoint(), clientKey, clientSec, benchRegion)
	if err != nil {
		return run, err
	}
	read := func(key string) error {
		body, _, _, err := rc.GetObject(ctx, bucket, key, minio.GetObjectOptions{})
		if err != nil {
			return err
		}
		defer body.Close()
		n, err := io.Copy(io.Discard, body)
		if err == nil && n != availSize {
			run.wrong++
		}
		return err
	}
	// Warm up: every object read once (its owner shards it), then wait
	// until every shard is held.
	deadline := time.Now().Add(2 * time.Minute)
	for i := range availObjects {
		if err := read(fmt.Sprintf("blob-%02d", i)); err != nil {
			return run, err
		}
	}
	cfg := erasure.Config{}
	_ = cfg.Validate()
	m := erasure.NewManifest(cfg, "", availSize)
	want := int64(availObjects) * m.ShardSize() * int64(m.Shards())
	for {
		var held int64
		for _, in := range ins {
			held += in.Cachelet().ErasureStats().Bytes
		}
		if held >= want {
			break
		}
		if time.Now().After(deadline) {
			return run, fmt.Errorf("warm-up: %d of %d bytes of shards held", held, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
	base := reader.Cachelet().ErasureCounters()

	// Reads, with a reclaim and a replacement every interval.
	next := len(ins)
	rnd := rand.New(rand.NewPCG(1, uint64(interval)))
	began := time.Now()
	lastReclaim := began
	var rebuiltGone, restoredGone int64 // by members since reclaimed
	lost := map[string]bool{}
	for time.Since(began) < length {
		if time.Since(lastReclaim) >= interval {
			lastReclaim = time.Now()
			victims := make([]int, 0, len(ins))
			for i := range ins {
				if i != 0 {
					victims = append(victims, i)
				}
			}
			v := victims[rnd.IntN(len(victims))]
			gone := ins[v].Cachelet().ErasureCounters()
			rebuiltGone += gone.Rebuilt
			restoredGone += gone.Restored
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			_ = ins[v].Close(cctx)
			cancel()
			delete(ins, v)
			run.reclaimed++
			if err := start(next); err != nil {
				return run, err
			}
			next++
		}
		key := fmt.Sprintf("blob-%02d", rnd.IntN(availObjects))
		before := reader.Cachelet().ErasureCounters().Misses
		if err := read(key); err != nil {
			return run, err
		}
		if reader.Cachelet().ErasureCounters().Misses > before {
			lost[key] = true
		}
		run.reads++
	}
	run.readSeconds = time.Since(began).Seconds()
	end := reader.Cachelet().ErasureCounters()
	run.hits, run.misses = end.Hits-base.Hits, end.Misses-base.Misses
	run.rebuilt, run.restored = rebuiltGone, restoredGone
	var held, backedUp int
	for _, in := range ins {
		n := in.Cachelet().ErasureCounters()
		run.rebuilt += n.Rebuilt
		run.restored += n.Restored
		backedUp += n.BackedUp
		held += in.Cachelet().ErasureStats().Shards
	}
	if held > 0 {
		run.backedUp = float64(backedUp) / float64(held)
	}
	// The loss rate of the run, per instance and second; the repair
	// window: the rebuild's delay and a rebuild at its rate (the
	// departure itself is seen at once: a closed member leaves).
	run.lossesPerInstS = float64(run.reclaimed) / float64(availMembers) / run.readSeconds
	restore := time.Duration(float64(m.ShardSize()) / float64(64<<20) * float64(time.Second))
	w := time.Second + restore
	// With backups, the share q backed up is restored as soon as the
	// departure is seen, without the rebuild's delay (the cachelet's own
	// model, erasure_risk.go).
	w = time.Duration(run.backedUp*float64(restore) + (1-run.backedUp)*float64(w))
	run.window = w.Seconds()
	run.lost = len(lost)
	run.computed = erasure.LossProbability(10, 2, run.lossesPerInstS, w, time.Duration(run.readSeconds*float64(time.Second)))
	return run, nil
}

func availabilityResult(o Options, secs int, runs []availRun, took time.Duration) *Result {
	tbl := Table{ID: "availability", Title: "Reads while instances are reclaimed",
		Columns: []string{"reclaim every", "backups", "share backed up", "instances reclaimed", "reads", "decoded from shards", "hit ratio", "reads missed", "objects lost", "objects lost, computed", "shards rebuilt", "shards restored from backups", "wrong bytes"}}
	var rows []Comparison
	for _, r := range runs {
		ratio := float64(r.hits) / float64(max(r.reads, 1))
		bk := "off"
		if r.backups {
			bk = "every " + availBackup.String()
		}
		tbl.Rows = append(tbl.Rows, []string{r.interval.String(), bk, fmt.Sprintf("%.0f%%", 100*r.backedUp), fmt.Sprint(r.reclaimed), fmt.Sprint(r.reads), fmt.Sprint(r.hits),
			fmt.Sprintf("%.1f%%", 100*ratio), fmt.Sprint(r.misses), fmt.Sprint(r.lost), fmt.Sprintf("%.2f", r.computed*availObjects),
			fmt.Sprint(r.rebuilt), fmt.Sprint(r.restored), fmt.Sprint(r.wrong)})
		rows = append(rows, Compare(fmt.Sprintf("reclaim every %v, backups %s: wrong bytes", r.interval, bk), "reads", F(0), F(float64(r.wrong)), LowerIsBetter, 0,
			"", "A doubt is a miss: every read must return the object's bytes."))
	}
	return &Result{
		Experiment: "erasure-availability",
		Title:      erasureAvailabilityExperiment().Title,
		Reproduces: []Reference{refInfiniCache},
		Status:     StatusOK,
		Quick:      o.Quick,
		Machine:    DescribeMachine(),
		Seconds:    took.Seconds(),
		Method: fmt.Sprintf("An application of %d cachelets with RS(10+2) holds %d objects of %s. One cachelet reads them at random "+
			"for %d s per run while every interval another cachelet is closed (it leaves at once, its shards gone) and a new one joins; "+
			"InfiniCache's reclaims every 60, 30 and 10 s, compressed 20-fold. Objects lost are reads that found fewer than 10 shards "+
			"(the store served them and they were sharded again), counted once per object. The computed figure is the objects times "+
			"erasure.LossProbability over the run's length, for its loss rate per instance and a repair window of the rebuild's delay "+
			"plus a shard at the rebuild rate; with backups, the share backed up at the end of the run (of the shards held) "+
			"counts a window of the restore alone. Each interval runs with backups off and on (every %v: InfiniCache's 5 min "+
			"compressed 20-fold, as the intervals are), each in a fresh application; a replacement sends its first backup one "+
			"interval after it joined.",
			availMembers, availObjects, bytesize.Human(availSize), secs, availBackup),
		Settings: RunSettings{ObjectSizes: []int64{availSize}, Link: LinkLoopback,
			Iterations: []Count{{What: "seconds of reads per interval", N: secs}}},
		Rows:   rows,
		Plots:  availabilityPlots(runs),
		Tables: []Table{tbl},
	}
}

// availabilityPlots draws the table: hit ratio, and objects lost against
// the loss model's figure, by reclaim interval, backups off and on.
func availabilityPlots(runs []availRun) []Plot {
	hit := Plot{Kind: PlotBar, ID: "hit-ratio", Title: "Hit ratio while instances are reclaimed", Unit: "%",
		XLabel: "one instance reclaimed every", YLabel: "reads decoded from shards (%)",
		Caption: "A miss is served from the store, right bytes, and shards the object again."}
	lost := Plot{Kind: PlotBar, ID: "objects-lost", Title: "Objects lost: measured and computed", Unit: "objects",
		XLabel: "one instance reclaimed every", YLabel: "objects lost (of " + fmt.Sprint(availObjects) + ")",
		Caption: "Computed: the objects times erasure.LossProbability for the run's loss rate and repair window (docs/design/erasure-coding.md)."}
	col := map[time.Duration]int{}
	for _, r := range runs {
		if _, ok := col[r.interval]; !ok {
			col[r.interval] = len(hit.Categories)
			hit.Categories = append(hit.Categories, r.interval.String())
		}
	}
	n := len(hit.Categories)
	lost.Categories = hit.Categories
	series := func(label string) Series { return Series{Label: label, Values: make([]*float64, n)} }
	hitS := [2]Series{series("backups off"), series("backups on")}
	lostS := [2]Series{series("lost, backups off"), series("lost, backups on")}
	compS := [2]Series{series("computed, backups off"), series("computed, backups on")}
	for _, r := range runs {
		b, c := 0, col[r.interval]
		if r.backups {
			b = 1
		}
		hitS[b].Values[c] = F(100 * float64(r.hits) / float64(max(r.reads, 1)))
		lostS[b].Values[c] = F(float64(r.lost))
		compS[b].Values[c] = F(r.computed * availObjects)
	}
	hit.Series = hitS[:]
	lost.Series = []Series{lostS[0], compS[0], lostS[1], compS[1]}
	return []Plot{hit, lost}
}
