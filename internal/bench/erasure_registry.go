package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/redis/go-redis/v9"

	"github.com/hoard-io/hoard/internal/bytesize"
	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/cachelet"
	"github.com/hoard-io/hoard/internal/instance"
	"github.com/hoard-io/hoard/internal/localstore"
	etcdmembership "github.com/hoard-io/hoard/internal/membership/etcd"
	"github.com/hoard-io/hoard/internal/store"
	s3store "github.com/hoard-io/hoard/internal/store/s3"
)

// The registry replay [InfiniCache: IBM Docker registry, large objects
// only]: blobs over 10 MB read repeatedly with a Zipf popularity, through
// hoard with RS(10+2) over 14 cachelets (one reclaimed and replaced every
// regReclaim), with backups and without, and through Redis of the same
// memory (maxmemory, allkeys-lru; a miss reads the store and sets the
// blob) as the managed in-memory cache. Hit ratios of the same seeded
// trace, and the cost per hour of each from the prices below.

// Prices (USD, AWS us-east-1 on-demand) as the InfiniCache slides (USENIX
// FAST '20, February 2020) quote them, and Lambda's billing granularity of
// that time (100 ms; 1 ms since December 2020).
const (
	priceLambdaGBSecond   = 0.00001667 // per GB-second of a function's memory
	priceLambdaInvocation = 0.2 / 1e6  // per invocation
	priceElastiCacheHour  = 10.368     // one cache.r5.24xlarge, per hour
	elastiCacheNodeGB     = 600.0      // its memory, as the slides give it
	lambdaBilledMinimum   = 100 * time.Millisecond
	pricesSource          = "InfiniCache slides (USENIX FAST '20, 2020-02): AWS Lambda $0.2 per 1M invocations and $0.00001667 per GB-s; ElastiCache cache.r5.24xlarge (600 GB) $10.368 per hour; Lambda billed per 100 ms (until 2020-12)"
)

// The paper's figures for large objects: hit ratio with backup and
// without, ElastiCache's, and how much cheaper InfiniCache ran.
const (
	paperRegistryHitBackup   = 0.636
	paperRegistryHitNoBackup = 0.561
	paperRegistryHitElasti   = 0.659
	paperCheaperLow          = 31.0
	paperCheaperHigh         = 96.0
)

// The replay's scale: InfiniCache replayed 50 hours of the Dallas trace on
// 400 functions of 1.5 GB (600 GB) against 600 GB of ElastiCache; here a
// few hundred blobs of 10-30 MB (log-uniform) on one 2-core machine, the
// cache given a fifth of the blobs' bytes.
const (
	regMembers       = 14
	regMinSize       = 10_000_000
	regMaxSize       = 30_000_000
	regZipfS         = 1.1
	regCapacityShare = 0.2
	regReclaim       = 2 * time.Second
	regBackup        = 15 * time.Second // InfiniCache's 5 min, compressed 20-fold as the reclaims
	regWarmUp        = 3 * time.Second  // its 1 min, likewise
)

func erasureRegistryExperiment() Experiment {
	return Experiment{
		Name:       "erasure-registry",
		Title:      "Registry replay: large blobs with a Zipf popularity through erasure-coded hoard and Redis of the same memory, hit ratio and cost per hour",
		Reproduces: []Reference{refInfiniCacheRegistry},
		// Iterations: reads replayed per target (over 100 blobs quick,
		// 300 full).
		Quick: Options{Iterations: 1000},
		Full:  Options{Iterations: 3000},
		Run:   runErasureRegistry,
	}
}

var refInfiniCacheRegistry = Reference{Paper: "InfiniCache", Figure: "hit ratio and cost, large objects", Section: "evaluation: cost effectiveness (slides)",
	Citation: refInfiniCache.Citation}

// registryTrace is the seeded trace: blob sizes and the reads' order.
type registryTrace struct {
	sizes []int64
	reads []int
}

func newRegistryTrace(blobs, reads int) registryTrace {
	rnd := rand.New(rand.NewPCG(17, 2020))
	t := registryTrace{sizes: make([]int64, blobs), reads: make([]int, reads)}
	lo, hi := math.Log(regMinSize), math.Log(regMaxSize)
	for i := range t.sizes {
		t.sizes[i] = int64(math.Exp(lo + rnd.Float64()*(hi-lo)))
	}
	z := rand.NewZipf(rnd, regZipfS, 1, uint64(blobs-1))
	for i := range t.reads {
		t.reads[i] = int(z.Uint64())
	}
	return t
}

func (t registryTrace) footprint() int64 {
	var n int64
	for _, s := range t.sizes {
		n += s
	}
	return n
}

func blobKey(i int) string { return fmt.Sprintf("blobs/sha256-%04d", i) }

// registryRun is one target's replay.
type registryRun struct {
	target                 string
	reads, hits, wrong     int64
	seconds                float64
	reclaimed              int64
	rebuilt, restored      int64
	instances              int
	instanceBytes, capByte int64 // a cachelet's budget; the cache's memory in all
	backupBytes            int64 // the backups' memory in all, apart from capByte
}

func (r registryRun) hitRatio() float64 { return float64(r.hits) / float64(max(r.reads, 1)) }

func runErasureRegistry(ctx context.Context, o Options) (*Result, error) {
	env := o.Env
	started := time.Now()
	blobs, reads := 300, max(o.Iterations, 1)
	if o.Quick {
		blobs = 100
	}
	say := func(format string, args ...any) {
		fmt.Fprintf(env.progress(), "erasure-registry: "+format+"\n", args...)
	}
	log := env.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	redisBin := env.RedisBinary
	if redisBin == "" {
		var err error
		if redisBin, err = FindRedisServer(); err != nil {
			return nil, err
		}
	}
	tmp, err := os.MkdirTemp(env.TempDir, "hoard-bench-ecreg-")
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
	const bucket = "registry"
	if err := st.CreateBucket(ctx, bucket, ""); err != nil {
		return nil, err
	}
	trace := newRegistryTrace(blobs, reads)
	for i, n := range trace.sizes {
		if _, err := st.Put(ctx, bucket, blobKey(i), &patternReader{n: n}, n, store.PutOptions{}); err != nil {
			return nil, err
		}
	}
	capacity := int64(float64(trace.footprint()) * regCapacityShare)
	say("%d blobs, %s in all; cache memory %s; %d reads", blobs, bytesize.Human(trace.footprint()), bytesize.Human(capacity), reads)

	var runs []registryRun
	rs, err := StartRedis(ctx, redisBin, filepath.Join(tmp, "redis"))
	if err != nil {
		return nil, err
	}
	run, err := registryRedis(ctx, rs.Addr, st, bucket, trace, capacity)
	rs.Close()
	if err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	say("redis: %d reads, hit ratio %.1f%%", run.reads, 100*run.hitRatio())
	runs = append(runs, run)
	for _, backups := range []bool{true, false} {
		run, err := registryHoard(ctx, etcd.Endpoints(), stEP, fmt.Sprintf("registry-%v", backups), bucket, trace, capacity, backups, log)
		if err != nil {
			return nil, fmt.Errorf("hoard (backups %v): %w", backups, err)
		}
		say("%s: %d reads, hit ratio %.1f%%, %d reclaimed, %d shards rebuilt, %d restored, wrong %d",
			run.target, run.reads, 100*run.hitRatio(), run.reclaimed, run.rebuilt, run.restored, run.wrong)
		runs = append(runs, run)
	}
	return registryResult(o, blobs, trace, capacity, runs, time.Since(started)), nil
}

// registryRedis replays the trace through Redis of capacity bytes: a GET,
// and on a miss the store's bytes read and SET.
func registryRedis(ctx context.Context, addr string, st store.Store, bucket string, trace registryTrace, capacity int64) (registryRun, error) {
	run := registryRun{target: "Redis (maxmemory, allkeys-lru)", instances: 1, instanceBytes: capacity, capByte: capacity}
	rc := NewRedisClient(addr)
	defer rc.Close()
	if err := rc.ConfigSet(ctx, "maxmemory", fmt.Sprint(capacity)).Err(); err != nil {
		return run, err
	}
	if err := rc.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		return run, err
	}
	began := time.Now()
	for _, i := range trace.reads {
		key := blobKey(i)
		b, err := rc.Get(ctx, key).Bytes()
		switch {
		case err == nil:
			run.hits++
		case errors.Is(err, redis.Nil):
			body, _, _, err := st.Get(ctx, bucket, key, store.GetOptions{})
			if err != nil {
				return run, err
			}
			b, err = io.ReadAll(body)
			body.Close()
			if err != nil {
				return run, err
			}
			if err := rc.Set(ctx, key, b, 0).Err(); err != nil {
				return run, err
			}
		default:
			return run, err
		}
		if int64(len(b)) != trace.sizes[i] {
			run.wrong++
		}
		run.reads++
	}
	run.seconds = time.Since(began).Seconds()
	return run, nil
}

// registryHoard replays the trace through one cachelet of an application
// of regMembers with RS(10+2), the cache's memory shared among them as
// their erasure memory, one cachelet other than the reader reclaimed and
// replaced every regReclaim.
func registryHoard(ctx context.Context, etcdEndpoints []string, st storeEndpoint, app, bucket string, trace registryTrace, capacity int64, backups bool, log *slog.Logger) (registryRun, error) {
	run := registryRun{target: "hoard RS(10+2), no backups", instances: regMembers}
	backup := time.Duration(-1)
	if backups {
		run.target, backup = fmt.Sprintf("hoard RS(10+2), backups every %v", regBackup), regBackup
	}
	memory := capacity / regMembers
	// Backups keep a quarter of that again, apart (erasure.backup_memory):
	// they do not take the shards' place, as InfiniCache's backups live
	// in functions of their own.
	var backupMem int64
	if backups {
		backupMem = memory / 4
	}
	// The memory tier keeps 64 MiB besides, and objects of 4 MiB at most:
	// no blob goes there.
	run.instanceBytes, run.capByte, run.backupBytes = memory+backupMem+64<<20, memory*regMembers, backupMem*regMembers
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
		ec := &cachelet.ErasureConfig{Memory: memory, BackupMemory: backupMem, Backup: backup, WarmUp: regWarmUp}
		in, err := instance.Start(ctx, instance.Config{
			MetricsListen: "off", Region: benchRegion, AccessKey: clientKey, SecretKey: clientSec,
			Store:    s3store.Config{Endpoint: st.Endpoint, AccessKey: st.AccessKey, SecretKey: st.SecretKey, Region: benchRegion},
			Cachelet: cachelet.Config{Cache: cache.Config{Budget: run.instanceBytes, MaxObjectSize: 4 << 20}, Erasure: ec},
			Registry: reg, App: app, ID: fmt.Sprintf("%s-%d", app, i), Secret: benchSecret,
		}, log.With("cachelet", i))
		if err != nil {
			return err
		}
		ins[i] = in
		return nil
	}
	for i := range regMembers {
		if err := start(i); err != nil {
			return run, err
		}
	}
	reader := ins[0]
	rc, err := NewS3Client(reader.Endpoint(), clientKey, clientSec, benchRegion)
	if err != nil {
		return run, err
	}
	base := reader.Cachelet().ErasureCounters()
	next := len(ins)
	rnd := rand.New(rand.NewPCG(2, 17))
	began := time.Now()
	lastReclaim := began
	var gone cachelet.ErasureCounters
	for _, i := range trace.reads {
		if time.Since(lastReclaim) >= regReclaim {
			lastReclaim = time.Now()
			victims := make([]int, 0, len(ins))
			for v := range ins {
				if v != 0 {
					victims = append(victims, v)
				}
			}
			v := victims[rnd.IntN(len(victims))]
			n := ins[v].Cachelet().ErasureCounters()
			gone.Rebuilt += n.Rebuilt
			gone.Restored += n.Restored
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
		body, _, _, err := rc.GetObject(ctx, bucket, blobKey(i), minio.GetObjectOptions{})
		if err != nil {
			return run, err
		}
		n, err := io.Copy(io.Discard, body)
		body.Close()
		if err != nil {
			return run, err
		}
		if n != trace.sizes[i] {
			run.wrong++
		}
		run.reads++
	}
	run.seconds = time.Since(began).Seconds()
	end := reader.Cachelet().ErasureCounters()
	run.hits = end.Hits - base.Hits
	run.rebuilt, run.restored = gone.Rebuilt, gone.Restored
	for _, in := range ins {
		n := in.Cachelet().ErasureCounters()
		run.rebuilt += n.Rebuilt
		run.restored += n.Restored
	}
	return run, nil
}

// registryCost is a target's cost per hour (USD) at a read rate.
type registryCost struct {
	// ElastiCache: the managed cache's memory pro rata of the slides'
	// node (a whole node would cost more).
	ElastiCache float64
	// PerUse: hoard's cachelets billed as InfiniCache's functions are,
	// for the time they run: a warm-up every minute and a backup every
	// 5 min per instance, and the k+r shard requests of each read, each
	// an invocation billed at the minimum (100 ms) of the instance's
	// memory.
	PerUse float64
	// Held: the instances' memory paid for the whole hour at Lambda's
	// GB-second price (hoard keeps instances holding shards loaded, ADR
	// 23).
	Held float64
}

// costPerHour prices capacity bytes of managed cache against instances
// each given an equal share of the same memory, serving readsPerHour
// reads of shards shards, with backups or without.
func costPerHour(capacity int64, instances int, readsPerHour float64, shards int, backups bool) registryCost {
	gb := func(b int64) float64 { return float64(b) / 1e9 }
	instanceBytes := capacity / int64(instances)
	invocation := priceLambdaInvocation + lambdaBilledMinimum.Seconds()*gb(instanceBytes)*priceLambdaGBSecond
	perInstance := 60.0 // warm-ups an hour
	if backups {
		perInstance += 12 // backups an hour
	}
	return registryCost{
		ElastiCache: gb(capacity) * priceElastiCacheHour / elastiCacheNodeGB,
		PerUse:      (float64(instances)*perInstance + readsPerHour*float64(shards)) * invocation,
		Held:        float64(instances) * gb(instanceBytes) * 3600 * priceLambdaGBSecond,
	}
}

func registryResult(o Options, blobs int, trace registryTrace, capacity int64, runs []registryRun, took time.Duration) *Result {
	tbl := Table{ID: "registry", Title: "Registry replay: hit ratio and cost per hour",
		Columns: []string{"target", "cache memory", "reads", "hits", "hit ratio", "InfiniCache's hit ratio", "reads/s here", "instances reclaimed",
			"shards rebuilt", "restored from backups", "wrong bytes", "cost/h ElastiCache (same memory)", "cost/h billed per use", "cost/h memory held", "ElastiCache / per use"}}
	var rows []Comparison
	paperHit := map[int]float64{0: paperRegistryHitElasti, 1: paperRegistryHitBackup, 2: paperRegistryHitNoBackup}
	for i, r := range runs {
		rate := float64(r.reads) / max(r.seconds, 1e-9) * 3600
		// ElastiCache of the shards' memory; the instances priced with
		// their backups' memory too.
		cost := costPerHour(r.capByte+r.backupBytes, r.instances, rate, 12, i == 1)
		cost.ElastiCache = costPerHour(r.capByte, max(r.instances, 1), rate, 12, false).ElastiCache
		perUse, held, ratio := fmt.Sprintf("$%.4f", cost.PerUse), fmt.Sprintf("$%.4f", cost.Held), fmt.Sprintf("%.2fx", cost.ElastiCache/cost.PerUse)
		reclaimed, rebuilt, restored := fmt.Sprint(r.reclaimed), fmt.Sprint(r.rebuilt), fmt.Sprint(r.restored)
		if i == 0 {
			perUse, held, ratio, reclaimed, rebuilt, restored = "-", "-", "-", "-", "-", "-"
		}
		tbl.Rows = append(tbl.Rows, []string{r.target, bytesize.Human(r.capByte), fmt.Sprint(r.reads), fmt.Sprint(r.hits),
			fmt.Sprintf("%.1f%%", 100*r.hitRatio()), fmt.Sprintf("%.1f%%", 100*paperHit[i]), fmt.Sprintf("%.2f", float64(r.reads)/max(r.seconds, 1e-9)),
			reclaimed, rebuilt, restored, fmt.Sprint(r.wrong), fmt.Sprintf("$%.4f", cost.ElastiCache), perUse, held, ratio})
		rows = append(rows, Compare(r.target+": hit ratio", "", F(paperHit[i]), F(r.hitRatio()), HigherIsBetter, 0.1,
			"slides: hit ratio, large objects only", "The same seeded trace for every target; the cache holds a fifth of the blobs' bytes."))
		rows = append(rows, Compare(r.target+": wrong bytes", "reads", F(0), F(float64(r.wrong)), LowerIsBetter, 0, "", "Every read must return the blob's bytes."))
	}
	// At InfiniCache's own scale: 400 functions of 1.5 GB against 600 GB
	// of ElastiCache, the per-use cost for a read rate, and the rate at
	// which it reaches ElastiCache's.
	scale := Table{ID: "registry-cost-scale", Title: "Cost per hour at InfiniCache's scale (400 functions of 1.5 GB, RS(10+2), backups; 600 GB ElastiCache)",
		Columns: []string{"reads per hour", "ElastiCache", "billed per use", "ElastiCache / per use", "memory held all hour"}}
	for _, rate := range []float64{1_000, 10_000, 100_000} {
		c := costPerHour(600e9, 400, rate, 12, true)
		scale.Rows = append(scale.Rows, []string{fmt.Sprint(rate), fmt.Sprintf("$%.3f", c.ElastiCache), fmt.Sprintf("$%.3f", c.PerUse),
			fmt.Sprintf("%.0fx", c.ElastiCache/c.PerUse), fmt.Sprintf("$%.2f", c.Held)})
	}
	for _, at := range []struct{ rate, paper float64 }{{1_000, paperCheaperHigh}, {10_000, paperCheaperLow}} {
		c := costPerHour(600e9, 400, at.rate, 12, true)
		rows = append(rows, Compare(fmt.Sprintf("ElastiCache / billed per use at %.0f reads an hour, InfiniCache's scale", at.rate), "x", F(at.paper), F(c.ElastiCache/c.PerUse),
			HigherIsBetter, 0.2, "slides: 31-96x cheaper than ElastiCache", "The cost model's figure, not a measurement: the functions billed per use as InfiniCache's are."))
	}
	return &Result{
		Experiment: "erasure-registry",
		Title:      erasureRegistryExperiment().Title,
		Reproduces: []Reference{refInfiniCacheRegistry},
		Status:     StatusOK,
		Quick:      o.Quick,
		Machine:    DescribeMachine(),
		Seconds:    took.Seconds(),
		Method: fmt.Sprintf("%d blobs of %s to %s (log-uniform, %s in all) in a local MinIO; %d reads with a Zipf popularity (s = %.1f), seeded, "+
			"the same for every target, one after another. Redis gets maxmemory %s (a fifth of the blobs' bytes) with allkeys-lru; a miss reads "+
			"the store and sets the blob. hoard: %d cachelets of one application with RS(10+2), the same memory split among them as their "+
			"erasure memory (with backups, a quarter of it again keeps backups, apart, priced with the instances), one reading; every %v another is reclaimed and replaced; warm-ups "+
			"every %v and backups every %v (InfiniCache's 1 min and 5 min compressed 20-fold). A hit is a read decoded from shards. Cost per "+
			"hour at the rate the replay ran here, each instance priced for its share of the cache's memory, from %s.",
			blobs, bytesize.Human(regMinSize), bytesize.Human(regMaxSize), bytesize.Human(trace.footprint()), len(trace.reads), regZipfS,
			bytesize.Human(capacity), regMembers, regReclaim, regWarmUp, regBackup, pricesSource),
		Settings: RunSettings{ObjectSizes: []int64{regMinSize, regMaxSize}, Link: LinkLoopback,
			Iterations: []Count{{What: "reads", N: len(trace.reads)}, {What: "blobs", N: blobs}}},
		Rows:   rows,
		Plots:  registryPlots(runs, paperHit),
		Tables: []Table{tbl, scale},
		Notes: []string{"Scaled: InfiniCache replayed 50 hours of IBM's Dallas registry trace on 400 functions of 1.5 GB; this replay is " +
			"synthetic (Zipf over blobs of 10-30 MB) on one 2-core machine with loopback links."},
	}
}

// registryPlots draws the tables: each target's hit ratio beside
// InfiniCache's, and the cost per hour at InfiniCache's scale by read
// rate.
func registryPlots(runs []registryRun, paperHit map[int]float64) []Plot {
	hit := Plot{Kind: PlotBar, ID: "hit-ratio", Title: "Registry replay: hit ratio", Unit: "%",
		XLabel: "target", YLabel: "hit ratio (%)",
		Caption: "The same seeded Zipf trace for every target, the cache a fifth of the blobs' bytes; InfiniCache's figures from its slides."}
	here, paper := Series{Label: "here"}, Series{Label: "InfiniCache"}
	for i, r := range runs {
		hit.Categories = append(hit.Categories, r.target)
		here.Values = append(here.Values, F(100*r.hitRatio()))
		paper.Values = append(paper.Values, F(100*paperHit[i]))
	}
	hit.Series = []Series{here, paper}
	cost := Plot{Kind: PlotBar, ID: "cost-per-hour", Title: "Cost per hour at InfiniCache's scale", Unit: "$",
		XLabel: "reads per hour", YLabel: "$ per hour", YLog: true,
		Caption: "The cost model (prices listed in the method), not a measurement: 600 GB of ElastiCache against 400 functions of 1.5 GB billed per use, or held all hour."}
	elasti, perUse, held := Series{Label: "ElastiCache"}, Series{Label: "functions billed per use"}, Series{Label: "functions held all hour"}
	for _, rate := range []float64{1_000, 10_000, 100_000} {
		c := costPerHour(600e9, 400, rate, 12, true)
		cost.Categories = append(cost.Categories, fmt.Sprint(rate))
		elasti.Values = append(elasti.Values, F(c.ElastiCache))
		perUse.Values = append(perUse.Values, F(c.PerUse))
		held.Values = append(held.Values, F(c.Held))
	}
	cost.Series = []Series{elasti, perUse, held}
	return []Plot{hit, cost}
}
