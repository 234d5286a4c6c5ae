//go:build integration

package rig

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hoard-io/hoard/internal/etcdauth"
	etcdmembership "github.com/hoard-io/hoard/internal/membership/etcd"
)

// TestControlPlaneAuth runs the platform with etcd's authentication on
// (ADR 15): every instance has an etcd user of its own while it lives,
// and its application's token reaches only its own scaling hints and
// votes on the controller; the controller's and the agent's /metrics
// want their tokens.
func TestControlPlaneAuth(t *testing.T) {
	e := start(t)
	e.deploy(t, testSpec)
	e.deploy(t, "name: other\nfunctions: {f: {handler: fns.upper}}\n")
	e.put(t, "data", "hello.txt", "hello, hoard")
	rec := invoke(t, e.p.Controller, "t1", "upper", map[string]string{"bucket": "data", "key": "hello.txt"})
	if !rec.OK {
		t.Fatalf("invocation: %+v", rec.Error)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := etcdauth.NewAdmin(e.p.etcd, "")
	ids, err := admin.Instances(ctx)
	if err != nil || !slices.Contains(ids, rec.Instance) {
		t.Fatalf("instances with etcd users: %v, %v; want %s among them", ids, err, rec.Instance)
	}
	if got := members(t, e, "t1"); !slices.Contains(got, rec.Instance) {
		t.Fatalf("ring t1: %v, want %s in it", got, rec.Instance)
	}
	anon, err := etcdauth.Client(e.etcd.Endpoints(), etcdauth.Credentials{})
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	if _, err := anon.Get(ctx, "/hoard/platform/apps/t1"); err == nil {
		t.Error("an unauthenticated etcd client read an application's record")
	}
	if _, err := anon.Put(ctx, etcdmembership.MemberKey("", "t1", "rogue"), `{"peer_addr":"127.0.0.1:1","s3_addr":"127.0.0.1:2"}`); err == nil {
		t.Error("an unauthenticated etcd client planted a member")
	}

	creds, err := e.p.Controller.Credentials("t1")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		token, method, path, body string
		want                      int
	}{
		{creds.PlatformToken, "GET", "/v1/apps/t1/scaling", "", 200},
		{creds.PlatformToken, "GET", "/v1/apps/other/scaling", "", 403},
		{creds.PlatformToken, "POST", "/v1/apps/other/votes", `{"policy": "bandwidth", "delta": 1}`, 403},
		{creds.PlatformToken, "POST", "/v1/apps", "", 403},
		{creds.PlatformToken, "GET", "/v1/apps/t1", "", 403},
		{creds.PlatformToken, "GET", "/metrics", "", 403},
		{"", "GET", "/metrics", "", 401},
		{testEventsToken, "GET", "/metrics", "", 403},
		{testEventsToken, "GET", "/v1/apps/t1/scaling", "", 403},
		{e.cfg.ControllerToken, "GET", "/metrics", "", 200},
	} {
		req, _ := http.NewRequestWithContext(ctx, tc.method, e.p.ControllerURL+tc.path, strings.NewReader(tc.body))
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("controller %s %s: %d, want %d", tc.method, tc.path, resp.StatusCode, tc.want)
		}
	}
	for _, tc := range []struct {
		token string
		want  int
	}{{"", 401}, {creds.PlatformToken, 401}, {e.cfg.ControllerToken, 401}, {e.cfg.AgentToken, 200}} {
		req, _ := http.NewRequestWithContext(ctx, "GET", e.p.AgentURL+"/metrics", nil)
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("agent /metrics with %q: %d, want %d", tc.token, resp.StatusCode, tc.want)
		}
	}

	// Removed, the application's instances lose their etcd users.
	if err := e.p.Controller.Remove(ctx, "t1"); err != nil {
		t.Fatal(err)
	}
	ids, err = admin.Instances(ctx)
	if err != nil || slices.Contains(ids, rec.Instance) {
		t.Errorf("after removal, instances with etcd users: %v, %v", ids, err)
	}
	resp, err := e.p.etcd.Get(ctx, etcdmembership.RingPrefix("", "t1"), clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 0 {
		t.Errorf("ring t1 after removal: %v, %v; want empty", resp, err)
	}
}
