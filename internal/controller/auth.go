package controller

import (
	"context"
	"crypto/subtle"
	"errors"
	"net/http"
	"strings"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/appspec"
)

// Who may call what (docs/platform.md, "Who may call what"):
//
//   - the admin token (the operator's, the hoard CLI's) may call
//     everything;
//   - the store's events token (Config.StoreEventsToken, in the store's
//     webhook configuration) may post events, for any bucket, and
//     nothing else;
//   - an application's token (api.Credentials.PlatformToken, made at
//     deploy, handed to its instances' cachelets) may read that
//     application's scaling hints, vote for it, post object-created
//     events naming it and its buckets, and follow the changes of its
//     granted buckets (GET /v1/changes, changes.go); anything else is
//     403;
//   - HTTP Basic authenticates the store's events token only (its
//     password; the user name is not read), for SNS, which cannot send
//     a bearer token (awsevents.go);
//   - no token, or an unknown one, is 401 (with a Basic challenge on
//     /v1/events: SNS may send its credentials only once challenged);
//   - /healthz and the HTTP triggers (/http/...) are open;
//   - the dashboard's pages (/dashboard...) check a session cookie
//     instead (dashboard.go), which only a code from POST
//     /v1/dashboard/login (admin token) gets.
//
// The agents' token is another one altogether: the controller sends it,
// it never accepts it.

// ErrForbidden marks an authenticated call outside its token's scope.
var ErrForbidden = errors.New("forbidden")

// scopeKey is the context key of the application an app-scoped call
// speaks for.
type scopeKey struct{}

// scopedApp is the application whose token authenticated r, or "" for
// the admin token.
func scopedApp(ctx context.Context) string {
	s, _ := ctx.Value(scopeKey{}).(string)
	return s
}

// authorize wraps the API with the token rule above.
func (c *Controller) authorize(admin string, next http.Handler) http.Handler {
	adminAuth := []byte("Bearer " + admin)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" || strings.HasPrefix(r.URL.Path, "/http/") || isDashboardPage(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		auth := r.Header.Get("Authorization")
		if admin != "" && subtle.ConstantTimeCompare([]byte(auth), adminAuth) == 1 {
			next.ServeHTTP(w, r)
			return
		}
		tok, ok := strings.CutPrefix(auth, "Bearer ")
		_, pass, basic := r.BasicAuth()
		if basic {
			// SNS's HTTPS subscriptions authenticate by HTTP Basic only:
			// the password is the store's events token, the user name is
			// not read (the documentation's is "hoard").
			tok = pass
		}
		if ev := c.cfg.StoreEventsToken; (ok || basic) && ev != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(ev)) == 1 {
			if r.Method != http.MethodPost || r.URL.Path != "/v1/events" {
				api.WriteError(w, http.StatusForbidden, errors.New("forbidden: the store's token may only post events"))
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		app := ""
		if ok {
			app = c.appByToken(tok)
		}
		if app == "" {
			if r.URL.Path == "/v1/events" {
				// SNS may send its credentials only once challenged.
				w.Header().Set("WWW-Authenticate", `Basic realm="hoard events"`)
			}
			msg := "missing or wrong bearer token"
			if basic {
				msg = "wrong password: HTTP Basic's is the store's events token"
			}
			api.WriteError(w, http.StatusUnauthorized, errors.New(msg))
			return
		}
		if !appMayCall(app, r.Method, r.URL.Path) {
			api.WriteError(w, http.StatusForbidden, errors.New("forbidden: an application's token may only read its scaling hints, vote, post events and follow its buckets' changes"))
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), scopeKey{}, app)))
	})
}

// isDashboardPage reports whether path is the dashboard's, which
// authenticates by its session cookie.
func isDashboardPage(path string) bool {
	return path == "/dashboard" || strings.HasPrefix(path, "/dashboard/")
}

// appMayCall reports whether app's token may call method path: its own
// scaling hints and votes, and events (which HandleEventAs checks
// record by record).
func appMayCall(app, method, path string) bool {
	if (method == http.MethodPost && path == "/v1/events") || (method == http.MethodGet && path == "/v1/changes") {
		return true
	}
	seg := strings.Split(strings.TrimPrefix(path, "/"), "/")
	if len(seg) != 4 || seg[0] != "v1" || seg[1] != "apps" || seg[2] != app {
		return false
	}
	return (method == http.MethodGet && seg[3] == "scaling") || (method == http.MethodPost && seg[3] == "votes")
}

// appByToken is the application whose token tok is, or "". Every
// application's token is compared, in constant time.
func (c *Controller) appByToken(tok string) string {
	if tok == "" {
		return ""
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	found := ""
	for name, a := range c.apps {
		want := a.rec.Credentials.PlatformToken
		if want != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(want)) == 1 {
			found = name
		}
	}
	return found
}

// appBuckets are the buckets an application's spec names: the buckets it
// was granted, its object triggers' and its pipelines' intermediate
// buckets.
func appBuckets(s *appspec.Spec) map[string]bool {
	set := map[string]bool{}
	for _, b := range s.Buckets {
		set[b.Name] = true
	}
	for _, b := range triggerBuckets(s) {
		set[b] = true
	}
	for _, p := range s.Pipelines {
		if p.Intermediate != nil {
			set[p.Intermediate.Bucket] = true
		}
	}
	return set
}
