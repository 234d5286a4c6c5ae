//go:build integration

// End-to-end tests of the platform through its real parts: a MinIO with
// hoard's webhook target, an embedded etcd, the controller and a node
// agent, instances whose cachelets are the real hoard binary ($HOARD_BIN,
// or <module root>/bin/hoard) in memory cgroups, and Python workers from
// the project's virtualenv running boto3 functions written for AWS.
package rig

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/appspec"
	"github.com/hoard-io/hoard/internal/controller"
	"github.com/hoard-io/hoard/internal/etcdauth"
	"github.com/hoard-io/hoard/internal/etcdembed"
	"github.com/hoard-io/hoard/internal/localstore"
	etcdmembership "github.com/hoard-io/hoard/internal/membership/etcd"
	"github.com/hoard-io/hoard/internal/netshape"
	"github.com/hoard-io/hoard/internal/store"
	s3store "github.com/hoard-io/hoard/internal/store/s3"
)

const testSpec = `
name: t1
memory: 96MiB
timeout: 20s
keep_alive: 1h
max_instances: 3
buckets: {data: read-write, trig: read-write}
cache: {budget: 32MiB}
functions:
  upper: {handler: fns.upper}
  put: {handler: fns.put}
  fail: {handler: fns.fail}
  slow: {handler: fns.slow, timeout: 1s}
  hog: {handler: fns.hog}
  read: {handler: fns.read}
  on_upload: {handler: fns.on_upload}
  stage: {handler: fns.stage}
triggers:
  - {http: /upper, function: upper}
  - {object: {bucket: trig, prefix: in/}, function: on_upload}
pipelines:
  p:
    intermediate: {bucket: data, prefix: tmp/}
    delete_intermediate: true
    stages:
      - {name: a, function: stage, args: {n: 1}}
      - {name: b, function: stage, after: [a], args: {n: 2}}
      - {name: c, function: stage, after: [a], args: {n: 3}}
      - {name: d, function: stage, after: [b, c], args: {n: 4}}
`

// The functions are plain AWS Lambda Python: boto3.client("s3") with no
// endpoint or credentials in the code.
const testFns = `
import json, os, time, urllib.parse
import boto3

s3 = boto3.client("s3")

def upper(event, context):
    req = json.loads(event["body"]) if "body" in event else event
    body = s3.get_object(Bucket=req["bucket"], Key=req["key"])["Body"].read()
    s3.put_object(Bucket=req["bucket"], Key="out/" + req["key"], Body=body.upper())
    print("upper", req["key"], len(body))
    if "body" in event:
        return {"statusCode": 201, "headers": {"content-type": "text/plain"}, "body": body.upper().decode()}
    return {"size": len(body), "request_id": context.aws_request_id, "memory": context.memory_limit_in_mb,
            "instance": os.environ["HOARD_INSTANCE"]}

def put(event, context):
    s3.put_object(Bucket=event["bucket"], Key=event["key"], Body=event["body"].encode())
    return "ok"

def fail(event, context):
    print("about to fail")
    raise ValueError("bad input: " + str(event.get("x")))

def slow(event, context):
    print("sleeping", flush=True)
    time.sleep(30)

def hog(event, context):
    print("allocating", event["mib"], "MiB", flush=True)
    b = bytearray(event["mib"] << 20)
    for i in range(0, len(b), 4096):
        b[i] = 1
    return len(b)

def read(event, context):
    time.sleep(event.get("hold", 0))
    out = {k: len(s3.get_object(Bucket=event["bucket"], Key=k)["Body"].read()) for k in event["keys"]}
    return {"sizes": out, "instance": os.environ["HOARD_INSTANCE"]}

def on_upload(event, context):
    rec = event["Records"][0]["s3"]
    key = urllib.parse.unquote_plus(rec["object"]["key"])
    s3.put_object(Bucket="trig", Key="seen/" + key.replace("/", "_"), Body=json.dumps(event).encode())
    return key

def stage(event, context):
    p = event["pipeline"]
    loc = p["intermediate"]
    for st in event["results"]:
        s3.get_object(Bucket=loc["bucket"], Key=loc["prefix"] + st)["Body"].read()
    s3.put_object(Bucket=loc["bucket"], Key=loc["prefix"] + p["stage"], Body=b"x" * 1000 * event["args"]["n"])
    return event["args"]["n"] + sum(event["results"].values())
`

type env struct {
	p     *Platform
	st    store.Store
	cfg   Config
	minio *localstore.Server
	etcd  *etcdembed.Server
}

func hoardBinary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("HOARD_BIN"); p != "" {
		return p
	}
	wd, _ := os.Getwd()
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			p := filepath.Join(dir, "bin", "hoard")
			if _, err := os.Stat(p); err != nil {
				t.Fatalf("hoard binary %s missing: run `make build` or set $HOARD_BIN", p)
			}
			return p
		}
		if filepath.Dir(dir) == dir {
			t.Fatal("no go.mod above the working directory; set $HOARD_BIN")
		}
	}
}

// testEventsToken is what the store's webhook posts events with.
const testEventsToken = "store-events-token-0123456789"

func start(t testing.TB) *env {
	t.Helper()
	return startShaped(t, netshape.Link{})
}

// startShaped starts the platform with the store behind a toxiproxy link
// shaped as link (both ways) when link is shaped, its Config changed by
// opts.
func startShaped(t testing.TB, link netshape.Link, opts ...func(*Config)) *env {
	t.Helper()
	return startPlatform(t, link, true, opts...)
}

// startPlatform is startShaped, MinIO's webhook queueing its events on
// disk (and sending them on its 3-second poll) when queued.
func startPlatform(t testing.TB, link netshape.Link, queued bool, opts ...func(*Config)) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	token := "controller-token-0123456789"
	queueDir := ""
	if queued {
		queueDir = filepath.Join(dir, "minio-events")
	}
	minio, err := localstore.StartMinIO(ctx, localstore.Config{
		DataDir: filepath.Join(dir, "minio"), Addr: "127.0.0.1:0", AccessKey: "storekey", SecretKey: "storesecret123",
		Env: MinIOWebhookEnv("http://"+ln.Addr().String(), testEventsToken, queueDir),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { minio.Close() })
	etcd, err := etcdembed.Start(ctx, etcdembed.Config{Dir: dir, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(etcd.Close)
	// etcd with authentication, as hoard up runs it: the platform signs
	// in as root and gives each instance an etcd user of its own.
	root := etcdauth.Credentials{Username: etcdauth.Root, Password: etcdauth.NewPassword()}
	if err := etcdauth.Enable(ctx, etcd.Endpoints(), root.Password); err != nil {
		t.Fatal(err)
	}
	endpoint := minio.Endpoint()
	if link.Shaped() {
		shaper, err := netshape.Start(ctx, netshape.Config{Logger: log, LogFile: filepath.Join(dir, "toxiproxy.log")})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { shaper.Close() })
		proxy, err := shaper.Shape(ctx, "store", endpoint, link, link)
		if err != nil {
			t.Fatal(err)
		}
		endpoint = proxy.Endpoint
	}
	cfg := Config{
		Controller: true, ControllerListener: ln, Agent: true, Dir: dir, HoardBin: hoardBinary(t),
		EtcdEndpoints: etcd.Endpoints(), EtcdCredentials: root, StoreEndpoint: endpoint, StoreAccessKey: "storekey", StoreSecretKey: "storesecret123",
		ControllerToken: token, AgentToken: "agent-token-0123456789", StoreNotifications: true, StoreIdentities: "minio", StoreEventsToken: testEventsToken,
	}
	for _, o := range opts {
		o(&cfg)
	}
	p, err := Start(ctx, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	st, err := s3store.New(s3store.Config{Endpoint: minio.Endpoint(), AccessKey: "storekey", SecretKey: "storesecret123"}, log)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"data", "trig"} {
		if err := st.CreateBucket(ctx, b, ""); err != nil {
			t.Fatal(err)
		}
	}
	return &env{p: p, st: st, cfg: cfg, minio: minio, etcd: etcd}
}

func (e *env) deploy(t *testing.T, spec string) *api.AppInfo {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, appspec.FileName), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "fns.py"), []byte(testFns), 0o644); err != nil {
		t.Fatal(err)
	}
	pkg, err := appspec.PackBlocks(dir)
	if err != nil {
		t.Fatal(err)
	}
	info, err := e.p.Controller.Deploy(context.Background(), pkg.Data)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

func (e *env) put(t *testing.T, bucket, key, body string) {
	t.Helper()
	if _, err := e.st.Put(context.Background(), bucket, key, strings.NewReader(body), int64(len(body)), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (e *env) get(bucket, key string) (string, error) {
	body, _, _, err := e.st.Get(context.Background(), bucket, key, store.GetOptions{})
	if err != nil {
		return "", err
	}
	defer body.Close()
	b, err := io.ReadAll(body)
	return string(b), err
}

func invoke(t *testing.T, c *controller.Controller, app, fn string, event any) *api.Invocation {
	t.Helper()
	ev, _ := json.Marshal(event)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rec, err := c.Invoke(ctx, app, fn, ev, "test")
	if err != nil {
		t.Fatalf("invoke %s/%s: %v", app, fn, err)
	}
	return rec
}

func members(t *testing.T, e *env, app string) []string {
	t.Helper()
	reg, err := etcdmembership.New(etcdmembership.Config{Client: e.p.etcd})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch, err := reg.Watch(ctx, app)
	if err != nil {
		t.Fatal(err)
	}
	return (<-ch).IDs()
}

func eventually(t *testing.T, what string, timeout time.Duration, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s", what, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestPlatform(t *testing.T) {
	e := start(t)
	c := e.p.Controller
	e.deploy(t, testSpec)
	e.put(t, "data", "hello.txt", "hello, hoard")

	t.Run("unmodified boto3 function", func(t *testing.T) {
		rec := invoke(t, c, "t1", "upper", map[string]string{"bucket": "data", "key": "hello.txt"})
		if !rec.OK || !rec.Cold {
			t.Fatalf("first invocation: ok %v cold %v error %+v log %s", rec.OK, rec.Cold, rec.Error, rec.Log)
		}
		var out struct {
			Size      int    `json:"size"`
			RequestID string `json:"request_id"`
			Memory    string `json:"memory"` // a string, as in Lambda
		}
		json.Unmarshal(rec.Result, &out)
		if out.Size != 12 || out.RequestID != rec.RequestID || out.Memory != "96" {
			t.Errorf("result %s (request %s)", rec.Result, rec.RequestID)
		}
		if got, _ := e.get("data", "out/hello.txt"); got != "HELLO, HOARD" {
			t.Errorf("out/hello.txt = %q", got)
		}
		if !strings.Contains(rec.Log, "upper hello.txt 12") {
			t.Errorf("log %q", rec.Log)
		}
		if rec.Reads["local_miss"].Bytes != 12 && rec.Reads["remote_miss"].Bytes != 12 {
			t.Errorf("reads %+v: want the 12-byte miss", rec.Reads)
		}
		again := invoke(t, c, "t1", "upper", map[string]string{"bucket": "data", "key": "hello.txt"})
		if !again.OK || again.Cold || again.Instance != rec.Instance || again.Reads["local_hit"].Count != 1 {
			t.Errorf("second invocation: ok %v cold %v instance %s (first %s) reads %+v", again.OK, again.Cold, again.Instance, rec.Instance, again.Reads)
		}
	})

	t.Run("errors", func(t *testing.T) {
		rec := invoke(t, c, "t1", "fail", map[string]int{"x": 7})
		if rec.OK || rec.Error.Type != "ValueError" || rec.Error.Message != "bad input: 7" || !strings.Contains(rec.Error.Traceback, "fns.py") || !strings.Contains(rec.Log, "about to fail") {
			t.Errorf("exception: %+v log %q", rec.Error, rec.Log)
		}
		rec = invoke(t, c, "t1", "slow", nil)
		if rec.OK || rec.Error.Type != "Timeout" || !strings.Contains(rec.Log, "sleeping") {
			t.Errorf("timeout: %+v log %q", rec.Error, rec.Log)
		}
		if _, err := c.Invoke(context.Background(), "t1", "nope", nil, "test"); err == nil {
			t.Error("unknown function: no error")
		}
		if _, err := c.Invoke(context.Background(), "t1", "upper", json.RawMessage("{bad"), "test"); err == nil {
			t.Error("bad JSON: no error")
		}
	})

	t.Run("memory limit", func(t *testing.T) {
		// 96 MiB booked + 32 MiB cache: 400 MiB cannot fit.
		rec := invoke(t, c, "t1", "hog", map[string]int{"mib": 400})
		if rec.OK || rec.Error.Type != "OutOfMemory" || !strings.Contains(rec.Error.Message, "memory limit") || !strings.Contains(rec.Log, "allocating 400 MiB") {
			t.Fatalf("over-allocation: %+v log %q", rec.Error, rec.Log)
		}
		// The instance recovers: a fresh worker, the same cachelet.
		rec2 := invoke(t, c, "t1", "hog", map[string]int{"mib": 16})
		if !rec2.OK || rec2.Instance != rec.Instance {
			t.Errorf("after the OOM kill: ok %v instance %s (was %s) error %+v", rec2.OK, rec2.Instance, rec.Instance, rec2.Error)
		}
	})

	t.Run("http trigger", func(t *testing.T) {
		resp, err := http.Post(e.p.ControllerURL+"/http/t1/upper", "application/json", strings.NewReader(`{"bucket":"data","key":"hello.txt"}`))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 201 || string(body) != "HELLO, HOARD" || resp.Header.Get("Content-Type") != "text/plain" {
			t.Errorf("HTTP trigger: %d %q %v", resp.StatusCode, body, resp.Header)
		}
		resp, _ = http.Post(e.p.ControllerURL+"/http/t1/nothing", "application/json", nil)
		if resp.StatusCode != 404 {
			t.Errorf("unbound path: %d", resp.StatusCode)
		}
		resp.Body.Close()
		// The API needs the token; HTTP triggers do not.
		resp, _ = http.Get(e.p.ControllerURL + "/v1/apps")
		if resp.StatusCode != 401 {
			t.Errorf("API without a token: %d", resp.StatusCode)
		}
		resp.Body.Close()
	})

	t.Run("object triggers", func(t *testing.T) {
		// Written through a cachelet (by a function): a cache trigger.
		rec := invoke(t, c, "t1", "put", map[string]string{"bucket": "trig", "key": "in/via cache", "body": "x"})
		if !rec.OK {
			t.Fatalf("put: %+v", rec.Error)
		}
		// Written to the store directly: the store's notification.
		e.put(t, "trig", "in/direct", "y")
		e.put(t, "trig", "other/ignored", "z")
		for _, key := range []string{"seen/in_via cache", "seen/in_direct"} {
			eventually(t, key, 30*time.Second, func() bool { _, err := e.get("trig", key); return err == nil })
		}
		// Each object fired once, though the cachelet and the store both
		// reported the first.
		time.Sleep(2 * time.Second)
		logs, _ := c.Logs("t1", "on_upload", 100, false)
		count := map[string]int{}
		for _, r := range logs {
			var k string
			json.Unmarshal(r.Result, &k)
			count[k]++
		}
		if count["in/via cache"] != 1 || count["in/direct"] != 1 || len(count) != 2 {
			t.Errorf("on_upload ran for %v", count)
		}
	})

	t.Run("pipeline", func(t *testing.T) {
		run, err := c.RunPipeline(context.Background(), "t1", "p", json.RawMessage(`{}`), "test")
		if err != nil {
			t.Fatal(err)
		}
		if !run.OK {
			t.Fatalf("run: %s", run.Error)
		}
		var d int
		json.Unmarshal(run.Stages["d"].Result, &d)
		if d != 12 { // d = 4 + a (1) + b (2+1) + c (3+1)
			t.Errorf("stage d = %d; want 12", d)
		}
		if run.Dropped < 4 || run.Deleted != 4 {
			t.Errorf("intermediate: dropped %d from caches, deleted %d from the store; want >= 4 and 4", run.Dropped, run.Deleted)
		}
		if _, err := e.get("data", run.Intermediate.Prefix+"a"); err == nil {
			t.Error("an intermediate object is still in the store")
		}
		// A failing stage stops the run and the stages after it.
		bad := strings.Replace(testSpec, "{name: b, function: stage,", "{name: b, function: fail,", 1)
		e.deploy(t, bad)
		defer e.deploy(t, testSpec)
		run, err = c.RunPipeline(context.Background(), "t1", "p", json.RawMessage(`{}`), "test")
		if err != nil {
			t.Fatal(err)
		}
		if run.OK || run.Stages["d"].Error == nil || run.Stages["d"].Error.Type != "NotRun" || !strings.Contains(run.Error, "stage b") {
			t.Errorf("failed run: ok %v error %q d %+v", run.OK, run.Error, run.Stages["d"].Error)
		}
	})

	t.Run("instances share one ring", func(t *testing.T) {
		var keys []string
		for i := range 12 {
			k := fmt.Sprintf("ring/%d", i)
			e.put(t, "data", k, strings.Repeat("r", 1000+i))
			keys = append(keys, k)
		}
		round := func() (instances map[string]bool, reads map[string]int64) {
			instances, reads = map[string]bool{}, map[string]int64{}
			var mu sync.Mutex
			var wg sync.WaitGroup
			for range 3 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rec := invoke(t, c, "t1", "read", map[string]any{"bucket": "data", "keys": keys, "hold": 1.0})
					if !rec.OK {
						t.Errorf("read: %+v %s", rec.Error, rec.Log)
						return
					}
					mu.Lock()
					defer mu.Unlock()
					instances[rec.Instance] = true
					for k, v := range rec.Reads {
						reads[k] += v.Count
					}
				}()
			}
			wg.Wait()
			return
		}
		ins, reads := round()
		if len(ins) != 3 {
			t.Fatalf("3 concurrent invocations ran on %d instances; want 3 (max_instances)", len(ins))
		}
		if m := members(t, e, "t1"); len(m) != 3 {
			t.Errorf("ring members %v; want the 3 instances", m)
		}
		if reads["remote_hit"]+reads["remote_miss"] == 0 {
			t.Errorf("reads %v: no remote reads across 3 cachelets", reads)
		}
		_, reads = round()
		if reads["local_hit"] != 36 {
			t.Errorf("second round reads %v; want 36 local hits", reads)
		}
	})

	t.Run("restarted controller resumes", func(t *testing.T) {
		before := map[string]bool{}
		for _, a := range c.Apps() {
			for _, in := range a.Instances {
				before[in.ID] = true
			}
		}
		c.Close()
		ids, err := ParseStoreIdentities(e.cfg.StoreIdentities, e.cfg.StoreEndpoint, e.cfg.StoreAccessKey, e.cfg.StoreSecretKey, nil)
		if err != nil {
			t.Fatal(err)
		}
		c2, err := controller.New(context.Background(), controller.Config{Etcd: e.p.etcd, Store: e.st, Identities: ids, AgentToken: e.cfg.AgentToken,
			EtcdUsers: etcdauth.NewAdmin(e.p.etcd, "")}, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		defer c2.Close()
		rec := invoke(t, c2, "t1", "upper", map[string]string{"bucket": "data", "key": "hello.txt"})
		if !rec.OK || rec.Cold || !before[rec.Instance] {
			t.Errorf("after restart: ok %v cold %v instance %s (known %v)", rec.OK, rec.Cold, rec.Instance, before)
		}
	})
}

func TestKeepAlive(t *testing.T) {
	e := start(t)
	c := e.p.Controller
	e.deploy(t, strings.Replace(strings.Replace(testSpec, "keep_alive: 1h", "keep_alive: 2s", 1), "name: t1", "name: t2", 1))
	e.put(t, "data", "k", "v")
	rec := invoke(t, c, "t2", "upper", map[string]string{"bucket": "data", "key": "k"})
	if !rec.OK || !rec.Cold {
		t.Fatalf("first: ok %v cold %v %+v", rec.OK, rec.Cold, rec.Error)
	}
	if m := members(t, e, "t2"); len(m) != 1 {
		t.Fatalf("members %v", m)
	}
	eventually(t, "unload after keep-alive", 20*time.Second, func() bool {
		a := c.Apps()
		return len(a) == 1 && len(a[0].Instances) == 0 && len(e.p.Agent.Instances()) == 0
	})
	// Its cachelet left the ring.
	eventually(t, "cachelet left the ring", 10*time.Second, func() bool { return len(members(t, e, "t2")) == 0 })
	rec = invoke(t, c, "t2", "upper", map[string]string{"bucket": "data", "key": "k"})
	if !rec.OK || !rec.Cold || rec.Instance == "" {
		t.Errorf("after unload: ok %v cold %v", rec.OK, rec.Cold)
	}
}

// TestPrewarm: an application's access history, saved when its instance
// unloads, pre-warms the next instance, whose first read is then a local
// hit; loaded but not warmed, it is a miss.
func TestPrewarm(t *testing.T) {
	e := start(t)
	c := e.p.Controller
	e.deploy(t, strings.Replace(strings.Replace(testSpec, "keep_alive: 1h", "keep_alive: 2s", 1), "name: t1", "name: t3", 1))
	keys := []string{"model", "labels"}
	for _, k := range keys {
		e.put(t, "data", k, strings.Repeat(k, 50000))
	}
	e.put(t, "data", "once", "read once")
	read := map[string]any{"bucket": "data", "keys": keys}
	for range 2 {
		if rec := invoke(t, c, "t3", "read", read); !rec.OK {
			t.Fatalf("read: %+v", rec.Error)
		}
	}
	invoke(t, c, "t3", "read", map[string]any{"bucket": "data", "keys": []string{"once"}})
	unloaded := func() bool { a := c.Apps(); return len(a[0].Instances) == 0 && len(e.p.Agent.Instances()) == 0 }
	eventually(t, "unload after keep-alive", 20*time.Second, unloaded)

	// Loaded, not warmed: the first read misses.
	if _, err := c.Preload(context.Background(), "t3", false); err != nil {
		t.Fatal(err)
	}
	rec := invoke(t, c, "t3", "read", read)
	if rec.Cold || rec.Reads["local_hit"].Count != 0 {
		t.Errorf("loaded, not warmed: cold %v reads %+v; want a warm start that misses", rec.Cold, rec.Reads)
	}
	eventually(t, "unload after keep-alive", 20*time.Second, unloaded)

	// Pre-warmed: the history selects model and labels (read more than
	// once), not "once"; the first read is all local hits.
	sel, err := c.Preload(context.Background(), "t3", true)
	if err != nil {
		t.Fatal(err)
	}
	picked := map[string]bool{}
	for _, o := range sel.Objects {
		picked[o.Key] = true
	}
	if !picked["model"] || !picked["labels"] || picked["once"] || sel.Records < 2 {
		t.Fatalf("selection %+v from %d records", picked, sel.Records)
	}
	eventually(t, "pre-warm done", 20*time.Second, func() bool {
		ins := e.p.Agent.Instances()
		return len(ins) == 1 && !ins[0].Prewarm.Running && ins[0].Prewarm.Fetched == 2
	})
	rec = invoke(t, c, "t3", "read", read)
	if rec.Cold || rec.Reads["local_hit"].Count != 2 || rec.Reads["local_miss"].Count != 0 {
		t.Errorf("pre-warmed: cold %v reads %+v; want 2 local hits", rec.Cold, rec.Reads)
	}
}

// scrape reads the unlabelled series of a Prometheus endpoint.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return parseMetrics(string(body))
}

// parseMetrics maps each sample of a metrics page (name and labels) to
// its value.
func parseMetrics(body string) map[string]float64 {
	out := map[string]float64{}
	for line := range strings.Lines(body) {
		var name string
		var v float64
		if !strings.HasPrefix(line, "#") {
			if _, err := fmt.Sscan(line, &name, &v); err == nil {
				out[name] = v
			}
		}
	}
	return out
}
