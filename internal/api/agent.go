package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/hoard-io/hoard/internal/erasure"
)

// The node agent's HTTP API, used by the controller (AgentClient). Every
// request but /healthz carries "Authorization: Bearer TOKEN".
//
//	POST   /v1/instances              StartRequest -> InstanceInfo (when ready)
//	GET    /v1/instances              -> []InstanceInfo
//	GET    /v1/instances/{id}         -> InstanceInfo
//	POST   /v1/instances/{id}/invoke  InvokeRequest -> InvokeResult
//	POST   /v1/instances/{id}/drop    DropRequest -> {"dropped": N}
//	POST   /v1/instances/{id}/prewarm PrewarmRequest -> 202 (runs while idle)
//	DELETE /v1/instances/{id}         unload
//	GET    /healthz

// PackageRef says where an application's code package is in the store.
type PackageRef struct {
	Bucket string `json:"bucket"`
	Key    string `json:"key"`
	SHA256 string `json:"sha256"`
	// IndexSHA256 is, for a package in the block format, the digest of
	// its index (and so of every block's checksum): an agent that reads
	// the package lazily, block by block, checks the index against it
	// instead of the whole package against SHA256.
	IndexSHA256 string `json:"index_sha256,omitempty"`
	// SumsSHA256 is the digest of the package's block sums, stored next
	// to it under Key + ".sums" (appspec.Package.BlockSums): an agent
	// checks every block relayed by another agent against them.
	SumsSHA256 string `json:"sums_sha256,omitempty"`
	// Size is the package's length in bytes: what an agent downloading
	// it whole reads at most. 0 in records older than it.
	Size int64 `json:"size,omitempty"`
}

// Credentials are an application's: the keys its functions sign S3
// requests with, the secret its cachelets sign peer requests with, and
// the token its cachelets call the controller with. That token is scoped:
// it reads the application's scaling hints, votes for it and posts
// object-created events naming it and its buckets, nothing else
// (docs/platform.md, "Who may call what").
type Credentials struct {
	AccessKey     string `json:"access_key"`
	SecretKey     string `json:"secret_key"`
	PeerSecret    string `json:"peer_secret"`
	PlatformToken string `json:"platform_token,omitempty"`
}

// StoreKeys are an application's own identity at the store, which
// reaches only the buckets its spec grants: its cachelets sign to the
// store with them, never with the store's root keys.
type StoreKeys struct {
	AccessKey string `json:"access_key"`
	SecretKey string `json:"secret_key"`
}

// StartRequest loads one instance of an application.
type StartRequest struct {
	App         string      `json:"app"`
	ID          string      `json:"id"`
	Spec        string      `json:"spec"` // the application's hoard.yaml
	Package     PackageRef  `json:"package"`
	Credentials Credentials `json:"credentials"`
	// Store is the application's store identity, for its cachelets.
	Store StoreKeys `json:"store"`
	// Metadata is where the instance's access metadata is saved when it
	// unloads (a prewarm.Record per unload, as JSON); empty: not saved.
	Metadata Location `json:"metadata"`
	// Etcd is the instance's own etcd user, where etcd has authentication
	// on: it may read the application's ring and write only the
	// instance's member key. Nil: the cachelet signs in as nobody.
	Etcd *EtcdCredentials `json:"etcd,omitempty"`
	// Parent is the agent above this one in the application's function
	// tree (FaaSNet §3): the agent fetches the package's blocks from it,
	// and from the store when it fails. Nil: the store (the tree's root).
	Parent *Registration `json:"parent,omitempty"`
	// Ancestors are the parent's own ancestors, nearest first, up to
	// the root: where the agent turns when its parent fails, before
	// the store.
	Ancestors []Registration `json:"ancestors,omitempty"`
}

// EtcdCredentials are an etcd user's name and password.
type EtcdCredentials struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

// Location is a bucket and a key prefix in the store.
type Location struct {
	Bucket string `json:"bucket"`
	Prefix string `json:"prefix"`
}

// PrewarmRequest asks an instance's cachelet to fetch the objects it owns
// among Keys, while the instance is idle.
type PrewarmRequest struct {
	Keys []Key `json:"keys"`
}

// Key names an object.
type Key struct {
	Bucket string `json:"bucket"`
	Key    string `json:"key"`
}

// PrewarmStatus is how an instance's pre-warming went so far.
type PrewarmStatus struct {
	Requested int   `json:"requested"`
	Done      int   `json:"done"` // keys handled (owned or not)
	Owned     int   `json:"owned"`
	Fetched   int   `json:"fetched"`
	Bytes     int64 `json:"bytes"`
	Paused    int   `json:"paused"` // times an invocation interrupted it
	Running   bool  `json:"running"`
}

// Instance states.
const (
	StateStarting = "starting"
	StateIdle     = "idle"
	StateBusy     = "busy"
	StateDead     = "dead"
)

// InstanceInfo describes one instance.
type InstanceInfo struct {
	ID          string        `json:"id"`
	App         string        `json:"app"`
	Rev         string        `json:"rev"` // the code package's SHA-256
	Agent       string        `json:"agent"`
	State       string        `json:"state"`
	Reason      string        `json:"reason,omitempty"` // why it is dead
	Endpoint    string        `json:"endpoint"`         // the cachelet's S3 endpoint
	MetricsURL  string        `json:"metrics_url"`
	PeerAddr    string        `json:"peer_addr"`
	MemoryLimit int64         `json:"memory_limit"`
	MemoryUsage int64         `json:"memory_usage"`
	Enforced    bool          `json:"enforced"` // whether the memory limit is enforced
	StartedAt   time.Time     `json:"started_at"`
	LastUsed    time.Time     `json:"last_used"`
	StartMillis float64       `json:"start_ms"` // how long loading took (the cold start)
	Invocations int64         `json:"invocations"`
	OOMKills    uint64        `json:"oom_kills"`
	Prewarm     PrewarmStatus `json:"prewarm"`
	// Cache is the instance's cachelet's counters (its /stats), for the
	// scale controller's cache-size policy.
	Cache CacheCounters `json:"cache"`
	// MemoryWorkingSet is MemoryUsage less the page cache the kernel
	// reclaims first (sandbox.WorkingSet): what the memory daemon watches.
	MemoryWorkingSet int64 `json:"memory_working_set"`
	// MemoryDaemon is what the instance's memory daemon did; absent when
	// the agent runs without one.
	MemoryDaemon *MemoryDaemonInfo `json:"memory_daemon,omitempty"`
	// FunctionLimit is the function's own cgroup's limit now (0 where
	// functions are not sized apart from their instance); LastMemory how
	// the last invocation was sized and what it used.
	FunctionLimit int64             `json:"function_limit,omitempty"`
	LastMemory    *InvocationMemory `json:"last_memory,omitempty"`
	// Code is how the instance's package came to its node when it is
	// mounted lazily; absent when it was downloaded whole.
	Code *CodeInfo `json:"code,omitempty"`
}

// CodeInfo is a lazily mounted code package on a node (shared by the
// node's instances of it).
type CodeInfo struct {
	// Bytes is the package's size and Held how much of it the node
	// holds; FromParent and FromStore what the node fetched of it from
	// other agents and from the store, Pushed the part of FromParent its
	// parent pushed.
	Bytes      int64 `json:"bytes"`
	Held       int64 `json:"held"`
	FromParent int64 `json:"from_parent"`
	FromStore  int64 `json:"from_store"`
	Pushed     int64 `json:"pushed"`
	// Whole is when the node first held the whole package: every block
	// (those from other agents each matched against its SHA-256) and
	// the index. Absent until then.
	Whole *time.Time `json:"whole,omitempty"`
}

// MemoryDaemonInfo is the state of an instance's memory daemon (memory.go),
// which moves the cachelet's budget to keep the function and the cache
// within the instance's memory limit.
type MemoryDaemonInfo struct {
	Running bool `json:"running"`
	// Shared is the spec's cache.shared: the cache lives inside the booked
	// memory.
	Shared bool `json:"shared"`
	// Notified: the kernel wakes the daemon when usage crosses the high
	// mark (cgroup v1 thresholds), besides its polling.
	Notified         bool  `json:"notified"`
	ConfiguredBudget int64 `json:"configured_budget"` // the spec's cache.budget
	CacheBudget      int64 `json:"cache_budget"`      // the cachelet's budget now
	Shrinks          int64 `json:"shrinks"`           // times it lowered the budget
	Raises           int64 `json:"raises"`            // times it raised it back
	// FreedBytes is the bytes the cachelet evicted for the lowered budgets.
	FreedBytes int64 `json:"freed_bytes"`
	// PeakUsage is the highest working set the daemon sampled.
	PeakUsage int64 `json:"peak_usage"`
	// Errors counts failed requests to the cachelet (retried).
	Errors     int64     `json:"errors"`
	LastShrink time.Time `json:"last_shrink,omitzero"`
}

// CacheCounters are a cachelet's cumulative counters.
type CacheCounters struct {
	Reads        int64 `json:"reads"`         // reads of every access type
	EvictedAgain int64 `json:"evicted_again"` // evictions of objects evicted before
	CacheBytes   int64 `json:"cache_bytes"`
	BudgetBytes  int64 `json:"budget_bytes"`
	// Erasure is the cachelet's erasure-coded shards and risk; nil when
	// the application does not shard large objects.
	Erasure *erasure.Health `json:"erasure,omitempty"`
}

// InvokeRequest runs one function in an instance.
type InvokeRequest struct {
	RequestID string          `json:"request_id"`
	Function  string          `json:"function"`
	Event     json.RawMessage `json:"event"`
	// MemoryLimit is the memory the function gets for this invocation
	// when a mature model predicted it (one interval above the predicted
	// one, OFC §5.3.1); 0 means the memory it booked. The agent gives
	// the booked memory above it to the instance's cache, and runs the
	// invocation again at the booked size if it is killed for memory.
	MemoryLimit int64 `json:"memory_limit,omitempty"`
	// NoCache says the function's inputs are not worth caching
	// (admission by predicted benefit): the instance's cachelet serves
	// its misses without keeping a copy.
	NoCache bool `json:"no_cache,omitempty"`
}

// IOTimes is an invocation's time with its data: its reads and writes as
// served (ServedMS), and the same with its reads at the store's measured
// cost, as if nothing were cached (StoreMS; package admission).
type IOTimes struct {
	ServedMS float64 `json:"served_ms"`
	StoreMS  float64 `json:"store_ms"`
}

// InvocationMemory is how an invocation's memory was sized and used.
type InvocationMemory struct {
	// Booked is what the function booked; Limit what it started under
	// (Booked, or the prediction); Sized says the limit was the
	// function's own (a function cgroup), not only the instance's.
	Booked int64 `json:"booked"`
	Limit  int64 `json:"limit"`
	Sized  bool  `json:"sized"`
	// Peak is the most memory the function's cgroup held during the
	// invocation (0 when not measured).
	Peak int64 `json:"peak"`
	// CacheGiven is what the cache's budget got on top of its own for
	// the invocation (Booked − Limit).
	CacheGiven int64 `json:"cache_given,omitempty"`
	// Raised is what the node's slack pool lent the function while it
	// ran, as it neared its limit.
	Raised int64 `json:"raised,omitempty"`
	// Retried: killed for memory under the predicted limit, the
	// invocation ran again at the booked size; the result is that run's.
	Retried bool `json:"retried,omitempty"`
	// ResizeMS is what resizing the function and the cache took before
	// the invocation ran (0 when nothing changed).
	ResizeMS float64 `json:"resize_ms,omitempty"`
}

// ErrorInfo is why an invocation failed. Type is the exception's class
// name, or one of the platform's: Timeout, OutOfMemory, Crashed,
// InstanceUnavailable.
type ErrorInfo struct {
	Type      string `json:"type"`
	Message   string `json:"message"`
	Traceback string `json:"traceback,omitempty"`
}

// ReadCount is a count of reads and their bytes.
type ReadCount struct {
	Count int64 `json:"count"`
	Bytes int64 `json:"bytes"`
	// Nanos is the time the reads took as served, request to the body's
	// close.
	Nanos int64 `json:"nanos,omitempty"`
}

// InvokeResult is one invocation's outcome.
type InvokeResult struct {
	RequestID  string               `json:"request_id"`
	Instance   string               `json:"instance"`
	OK         bool                 `json:"ok"`
	Result     json.RawMessage      `json:"result,omitempty"`
	Error      *ErrorInfo           `json:"error,omitempty"`
	Log        string               `json:"log"`
	DurationMS float64              `json:"duration_ms"`
	Reads      map[string]ReadCount `json:"reads"` // by access type: local_hit, local_miss, remote_hit, remote_miss, pass_through, disk_hit
	// Replaced says the instance's worker died and was replaced.
	Replaced bool `json:"replaced,omitempty"`
	// Memory is how the invocation was sized and what it used.
	Memory *InvocationMemory `json:"memory,omitempty"`
	// IO is its time with data; nil when the cachelet's counters could
	// not be read or no store cost was measured yet on the node.
	IO *IOTimes `json:"io,omitempty"`
	// NotAdmitted counts its misses served without keeping a copy
	// (NoCache); they are among its pass_through reads.
	NotAdmitted int64 `json:"not_admitted,omitempty"`
}

// DropRequest drops an application's cached objects under a prefix.
type DropRequest struct {
	Bucket string `json:"bucket"`
	Prefix string `json:"prefix"`
}

// EtcdPrefix is where agents register (key: prefix + agent id, value:
// Registration as JSON, under a lease).
const EtcdPrefix = "/hoard/platform/agents/"

// Registration is an agent's entry in etcd.
type Registration struct {
	ID  string `json:"id"`
	URL string `json:"url"`
}

// AgentClient calls one node agent. Safe for concurrent use.
type AgentClient struct{ c caller }

// NewAgentClient returns a client of the agent at url (http://host:port)
// authenticating with token, over hc (nil: a client of its own).
func NewAgentClient(url, token string, hc *http.Client) *AgentClient {
	if hc == nil {
		hc = &http.Client{}
	}
	return &AgentClient{caller{base: strings.TrimSuffix(url, "/"), token: token, http: hc}}
}

func instancePath(id string) string { return "/v1/instances/" + url.PathEscape(id) }

// Start loads an instance and returns it once ready. An instance of that
// id on the agent already is ErrConflict.
func (a *AgentClient) Start(ctx context.Context, req StartRequest) (InstanceInfo, error) {
	var info InstanceInfo
	err := a.c.call(ctx, http.MethodPost, "/v1/instances", "", req, &info)
	return info, err
}

// Instances lists the agent's instances.
func (a *AgentClient) Instances(ctx context.Context) ([]InstanceInfo, error) {
	var out []InstanceInfo
	err := a.c.call(ctx, http.MethodGet, "/v1/instances", "", nil, &out)
	return out, err
}

// Instance describes one instance; an unknown one is ErrNotFound.
func (a *AgentClient) Instance(ctx context.Context, id string) (InstanceInfo, error) {
	var info InstanceInfo
	err := a.c.call(ctx, http.MethodGet, instancePath(id), "", nil, &info)
	return info, err
}

// Stop unloads an instance.
func (a *AgentClient) Stop(ctx context.Context, id string) error {
	return a.c.call(ctx, http.MethodDelete, instancePath(id), "", nil, nil)
}

// Invoke runs a function in an instance. A busy or vanished instance is
// ErrConflict; a function's failure is an InvokeResult with OK false.
func (a *AgentClient) Invoke(ctx context.Context, id string, req InvokeRequest) (*InvokeResult, error) {
	var res InvokeResult
	if err := a.c.call(ctx, http.MethodPost, instancePath(id)+"/invoke", "", req, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// Drop drops an instance's cached objects under a prefix and returns how
// many were dropped.
func (a *AgentClient) Drop(ctx context.Context, id string, req DropRequest) (int, error) {
	var out struct {
		Dropped int `json:"dropped"`
	}
	err := a.c.call(ctx, http.MethodPost, instancePath(id)+"/drop", "", req, &out)
	return out.Dropped, err
}

// Prewarm asks an instance to pre-warm keys while it is idle; it returns
// once the agent accepted the request.
func (a *AgentClient) Prewarm(ctx context.Context, id string, req PrewarmRequest) error {
	return a.c.call(ctx, http.MethodPost, instancePath(id)+"/prewarm", "", req, nil)
}
