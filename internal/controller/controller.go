// Package controller is hoard's platform controller: the HTTP API that
// deploys applications and invokes their functions, the frontend that
// routes each invocation to a warm idle instance (starting one when all
// are busy), keep-alive, triggers (HTTP, objects written through a
// cachelet or straight to the store) and pipelines. Its state lives in
// etcd under /hoard/platform/, so a restarted controller resumes: it
// re-reads the applications and adopts the instances its agents still
// run. docs/platform.md tells how an invocation flows.
package controller

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hoard-io/hoard/internal/admission"
	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/appspec"
	"github.com/hoard-io/hoard/internal/changerelay"
	"github.com/hoard-io/hoard/internal/clock"
	"github.com/hoard-io/hoard/internal/keepalive"
	"github.com/hoard-io/hoard/internal/predict"
	"github.com/hoard-io/hoard/internal/scaling"
	"github.com/hoard-io/hoard/internal/store"
)

// EtcdApps is where application records live (key: prefix + name).
const EtcdApps = "/hoard/platform/apps/"

// Config configures a controller.
type Config struct {
	// Etcd holds the platform's state. Required.
	Etcd *clientv3.Client
	// Store holds code packages (in SystemBucket) and the applications'
	// data. Required.
	Store store.Store
	// SystemBucket holds code packages; default "hoard-platform".
	SystemBucket string
	// Identities gives each application its own store identity, limited
	// to the buckets its spec grants, for its cachelets. Required.
	Identities StoreIdentities
	// Notifications configures the store's bucket notifications so that
	// objects written to the store directly fire object triggers; nil
	// means only writes through cachelets fire them.
	Notifications BucketNotifier
	// AgentToken authenticates the controller to agents.
	AgentToken string
	// AgentTLS, when set, is the TLS of the controller's calls to agents
	// on https: the platform's CA and the controller's certificate, which
	// agents require (pki.ClientConfig with pki.Agent identities only).
	// Default nil: plain HTTP.
	AgentTLS *tls.Config
	// StoreEventsToken, when set, is the token the store's webhook posts
	// its events with (Handler), as a bearer token or as HTTP Basic's
	// password (SNS, awsevents.go): it may post events, for any bucket,
	// and call nothing else. Empty: the store posts with the admin token
	// (and SNS, which has no bearer token, cannot post).
	StoreEventsToken string
	// EtcdUsers, when set, gives every instance an etcd user of its own
	// (made before it starts, removed when it is unloaded), which may
	// read its application's ring and write only its own member key; the
	// credentials travel in the start request. Nil: etcd without
	// authentication, instances sign in as nobody.
	EtcdUsers EtcdUsers
	// Registerer takes the controller's metrics; default none.
	Registerer prometheus.Registerer
	// ScanInterval is how often keep-alive is checked; default 1 s.
	ScanInterval time.Duration
	// KeepAlive shapes every application's hybrid-histogram policy (bins,
	// percentiles, margin); its Fixed is each spec's keep_alive. Default:
	// the policy's defaults (1-minute bins over 4 hours).
	KeepAlive keepalive.Config
	// VoteInterval is how often the scale controller asks for votes;
	// default 5 s.
	VoteInterval time.Duration
	// DedupWindow is how long an object-created event is remembered so
	// the same write notified twice (by a cachelet and by the store) runs
	// its triggers once; default 10 minutes.
	DedupWindow time.Duration
	// Prediction configures the functions' memory models (memory.go):
	// intervals, maturity, training; default predict's (OFC's: 16 MiB
	// intervals in [0, 2 GiB], mature after 100 invocations at 90%
	// exact-or-over).
	Prediction predict.Config
	// DisablePrediction gives every invocation its booked memory and
	// learns nothing. Default false.
	DisablePrediction bool
	// InputSizeTimeout bounds the store HEAD that finds an invocation's
	// input size for its memory model (memory.go). Default 250 ms.
	InputSizeTimeout time.Duration
	// DisableDataRouting routes invocations to the most recently used
	// idle instance and places new ones by load alone, whatever input
	// their events name (locality.go); for comparisons. Default false.
	DisableDataRouting bool
	// MaxPackage bounds a code package's compressed size, in bytes: an
	// upload is spooled to a file in UploadDir, never held in memory,
	// so this is a setting of disk, not memory (upload.go). Default
	// appspec.DefaultMaxPackageBytes (1 GiB); its files together may be
	// four times that (appspec.LimitsFor).
	MaxPackage int64
	// UploadDir is where uploads are spooled, each to a file of mode
	// 0600 removed when its deploy ends; default os.TempDir().
	UploadDir string
	// ChangeRelay shapes the relay of the store's changes to the
	// applications' cachelets (ADR 0033); its Prober defaults to Store
	// and its Logger and Registerer to the controller's.
	ChangeRelay changerelay.Config
	// Clock tells the time of records, events, idle times and keep-alive;
	// default the system clock. (The scan and vote loops tick on the
	// runtime's timers.)
	Clock clock.Clock
}

// Validate checks the config and fills in the defaults.
func (c *Config) Validate() error {
	if c.Etcd == nil || c.Store == nil || c.Identities == nil {
		return errors.New("controller: Etcd, Store and Identities are required")
	}
	if c.ScanInterval < 0 || c.DedupWindow < 0 || c.VoteInterval < 0 || c.InputSizeTimeout < 0 {
		return errors.New("controller: intervals must not be negative")
	}
	if c.MaxPackage < 0 {
		return errors.New("controller: MaxPackage must not be negative")
	}
	if c.MaxPackage == 0 {
		c.MaxPackage = appspec.DefaultMaxPackageBytes
	}
	if c.UploadDir == "" {
		c.UploadDir = os.TempDir()
	}
	if c.SystemBucket == "" {
		c.SystemBucket = appspec.PlatformBucket
	}
	if c.ScanInterval == 0 {
		c.ScanInterval = time.Second
	}
	if c.DedupWindow == 0 {
		c.DedupWindow = 10 * time.Minute
	}
	if c.VoteInterval == 0 {
		c.VoteInterval = 5 * time.Second
	}
	if c.InputSizeTimeout == 0 {
		c.InputSizeTimeout = inputSizeTimeout
	}
	if err := c.Prediction.Validate(); err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	c.Clock = clock.Or(c.Clock)
	return nil
}

// EtcdUsers makes and removes instances' etcd users (package etcdauth's
// Admin). Safe for concurrent use.
type EtcdUsers interface {
	// AddInstance makes instance id's user: read app's ring, write its
	// own member key.
	AddInstance(ctx context.Context, app, id string) (api.EtcdCredentials, error)
	// RemoveInstance removes it; a missing user is no error.
	RemoveInstance(ctx context.Context, id string) error
	// Instances lists the instances that have users.
	Instances(ctx context.Context) ([]string, error)
}

// BucketNotifier asks the store to notify the controller of objects
// created in a bucket.
type BucketNotifier interface {
	EnableNotifications(ctx context.Context, bucket string) error
}

// Record is an application as stored in etcd.
type Record struct {
	Name        string          `json:"name"`
	Spec        string          `json:"spec"`
	Package     api.PackageRef  `json:"package"`
	Credentials api.Credentials `json:"credentials"`
	// Store is the application's store identity (StoreIdentities.Grant).
	Store      api.StoreKeys `json:"store"`
	Version    int           `json:"version"`
	DeployedAt time.Time     `json:"deployed_at"`
}

// Controller is the platform's control plane.
type Controller struct {
	cfg    Config
	clk    clock.Clock
	log    *slog.Logger
	m      *metrics
	agents *agentClient

	mu   sync.Mutex
	apps map[string]*app
	seen map[string]time.Time // dedup of object-created events

	models models // the functions' memory models (memory.go)

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	trees *trees // the function trees (trees.go)

	relay *changerelay.Hub // the store's changes to the cachelets (changes.go)

	snsClient *http.Client // confirms SNS subscriptions (awsevents.go)
}

// app is one deployed application and its instances.
type app struct {
	rec  Record
	spec *appspec.Spec

	instances map[string]*inst
	starting  int
	readers   lastReaders    // which instance last read each input (locality.go)
	placing   map[string]int // agent ID -> instances being started there (route.go's place)
	waiters   []*waiter
	seq       int

	records []*api.Invocation // the most recent, oldest first
	fstats  map[string]*funcStats
	// admission is each function's admission by benefit (admission.go).
	admission map[string]*admission.Decider

	// Keep-alive and pre-load (keepalive.go): the hybrid histogram of
	// the application's idle times, when its last invocation ended, and
	// the idle period a pre-load was scheduled for.
	policy      *keepalive.Policy
	lastEnd     time.Time
	inFlight    int
	preloadedAt time.Time // the lastEnd a pre-load ran for
	decision    keepalive.Decision

	// The scale controller (scale.go).
	scaleMu      sync.Mutex // one round at a time
	pendingVotes []scaling.Vote
	loads        *scaling.LoadEstimator // instance load times (the bandwidth policy's T_load)
	lastVote     time.Time
	events       []api.Event
}

// inst is one instance as the controller sees it.
type inst struct {
	id, agentID, agentURL, rev, endpoint string
	busy                                 bool
	preloaded                            bool // started by a pre-load, not used yet
	lastCache                            api.CacheCounters
	counted                              bool // lastCache holds a reading
	orphan                               bool // adopted busy after a restart: polled until idle
	lastUsed                             time.Time
}

type waiter struct {
	ch chan *inst
}

// New starts a controller: it loads the applications from etcd and adopts
// the instances the agents run.
func New(ctx context.Context, cfg Config, log *slog.Logger) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Controller{cfg: cfg, clk: cfg.Clock, log: log, apps: map[string]*app{}, seen: map[string]time.Time{},
		agents: newAgentClient(cfg.Etcd, cfg.AgentToken, cfg.AgentTLS), models: models{m: map[string]*fnModel{}},
		snsClient: newSNSClient()}
	c.m = newMetrics(cfg.Registerer, c)
	rcfg := cfg.ChangeRelay
	if rcfg.Prober == nil {
		rcfg.Prober = cfg.Store
	}
	if rcfg.Logger == nil {
		rcfg.Logger = log.With("component", "changerelay")
	}
	if rcfg.Registerer == nil {
		rcfg.Registerer = cfg.Registerer
	}
	var err error
	if c.relay, err = changerelay.New(rcfg); err != nil {
		return nil, fmt.Errorf("controller: %w", err)
	}
	if err := c.load(ctx); err != nil {
		return nil, err
	}
	if err := c.loadTrees(ctx); err != nil {
		return nil, err
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.wg.Add(3)
	go c.scan()
	go c.scaler()
	go c.treeLoop()
	return c, nil
}

// Close stops the controller's loops. Instances keep running: a new
// controller adopts them.
func (c *Controller) Close() {
	c.cancel()
	c.relay.Close()
	c.wg.Wait()
	c.savePolicies()
}

// load reads the applications from etcd and adopts running instances.
func (c *Controller) load(ctx context.Context) error {
	resp, err := c.cfg.Etcd.Get(ctx, EtcdApps, clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("controller: reading applications from etcd: %w", err)
	}
	for _, kv := range resp.Kvs {
		var rec Record
		if err := json.Unmarshal(kv.Value, &rec); err != nil {
			c.log.Error("skipping an unreadable application record", "key", string(kv.Key), "err", err)
			continue
		}
		spec, err := appspec.Parse([]byte(rec.Spec))
		if err != nil {
			c.log.Error("skipping an application whose spec no longer parses", "app", rec.Name, "err", err)
			continue
		}
		if rec.Store.AccessKey == "" {
			// Recorded before applications had store identities.
			if rec.Store, err = c.cfg.Identities.Grant(ctx, rec.Name, spec.Buckets, rec.Store); err != nil {
				c.log.Error("skipping an application without a store identity", "app", rec.Name, "err", err)
				continue
			}
			val, _ := json.Marshal(rec)
			if _, err := c.cfg.Etcd.Put(ctx, EtcdApps+rec.Name, string(val)); err != nil {
				return fmt.Errorf("controller: recording %s's store identity: %w", rec.Name, err)
			}
		}
		if rec.Credentials.PlatformToken == "" {
			// Deployed before applications had tokens of their own: its
			// running instances hold none; new ones will.
			rec.Credentials.PlatformToken = randHex(32)
			val, _ := json.Marshal(rec)
			if _, err := c.cfg.Etcd.Put(ctx, string(kv.Key), string(val)); err != nil {
				return fmt.Errorf("controller: giving application %s a token: %w", rec.Name, err)
			}
		}
		a := newApp(rec, spec)
		a.policy = newPolicy(spec, c.cfg.KeepAlive, nil)
		c.restorePolicy(ctx, a)
		c.apps[rec.Name] = a
	}
	agents, err := c.agents.list(ctx)
	if err != nil {
		return err
	}
	adopted := 0
	for _, ag := range agents {
		list, err := c.agents.at(ag.URL).Instances(ctx)
		if err != nil {
			c.log.Warn("cannot list an agent's instances", "agent", ag.ID, "err", err)
			continue
		}
		for _, info := range list {
			a := c.apps[info.App]
			if a == nil || info.State == api.StateDead || info.State == api.StateStarting {
				continue
			}
			a.instances[info.ID] = &inst{id: info.ID, agentID: ag.ID, agentURL: ag.URL, rev: info.Rev, endpoint: info.Endpoint,
				busy: info.State == api.StateBusy, orphan: info.State == api.StateBusy, lastUsed: info.LastUsed}
			adopted++
		}
	}
	c.log.Info("controller state loaded", "apps", len(c.apps), "agents", len(agents), "instances adopted", adopted)
	c.sweepEtcdUsers(ctx)
	return nil
}

// sweepEtcdUsers removes the etcd users of instances no agent runs (a
// controller stopped between starting an instance and unloading it).
// Instances being started are not yet in c.apps, so this runs only at
// load, before any starts.
func (c *Controller) sweepEtcdUsers(ctx context.Context) {
	if c.cfg.EtcdUsers == nil {
		return
	}
	ids, err := c.cfg.EtcdUsers.Instances(ctx)
	if err != nil {
		c.log.Warn("cannot list the instances' etcd users", "err", err)
		return
	}
	live := map[string]bool{}
	for _, a := range c.apps {
		for id := range a.instances {
			live[id] = true
		}
	}
	for _, id := range ids {
		if !live[id] {
			if err := c.cfg.EtcdUsers.RemoveInstance(ctx, id); err != nil {
				c.log.Warn("cannot remove a gone instance's etcd user", "instance", id, "err", err)
			}
		}
	}
}

func newApp(rec Record, spec *appspec.Spec) *app {
	a := &app{rec: rec, spec: spec, instances: map[string]*inst{}, fstats: map[string]*funcStats{}}
	a.policy = newPolicy(spec, keepalive.Config{}, nil)
	return a
}

// ErrNotFound marks unknown applications, functions and pipelines.
var ErrNotFound = errors.New("not found")

func (c *Controller) app(name string) (*app, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a := c.apps[name]
	if a == nil {
		return nil, fmt.Errorf("%w: no application %q", ErrNotFound, name)
	}
	return a, nil
}

// Deploy stores an application's package and record and makes it live.
// A redeploy keeps the application's credentials; instances of the older
// version finish what they run and are unloaded.
func (c *Controller) Deploy(ctx context.Context, data []byte) (*api.AppInfo, error) {
	return c.DeployFrom(ctx, bytes.NewReader(data))
}

// deploy deploys a checked package whose bytes pkgData reads (a spooled
// file, upload.go), from its start.
func (c *Controller) deploy(ctx context.Context, pkg *appspec.Package, pkgData io.ReaderAt) (*api.AppInfo, error) {
	name := pkg.Spec.Name
	if _, ok := pkg.Spec.Buckets.Set().Lookup(c.cfg.SystemBucket); ok {
		return nil, fmt.Errorf("%w: buckets: %s is the platform's own bucket", appspec.ErrInvalid, c.cfg.SystemBucket)
	}
	if err := c.ensureBucket(ctx, c.cfg.SystemBucket); err != nil {
		return nil, err
	}
	ref := api.PackageRef{Bucket: c.cfg.SystemBucket, Key: "apps/" + name + "/" + pkg.SHA256 + "." + pkg.Format, SHA256: pkg.SHA256, IndexSHA256: pkg.IndexSHA256, Size: pkg.Size}
	contentType := "application/octet-stream"
	if pkg.Format == appspec.FormatTarGz {
		contentType = "application/gzip"
	}
	if _, err := c.cfg.Store.Put(ctx, ref.Bucket, ref.Key, io.NewSectionReader(pkgData, 0, pkg.Size), pkg.Size, store.PutOptions{ContentType: contentType}); err != nil {
		return nil, fmt.Errorf("storing the code package: %w", err)
	}
	if len(pkg.BlockSums) > 0 {
		sum := sha256.Sum256(pkg.BlockSums)
		ref.SumsSHA256 = hex.EncodeToString(sum[:])
		if _, err := c.cfg.Store.Put(ctx, ref.Bucket, ref.Key+".sums", bytes.NewReader(pkg.BlockSums), int64(len(pkg.BlockSums)), store.PutOptions{ContentType: "application/octet-stream"}); err != nil {
			return nil, fmt.Errorf("storing the code package's block sums: %w", err)
		}
	}
	specYAML, err := pkg.Spec.Marshal()
	if err != nil {
		return nil, err
	}
	rec := Record{Name: name, Spec: string(specYAML), Package: ref, DeployedAt: c.clk.Now().UTC(), Version: 1}
	c.mu.Lock()
	if old := c.apps[name]; old != nil {
		rec.Credentials, rec.Store, rec.Version = old.rec.Credentials, old.rec.Store, old.rec.Version+1
	}
	c.mu.Unlock()
	// The store identity follows the spec's buckets: a redeploy with
	// other buckets changes what the same keys reach.
	if rec.Store, err = c.cfg.Identities.Grant(ctx, name, pkg.Spec.Buckets, rec.Store); err != nil {
		return nil, fmt.Errorf("the application's store identity: %w", err)
	}
	if rec.Credentials.AccessKey == "" {
		rec.Credentials = api.Credentials{AccessKey: "HK" + strings.ToUpper(randHex(9)), SecretKey: randHex(20), PeerSecret: randHex(16)}
	}
	if rec.Credentials.PlatformToken == "" {
		rec.Credentials.PlatformToken = randHex(32)
	}
	for _, b := range triggerBuckets(pkg.Spec) {
		if err := c.ensureBucket(ctx, b); err != nil {
			return nil, err
		}
		if c.cfg.Notifications != nil {
			if err := c.cfg.Notifications.EnableNotifications(ctx, b); err != nil {
				c.log.Warn("the store will not notify writes made to it directly; only writes through cachelets fire triggers",
					"bucket", b, "err", err)
			}
		}
	}
	c.followBuckets(ctx, pkg.Spec)
	val, _ := json.Marshal(rec)
	if _, err := c.cfg.Etcd.Put(ctx, EtcdApps+name, string(val)); err != nil {
		return nil, fmt.Errorf("recording the application in etcd: %w", err)
	}
	c.mu.Lock()
	a := c.apps[name]
	if a == nil {
		a = newApp(rec, pkg.Spec)
		a.policy = newPolicy(pkg.Spec, c.cfg.KeepAlive, nil)
		c.apps[name] = a
	} else {
		a.rec, a.spec = rec, pkg.Spec
		a.policy = newPolicy(pkg.Spec, c.cfg.KeepAlive, a.policy)
		a.admission = nil // new code: its functions' admission is learned again
	}
	c.mu.Unlock()
	// Streams of buckets the new spec no longer grants end.
	granted := pkg.Spec.Buckets.Set()
	c.relay.Revoke(name, func(b string) bool { return granted.Allows(b, false) })
	c.log.Info("application deployed", "app", name, "version", rec.Version, "package", ref.Key)
	info := c.info(a)
	return &info, nil
}

// Remove unloads an application's instances and forgets it.
func (c *Controller) Remove(ctx context.Context, name string) error {
	a, err := c.app(name)
	if err != nil {
		return err
	}
	c.mu.Lock()
	keys := a.rec.Store
	c.mu.Unlock()
	if err := c.cfg.Identities.Revoke(ctx, name, keys); err != nil {
		return err
	}
	if _, err := c.cfg.Etcd.Delete(ctx, EtcdApps+name); err != nil {
		return err
	}
	c.forgetModels(ctx, name)
	c.relay.Revoke(name, func(string) bool { return false })
	c.mu.Lock()
	delete(c.apps, name)
	list := make([]*inst, 0, len(a.instances))
	for _, in := range a.instances {
		list = append(list, in)
	}
	a.instances = map[string]*inst{}
	for _, w := range a.waiters {
		close(w.ch)
	}
	a.waiters = nil
	c.mu.Unlock()
	for _, in := range list {
		c.unload(in, "application removed")
	}
	return nil
}

func triggerBuckets(s *appspec.Spec) []string {
	set := map[string]bool{}
	for _, t := range s.Triggers {
		if t.Object != nil {
			set[t.Object.Bucket] = true
		}
	}
	out := make([]string, 0, len(set))
	for b := range set {
		out = append(out, b)
	}
	sort.Strings(out)
	return out
}

func (c *Controller) ensureBucket(ctx context.Context, b string) error {
	err := c.cfg.Store.HeadBucket(ctx, b)
	if errors.Is(err, store.ErrNoSuchBucket) {
		err = c.cfg.Store.CreateBucket(ctx, b, "")
		if errors.Is(err, store.ErrBucketExists) {
			err = nil
		}
	}
	if err != nil {
		return fmt.Errorf("bucket %s: %w", b, err)
	}
	return nil
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Apps lists the applications.
func (c *Controller) Apps() []api.AppInfo {
	c.mu.Lock()
	names := make([]string, 0, len(c.apps))
	for n := range c.apps {
		names = append(names, n)
	}
	c.mu.Unlock()
	sort.Strings(names)
	out := make([]api.AppInfo, 0, len(names))
	for _, n := range names {
		if a, err := c.app(n); err == nil {
			out = append(out, c.info(a))
		}
	}
	return out
}

func (c *Controller) info(a *app) api.AppInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	info := api.AppInfo{Name: a.rec.Name, Version: a.rec.Version, DeployedAt: a.rec.DeployedAt, Rev: a.rec.Package.SHA256,
		Functions: a.spec.FunctionNames(), Triggers: len(a.spec.Triggers), Queue: len(a.waiters), Spec: a.rec.Spec}
	for p := range a.spec.Pipelines {
		info.Pipelines = append(info.Pipelines, p)
	}
	sort.Strings(info.Pipelines)
	for _, in := range a.instances {
		state := api.StateIdle
		if in.busy {
			state = api.StateBusy
		}
		info.Instances = append(info.Instances, api.InstanceSummary{ID: in.id, Agent: in.agentID, State: state,
			Endpoint: in.endpoint, Current: in.rev == a.rec.Package.SHA256, LastUsed: in.lastUsed})
	}
	sort.Slice(info.Instances, func(i, j int) bool { return info.Instances[i].ID < info.Instances[j].ID })
	for _, fs := range a.fstats {
		info.Invocations += fs.n
	}
	info.Events = append([]api.Event(nil), a.events...)
	d := a.decision
	info.KeepAlive = &d
	info.Tree = c.treeInfo(a.rec.Name)
	return info
}

// Credentials returns an application's credentials (the S3 keys its
// functions use against its cachelets).
func (c *Controller) Credentials(name string) (api.Credentials, error) {
	a, err := c.app(name)
	if err != nil {
		return api.Credentials{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return a.rec.Credentials, nil
}

// agentClient talks to the agents registered in etcd.
type agentClient struct {
	etcd  *clientv3.Client
	token string
	http  *http.Client
}

func newAgentClient(etcd *clientv3.Client, token string, tc *tls.Config) *agentClient {
	tr := &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second}
	if tc != nil {
		tr.TLSClientConfig, tr.TLSHandshakeTimeout = tc.Clone(), 10*time.Second
	}
	return &agentClient{etcd: etcd, token: token, http: &http.Client{Transport: tr}}
}

// at is the client of the agent at url.
func (ac *agentClient) at(url string) *api.AgentClient {
	return api.NewAgentClient(url, ac.token, ac.http)
}
