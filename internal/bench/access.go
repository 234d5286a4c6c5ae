package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/redis/go-redis/v9"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/cachelet"
	"github.com/hoard-io/hoard/internal/instance"
	"github.com/hoard-io/hoard/internal/localstore"
	"github.com/hoard-io/hoard/internal/netshape"
	s3store "github.com/hoard-io/hoard/internal/store/s3"
)

// DefaultSizes are the object sizes of a full run; QuickSizes of --quick.
var (
	DefaultSizes = []int64{1 << 10, 4 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20}
	QuickSizes   = []int64{1 << 10, 4 << 10, 64 << 10, 1 << 20, 16 << 20}
)

// ColdMethod is how the cold target makes every timed GET a local miss.
const ColdMethod = "before every timed GET the cached copy is dropped with Cachelet.Invalidate (untimed), so each timed GET is a local miss that fetches the object from MinIO while streaming it to the client"

// RemoteMethod is how the remote-hit and remote-miss targets are measured.
const RemoteMethod = "two cachelets of one application (in-process instances, embedded etcd, membership/etcd registry), default setting strong; every GET goes through the cachelet that does not own the key; before each timed GET the reader's copy is dropped with Cachelet.Invalidate on the reader only (remote-hit: the owner still holds it, and confirms it with MinIO under strong) or on both cachelets (remote-miss: the owner fetches from MinIO)"

// OwnerMethod is how the owner-hit and owner-remote-hit targets are
// measured.
const OwnerMethod = "two cachelets of a second application (in-process instances, the same embedded etcd) under the owner setting; every GET goes through the cachelet that does not own the key; owner-hit: its copy, which it confirms with the owner (answered not modified, no store request); owner-remote-hit: before each timed GET its copy is dropped with Cachelet.Invalidate, so the owner sends the object and the reader keeps it; the owner holds it throughout"

// remoteApp is the application the remote targets' cachelets belong to;
// ownerApp the owner targets'.
const (
	remoteApp = "bench-access"
	ownerApp  = "bench-access-owner"
)

const (
	benchBucket = "hoard-bench"
	benchRegion = "us-east-1"
	clientKey   = "hoardbench"
	clientSec   = "hoardbench-secret"
)

// AccessConfig configures RunAccess.
type AccessConfig struct {
	// Sizes to measure; default DefaultSizes (QuickSizes when Quick).
	Sizes []int64
	// Quick runs fewer iterations.
	Quick bool
	// Targets to measure, a subset of AllTargets(); default all of them.
	Targets []string
	// MinIOBinary; default localstore.FindBinary("minio").
	MinIOBinary string
	// RedisBinary; default FindRedisServer().
	RedisBinary string
	// Boto3 also measures through boto3 with Python running Boto3Script.
	Boto3       bool
	Python      string
	Boto3Script string
	// TempDir is where the run's scratch directory is made; default
	// os.TempDir(). The scratch directory is removed at the end.
	TempDir string
	// Progress receives one line per measurement; nil discards.
	Progress io.Writer
	// Log receives the servers' logs; nil discards.
	Log *slog.Logger
	// Sequential measures the targets of a size one after another, each
	// to its end, instead of in rotation (the default: one request of
	// each in turn, round after round, so that a change in the machine's
	// load falls on every target alike).
	Sequential bool
	// StoreLink, when set, names a netshape preset whose store link
	// MinIO is put behind (toxiproxy): the store targets and hoard's own
	// requests to the store cross it alike, as a function's reads cross
	// the network to a remote store. Empty: MinIO on loopback.
	StoreLink string
}

// Plan is how many requests one target makes at one size.
type Plan struct {
	Warmup     int
	Iterations int
	// MinIterations are made even past TimeCap.
	MinIterations int
	// TimeCap stops the timed loop early once MinIterations are done.
	TimeCap time.Duration
}

// PlanFor adapts the iteration count to the object size: enough requests
// for a stable p99 on small objects, a few on large ones, so that a full
// run stays within minutes on a small machine.
func PlanFor(size int64, quick bool) Plan {
	budget, lo, hi, capT := int64(4<<30), 10, 5000, 40*time.Second
	if quick {
		budget, lo, hi, capT = 512<<20, 5, 1000, 8*time.Second
	}
	n := hi
	if size > 0 {
		n = int(min(max(budget/size, int64(lo)), int64(hi)))
	}
	return Plan{
		Warmup:        min(max(n/10, 2), 50),
		Iterations:    n,
		MinIterations: lo,
		TimeCap:       capT,
	}
}

// boto3Plan is the (smaller) plan for the Python client, which is slower.
func boto3Plan(size int64, quick bool) Plan {
	p := PlanFor(size, quick)
	p.Iterations = min(max(p.Iterations/4, 3), 200)
	p.Warmup = min(max(p.Warmup/4, 2), 10)
	return p
}

// target is one thing measured at one size.
type target struct {
	name   string
	getter Getter
	// before runs, untimed, before every request (warm-up included).
	before func(ctx context.Context, key string) error
	// onTimed runs once between the warm-up and the timed requests.
	onTimed func()
	close   func()
	// noBody: an answer without a body (store-304), of 0 bytes.
	noBody bool
}

// bodySize is the bytes each of t's answers carries for an object of size.
func (t target) bodySize(size int64) int64 {
	if t.noBody {
		return 0
	}
	return size
}

// measure warms t up and times plan.Iterations requests of key.
func measure(ctx context.Context, t target, key string, size int64, plan Plan) (TargetResult, error) {
	one := t.request(ctx, key, size)
	for range plan.Warmup {
		if _, err := one(); err != nil {
			return TargetResult{}, fmt.Errorf("%s warm-up: %w", t.name, err)
		}
	}
	if t.onTimed != nil {
		t.onTimed()
	}
	runtime.GC()
	samples := make([]time.Duration, 0, plan.Iterations)
	start := time.Now()
	for len(samples) < plan.Iterations {
		if err := ctx.Err(); err != nil {
			return TargetResult{}, err
		}
		d, err := one()
		if err != nil {
			return TargetResult{}, fmt.Errorf("%s: %w", t.name, err)
		}
		samples = append(samples, d)
		if len(samples) >= plan.MinIterations && time.Since(start) > plan.TimeCap {
			break
		}
	}
	return t.result(samples, size, plan), nil
}

// request returns one timed request of key by t: its before hook
// (untimed), the GET, and the check of the bytes read.
func (t target) request(ctx context.Context, key string, size int64) func() (time.Duration, error) {
	return func() (time.Duration, error) {
		if t.before != nil {
			if err := t.before(ctx, key); err != nil {
				return 0, err
			}
		}
		start := time.Now()
		n, err := t.getter.Get(ctx, key)
		d := time.Since(start)
		if err != nil {
			return d, err
		}
		if want := t.bodySize(size); n != want {
			return d, fmt.Errorf("read %d bytes, want %d", n, want)
		}
		return d, nil
	}
}

// result summarizes t's timed samples.
func (t target) result(samples []time.Duration, size int64, plan Plan) TargetResult {
	res := TargetResult{Name: t.name, Summary: Summarize(samples, t.bodySize(size)), Warmup: plan.Warmup}
	res.SamplesNS = make([]int64, len(samples))
	for i, d := range samples {
		res.SamplesNS[i] = d.Nanoseconds()
	}
	return res
}

// measureRotated warms every target of ts up, then times them in
// rotation: each round one request of every target, the first one target
// further on each round, until plan.Iterations rounds, or
// plan.MinIterations once the rounds took len(ts) times plan.TimeCap. A
// change in the machine's load then falls on every target alike, and the
// ratios between them compare requests made moments apart.
func measureRotated(ctx context.Context, ts []target, key string, size int64, plan Plan) ([]TargetResult, error) {
	ones := make([]func() (time.Duration, error), len(ts))
	for i, t := range ts {
		ones[i] = t.request(ctx, key, size)
		for range plan.Warmup {
			if _, err := ones[i](); err != nil {
				return nil, fmt.Errorf("%s warm-up: %w", t.name, err)
			}
		}
	}
	for _, t := range ts {
		if t.onTimed != nil {
			t.onTimed()
		}
	}
	runtime.GC()
	samples := make([][]time.Duration, len(ts))
	for i := range samples {
		samples[i] = make([]time.Duration, 0, plan.Iterations)
	}
	start := time.Now()
	for round := 0; round < plan.Iterations; round++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		for j := range ts {
			i := (round + j) % len(ts)
			d, err := ones[i]()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", ts[i].name, err)
			}
			samples[i] = append(samples[i], d)
		}
		if round+1 >= plan.MinIterations && time.Since(start) > time.Duration(len(ts))*plan.TimeCap {
			break
		}
	}
	res := make([]TargetResult, len(ts))
	for i, t := range ts {
		res[i] = t.result(samples[i], size, plan)
	}
	return res, nil
}

// objectKey names the object of one size.
func objectKey(size int64) string { return fmt.Sprintf("access/%d", size) }

// Validate checks the config and fills in the defaults, finding the
// binaries it needs before anything starts.
func (cfg *AccessConfig) Validate() error {
	if len(cfg.Sizes) == 0 {
		cfg.Sizes = DefaultSizes
		if cfg.Quick {
			cfg.Sizes = QuickSizes
		}
	}
	if len(cfg.Targets) == 0 {
		cfg.Targets = AllTargets()
	}
	for _, t := range cfg.Targets {
		if !slices.Contains(AllTargets(), t) {
			return fmt.Errorf("bench: unknown target %q (known: %v)", t, AllTargets())
		}
	}
	for _, s := range cfg.Sizes {
		if s <= 0 {
			return fmt.Errorf("bench: object size must be positive, got %d", s)
		}
	}
	if cfg.StoreLink != "" {
		p, err := netshape.LookupPreset(cfg.StoreLink)
		if err != nil {
			return fmt.Errorf("bench: store link: %w", err)
		}
		if !p.Store.Shaped() {
			return fmt.Errorf("bench: store link: preset %q does not shape the store link", cfg.StoreLink)
		}
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.MinIOBinary == "" {
		bin, err := localstore.FindBinary(localstore.MinIOBinary)
		if err != nil {
			return err
		}
		cfg.MinIOBinary = bin
	}
	if cfg.wants(TargetRedis) && cfg.RedisBinary == "" {
		bin, err := FindRedisServer()
		if err != nil {
			return err
		}
		cfg.RedisBinary = bin
	}
	return nil
}

func (cfg *AccessConfig) wants(target string) bool { return slices.Contains(cfg.Targets, target) }

func (cfg *AccessConfig) wantsRemote() bool {
	return cfg.wants(TargetRemoteHit) || cfg.wants(TargetRemoteMiss)
}

// wantsOwner says whether a target of the owner application is asked for.
func (cfg *AccessConfig) wantsOwner() bool {
	return cfg.wants(TargetOwnerHit) || cfg.wants(TargetOwnerRemoteHit)
}

func (cfg *AccessConfig) progress(format string, args ...any) {
	fmt.Fprintf(cfg.Progress, format+"\n", args...)
}

// RunAccess measures GET latency and throughput for every target and size
// in cfg: the store direct, hoard cold, warm, warm-local, remote hit and
// remote miss, Redis and plain TCP, measured in one run.
func RunAccess(ctx context.Context, cfg AccessConfig) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	rep := newAccessReport(cfg)
	tmp, err := os.MkdirTemp(cfg.TempDir, "hoard-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)

	r, err := startAccessRig(ctx, &cfg, tmp, rep)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	if err := r.upload(ctx, cfg.Sizes); err != nil {
		return nil, err
	}
	runtime.GC()
	cfg.progress("uploaded %d objects", len(cfg.Sizes))

	for _, size := range cfg.Sizes {
		sr, err := r.measureSize(ctx, &cfg, rep, size)
		if err != nil {
			return nil, err
		}
		rep.Sizes = append(rep.Sizes, sr)
	}
	// The version-checked instance is left warm for boto3: the warm
	// target (when measured) read every object from it, or in a
	// sequential run the last cold GET refilled it; boto3's warm-up
	// fills what is missing.
	if cfg.Boto3 {
		if err := r.measureBoto3(ctx, &cfg, rep); err != nil {
			return nil, err
		}
	}
	for i := range rep.Sizes {
		rep.Sizes[i].ComputeRatios()
	}
	rep.EvaluateChecks()
	if n := fewSamplesNote(rep.Sizes); n != "" {
		rep.Notes = append(rep.Notes, n)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return rep, nil
}

// newAccessReport is the report's header: the machine and the settings.
func newAccessReport(cfg AccessConfig) *Report {
	rep := &Report{
		Benchmark: "access",
		Machine:   DescribeMachine(),
		Settings: Settings{
			Quick: cfg.Quick, Sizes: cfg.Sizes, Targets: cfg.Targets, Boto3: cfg.Boto3,
			Descriptions: map[string]string{},
		},
	}
	for _, t := range cfg.Targets {
		rep.Settings.Descriptions[t] = TargetDescription(t)
	}
	if cfg.Boto3 {
		rep.Settings.Descriptions[TargetBoto3Store] = TargetDescription(TargetBoto3Store)
		rep.Settings.Descriptions[TargetBoto3Warm] = TargetDescription(TargetBoto3Warm)
	}
	if cfg.wants(TargetCold) {
		rep.Settings.ColdMethod = ColdMethod
	}
	if cfg.wantsRemote() {
		rep.Settings.RemoteMethod = RemoteMethod
	}
	if cfg.wantsOwner() {
		rep.Settings.OwnerMethod = OwnerMethod
	}
	if cfg.wantsRemote() || cfg.wantsOwner() {
		rep.Settings.RemoteOwners = map[string]string{}
	}
	rep.Machine.MinIOVersion = commandVersion(cfg.MinIOBinary, "--version")
	return rep
}

// accessRig is what one access run measures against: the store, Redis,
// the TCP ceiling, hoard instances per read mode and a two-cachelet
// application for the remote targets. Close stops what was started.
type accessRig struct {
	srv *localstore.Server
	// storeURL is where the store is reached: MinIO's endpoint, or the
	// shaped link's in front of it (StoreLink).
	storeURL  string
	storeCore *minio.Core
	// fwdCore reaches the store through a bare TCP forwarder (store-fwd).
	fwdCore *minio.Core
	// httpCore reaches the store through a bare HTTP proxy (store-http).
	httpCore *minio.Core
	rdb      *redis.Client
	tcp      *TCPServer
	// tcpFwd forwards to tcp (tcp-fwd).
	tcpFwd *Forwarder
	// checked reads with version-check (cold, warm, boto3), local with
	// read mode local (warm-local); app is the remote targets' pair.
	checked, local         *instance.Instance
	checkedCore, localCore *minio.Core
	// cold serves the cold target: checked, or, when the targets are
	// measured in rotation, an instance of its own (its drops would turn
	// warm's hits into misses).
	cold     *instance.Instance
	coldCore *minio.Core
	app      *appCluster
	// ownerApp is the owner targets' pair, under the owner setting.
	ownerApp *appCluster
	closes   []func()
}

// Close stops everything, last started first.
func (r *accessRig) Close() {
	for i := len(r.closes) - 1; i >= 0; i-- {
		r.closes[i]()
	}
}

// startAccessRig starts what cfg's targets need. The hoard instances'
// budget holds every object at once plus a fill of the largest, so
// nothing is evicted or passed through.
func startAccessRig(ctx context.Context, cfg *AccessConfig, tmp string, rep *Report) (_ *accessRig, err error) {
	r := &accessRig{}
	defer func() {
		if err != nil {
			r.Close()
		}
	}()
	cfg.progress("starting MinIO (%s) in %s", cfg.MinIOBinary, tmp)
	if r.srv, r.storeCore, err = startStore(ctx, cfg.MinIOBinary, tmp, cfg.Log); err != nil {
		return nil, err
	}
	r.closes = append(r.closes, func() { r.srv.Close() })
	r.storeURL = r.srv.Endpoint()
	if cfg.StoreLink != "" {
		preset, _ := netshape.LookupPreset(cfg.StoreLink) // Validate looked it up
		shaper, err := netshape.Start(ctx, netshape.Config{Logger: cfg.Log, LogFile: filepath.Join(tmp, "toxiproxy.log")})
		if err != nil {
			return nil, err
		}
		r.closes = append(r.closes, func() { shaper.Close() })
		link, err := shaper.Shape(ctx, "store", r.srv.Endpoint(), preset.Store, preset.Store)
		if err != nil {
			return nil, err
		}
		r.storeURL = link.Endpoint
		if r.storeCore, err = NewS3Client(r.storeURL, r.srv.AccessKey(), r.srv.SecretKey(), benchRegion); err != nil {
			return nil, err
		}
		rep.Settings.StoreLink = cfg.StoreLink + ": " + preset.Store.String()
		cfg.progress("MinIO behind the %s link (%s) at %s", cfg.StoreLink, preset.Store, r.storeURL)
	}

	if cfg.wants(TargetStoreFwd) || cfg.wants(TargetStore304Fwd) {
		u, err := url.Parse(r.storeURL)
		if err != nil {
			return nil, err
		}
		fwd, err := StartForwarder(u.Host)
		if err != nil {
			return nil, err
		}
		r.closes = append(r.closes, func() { fwd.Close() })
		if r.fwdCore, err = NewS3Client("http://"+fwd.Addr(), r.srv.AccessKey(), r.srv.SecretKey(), benchRegion); err != nil {
			return nil, err
		}
		cfg.progress("a bare TCP forwarder at %s in front of the store at %s", fwd.Addr(), u.Host)
	}
	if cfg.wants(TargetStoreHTTP) || cfg.wants(TargetStore304HTTP) {
		u, err := url.Parse(r.storeURL)
		if err != nil {
			return nil, err
		}
		hf, err := StartHTTPForwarder(u.Host)
		if err != nil {
			return nil, err
		}
		r.closes = append(r.closes, func() { hf.Close() })
		if r.httpCore, err = NewS3Client("http://"+hf.Addr(), r.srv.AccessKey(), r.srv.SecretKey(), benchRegion); err != nil {
			return nil, err
		}
		cfg.progress("a bare HTTP proxy at %s in front of the store at %s", hf.Addr(), u.Host)
	}
	if cfg.wants(TargetRedis) {
		rs, err := StartRedis(ctx, cfg.RedisBinary, filepath.Join(tmp, "redis"))
		if err != nil {
			return nil, err
		}
		r.closes = append(r.closes, func() { rs.Close() })
		rep.Machine.RedisVersion = rs.Version
		cfg.progress("started redis-server %s on %s", rs.Version, rs.Addr)
		r.rdb = NewRedisClient(rs.Addr)
		r.closes = append(r.closes, func() { r.rdb.Close() })
	}
	if cfg.wants(TargetTCP) || cfg.wants(TargetTCPFwd) {
		if r.tcp, err = StartTCPServer(); err != nil {
			return nil, err
		}
		r.closes = append(r.closes, func() { r.tcp.Close() })
	}
	if cfg.wants(TargetTCPFwd) {
		if r.tcpFwd, err = StartForwarder(r.tcp.Addr()); err != nil {
			return nil, err
		}
		r.closes = append(r.closes, func() { r.tcpFwd.Close() })
	}

	var total, largest int64
	for _, s := range cfg.Sizes {
		total += s
		largest = max(largest, s)
	}
	budget := 2*total + 64<<20
	rep.Settings.Budget = budget
	ccfg := cachelet.Config{Cache: cache.Config{Budget: budget, MaxObjectSize: largest}}
	if cfg.wants(TargetCold) || cfg.wants(TargetWarm) || cfg.Boto3 {
		if r.checked, r.checkedCore, err = r.startInstance(ctx, cfg, ccfg, cachelet.ReadVersionCheck); err != nil {
			return nil, err
		}
		r.cold, r.coldCore = r.checked, r.checkedCore
	}
	if cfg.wants(TargetCold) && !cfg.Sequential {
		if r.cold, r.coldCore, err = r.startInstance(ctx, cfg, ccfg, cachelet.ReadVersionCheck); err != nil {
			return nil, err
		}
	}
	if cfg.wants(TargetWarmLocal) {
		if r.local, r.localCore, err = r.startInstance(ctx, cfg, ccfg, cachelet.ReadLocal); err != nil {
			return nil, err
		}
	}
	// Two cachelets of one application for the remote targets, under the
	// default setting (strong); two of another under owner for the
	// owner targets.
	if cfg.wantsRemote() || cfg.wantsOwner() {
		etcd, err := startEtcd(ctx, filepath.Join(tmp, "etcd"))
		if err != nil {
			return nil, err
		}
		r.closes = append(r.closes, func() { etcd.Close() })
		cfg.progress("started embedded etcd on %v", etcd.Endpoints())
		st := storeEndpoint{r.storeURL, r.srv.AccessKey(), r.srv.SecretKey()}
		if cfg.wantsRemote() {
			if r.app, err = startAppCluster(ctx, etcd.Endpoints(), st, remoteApp, 2, ccfg, cfg.Log); err != nil {
				return nil, err
			}
			r.closes = append(r.closes, r.app.Close)
		}
		if cfg.wantsOwner() {
			ocfg := ccfg
			owner, err := cachelet.ParseConsistency("owner")
			if err != nil {
				return nil, err
			}
			owner.Apply(&ocfg)
			if r.ownerApp, err = startAppCluster(ctx, etcd.Endpoints(), st, ownerApp, 2, ocfg, cfg.Log); err != nil {
				return nil, err
			}
			r.closes = append(r.closes, r.ownerApp.Close)
		}
	}
	return r, nil
}

// startInstance starts one hoard instance in front of the store, with
// the read mode, and a client of it.
func (r *accessRig) startInstance(ctx context.Context, cfg *AccessConfig, ccfg cachelet.Config, mode cachelet.ReadMode) (*instance.Instance, *minio.Core, error) {
	ccfg.ReadMode = mode
	in, err := instance.Start(ctx, instance.Config{
		MetricsListen: "off",
		Region:        benchRegion,
		AccessKey:     clientKey,
		SecretKey:     clientSec,
		Store: s3store.Config{
			Endpoint:  r.storeURL,
			AccessKey: r.srv.AccessKey(),
			SecretKey: r.srv.SecretKey(),
			Region:    benchRegion,
		},
		Cachelet: ccfg,
	}, cfg.Log)
	if err != nil {
		return nil, nil, err
	}
	r.closes = append(r.closes, func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = in.Close(cctx)
	})
	core, err := NewS3Client(in.Endpoint(), clientKey, clientSec, benchRegion)
	if err != nil {
		return nil, nil, err
	}
	return in, core, nil
}

// upload puts the same random bytes of each size in the store and in
// Redis.
func (r *accessRig) upload(ctx context.Context, sizes []int64) error {
	rng := rand.NewChaCha8([32]byte{'h', 'o', 'a', 'r', 'd'})
	for _, size := range sizes {
		data := make([]byte, size)
		_, _ = rng.Read(data)
		key := objectKey(size)
		if _, err := r.storeCore.PutObject(ctx, benchBucket, key, bytes.NewReader(data), size, "", "",
			minio.PutObjectOptions{DisableMultipart: true, ContentType: "application/octet-stream"}); err != nil {
			return fmt.Errorf("bench: upload %s: %w", key, err)
		}
		if r.rdb != nil {
			if err := r.rdb.Set(ctx, key, data, 0).Err(); err != nil {
				return fmt.Errorf("bench: redis SET %s: %w", key, err)
			}
		}
	}
	return nil
}

// measureSize measures every wanted target at one size, in AllTargets'
// order.
func (r *accessRig) measureSize(ctx context.Context, cfg *AccessConfig, rep *Report, size int64) (SizeResult, error) {
	key := objectKey(size)
	sr := SizeResult{Size: size, Label: FormatSize(size)}
	plan := PlanFor(size, cfg.Quick)
	if !cfg.Sequential {
		return r.measureSizeRotated(ctx, cfg, rep, sr, plan)
	}
	for _, name := range AllTargets() {
		if !cfg.wants(name) {
			continue
		}
		t, err := r.target(name, key, size, sr.Label, rep)
		if err != nil {
			return sr, err
		}
		began := time.Now()
		res, err := measure(ctx, t, key, size, plan)
		if t.close != nil {
			t.close()
		}
		if err != nil {
			return sr, fmt.Errorf("bench: %s at %s: %w", name, sr.Label, err)
		}
		cfg.progress("%-8s %-16s n=%-5d p50=%-9s p99=%-9s %8s MB/s  (%.1fs)", sr.Label, name, res.N,
			FormatDuration(res.P50), FormatDuration(res.P99), FormatMBps(res.MBps), time.Since(began).Seconds())
		sr.Targets = append(sr.Targets, res)
	}
	return sr, nil
}

// measureSizeRotated measures the targets of one size in rotation
// (measureRotated), but remote-miss after them on its own: it drops the
// owner's copy that remote-hit reads.
func (r *accessRig) measureSizeRotated(ctx context.Context, cfg *AccessConfig, rep *Report, sr SizeResult, plan Plan) (SizeResult, error) {
	key := objectKey(sr.Size)
	var rotated, after []target
	for _, name := range AllTargets() {
		if !cfg.wants(name) {
			continue
		}
		t, err := r.target(name, key, sr.Size, sr.Label, rep)
		if err != nil {
			return sr, err
		}
		if t.close != nil {
			defer t.close()
		}
		if name == TargetRemoteMiss {
			after = append(after, t)
		} else {
			rotated = append(rotated, t)
		}
	}
	began := time.Now()
	res, err := measureRotated(ctx, rotated, key, sr.Size, plan)
	if err != nil {
		return sr, fmt.Errorf("bench: at %s: %w", sr.Label, err)
	}
	for _, t := range after {
		one, err := measure(ctx, t, key, sr.Size, plan)
		if err != nil {
			return sr, fmt.Errorf("bench: %s at %s: %w", t.name, sr.Label, err)
		}
		res = append(res, one)
	}
	for _, t := range res {
		cfg.progress("%-8s %-16s n=%-5d p50=%-9s p99=%-9s %8s MB/s", sr.Label, t.Name, t.N,
			FormatDuration(t.P50), FormatDuration(t.P99), FormatMBps(t.MBps))
	}
	cfg.progress("%-8s %d targets in rotation (%.1fs)", sr.Label, len(rotated), time.Since(began).Seconds())
	// In AllTargets order, as the sequential run reports them.
	slices.SortStableFunc(res, func(a, b TargetResult) int {
		return slices.Index(AllTargets(), a.Name) - slices.Index(AllTargets(), b.Name)
	})
	sr.Targets = res
	return sr, nil
}

// target is how the named target reads key: its getter, what runs before
// each request, and which access type hoard must report.
func (r *accessRig) target(name, key string, size int64, label string, rep *Report) (target, error) {
	hoardGetter := func(core *minio.Core, expect cachelet.Outcome) (*S3Getter, func()) {
		g := NewS3Getter(core, benchBucket)
		return g, func() { g.Expect = string(expect) }
	}
	t := target{name: name}
	switch name {
	case TargetStore:
		t.getter = NewS3Getter(r.storeCore, benchBucket)
	case TargetStore304:
		t.getter, t.noBody = &ConditionalGetter{Core: r.storeCore, Bucket: benchBucket}, true
	case TargetStoreFwd:
		t.getter = NewS3Getter(r.fwdCore, benchBucket)
	case TargetStore304Fwd:
		t.getter, t.noBody = &ConditionalGetter{Core: r.fwdCore, Bucket: benchBucket}, true
	case TargetStoreHTTP:
		t.getter = NewS3Getter(r.httpCore, benchBucket)
	case TargetStore304HTTP:
		t.getter, t.noBody = &ConditionalGetter{Core: r.httpCore, Bucket: benchBucket}, true
	case TargetCold:
		t.getter, t.onTimed = hoardGetter(r.coldCore, cachelet.LocalMiss)
		cl := r.cold.Cachelet()
		t.before = func(_ context.Context, key string) error {
			cl.Invalidate(benchBucket, key)
			return nil
		}
	case TargetWarm:
		t.getter, t.onTimed = hoardGetter(r.checkedCore, cachelet.LocalHit)
	case TargetWarmLocal:
		t.getter, t.onTimed = hoardGetter(r.localCore, cachelet.LocalHit)
	case TargetRemoteHit, TargetRemoteMiss:
		own, err := r.app.owner(benchBucket, key)
		if err != nil {
			return t, err
		}
		via := 1 - own
		rep.Settings.RemoteOwners[label] = fmt.Sprintf("owner %s, read through %s", r.app.ins[own].ID(), r.app.ins[via].ID())
		expect := cachelet.RemoteHit
		if name == TargetRemoteMiss {
			expect = cachelet.RemoteMiss
		}
		t.getter, t.onTimed = hoardGetter(r.app.cores[via], expect)
		reader, owner := r.app.ins[via].Cachelet(), r.app.ins[own].Cachelet()
		t.before = func(_ context.Context, key string) error {
			reader.Invalidate(benchBucket, key)
			if name == TargetRemoteMiss {
				owner.Invalidate(benchBucket, key)
			}
			return nil
		}
	case TargetOwnerHit, TargetOwnerRemoteHit:
		own, err := r.ownerApp.owner(benchBucket, key)
		if err != nil {
			return t, err
		}
		via := 1 - own
		rep.Settings.RemoteOwners[label+" owner"] = fmt.Sprintf("owner %s, read through %s", r.ownerApp.ins[own].ID(), r.ownerApp.ins[via].ID())
		expect := cachelet.LocalHit
		if name == TargetOwnerRemoteHit {
			expect = cachelet.RemoteHit
			reader := r.ownerApp.ins[via].Cachelet()
			t.before = func(_ context.Context, key string) error {
				reader.Invalidate(benchBucket, key)
				return nil
			}
		}
		// The warm-up's first read makes the owner fill (a remote
		// miss); owner-hit's first makes the reader keep a copy.
		t.getter, t.onTimed = hoardGetter(r.ownerApp.cores[via], expect)
	case TargetRedis:
		t.getter = RedisGetter{Client: r.rdb}
	case TargetTCP:
		g := NewTCPGetter(r.tcp.Addr(), size)
		t.getter, t.close = g, func() { g.Close() }
	case TargetTCPFwd:
		g := NewTCPGetter(r.tcpFwd.Addr(), size)
		t.getter, t.close = g, func() { g.Close() }
	}
	return t, nil
}

// measureBoto3 measures the store and the warm instance through boto3; a
// failure is a note in the report, not an error, unless ctx ended.
func (r *accessRig) measureBoto3(ctx context.Context, cfg *AccessConfig, rep *Report) error {
	cfg.progress("measuring through boto3 (%s)", cfg.Python)
	b, err := runBoto3(ctx, *cfg, boto3Input{
		Bucket: benchBucket,
		Region: benchRegion,
		Targets: []boto3Target{
			{Name: TargetBoto3Store, Endpoint: r.storeURL, AccessKey: r.srv.AccessKey(), SecretKey: r.srv.SecretKey()},
			{Name: TargetBoto3Warm, Endpoint: r.checked.Endpoint(), AccessKey: clientKey, SecretKey: clientSec, ExpectRead: string(cachelet.LocalHit)},
		},
		Objects: boto3Objects(cfg.Sizes, cfg.Quick),
	})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		rep.Notes = append(rep.Notes, "boto3 measurement failed: "+err.Error())
		cfg.progress("boto3 measurement failed: %v", err)
		return nil
	}
	b.merge(rep)
	return nil
}

// errNoPython: boto3 was asked for without an interpreter.
var errNoPython = errors.New("bench: boto3 measurement needs Python (set AccessConfig.Python)")

// fewSamplesNote warns, once, when some result has fewer than 100
// samples (its p99 is then its slowest sample), or returns "".
func fewSamplesNote(sizes []SizeResult) string {
	for _, s := range sizes {
		for _, t := range s.Targets {
			if t.N > 0 && t.N < 100 {
				return "where n < 100, p99 is the slowest sample"
			}
		}
	}
	return ""
}

// makeBucket creates the benchmark's bucket, retrying for a few seconds
// while MinIO, ready by its health check, still finishes initialising.
func makeBucket(ctx context.Context, core *minio.Core) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := core.MakeBucket(ctx, benchBucket, minio.MakeBucketOptions{Region: benchRegion})
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("bench: create bucket: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startStore starts the benchmark's MinIO under tmp, with its bucket, and
// a client of it.
func startStore(ctx context.Context, binary, tmp string, log *slog.Logger) (*localstore.Server, *minio.Core, error) {
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	srv, err := localstore.StartMinIO(sctx, localstore.Config{
		Binary:  binary,
		DataDir: filepath.Join(tmp, "minio", "data"),
		LogFile: filepath.Join(tmp, "minio.log"),
		Logger:  log,
	})
	if err != nil {
		return nil, nil, err
	}
	core, err := NewS3Client(srv.Endpoint(), srv.AccessKey(), srv.SecretKey(), benchRegion)
	if err == nil {
		err = makeBucket(ctx, core)
	}
	if err != nil {
		srv.Close()
		return nil, nil, err
	}
	return srv, core, nil
}
