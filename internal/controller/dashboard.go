package controller

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/dashboard"
	"github.com/hoard-io/hoard/internal/ring"
)

// The dashboard (docs/platform.md, "Dashboard"): a page served by the
// controller under /dashboard/, its assets built into the binary, polling
// GET /dashboard/api/state for what the platform is doing.
//
// A browser carries no bearer token, so the dashboard has logins of its
// own: the admin (`hoard dashboard`, with the admin token) asks POST
// /v1/dashboard/login for a one-time code, valid for a minute; opening
// /dashboard/login?code=... trades it for a session cookie (HttpOnly,
// SameSite=Strict, Secure over TLS) valid for 12 hours. Everything under
// /dashboard/ but the login needs that cookie. Codes and sessions are
// kept as SHA-256 digests, a bounded number of each.

const (
	dashCodeTTL       = time.Minute
	dashSessionTTL    = 12 * time.Hour
	dashMaxCodes      = 16
	dashMaxSessions   = 64
	dashCookie        = "hoard_dashboard"
	dashStateMaxAge   = time.Second     // a state this recent is served again
	dashAgentDeadline = 2 * time.Second // each agent's answer
)

// DashState is what the dashboard shows (GET /dashboard/api/state).
type DashState struct {
	Time   time.Time   `json:"time"`
	Agents []DashAgent `json:"agents"`
	Apps   []DashApp   `json:"apps"`
}

// DashAgent is one node agent and its instances, as it reports them.
type DashAgent struct {
	ID        string             `json:"id"`
	Error     string             `json:"error,omitempty"` // it did not answer
	Instances []api.InstanceInfo `json:"instances"`
}

// DashApp is one application: what `hoard apps APP` shows (without the
// spec and credentials), its reads summed over functions, and its ring.
type DashApp struct {
	api.AppInfo
	Memory      int64                    `json:"memory"`       // booked per instance
	CacheBudget int64                    `json:"cache_budget"` // per cachelet, as configured
	Reads       map[string]api.ReadCount `json:"reads"`        // by access type, all functions
	Ring        []DashShare              `json:"ring"`
}

// DashShare is a ring member's share of the application's keys.
type DashShare struct {
	Member string  `json:"member"`
	Share  float64 `json:"share"`
}

// dashboardServer serves the page, its logins and its state.
type dashboardServer struct {
	c      *Controller
	static http.Handler

	mu       sync.Mutex
	codes    map[[32]byte]time.Time // digest of a login code -> expiry
	sessions map[[32]byte]time.Time // digest of a session id -> expiry

	stateMu   sync.Mutex // one state built at a time
	state     []byte
	stateTime time.Time
}

func newDashboard(c *Controller) *dashboardServer {
	return &dashboardServer{c: c, static: dashboard.Handler("/dashboard", "platform"),
		codes: map[[32]byte]time.Time{}, sessions: map[[32]byte]time.Time{}}
}

// routes registers the dashboard on mux: the code (behind the admin token,
// like all of /v1/) and the cookie-authenticated pages.
func (d *dashboardServer) routes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/dashboard/login", d.newCode)
	mux.HandleFunc("GET /dashboard/login", d.login)
	mux.HandleFunc("POST /dashboard/logout", d.withSession(d.logout))
	mux.HandleFunc("GET /dashboard/api/state", d.withSession(d.serveState))
	mux.HandleFunc("GET /dashboard/", d.withSession(d.static.ServeHTTP))
	mux.HandleFunc("GET /dashboard", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/dashboard/", http.StatusFound)
	})
}

// newSecret returns 32 random bytes, URL-safe base64, and their digest.
func newSecret() (string, [32]byte) {
	var b [32]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	s := base64.RawURLEncoding.EncodeToString(b[:])
	return s, sha256.Sum256([]byte(s))
}

// prune drops what expired from m and, at its bound, the entry expiring
// first; d.mu held.
func prune(m map[[32]byte]time.Time, now time.Time, bound int) {
	var first [32]byte
	var firstExp time.Time
	for k, exp := range m {
		if !now.Before(exp) {
			delete(m, k)
			continue
		}
		if firstExp.IsZero() || exp.Before(firstExp) {
			first, firstExp = k, exp
		}
	}
	if len(m) >= bound {
		delete(m, first)
	}
}

func (d *dashboardServer) newCode(w http.ResponseWriter, r *http.Request) {
	if scopedApp(r.Context()) != "" {
		api.WriteError(w, http.StatusForbidden, errors.New("forbidden: the dashboard is the admin's"))
		return
	}
	code, digest := newSecret()
	now := d.c.clk.Now()
	d.mu.Lock()
	prune(d.codes, now, dashMaxCodes)
	d.codes[digest] = now.Add(dashCodeTTL)
	d.mu.Unlock()
	api.WriteJSON(w, http.StatusOK, api.DashboardLogin{Path: "/dashboard/login?code=" + code, Expires: now.Add(dashCodeTTL)})
}

// login trades a code, once, for a session cookie.
func (d *dashboardServer) login(w http.ResponseWriter, r *http.Request) {
	dashboard.SetHeaders(w)
	digest := sha256.Sum256([]byte(r.URL.Query().Get("code")))
	now := d.c.clk.Now()
	d.mu.Lock()
	exp, ok := d.codes[digest]
	delete(d.codes, digest)
	var id string
	if ok && now.Before(exp) {
		var sdigest [32]byte
		id, sdigest = newSecret()
		prune(d.sessions, now, dashMaxSessions)
		d.sessions[sdigest] = now.Add(dashSessionTTL)
	}
	d.mu.Unlock()
	if id == "" {
		if d.hasSession(r) { // the link again, from a browser logged in
			http.Redirect(w, r, "/dashboard/", http.StatusSeeOther)
			return
		}
		http.Error(w, "this login link is unknown, used or expired: run `hoard dashboard` for a new one", http.StatusUnauthorized)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: dashCookie, Value: id, Path: "/dashboard/", MaxAge: int(dashSessionTTL / time.Second),
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/dashboard/", http.StatusSeeOther)
}

func (d *dashboardServer) logout(w http.ResponseWriter, r *http.Request) {
	if ck, err := r.Cookie(dashCookie); err == nil {
		digest := sha256.Sum256([]byte(ck.Value))
		d.mu.Lock()
		delete(d.sessions, digest)
		d.mu.Unlock()
	}
	http.SetCookie(w, &http.Cookie{Name: dashCookie, Path: "/dashboard/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	w.WriteHeader(http.StatusNoContent)
}

// hasSession reports whether r carries a live session cookie.
func (d *dashboardServer) hasSession(r *http.Request) bool {
	ck, err := r.Cookie(dashCookie)
	if err != nil {
		return false
	}
	digest := sha256.Sum256([]byte(ck.Value))
	d.mu.Lock()
	defer d.mu.Unlock()
	exp, found := d.sessions[digest]
	return found && d.c.clk.Now().Before(exp)
}

// withSession lets through requests with a live session cookie.
func (d *dashboardServer) withSession(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		dashboard.SetHeaders(w)
		if !d.hasSession(r) {
			http.Error(w, "not logged in: run `hoard dashboard` for a login link", http.StatusUnauthorized)
			return
		}
		next(w, r)
	}
}

func (d *dashboardServer) serveState(w http.ResponseWriter, r *http.Request) {
	body, err := d.currentState(r.Context())
	if err != nil {
		api.WriteError(w, http.StatusServiceUnavailable, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(body)
}

// currentState returns the state as JSON, built at most once a second
// however many pages poll.
func (d *dashboardServer) currentState(ctx context.Context) ([]byte, error) {
	d.stateMu.Lock()
	defer d.stateMu.Unlock()
	now := d.c.clk.Now()
	if d.state != nil && now.Sub(d.stateTime) < dashStateMaxAge && !now.Before(d.stateTime) {
		return d.state, nil
	}
	st, err := d.c.DashboardState(ctx)
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(st)
	if err != nil {
		return nil, err
	}
	d.state, d.stateTime = body, now
	return body, nil
}

// DashboardState gathers what the dashboard shows: every application as
// the controller knows it, and every agent's instances as the agent
// reports them (an agent that does not answer within its deadline is
// listed with its error).
func (c *Controller) DashboardState(ctx context.Context) (*DashState, error) {
	st := &DashState{Time: c.clk.Now()}
	regs, err := c.agents.list(ctx)
	if err != nil {
		return nil, err
	}
	st.Agents = make([]DashAgent, len(regs))
	var wg sync.WaitGroup
	for i, reg := range regs {
		wg.Go(func() {
			actx, cancel := context.WithTimeout(ctx, dashAgentDeadline)
			defer cancel()
			st.Agents[i] = DashAgent{ID: reg.ID}
			list, err := c.agents.at(reg.URL).Instances(actx)
			if err != nil {
				st.Agents[i].Error = err.Error()
				return
			}
			sort.Slice(list, func(a, b int) bool { return list[a].ID < list[b].ID })
			st.Agents[i].Instances = list
		})
	}
	wg.Wait()
	for _, info := range c.Apps() {
		info.Spec, info.Credentials = "", nil
		a, err := c.app(info.Name)
		if err != nil {
			continue // removed meanwhile
		}
		c.mu.Lock()
		da := DashApp{AppInfo: info, Memory: int64(a.spec.Memory), CacheBudget: int64(a.spec.Cache.Budget),
			Reads: map[string]api.ReadCount{}}
		c.mu.Unlock()
		da.Stats, _ = c.Stats(info.Name)
		for _, fs := range da.Stats {
			for access, rc := range fs.Reads {
				t := da.Reads[access]
				t.Count += rc.Count
				t.Bytes += rc.Bytes
				da.Reads[access] = t
			}
		}
		ids := make([]string, 0, len(info.Instances))
		for _, in := range info.Instances {
			ids = append(ids, in.ID)
		}
		if r, err := ring.New(ring.Config{}, ids); err == nil {
			for i, share := range r.Shares() {
				da.Ring = append(da.Ring, DashShare{Member: r.Members()[i], Share: share})
			}
		}
		st.Apps = append(st.Apps, da)
	}
	return st, nil
}
