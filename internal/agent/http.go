package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hoard-io/hoard/internal/api"
)

// Handler serves the agent's API (api/agent.go lists it), and metrics
// (when not nil) on GET /metrics, every request but /healthz
// authenticated with the agents' bearer token.
func (a *Agent) Handler(token string, metrics http.Handler) http.Handler {
	a.token.Store(&token)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/packages/{sha}/raw", a.servePackageRaw)       // child agents (relay.go)
	mux.HandleFunc("GET /v1/packages/{sha}/blocks", a.servePackageBlocks) // child agents (pushdown.go)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		api.WriteJSON(w, http.StatusOK, map[string]string{"agent": a.cfg.ID, "sandbox": a.SandboxMode()})
	})
	mux.HandleFunc("GET /v1/instances", func(w http.ResponseWriter, r *http.Request) {
		api.WriteJSON(w, http.StatusOK, a.Instances())
	})
	mux.HandleFunc("POST /v1/instances", func(w http.ResponseWriter, r *http.Request) {
		var req api.StartRequest
		if !api.ReadJSON(w, r, &req) {
			return
		}
		in, err := a.Start(r.Context(), req)
		switch {
		case errors.Is(err, ErrExists):
			api.WriteError(w, http.StatusConflict, err)
		case err != nil:
			api.WriteError(w, http.StatusUnprocessableEntity, err)
		default:
			api.WriteJSON(w, http.StatusCreated, in.Info())
		}
	})
	mux.HandleFunc("GET /v1/instances/{id}", func(w http.ResponseWriter, r *http.Request) {
		if in := a.lookup(w, r); in != nil {
			api.WriteJSON(w, http.StatusOK, in.Info())
		}
	})
	mux.HandleFunc("DELETE /v1/instances/{id}", func(w http.ResponseWriter, r *http.Request) {
		if err := a.Stop(r.PathValue("id")); err != nil {
			api.WriteError(w, http.StatusNotFound, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /v1/instances/{id}/invoke", func(w http.ResponseWriter, r *http.Request) {
		in := a.lookup(w, r)
		if in == nil {
			return
		}
		var req api.InvokeRequest
		if !api.ReadJSON(w, r, &req) {
			return
		}
		res, err := in.Invoke(r.Context(), req)
		switch {
		case errors.Is(err, ErrBusy), errors.Is(err, ErrUnavailable):
			api.WriteError(w, http.StatusConflict, err)
		case err != nil:
			api.WriteError(w, http.StatusBadRequest, err)
		default:
			api.WriteJSON(w, http.StatusOK, res)
		}
	})
	mux.HandleFunc("POST /v1/instances/{id}/drop", func(w http.ResponseWriter, r *http.Request) {
		in := a.lookup(w, r)
		if in == nil {
			return
		}
		var req api.DropRequest
		if !api.ReadJSON(w, r, &req) {
			return
		}
		n, err := in.Drop(r.Context(), req.Bucket, req.Prefix)
		if err != nil {
			api.WriteError(w, http.StatusBadGateway, err)
			return
		}
		api.WriteJSON(w, http.StatusOK, map[string]int{"dropped": n})
	})
	mux.HandleFunc("POST /v1/instances/{id}/prewarm", func(w http.ResponseWriter, r *http.Request) {
		in := a.lookup(w, r)
		if in == nil {
			return
		}
		var req api.PrewarmRequest
		if !api.ReadJSON(w, r, &req) {
			return
		}
		in.Prewarm(req.Keys)
		w.WriteHeader(http.StatusAccepted)
	})
	if metrics != nil {
		mux.Handle("GET /metrics", metrics)
	}
	return api.RequireToken(token, relayCallers(mux))
}

func (a *Agent) lookup(w http.ResponseWriter, r *http.Request) *Instance {
	in := a.Instance(r.PathValue("id"))
	if in == nil {
		api.WriteError(w, http.StatusNotFound, fmt.Errorf("no instance %q on agent %s", r.PathValue("id"), a.cfg.ID))
	}
	return in
}

// Register keeps the agent's entry (its API's URL) in etcd under a lease
// until ctx ends, re-registering after a lost lease.
func (a *Agent) Register(ctx context.Context, cli *clientv3.Client, url string, log *slog.Logger) {
	val, _ := json.Marshal(api.Registration{ID: a.cfg.ID, URL: url})
	for ctx.Err() == nil {
		err := func() error {
			lease, err := cli.Grant(ctx, 10)
			if err != nil {
				return err
			}
			if _, err := cli.Put(ctx, api.EtcdPrefix+a.cfg.ID, string(val), clientv3.WithLease(lease.ID)); err != nil {
				return err
			}
			ka, err := cli.KeepAlive(ctx, lease.ID)
			if err != nil {
				return err
			}
			for range ka {
			}
			return errors.New("lease lost")
		}()
		if ctx.Err() != nil {
			break
		}
		log.Warn("agent registration", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	dctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, _ = cli.Delete(dctx, api.EtcdPrefix+a.cfg.ID)
}
