// Package agent is hoard's node agent: it runs the instances of
// applications on one machine. An instance is a memory sandbox (package
// sandbox) holding the instance's cachelet — a `hoard serve` process joined
// to its application's ring — and a Python worker (package worker) whose
// S3 SDKs point at that cachelet. The controller drives the agent over
// HTTP (api.go); docs/platform.md tells the lifecycle.
package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hoard-io/hoard/internal/admission"
	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/appspec"
	"github.com/hoard-io/hoard/internal/sandbox"
	"github.com/hoard-io/hoard/internal/store"
	"github.com/hoard-io/hoard/internal/worker"
)

// Config configures an agent.
type Config struct {
	// ID names the agent; default "agent-<hostname>".
	ID string
	// Dir is the agent's working directory: unpacked code, instance logs.
	// Required.
	Dir string
	// LogDir holds each instance's log, ID.log: its cachelet's and its
	// worker's output. Default Dir/logs.
	LogDir string
	// HoardBin is the hoard binary started as each instance's cachelet;
	// default the running executable.
	HoardBin string
	// Python runs the workers; default worker.FindPython().
	Python string
	// Store is the store, for code packages.
	Store store.Store
	// StoreEndpoint is where the cachelets reach the store, each with
	// its application's store identity (StartRequest.Store); the agent's
	// own access (Store) stays with the agent.
	StoreEndpoint string
	// Region the cachelets serve; default us-east-1.
	Region string
	// EtcdEndpoints hold the applications' rings. Required.
	EtcdEndpoints []string
	// NotifyURL, when set, is where cachelets post object-created events
	// (cache triggers), with their application's token
	// (api.Credentials.PlatformToken) as bearer token.
	NotifyURL string
	// Trees, when set, is where an agent whose parent in a function
	// tree failed reads the tree again, to reattach where it says
	// (treefollow.go); nil: it keeps to the chain its start request
	// named.
	Trees TreeSource
	// ControllerURL, when set, is the controller's base URL: each
	// cachelet's bandwidth policy reads its application's measured load
	// time and limit there and sends urgent votes, with its application's token.
	ControllerURL string
	// PeerHost is the address each cachelet's peer listener binds (on a
	// free port) and its application's other cachelets dial; default
	// 127.0.0.1. A node in its own network namespace gives its address
	// there, so that cachelets on other nodes reach it (package hostnet).
	PeerHost string
	// Sandboxes makes the instances' sandboxes. Required.
	Sandboxes *sandbox.Manager
	// Registerer takes the agent's metrics; default none.
	Registerer prometheus.Registerer
	// StartTimeout bounds loading one instance; default 60 s.
	StartTimeout time.Duration
	// DisableBandwidthPolicy starts cachelets without the bandwidth
	// policy (large objects downloaded in ranges by several instances).
	// Default false; $HOARD_BANDWIDTH_POLICY=off (BandwidthPolicyEnv)
	// sets it too.
	DisableBandwidthPolicy bool
	// DisableMemoryDaemon runs instances without the memory daemon
	// (memory.go), which otherwise keeps each instance's function and cache
	// within its memory limit by moving the cache's budget. Default false;
	// $HOARD_MEMORY_DAEMON=off (MemoryDaemonEnv) sets it too.
	DisableMemoryDaemon bool
	// InsecureSandbox lets New go on when this host cannot jail functions
	// (not Linux, not root, namespaces refused): they then run as
	// plain children of the agent, with its uid, files and network, and
	// the agent logs it once. Default false: New fails there instead.
	// $HOARD_INSECURE_SANDBOX=on (InsecureSandboxEnv) sets it too.
	InsecureSandbox bool
	// Unjailed runs functions unjailed even where the host can jail
	// them, as InsecureSandbox does where it cannot: only to measure
	// what jails cost (benchmarks). Default false.
	Unjailed bool
	// SandboxUIDBase and SandboxUIDCount are the uids (and gids) jailed
	// functions and their cachelets run as, two per live instance:
	// default DefaultSandboxUIDBase and DefaultSandboxUIDCount. No other
	// process on the host should use them, and agents sharing a host need
	// ranges of their own (NodeUIDs).
	SandboxUIDBase, SandboxUIDCount int
	// FunctionPIDs caps the tasks (processes and threads) of one
	// instance's function; default DefaultFunctionPIDs. FunctionCPUs caps
	// its CPU time, in CPUs; default DefaultFunctionCPUs.
	FunctionPIDs int64
	FunctionCPUs float64
	// SlackPool is the memory the node lends invocations that outgrow
	// their predicted size (sizing.go); default DefaultSlackPool, a
	// negative value none.
	SlackPool int64
	// TLS, when set, puts the agent's cachelets on TLS (tls.go, ADR
	// 0017). Default nil: plain HTTP.
	TLS *TLS
	// DiskBudget, when positive, gives each application a disk tier on
	// this node (disk.go) of this many bytes, in DiskDir/APP. Default 0:
	// memory only.
	DiskBudget int64
	// DiskDir holds the applications' disk tiers; default Dir/disk.
	DiskDir string
	// CodeFetch is how instances get their code (lazy.go, ADR 0027):
	// CodeFetchLazy, CodeFetchWhole, or CodeFetchAuto (the default: lazy
	// where FUSE mounts are possible). $HOARD_CODE_FETCH sets it too.
	CodeFetch string
	// NoCodeRelay fetches lazily mounted packages from the store only,
	// never from the parent agent the controller names (relay.go); a
	// baseline for benchmarks. $HOARD_CODE_RELAY=off sets it too.
	NoCodeRelay bool
	// NoCodePush keeps blocks from being pushed down the function tree
	// as they complete (pushdown.go): children read from their parents
	// on demand only ($HOARD_CODE_PUSH=off; a benchmark's baseline).
	NoCodePush bool
	// CodeFetchAhead has an agent that reads a lazily mounted package
	// from the store (the function tree's root) fetch all of it in the
	// background, in order, as soon as it is mounted (fetchahead.go):
	// the tree then carries the whole package down at the store's pace,
	// whatever the instances read. Off by default, which fetches only
	// what the instances read ($HOARD_CODE_FETCH_AHEAD=on sets it).
	CodeFetchAhead bool
	// PeerTLS is how the agent calls other agents (its parent in a
	// function tree, relay.go) where their APIs are on TLS: its own
	// certificate and the CA. Default nil: plain HTTP.
	PeerTLS *tls.Config
}

// Agent runs instances.
type Agent struct {
	cfg Config
	log *slog.Logger
	m   *metrics

	codeMu sync.Mutex             // one code download at a time
	lazy   *lazyCode              // lazily mounted code (lazy.go)
	token  atomic.Pointer[string] // the agents' bearer token (Handler; relay.go)

	relayOnce sync.Once
	relayHTTP *http.Client // calls parent agents (relay.go)

	jailed bool // functions run jailed (jail.go); set by New

	slack *slackPool // lent to invocations that outgrow their predicted size

	// storeModels is each application's last store cost fitted on this
	// node (cachelet.go's ioTimes), guarded by fitMu.
	fitMu       sync.Mutex
	storeModels map[string]admission.Model

	mu        sync.Mutex
	instances map[string]*Instance
	closed    bool
	closing   chan struct{} // closed by Close (closingCh), made on first use
	// drainRetry bounds the retries of a failed drain (durable.go);
	// zero: defaultDrainRetry.
	drainRetry drainRetry
	uids       map[int]bool // the jail uids in use
	// diskGroups are the applications' disk tier groups (disk.go),
	// guarded by diskMu.
	diskMu     sync.Mutex
	diskGroups map[string]int
	nextUID    int // where the search for a free one starts
}

var idRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// New makes an agent; it starts nothing until asked.
// Validate checks the config and fills in the defaults that need no
// lookup (Region, PeerHost, StartTimeout, LogDir); New fills the rest (ID
// from the host name, HoardBin, Python) and reads the environment's
// switches.
func (c *Config) Validate() error {
	if c.Dir == "" || c.Store == nil || c.Sandboxes == nil || len(c.EtcdEndpoints) == 0 {
		return errors.New("agent: Dir, Store, Sandboxes and EtcdEndpoints are required")
	}
	if c.StartTimeout < 0 {
		return errors.New("agent: StartTimeout must not be negative")
	}
	if c.TLS != nil {
		if err := c.TLS.Validate(); err != nil {
			return err
		}
	}
	if c.Region == "" {
		c.Region = "us-east-1"
	}
	if c.PeerHost == "" {
		c.PeerHost = "127.0.0.1"
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = 60 * time.Second
	}
	if c.SlackPool == 0 {
		c.SlackPool = DefaultSlackPool
	}
	if c.LogDir == "" {
		c.LogDir = filepath.Join(c.Dir, "logs")
	}
	if c.DiskDir == "" {
		c.DiskDir = filepath.Join(c.Dir, "disk")
	}
	if c.DiskBudget < 0 {
		return errors.New("agent: DiskBudget must not be negative")
	}
	if c.SandboxUIDBase == 0 {
		c.SandboxUIDBase = DefaultSandboxUIDBase
	}
	if c.SandboxUIDCount == 0 {
		c.SandboxUIDCount = DefaultSandboxUIDCount
	}
	if c.FunctionPIDs == 0 {
		c.FunctionPIDs = DefaultFunctionPIDs
	}
	if c.FunctionCPUs == 0 {
		c.FunctionCPUs = DefaultFunctionCPUs
	}
	if c.SandboxUIDBase <= 0 || c.SandboxUIDCount <= 0 || c.FunctionPIDs < 0 || c.FunctionCPUs < 0 {
		return errors.New("agent: SandboxUIDBase, SandboxUIDCount, FunctionPIDs and FunctionCPUs must be positive")
	}
	return nil
}

func New(cfg Config, log *slog.Logger) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.ID == "" {
		h, _ := os.Hostname()
		cfg.ID = "agent-" + strings.ToLower(h)
	}
	if cfg.HoardBin == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("agent: finding the hoard binary: %w", err)
		}
		cfg.HoardBin = exe
	}
	if cfg.Python == "" {
		p, err := worker.FindPython()
		if err != nil {
			return nil, fmt.Errorf("agent: %w", err)
		}
		cfg.Python = p
	}
	if strings.EqualFold(strings.TrimSpace(os.Getenv(MemoryDaemonEnv)), "off") {
		cfg.DisableMemoryDaemon = true
	}
	if strings.EqualFold(strings.TrimSpace(os.Getenv(BandwidthPolicyEnv)), "off") {
		cfg.DisableBandwidthPolicy = true
	}
	if strings.EqualFold(strings.TrimSpace(os.Getenv(InsecureSandboxEnv)), "on") {
		cfg.InsecureSandbox = true
	}
	// The state directory holds secrets and every instance's files:
	// the agent's alone (jailed functions never see it anyway).
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, err
	}
	_ = os.Chmod(cfg.Dir, 0o700)
	for _, d := range []string{filepath.Join(cfg.Dir, "code"), filepath.Join(cfg.Dir, "instances"), cfg.LogDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	a := &Agent{cfg: cfg, log: log, m: newMetrics(cfg.Registerer), instances: map[string]*Instance{}, uids: map[int]bool{}}
	slack := max(cfg.SlackPool, 0)
	a.slack = &slackPool{size: slack, free: slack, configured: slack}
	a.m.slackFree.Set(float64(slack))
	a.m.slackSize.Set(float64(slack))
	if err := a.checkIsolation(context.Background()); err != nil {
		return nil, err
	}
	if err := a.loadDiskGroups(); err != nil {
		return nil, err
	}
	if err := a.setupCodeFetch(); err != nil {
		return nil, err
	}
	return a, nil
}

// ID is the agent's name.
func (a *Agent) ID() string { return a.cfg.ID }

// SandboxMode says how instances are sandboxed: cgroup2, cgroup1 or none.
func (a *Agent) SandboxMode() string { return a.cfg.Sandboxes.Mode() }

// Instances lists the instances.
func (a *Agent) Instances() []api.InstanceInfo {
	a.mu.Lock()
	list := make([]*Instance, 0, len(a.instances))
	for _, in := range a.instances {
		list = append(list, in)
	}
	a.mu.Unlock()
	out := make([]api.InstanceInfo, 0, len(list))
	for _, in := range list {
		out = append(out, in.Info())
	}
	return out
}

// Instance returns the named instance, or nil.
func (a *Agent) Instance(id string) *Instance {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.instances[id]
}

// ErrExists is returned by Start for an instance ID already in use.
var ErrExists = errors.New("agent: an instance with that id exists")

// Start loads an instance and returns once it can take invocations: code
// unpacked, sandbox made, cachelet joined to its ring, worker ready.
func (a *Agent) Start(ctx context.Context, req api.StartRequest) (*Instance, error) {
	if !idRE.MatchString(req.ID) {
		return nil, fmt.Errorf("agent: instance id %q: want 1-63 of a-z, 0-9 and '-'", req.ID)
	}
	spec, err := appspec.Parse([]byte(req.Spec))
	if err != nil {
		return nil, err
	}
	if spec.Name != req.App {
		return nil, fmt.Errorf("agent: the spec is for %q, not %q", spec.Name, req.App)
	}
	if len(req.Credentials.PeerSecret) < 16 || req.Credentials.AccessKey == "" || req.Credentials.SecretKey == "" {
		return nil, errors.New("agent: the application's credentials are incomplete")
	}
	if req.Store.AccessKey == "" || req.Store.SecretKey == "" {
		return nil, errors.New("agent: the application has no store identity; its cachelets never get the store's root keys")
	}
	in := &Instance{agent: a, req: req, spec: spec, state: api.StateStarting, started: time.Now(), done: make(chan struct{})}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil, errors.New("agent: closing")
	}
	if a.instances[req.ID] != nil {
		a.mu.Unlock()
		return nil, ErrExists
	}
	a.instances[req.ID] = in
	a.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, a.cfg.StartTimeout)
	defer cancel()
	if err := in.load(ctx); err != nil {
		in.teardown("failed to start: " + err.Error())
		a.forget(req.ID)
		a.m.starts.WithLabelValues("error").Inc()
		return nil, fmt.Errorf("agent: starting %s: %w", req.ID, err)
	}
	a.m.starts.WithLabelValues("ok").Inc()
	a.m.startSeconds.Observe(time.Since(in.started).Seconds())
	return in, nil
}

// Stop unloads an instance: its worker ends, its cachelet leaves the ring
// (handing off what it owns), its sandbox goes.
func (a *Agent) Stop(id string) error {
	in := a.Instance(id)
	if in == nil {
		return fmt.Errorf("agent: no instance %q", id)
	}
	in.teardown("unloaded")
	a.forget(id)
	return nil
}

func (a *Agent) forget(id string) {
	a.mu.Lock()
	delete(a.instances, id)
	a.mu.Unlock()
}

// closingCh is closed once Close was called.
func (a *Agent) closingCh() <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closing == nil {
		a.closing = make(chan struct{})
		if a.closed {
			close(a.closing)
		}
	}
	return a.closing
}

// Close unloads every instance.
func (a *Agent) Close() {
	a.mu.Lock()
	a.closed = true
	if a.closing == nil {
		a.closing = make(chan struct{})
	}
	select {
	case <-a.closing:
	default:
		close(a.closing)
	}
	list := make([]*Instance, 0, len(a.instances))
	for _, in := range a.instances {
		list = append(list, in)
	}
	a.mu.Unlock()
	var wg sync.WaitGroup
	for _, in := range list {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in.teardown("agent shut down")
			a.forget(in.req.ID)
		}()
	}
	wg.Wait()
	a.unmountCode()
}

// code returns the directory holding an application's unpacked code,
// downloading and checking the package when it is not there yet.
func (a *Agent) code(ctx context.Context, ref api.PackageRef, parents []api.Registration) (string, error) {
	if len(ref.SHA256) != 64 || strings.Trim(ref.SHA256, "0123456789abcdef") != "" {
		return "", fmt.Errorf("bad package digest %q", ref.SHA256)
	}
	dir := filepath.Join(a.cfg.Dir, "code", ref.SHA256)
	a.codeMu.Lock()
	defer a.codeMu.Unlock()
	if lazy, ok, err := a.lazyCodeDir(ctx, ref, parents, dir); ok {
		return lazy, err
	}
	if _, err := os.Stat(filepath.Join(dir, appspec.FileName)); err == nil {
		return dir, nil
	}
	if err := a.downloadCode(ctx, ref, dir); err != nil {
		return "", err
	}
	// Readable by the jailed functions' uids where it is shown to them;
	// the code directory above it is the agent's alone (0700).
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", err
	}
	return dir, nil
}

// downloadCode streams a package whole to a file of its own in the code
// directory, checking its SHA-256 as it is written, and unpacks it from
// the file into dir; the file is removed however it ends. It reads at
// most ref.Size bytes (appspec.DefaultMaxPackageBytes for records
// without it).
func (a *Agent) downloadCode(ctx context.Context, ref api.PackageRef, dir string) error {
	limit := ref.Size
	if limit <= 0 {
		limit = appspec.DefaultMaxPackageBytes
	}
	body, _, _, err := a.cfg.Store.Get(ctx, ref.Bucket, ref.Key, store.GetOptions{})
	if err != nil {
		return fmt.Errorf("fetching the code package %s/%s: %w", ref.Bucket, ref.Key, err)
	}
	defer body.Close()
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(dir), ".package-*")
	if err != nil {
		return err
	}
	defer func() {
		f.Close()
		os.Remove(f.Name())
	}()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(body, limit+1))
	if err != nil {
		return fmt.Errorf("fetching the code package: %w", err)
	}
	if n > limit || hex.EncodeToString(h.Sum(nil)) != ref.SHA256 {
		return fmt.Errorf("the code package %s/%s does not match its digest", ref.Bucket, ref.Key)
	}
	os.RemoveAll(dir)
	// The controller checked these very bytes (the digest binds them)
	// within its limits (--max-package) before it stored them, so the
	// files' size is bounded there, not again here; names, types and
	// every block's checksum are checked again as they are unpacked.
	return appspec.UnpackAt(f, n, dir, appspec.Limits{Package: n, Unpacked: math.MaxInt64})
}

// workerEnv is the environment of an instance's worker: every AWS SDK
// points at the instance's cachelet, with the application's credentials.
//
// The application's keys are in the environment because functions
// written for Lambda expect them there; a jailed function's environment
// is readable only by its own uid, in its own PID namespace.
func (in *Instance) workerEnv() []string {
	home, endpoint := in.dir, in.ready.Endpoint
	awsConf, awsCreds := filepath.Join(in.dir, "aws-config"), filepath.Join(in.dir, "aws-credentials")
	if in.net != nil {
		scheme := "http://"
		if in.caBundle != "" {
			scheme = "https://"
		}
		home, endpoint = "/tmp", scheme+in.net.Endpoint()
		awsConf, awsCreds = jailAWSConfig, jailAWSCredentials
	}
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + home,
		"LANG=C.UTF-8",
		"AWS_ENDPOINT_URL=" + endpoint,
		"AWS_ENDPOINT_URL_S3=" + endpoint,
		"AWS_ACCESS_KEY_ID=" + in.req.Credentials.AccessKey,
		"AWS_SECRET_ACCESS_KEY=" + in.req.Credentials.SecretKey,
		"AWS_DEFAULT_REGION=" + in.agent.cfg.Region,
		"AWS_REGION=" + in.agent.cfg.Region,
		"AWS_EC2_METADATA_DISABLED=true",
		"AWS_CONFIG_FILE=" + awsConf,
		"AWS_SHARED_CREDENTIALS_FILE=" + awsCreds,
	}
	if in.caBundle != "" {
		// A path, not a secret: the CA the cachelet's certificate chains to.
		ca := in.agent.cfg.TLS.CA
		if in.net != nil {
			ca = jailCABundle
		}
		env = append(env, "AWS_CA_BUNDLE="+ca)
	}
	env = append(env,
		"HOARD_APP="+in.spec.Name,
		"HOARD_INSTANCE="+in.req.ID,
	)
	return env
}

// awsConfig makes SDKs address buckets by path, which a cachelet on a
// loopback address needs (there is no DNS for bucket.127.0.0.1).
const awsConfig = "[default]\ns3 =\n    addressing_style = path\n"

// startWorker starts a worker in the instance's sandbox.
func (in *Instance) startWorker(ctx context.Context) (*worker.Worker, error) {
	cfg, err := in.workerStart()
	if err != nil {
		return nil, fmt.Errorf("the worker's jail: %w", err)
	}
	w, err := worker.Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	add := in.box.Add
	if in.fn != nil {
		add = in.fn.Add
	}
	if err := add(w.Pid()); err != nil {
		w.Kill()
		return nil, fmt.Errorf("moving the worker into its sandbox: %w", err)
	}
	if in.box.Enforced() {
		if err := in.box.PreferForOOM(w.Pid()); err != nil {
			in.agent.log.Warn("cannot mark the worker first for the OOM killer", "instance", in.req.ID, "err", err)
		}
	}
	return w, nil
}

func writeFile(path, body string) error {
	return os.WriteFile(path, []byte(body), 0o600)
}

func (in *Instance) logTail() string {
	b, err := os.ReadFile(in.logPath)
	if err != nil || len(b) == 0 {
		return ""
	}
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	return ":\n" + string(bytes.TrimSpace(b))
}
