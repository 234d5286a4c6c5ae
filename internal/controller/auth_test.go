package controller

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/hoard-io/hoard/internal/api"
)

const (
	specA = "name: a\nbuckets: {abucket: read-write, atmp: read-write}\nfunctions: {f: {handler: m.h}}\ntriggers: [{object: {bucket: abucket}, function: f}]\n" +
		"pipelines: {p: {intermediate: {bucket: atmp}, stages: [{name: s, function: f}]}}\n"
	specB = "name: b\nbuckets: {bbucket: read-write}\nfunctions: {f: {handler: m.h}}\ntriggers: [{object: {bucket: bbucket}, function: f}]\n"
)

// event is a cachelet's object-created event for bucket/key, naming app
// (none when empty).
func event(app, bucket, key string) string {
	origin := ""
	if app != "" {
		origin = `, "hoard": {"app": "` + app + `", "cachelet": "x"}`
	}
	return `{"Records": [{"eventSource": "hoard:s3", "eventName": "ObjectCreated:Put", "s3": {"bucket": {"name": "` + bucket +
		`"}, "object": {"key": "` + key + `", "eTag": "e"}}}]` + origin + `}`
}

// TestTokenScopes is who may call what: the admin token everything, an
// application's token its own scaling hints, votes and events only, the
// store's token events only, no token nothing but /healthz and the HTTP
// triggers.
func TestTokenScopes(t *testing.T) {
	const storeTok = "store-events-0123456789"
	c, _, _ := setupWith(t, Config{StoreEventsToken: storeTok})
	ctx := context.Background()
	for _, s := range []string{specA, specB} {
		if _, err := c.Deploy(ctx, pkg(t, s)); err != nil {
			t.Fatal(err)
		}
	}
	credsA, _ := c.Credentials("a")
	credsB, _ := c.Credentials("b")
	if credsA.PlatformToken == "" || credsA.PlatformToken == credsB.PlatformToken {
		t.Fatalf("application tokens: %q, %q", credsA.PlatformToken, credsB.PlatformToken)
	}
	const admin = "admin-token-0123456789"
	srv := httptest.NewServer(c.Handler(admin, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("hoard_metrics 1\n"))
	})))
	t.Cleanup(srv.Close)
	tokA, tokB, agentTok := credsA.PlatformToken, credsB.PlatformToken, c.cfg.AgentToken
	vote := `{"policy": "bandwidth", "delta": 1}`

	for _, tc := range []struct {
		name, token, method, path, body string
		want                            int
	}{
		{"admin scaling", admin, "GET", "/v1/apps/a/scaling", "", 200},
		{"admin vote", admin, "POST", "/v1/apps/b/votes", vote, 202},
		{"admin event", admin, "POST", "/v1/events", event("", "bbucket", "k1"), 200},
		{"admin deploys", admin, "POST", "/v1/apps", "not a package", 400},
		{"admin app", admin, "GET", "/v1/apps/a", "", 200},
		{"admin metrics", admin, "GET", "/metrics", "", 200},

		{"own scaling", tokA, "GET", "/v1/apps/a/scaling", "", 200},
		{"own vote", tokA, "POST", "/v1/apps/a/votes", vote, 202},
		{"own event", tokA, "POST", "/v1/events", event("a", "abucket", "k2"), 200},
		{"own event, no origin", tokA, "POST", "/v1/events", event("", "abucket", "k3"), 200},
		{"own intermediate bucket", tokA, "POST", "/v1/events", event("a", "atmp", "k4"), 200},
		{"a bucket no trigger watches", tokA, "POST", "/v1/events", event("a", "elsewhere", "k5"), 200},
		{"other's scaling", tokA, "GET", "/v1/apps/b/scaling", "", 403},
		{"other's vote", tokA, "POST", "/v1/apps/b/votes", vote, 403},
		{"event naming another app", tokA, "POST", "/v1/events", event("b", "abucket", "k6"), 403},
		{"event in another app's bucket", tokA, "POST", "/v1/events", event("a", "bbucket", "k7"), 403},
		{"event in another app's bucket, no origin", tokA, "POST", "/v1/events", event("", "bbucket", "k8"), 403},
		{"deploy", tokA, "POST", "/v1/apps", "not a package", 403},
		{"redeploy own", tokA, "POST", "/v1/apps", specA, 403},
		{"own app record (credentials)", tokA, "GET", "/v1/apps/a", "", 403},
		{"list apps", tokA, "GET", "/v1/apps", "", 403},
		{"remove own", tokA, "DELETE", "/v1/apps/a", "", 403},
		{"invoke own", tokA, "POST", "/v1/apps/a/functions/f/invoke", "{}", 403},
		{"run pipeline", tokA, "POST", "/v1/apps/a/pipelines/p/run", "{}", 403},
		{"own logs", tokA, "GET", "/v1/apps/a/logs", "", 403},
		{"preload own", tokA, "POST", "/v1/apps/a/preload", "", 403},
		{"own stats", tokA, "GET", "/v1/apps/a/stats", "", 403},
		{"metrics", tokA, "GET", "/metrics", "", 403},
		{"vote with scaling's method", tokA, "GET", "/v1/apps/a/votes", "", 403},
		{"dot segments", tokA, "POST", "/v1/apps/a/../b/votes", vote, 403},
		{"encoded slash", tokA, "POST", "/v1/apps/a%2F..%2Fb/votes", vote, 403},
		{"b's own vote", tokB, "POST", "/v1/apps/b/votes", vote, 202},
		{"b's event in a's bucket", tokB, "POST", "/v1/events", event("b", "abucket", "k9"), 403},

		{"store's event", storeTok, "POST", "/v1/events", event("", "bbucket", "k11"), 200},
		{"store's event naming an app", storeTok, "POST", "/v1/events", event("b", "abucket", "k12"), 200},
		{"store scaling", storeTok, "GET", "/v1/apps/a/scaling", "", 403},
		{"store vote", storeTok, "POST", "/v1/apps/a/votes", vote, 403},
		{"store deploys", storeTok, "POST", "/v1/apps", "not a package", 403},
		{"store metrics", storeTok, "GET", "/metrics", "", 403},

		{"agent token", agentTok, "GET", "/v1/apps/a/scaling", "", 401},
		{"no token", "", "GET", "/v1/apps/a/scaling", "", 401},
		{"no token, metrics", "", "GET", "/metrics", "", 401},
		{"no token, event", "", "POST", "/v1/events", event("a", "abucket", "k10"), 401},
		{"wrong token", "nope", "POST", "/v1/apps/a/votes", vote, 401},
		{"token with a suffix", tokA + "x", "POST", "/v1/apps/a/votes", vote, 401},
		{"healthz", "", "GET", "/healthz", "", 200},
		{"http trigger", "", "GET", "/http/a/none", "", 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader(tc.body))
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("%s %s: %d, want %d", tc.method, tc.path, resp.StatusCode, tc.want)
			}
		})
	}
}

// TestScopedEventMarksNothing: a refused event does not mark its object
// as seen, so the real write's notification still fires.
func TestScopedEventMarksNothing(t *testing.T) {
	c, _, _ := setup(t)
	ctx := context.Background()
	for _, s := range []string{specA, specB} {
		if _, err := c.Deploy(ctx, pkg(t, s)); err != nil {
			t.Fatal(err)
		}
	}
	ev := func(app, bucket string) *S3Event {
		var e S3Event
		if err := json.Unmarshal([]byte(event(app, bucket, "same")), &e); err != nil {
			t.Fatal(err)
		}
		return &e
	}
	if _, err := c.HandleEventAs(ev("a", "bbucket"), "a"); err == nil {
		t.Fatal("a's token fired b's bucket")
	}
	if n, err := c.HandleEventAs(ev("b", "bbucket"), "b"); err != nil || n != 1 {
		t.Fatalf("b's own event after a's refused one: fired %d, %v", n, err)
	}
}

// fakeUsers is an EtcdUsers in memory.
type fakeUsers struct {
	mu    sync.Mutex
	users map[string]api.EtcdCredentials // instance ID -> user
}

func (f *fakeUsers) AddInstance(_ context.Context, app, id string) (api.EtcdCredentials, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := api.EtcdCredentials{Username: "hoard-instance:" + id, Password: randHex(8)}
	f.users[id] = c
	return c, nil
}

func (f *fakeUsers) RemoveInstance(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.users, id)
	return nil
}

func (f *fakeUsers) Instances(context.Context) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []string
	for id := range f.users {
		ids = append(ids, id)
	}
	return ids, nil
}

func (f *fakeUsers) get(id string) (api.EtcdCredentials, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.users[id]
	return c, ok
}

// TestInstanceEtcdUsers: each instance gets an etcd user of its own
// before it starts, carried in the start request, removed when it is
// unloaded; users no agent runs are swept when the controller starts.
func TestInstanceEtcdUsers(t *testing.T) {
	users := &fakeUsers{users: map[string]api.EtcdCredentials{"stale-1-abc": {Username: "hoard-instance:stale-1-abc"}}}
	c, fa, _ := setupWith(t, Config{EtcdUsers: users})
	if _, ok := users.get("stale-1-abc"); ok {
		t.Error("a gone instance's user survived the controller's start")
	}
	ctx := context.Background()
	if _, err := c.Deploy(ctx, pkg(t, spec)); err != nil {
		t.Fatal(err)
	}
	rec, err := c.Invoke(ctx, "app", "f", json.RawMessage(`{"x": 1}`), "test")
	if err != nil || !rec.OK {
		t.Fatalf("invoke: %+v, %v", rec, err)
	}
	got, ok := users.get(rec.Instance)
	sent := fa.etcd.Load()
	if !ok || sent == nil || *sent != got {
		t.Fatalf("instance %s: user %+v (%v), start request carried %+v", rec.Instance, got, ok, sent)
	}
	if err := c.Remove(ctx, "app"); err != nil {
		t.Fatal(err)
	}
	if _, ok := users.get(rec.Instance); ok {
		t.Error("an unloaded instance's etcd user survived")
	}
}
