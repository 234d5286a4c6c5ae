package api

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hoard-io/hoard/internal/appspec"
	"github.com/hoard-io/hoard/internal/keepalive"
	"github.com/hoard-io/hoard/internal/media"
	"github.com/hoard-io/hoard/internal/prewarm"
	"github.com/hoard-io/hoard/internal/scaling"
)

// The controller's HTTP API, used by `hoard` (ControllerClient), the
// instances' cachelets (scaling hints and votes, object-created events)
// and the benchmarks. Everything under /v1, and /metrics, needs
// "Authorization: Bearer TOKEN": the admin token may call everything; an
// application's token (Credentials.PlatformToken, its instances') only
// the calls marked [app], for that application (another's is 403),
// events only naming that application and its buckets, and the changes
// of its granted buckets only. /http/APP/PATH
// (HTTP triggers) is open, like a function URL; /healthz is open.
//
//	POST   /v1/apps                                  body: code package (block format or tar.gz) -> AppInfo
//	GET    /v1/apps                                  -> []AppInfo
//	GET    /v1/apps/{app}                            -> AppInfo with spec, credentials and stats
//	DELETE /v1/apps/{app}
//	POST   /v1/apps/{app}/functions/{fn}/invoke      body: event JSON -> Invocation
//	POST   /v1/apps/{app}/pipelines/{p}/run          body: input JSON -> PipelineRun
//	GET    /v1/apps/{app}/logs?function=&n=&errors=1 -> []Invocation
//	GET    /v1/apps/{app}/stats                      -> {function: FuncStats}
//	POST   /v1/apps/{app}/preload?warm=true|false    -> Selection (an idle instance, pre-warmed)
//	GET    /v1/apps/{app}/scaling                    [app] ScalingInfo (load time, instances, limit: the bandwidth policy's inputs)
//	POST   /v1/apps/{app}/votes                      [app] body: scaling.Vote (unrequested; urgent ones act at once)
//	POST   /v1/events                                [app] body: S3 event (cachelets, the store's webhook), or AWS S3's as SNS or EventBridge posts it (store token, bearer or Basic)
//	GET    /v1/changes?bucket=B&heartbeat=6s         [app] NDJSON stream of B's changes the store notified (ADR 0033, package changerelay)
//	GET    /metrics                                  Prometheus metrics (admin token)
//	ANY    /http/{app}/{path...}                     HTTP trigger

// AppInfo describes a deployed application.
type AppInfo struct {
	Name        string               `json:"name"`
	Version     int                  `json:"version"`
	DeployedAt  time.Time            `json:"deployed_at"`
	Rev         string               `json:"rev"`
	Functions   []string             `json:"functions"`
	Pipelines   []string             `json:"pipelines"`
	Triggers    int                  `json:"triggers"`
	Instances   []InstanceSummary    `json:"instances"`
	Queue       int                  `json:"queue"`
	Invocations int64                `json:"invocations"`
	Credentials *Credentials         `json:"credentials,omitempty"`
	Spec        string               `json:"spec,omitempty"`
	Stats       map[string]FuncStats `json:"stats,omitempty"`
	Events      []Event              `json:"events,omitempty"`
	KeepAlive   *keepalive.Decision  `json:"keep_alive,omitempty"`
	// Tree is the application's function tree: the agents hosting its
	// deployed version (`hoard apps --trees`); nil when none does.
	Tree *FuncTree `json:"tree,omitempty"`
}

// InstanceSummary is an instance in AppInfo.
type InstanceSummary struct {
	ID       string    `json:"id"`
	Agent    string    `json:"agent"`
	State    string    `json:"state"`
	Endpoint string    `json:"endpoint"`
	Current  bool      `json:"current"` // runs the deployed version
	LastUsed time.Time `json:"last_used"`
}

// Invocation is one invocation's record: what ran where, how it went.
type Invocation struct {
	RequestID string               `json:"request_id"`
	App       string               `json:"app"`
	Function  string               `json:"function"`
	Instance  string               `json:"instance"`
	Trigger   string               `json:"trigger"` // api, http, object, pipeline
	Start     time.Time            `json:"start"`
	Cold      bool                 `json:"cold"`
	OK        bool                 `json:"ok"`
	Result    json.RawMessage      `json:"result,omitempty"`
	Error     *ErrorInfo           `json:"error,omitempty"`
	Log       string               `json:"log"`
	TotalMS   float64              `json:"total_ms"` // queueing and cold start included
	ExecMS    float64              `json:"exec_ms"`  // the function alone
	QueueMS   float64              `json:"queue_ms"` // waiting for an instance (a cold start included)
	Reads     map[string]ReadCount `json:"reads,omitempty"`
	// Memory is how the agent sized the invocation and what it used;
	// Predicted is the memory the function's model gave it (0: none, the
	// model is not mature or could not place the invocation).
	Memory    *InvocationMemory `json:"memory,omitempty"`
	Predicted int64             `json:"predicted,omitempty"`
	// InputMedia is the media features of the input object the event
	// named, as the prediction had them (written through one of the
	// application's cachelets, package media); nil when it had none.
	InputMedia *media.Features `json:"input_media,omitempty"`
	// Route is why the invocation ran where it did.
	Route string `json:"route,omitempty"`
	// NoCache: its misses were not kept (admission by predicted
	// benefit); IO its time with data.
	NoCache     bool     `json:"no_cache,omitempty"`
	IO          *IOTimes `json:"io,omitempty"`
	NotAdmitted int64    `json:"not_admitted,omitempty"`
}

// Admission is a function's admission by predicted benefit, for an
// application with cache.admission: benefit.
type Admission struct {
	// Admit says whether its misses are cached.
	Admit bool `json:"admit"`
	// Share is the median over its recent invocations of extract and
	// load's estimated share of run time (-1 before any).
	Share float64 `json:"share"`
	// Samples is how many invocations the decision is taken over; Benefit
	// how many of them caching helps (share above one half).
	Samples int    `json:"samples"`
	Benefit int    `json:"benefit"`
	Reason  string `json:"reason"`
}

// ModelInfo is a function's memory model as `hoard apps` shows it.
type ModelInfo struct {
	Observed       int     `json:"observed"`
	Samples        int     `json:"samples"`
	Mature         bool    `json:"mature"`
	Evaluated      int     `json:"evaluated"`
	Exact          float64 `json:"exact"`         // share of held-out invocations predicted in their interval
	ExactOrOver    float64 `json:"exact_or_over"` // ... in it or above
	UnderWithinOne float64 `json:"under_within_one"`
	Nodes          int     `json:"nodes"`
	Trainings      int64   `json:"trainings"`
	// TrainedOn is how many invocations the model in use was trained
	// after (Observed counts those learned since, too).
	TrainedOn int `json:"trained_on"`
	// Predicted counts invocations the model sized; Retries those killed
	// for memory and run again at the booked size; UnderPredicted those
	// that used more than the predicted interval.
	Predicted      int64 `json:"predicted"`
	Retries        int64 `json:"retries"`
	UnderPredicted int64 `json:"under_predicted"`
	// PredictedBytes and PeakBytes sum the sized invocations' limits and
	// peaks; CacheGivenBytes what their caches got.
	PredictedBytes  int64 `json:"predicted_bytes"`
	PeakBytes       int64 `json:"peak_bytes"`
	CacheGivenBytes int64 `json:"cache_given_bytes"`
}

// PipelineRun is the outcome of one run of a pipeline.
type PipelineRun struct {
	App      string                 `json:"app"`
	Pipeline string                 `json:"pipeline"`
	RunID    string                 `json:"run_id"`
	OK       bool                   `json:"ok"`
	Error    string                 `json:"error,omitempty"`
	Stages   map[string]*Invocation `json:"stages"`
	TotalMS  float64                `json:"total_ms"`
	// Intermediate is where the run's intermediate objects went; Dropped
	// counts those dropped from cachelets when it ended, Deleted those
	// deleted from the store (delete_intermediate).
	Intermediate *appspec.Location `json:"intermediate,omitempty"`
	Dropped      int               `json:"dropped"`
	Deleted      int               `json:"deleted"`
}

// FuncStats summarises one function's invocations.
type FuncStats struct {
	Invocations int64                `json:"invocations"`
	Errors      int64                `json:"errors"`
	ColdStarts  int64                `json:"cold_starts"`
	P50MS       float64              `json:"p50_ms"`
	P99MS       float64              `json:"p99_ms"`
	Reads       map[string]ReadCount `json:"reads"`
	// Model is the function's memory model; nil before its first
	// invocation was observed.
	Model *ModelInfo `json:"model,omitempty"`
	// Admission is the function's admission decision; nil unless the
	// application admits by benefit.
	Admission *Admission `json:"admission,omitempty"`
}

// Selection is what a pre-warm chose.
type Selection struct {
	Records  int                `json:"records"` // unload records merged
	Window   string             `json:"window"`
	Objects  []prewarm.Selected `json:"objects"`
	Bytes    int64              `json:"bytes"`
	Instance string             `json:"instance,omitempty"`
}

// ScalingInfo is what the bandwidth policy of an application's cachelets
// needs from the platform (GET /v1/apps/APP/scaling): the median measured
// instance load time (nil until an instance was started), the instances
// running and the most the application may have.
type ScalingInfo struct {
	LoadTimeMS   *float64 `json:"load_time_ms"`
	LoadSamples  int      `json:"load_samples"`
	Instances    int      `json:"instances"`
	MaxInstances int      `json:"max_instances"`
}

// Event is something the platform decided about an application: a scale
// decision, a pre-load, a keep-alive policy change. The latest maxEvents
// are kept per application (AppInfo.Events).
type Event struct {
	Time   time.Time `json:"time"`
	Kind   string    `json:"kind"` // scale, preload, prewarm, keepalive, drop
	Detail string    `json:"detail"`
}

// ControllerClient calls a controller. Safe for concurrent use.
type ControllerClient struct{ c caller }

// NewControllerClient returns a client of the controller at url
// (http://host:port) authenticating with token, over hc (nil: a client of
// its own).
func NewControllerClient(url, token string, hc *http.Client) *ControllerClient {
	if hc == nil {
		hc = &http.Client{}
	}
	return &ControllerClient{caller{base: strings.TrimSuffix(url, "/"), token: token, http: hc}}
}

// URL is the controller's base URL.
func (c *ControllerClient) URL() string { return c.c.base }

func appPath(app string) string { return "/v1/apps/" + url.PathEscape(app) }

// Deploy deploys a code package (appspec.PackBlocks's block format, or
// appspec.Pack's tar.gz).
func (c *ControllerClient) Deploy(ctx context.Context, pkg []byte) (*AppInfo, error) {
	var info AppInfo
	if err := c.c.call(ctx, http.MethodPost, "/v1/apps", "application/octet-stream", pkg, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// DeployFrom is Deploy of a package of size bytes that r reads (a file,
// say), streamed as it is read rather than held in memory.
func (c *ControllerClient) DeployFrom(ctx context.Context, r io.Reader, size int64) (*AppInfo, error) {
	var info AppInfo
	if err := c.c.call(ctx, http.MethodPost, "/v1/apps", "application/octet-stream", upload{r, size}, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// Apps lists the deployed applications.
func (c *ControllerClient) Apps(ctx context.Context) ([]AppInfo, error) {
	var out []AppInfo
	err := c.c.call(ctx, http.MethodGet, "/v1/apps", "", nil, &out)
	return out, err
}

// App describes one application, with its spec, credentials and stats.
func (c *ControllerClient) App(ctx context.Context, app string) (*AppInfo, error) {
	var info AppInfo
	if err := c.c.call(ctx, http.MethodGet, appPath(app), "", nil, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// Remove removes an application and unloads its instances.
func (c *ControllerClient) Remove(ctx context.Context, app string) error {
	return c.c.call(ctx, http.MethodDelete, appPath(app), "", nil, nil)
}

// Invoke runs a function with an event (JSON) and returns its record; a
// function's failure is an Invocation with OK false.
func (c *ControllerClient) Invoke(ctx context.Context, app, function string, event json.RawMessage) (*Invocation, error) {
	var rec Invocation
	if err := c.c.call(ctx, http.MethodPost, appPath(app)+"/functions/"+url.PathEscape(function)+"/invoke", "application/json", []byte(event), &rec); err != nil {
		return nil, err
	}
	return &rec, nil
}

// RunPipeline runs a pipeline with an input (JSON).
func (c *ControllerClient) RunPipeline(ctx context.Context, app, pipeline string, input json.RawMessage) (*PipelineRun, error) {
	var run PipelineRun
	if err := c.c.call(ctx, http.MethodPost, appPath(app)+"/pipelines/"+url.PathEscape(pipeline)+"/run", "application/json", []byte(input), &run); err != nil {
		return nil, err
	}
	return &run, nil
}

// LogsQuery selects an application's recent invocations.
type LogsQuery struct {
	Function   string // "" for every function
	N          int    // how many, newest first (0: the controller's default)
	OnlyErrors bool
}

// Logs returns an application's recent invocations.
func (c *ControllerClient) Logs(ctx context.Context, app string, q LogsQuery) ([]*Invocation, error) {
	v := url.Values{}
	if q.Function != "" {
		v.Set("function", q.Function)
	}
	if q.N > 0 {
		v.Set("n", strconv.Itoa(q.N))
	}
	if q.OnlyErrors {
		v.Set("errors", "1")
	}
	path := appPath(app) + "/logs"
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	var out []*Invocation
	err := c.c.call(ctx, http.MethodGet, path, "", nil, &out)
	return out, err
}

// Stats returns an application's statistics by function.
func (c *ControllerClient) Stats(ctx context.Context, app string) (map[string]FuncStats, error) {
	var out map[string]FuncStats
	err := c.c.call(ctx, http.MethodGet, appPath(app)+"/stats", "", nil, &out)
	return out, err
}

// Preload loads an idle instance of an application, pre-warmed when warm.
func (c *ControllerClient) Preload(ctx context.Context, app string, warm bool) (*Selection, error) {
	var sel Selection
	if err := c.c.call(ctx, http.MethodPost, appPath(app)+"/preload?warm="+strconv.FormatBool(warm), "", nil, &sel); err != nil {
		return nil, err
	}
	return &sel, nil
}

// Scaling returns the inputs of an application's bandwidth policy.
func (c *ControllerClient) Scaling(ctx context.Context, app string) (ScalingInfo, error) {
	var si ScalingInfo
	err := c.c.call(ctx, http.MethodGet, appPath(app)+"/scaling", "", nil, &si)
	return si, err
}

// DashboardLogin is a one-time login to the controller's dashboard (POST
// /v1/dashboard/login, admin token only).
type DashboardLogin struct {
	// Path is the login URL's path and query, to append to the
	// controller's address: opening it once, before Expires, sets the
	// browser's session cookie.
	Path    string    `json:"path"`
	Expires time.Time `json:"expires"`
}

// DashboardLogin asks for a one-time login link to the dashboard.
func (c *ControllerClient) DashboardLogin(ctx context.Context) (DashboardLogin, error) {
	var out DashboardLogin
	err := c.c.call(ctx, http.MethodPost, "/v1/dashboard/login", "", nil, &out)
	return out, err
}

// Vote posts an unrequested scale vote; an urgent one acts at once.
func (c *ControllerClient) Vote(ctx context.Context, app string, v scaling.Vote) error {
	return c.c.call(ctx, http.MethodPost, appPath(app)+"/votes", "", v, nil)
}

// FuncTree is an application's function tree (FaaSNet §3): a balanced
// binary tree of the agents hosting an instance of its deployed version,
// by agent ID.
type FuncTree struct {
	// Rev is the package digest it distributes.
	Rev    string `json:"rev"`
	Root   string `json:"root"`
	Height int    `json:"height"`
	// Shape is the tree written as "a(b(d,e),c)".
	Shape string     `json:"shape"`
	Nodes []TreeNode `json:"nodes"`
}

// TreeNode is one agent of a function tree.
type TreeNode struct {
	ID       string   `json:"id"`
	Parent   string   `json:"parent,omitempty"`
	Children []string `json:"children,omitempty"`
}
