package controller

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/clock"
)

// TestDashboardLogin: only the admin token gets a login code; a code
// logs in once, within its minute; everything under /dashboard/ but the
// login needs the session cookie it sets; logging out ends the session.
func TestDashboardLogin(t *testing.T) {
	const storeTok = "store-events-0123456789"
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c, _, _ := setupWith(t, Config{StoreEventsToken: storeTok, Clock: clk})
	if _, err := c.Deploy(context.Background(), pkg(t, specA)); err != nil {
		t.Fatal(err)
	}
	creds, _ := c.Credentials("a")
	const admin = "admin-token-0123456789"
	srv := httptest.NewServer(c.Handler(admin, nil))
	t.Cleanup(srv.Close)

	code := func(token string) (int, api.DashboardLogin) {
		t.Helper()
		req, _ := http.NewRequest("POST", srv.URL+"/v1/dashboard/login", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var l api.DashboardLogin
		_ = json.NewDecoder(resp.Body).Decode(&l)
		return resp.StatusCode, l
	}
	for name, tok := range map[string]string{"no token": "", "an application's": creds.PlatformToken, "the store's": storeTok, "wrong": "nope"} {
		if status, _ := code(tok); status != http.StatusUnauthorized && status != http.StatusForbidden {
			t.Errorf("%s token: login code answered %d", name, status)
		}
	}

	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar}
	get := func(path string) (int, http.Header, string) {
		t.Helper()
		resp, err := browser.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	for _, p := range []string{"/dashboard/", "/dashboard/platform.js", "/dashboard/api/state"} {
		if status, _, _ := get(p); status != http.StatusUnauthorized {
			t.Errorf("GET %s without a session: %d, want 401", p, status)
		}
	}
	if status, _, _ := get("/dashboard/login?code=made-up"); status != http.StatusUnauthorized {
		t.Errorf("a made-up code: %d, want 401", status)
	}

	// An expired code does not log in.
	status, stale := code(admin)
	if status != http.StatusOK || !strings.HasPrefix(stale.Path, "/dashboard/login?code=") {
		t.Fatalf("admin login code: %d %+v", status, stale)
	}
	clk.Advance(dashCodeTTL + time.Second)
	if status, _, _ := get(stale.Path); status != http.StatusUnauthorized {
		t.Errorf("an expired code: %d, want 401", status)
	}

	_, login := code(admin)
	status, hdr, page := get(login.Path) // follows the redirect to the page
	if status != http.StatusOK || !strings.Contains(page, `<script src="platform.js"`) {
		t.Fatalf("login: %d %q", status, page)
	}
	if csp := hdr.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || hdr.Get("X-Frame-Options") != "DENY" {
		t.Errorf("security headers: %v", hdr)
	}
	u, _ := url.Parse(srv.URL + "/dashboard/")
	cks := jar.Cookies(u)
	if len(cks) != 1 || cks[0].Name != dashCookie || len(cks[0].Value) < 40 {
		t.Fatalf("session cookie: %+v", cks)
	}
	if status, _, _ := get(login.Path); status != http.StatusOK {
		t.Errorf("with a session, the used link still shows the page: %d", status)
	}
	// A used code does not log in a second browser.
	fresh := &http.Client{}
	resp, err := fresh.Get(srv.URL + login.Path)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a used code: %d, want 401", resp.StatusCode)
	}

	for _, p := range []string{"/dashboard/platform.js", "/dashboard/style.css"} {
		if status, _, body := get(p); status != http.StatusOK || len(body) < 100 {
			t.Errorf("GET %s: %d, %d bytes", p, status, len(body))
		}
	}
	status, hdr, body := get("/dashboard/api/state")
	if status != http.StatusOK || hdr.Get("Cache-Control") != "no-store" {
		t.Fatalf("state: %d %v", status, hdr)
	}
	var st DashState
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Apps) != 1 || st.Apps[0].Name != "a" || st.Apps[0].Spec != "" || st.Apps[0].Credentials != nil {
		t.Errorf("state's apps: %+v", st.Apps)
	}
	if strings.Contains(body, creds.PlatformToken) || strings.Contains(body, creds.SecretKey) {
		t.Error("the state carries the application's secrets")
	}
	if len(st.Agents) != 1 || st.Agents[0].ID != "fake" || st.Agents[0].Error != "" {
		t.Errorf("state's agents: %+v", st.Agents)
	}

	// The session lasts 12 hours.
	clk.Advance(dashSessionTTL + time.Second)
	if status, _, _ := get("/dashboard/api/state"); status != http.StatusUnauthorized {
		t.Errorf("an expired session: %d, want 401", status)
	}
	_, login = code(admin)
	get(login.Path)
	req, _ := http.NewRequest("POST", srv.URL+"/dashboard/logout", nil)
	if resp, err := browser.Do(req); err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("logout: %v %v", resp, err)
	}
	if status, _, _ := get("/dashboard/api/state"); status != http.StatusUnauthorized {
		t.Errorf("after logout: %d, want 401", status)
	}
}

// TestDashboardState: instances, reads by outcome summed over functions,
// the ring's shares, and decisions, after invocations.
func TestDashboardState(t *testing.T) {
	c, _, _ := setup(t)
	ctx := context.Background()
	if _, err := c.Deploy(ctx, pkg(t, spec)); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if rec, err := c.Invoke(ctx, "app", "f", json.RawMessage(`{"x": 1}`), "test"); err != nil || !rec.OK {
			t.Fatalf("invocation %d: %+v %v", i, rec, err)
		}
	}
	st, err := c.DashboardState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Apps) != 1 || len(st.Agents) != 1 {
		t.Fatalf("state: %+v", st)
	}
	app := st.Apps[0]
	if app.Invocations != 3 || len(app.Instances) == 0 {
		t.Errorf("app: %d invocations, %d instances", app.Invocations, len(app.Instances))
	}
	if rc := app.Reads["local_hit"]; rc.Count != 3 || rc.Bytes != 30 {
		t.Errorf("reads: %+v, want the fake agent's 3 local hits of 10 bytes", app.Reads)
	}
	sum := 0.0
	for _, s := range app.Ring {
		sum += s.Share
	}
	if len(app.Ring) != len(app.Instances) || sum < 0.999 || sum > 1.001 {
		t.Errorf("ring %+v over %d instances", app.Ring, len(app.Instances))
	}
	if len(st.Agents[0].Instances) != len(app.Instances) {
		t.Errorf("the agent reports %d instances; the app has %d", len(st.Agents[0].Instances), len(app.Instances))
	}
	if app.Memory <= 0 || app.CacheBudget <= 0 {
		t.Errorf("memory %d, cache budget %d", app.Memory, app.CacheBudget)
	}
}
