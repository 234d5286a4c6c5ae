package controller

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/appspec"
	"github.com/hoard-io/hoard/internal/scaling"
)

// Handler serves the controller's API (api/controller.go lists it), and
// metrics (when not nil) on GET /metrics, behind the token rule of
// auth.go: token is the admin token; applications' tokens reach only
// their own scaling hints, votes and events.
func (c *Controller) Handler(token string, metrics http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		api.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("POST /v1/apps", func(w http.ResponseWriter, r *http.Request) {
		// An upload that says it is too large is refused before its body
		// is read (a client that sent "Expect: 100-continue" sends none).
		if r.ContentLength > c.cfg.MaxPackage {
			api.WriteError(w, http.StatusRequestEntityTooLarge, c.tooLarge())
			return
		}
		info, err := c.DeployFrom(r.Context(), r.Body)
		if err != nil {
			api.WriteError(w, statusOf(err), err)
			return
		}
		api.WriteJSON(w, http.StatusCreated, info)
	})
	mux.HandleFunc("GET /v1/apps", func(w http.ResponseWriter, r *http.Request) {
		apps := c.Apps()
		for i := range apps {
			apps[i].Spec = ""
		}
		api.WriteJSON(w, http.StatusOK, apps)
	})
	mux.HandleFunc("GET /v1/apps/{app}", func(w http.ResponseWriter, r *http.Request) {
		a, err := c.app(r.PathValue("app"))
		if err != nil {
			api.WriteError(w, statusOf(err), err)
			return
		}
		info := c.info(a)
		creds, _ := c.Credentials(info.Name)
		info.Credentials = &creds
		info.Stats, _ = c.Stats(info.Name)
		api.WriteJSON(w, http.StatusOK, info)
	})
	mux.HandleFunc("DELETE /v1/apps/{app}", func(w http.ResponseWriter, r *http.Request) {
		if err := c.Remove(r.Context(), r.PathValue("app")); err != nil {
			api.WriteError(w, statusOf(err), err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /v1/apps/{app}/functions/{fn}/invoke", func(w http.ResponseWriter, r *http.Request) {
		event, ok := api.ReadBody(w, r)
		if !ok {
			return
		}
		rec, err := c.Invoke(r.Context(), r.PathValue("app"), r.PathValue("fn"), event, "api")
		if err != nil {
			api.WriteError(w, statusOf(err), err)
			return
		}
		api.WriteJSON(w, http.StatusOK, rec)
	})
	mux.HandleFunc("POST /v1/apps/{app}/pipelines/{p}/run", func(w http.ResponseWriter, r *http.Request) {
		input, ok := api.ReadBody(w, r)
		if !ok {
			return
		}
		run, err := c.RunPipeline(r.Context(), r.PathValue("app"), r.PathValue("p"), input, "api")
		if err != nil {
			api.WriteError(w, statusOf(err), err)
			return
		}
		api.WriteJSON(w, http.StatusOK, run)
	})
	mux.HandleFunc("GET /v1/apps/{app}/logs", func(w http.ResponseWriter, r *http.Request) {
		n := 20
		if s := r.URL.Query().Get("n"); s != "" {
			v, err := strconv.Atoi(s)
			if err != nil || v < 1 || v > maxRecords {
				api.WriteError(w, http.StatusBadRequest, fmt.Errorf("n: want 1-%d", maxRecords))
				return
			}
			n = v
		}
		logs, err := c.Logs(r.PathValue("app"), r.URL.Query().Get("function"), n, r.URL.Query().Get("errors") != "")
		if err != nil {
			api.WriteError(w, statusOf(err), err)
			return
		}
		api.WriteJSON(w, http.StatusOK, logs)
	})
	mux.HandleFunc("GET /v1/apps/{app}/scaling", func(w http.ResponseWriter, r *http.Request) {
		si, err := c.Scaling(r.PathValue("app"))
		if err != nil {
			api.WriteError(w, statusOf(err), err)
			return
		}
		api.WriteJSON(w, http.StatusOK, si)
	})
	mux.HandleFunc("POST /v1/apps/{app}/votes", func(w http.ResponseWriter, r *http.Request) {
		var v scaling.Vote
		body, ok := api.ReadBody(w, r)
		if !ok {
			return
		}
		if err := json.Unmarshal(body, &v); err != nil || v.Delta == 0 {
			api.WriteError(w, http.StatusBadRequest, fmt.Errorf("want a vote {\"policy\", \"delta\" (non-zero), \"urgent\", \"reason\"}: %v", err))
			return
		}
		if err := c.Vote(r.PathValue("app"), v); err != nil {
			api.WriteError(w, statusOf(err), err)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	})
	mux.HandleFunc("POST /v1/apps/{app}/preload", func(w http.ResponseWriter, r *http.Request) {
		warm := r.URL.Query().Get("warm") != "false"
		sel, err := c.Preload(r.Context(), r.PathValue("app"), warm)
		if err != nil {
			api.WriteError(w, statusOf(err), err)
			return
		}
		api.WriteJSON(w, http.StatusOK, sel)
	})
	mux.HandleFunc("GET /v1/apps/{app}/stats", func(w http.ResponseWriter, r *http.Request) {
		s, err := c.Stats(r.PathValue("app"))
		if err != nil {
			api.WriteError(w, statusOf(err), err)
			return
		}
		api.WriteJSON(w, http.StatusOK, s)
	})
	mux.HandleFunc("POST /v1/events", func(w http.ResponseWriter, r *http.Request) {
		body, ok := api.ReadBody(w, r)
		if !ok {
			return
		}
		form, err := decodeEventBody(body, r.Header.Get("x-amz-sns-message-type"))
		if err != nil {
			api.WriteError(w, http.StatusBadRequest, err)
			return
		}
		app := scopedApp(r.Context())
		if app != "" && form.aws {
			api.WriteError(w, http.StatusForbidden, errors.New("forbidden: SNS messages and EventBridge events are the store's: post them with its events token"))
			return
		}
		if form.confirm != nil {
			if err := c.confirmSNS(r.Context(), form.confirm); err != nil {
				status := http.StatusBadRequest
				if errors.Is(err, errUpstream) {
					status = http.StatusBadGateway
				}
				api.WriteError(w, status, err)
				return
			}
			api.WriteJSON(w, http.StatusOK, map[string]int{"fired": 0})
			return
		}
		if form.ignored != "" {
			c.log.Info("event ignored", "why", form.ignored)
		}
		ev := form.ev
		var n int
		if app != "" {
			n, err = c.HandleEventAs(ev, app)
		} else {
			// The store's (or the operator's): relayed to the cachelets
			// following the buckets; an application's own events are
			// writes through hoard, which its cachelets know of.
			c.relayChanges(ev)
			n, err = c.HandleEvent(ev)
		}
		if err != nil {
			status := http.StatusBadRequest
			if errors.Is(err, ErrForbidden) {
				status = http.StatusForbidden
			}
			api.WriteError(w, status, err)
			return
		}
		api.WriteJSON(w, http.StatusOK, map[string]int{"fired": n})
	})
	mux.HandleFunc("GET /v1/changes", c.serveChanges)
	mux.HandleFunc("/http/{app}/{path...}", c.serveHTTPTrigger)
	newDashboard(c).routes(mux)
	if metrics != nil {
		mux.Handle("GET /metrics", metrics)
	}
	return c.authorize(token, mux)
}

// serveHTTPTrigger turns a request into an API Gateway (HTTP API, payload
// 2.0) event for the bound function, and its result into the answer: a
// result with "statusCode" is a proxy response (statusCode, headers,
// body, isBase64Encoded); anything else is answered as JSON.
func (c *Controller) serveHTTPTrigger(w http.ResponseWriter, r *http.Request) {
	appName, path := r.PathValue("app"), "/"+r.PathValue("path")
	t, err := c.HTTPTrigger(appName, path)
	if err != nil {
		api.WriteError(w, statusOf(err), err)
		return
	}
	body, ok := api.ReadBody(w, r)
	if !ok {
		return
	}
	headers := map[string]string{}
	for k, v := range r.Header {
		headers[strings.ToLower(k)] = strings.Join(v, ",")
	}
	query := map[string]string{}
	for k, v := range r.URL.Query() {
		query[k] = strings.Join(v, ",")
	}
	ev := map[string]any{
		"version": "2.0", "routeKey": r.Method + " " + path, "rawPath": path, "rawQueryString": r.URL.RawQuery,
		"headers": headers, "queryStringParameters": query,
		"requestContext": map[string]any{"http": map[string]any{"method": r.Method, "path": path, "sourceIp": r.RemoteAddr},
			"timeEpoch": c.clk.Now().UnixMilli()},
	}
	if utf8.Valid(body) {
		ev["body"], ev["isBase64Encoded"] = string(body), false
	} else {
		ev["body"], ev["isBase64Encoded"] = base64.StdEncoding.EncodeToString(body), true
	}
	event, _ := json.Marshal(ev)
	c.m.triggers.WithLabelValues(appName, "http", "http").Inc()
	if t.Pipeline != "" {
		run, err := c.RunPipeline(r.Context(), appName, t.Pipeline, event, "http")
		if err != nil {
			api.WriteError(w, statusOf(err), err)
			return
		}
		status := http.StatusOK
		if !run.OK {
			status = http.StatusBadGateway
		}
		api.WriteJSON(w, status, run)
		return
	}
	rec, err := c.Invoke(r.Context(), appName, t.Function, event, "http")
	if err != nil {
		api.WriteError(w, statusOf(err), err)
		return
	}
	w.Header().Set("X-Hoard-Request-Id", rec.RequestID)
	if !rec.OK {
		api.WriteJSON(w, http.StatusBadGateway, map[string]any{"error": rec.Error, "request_id": rec.RequestID})
		return
	}
	var proxy struct {
		StatusCode      int               `json:"statusCode"`
		Headers         map[string]string `json:"headers"`
		Body            *string           `json:"body"`
		IsBase64Encoded bool              `json:"isBase64Encoded"`
	}
	if json.Unmarshal(rec.Result, &proxy) == nil && proxy.StatusCode >= 100 && proxy.StatusCode <= 599 {
		for k, v := range proxy.Headers {
			w.Header().Set(k, v)
		}
		var out []byte
		if proxy.Body != nil {
			out = []byte(*proxy.Body)
			if proxy.IsBase64Encoded {
				if out, err = base64.StdEncoding.DecodeString(*proxy.Body); err != nil {
					api.WriteError(w, http.StatusBadGateway, fmt.Errorf("the function's body is not base64: %w", err))
					return
				}
			}
		}
		w.WriteHeader(proxy.StatusCode)
		_, _ = w.Write(out)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(rec.Result)
}

// statusOf maps errors to HTTP statuses.
func statusOf(err error) int {
	switch {
	case errors.Is(err, ErrPackageTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, appspec.ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	case strings.Contains(err.Error(), "not valid JSON"):
		return http.StatusBadRequest
	default:
		return http.StatusServiceUnavailable
	}
}
