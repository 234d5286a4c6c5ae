package agent

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Handler serves the agent's API (api.go), every request authenticated
// with the bearer token.
func (a *Agent) Handler(token string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"agent": a.cfg.ID, "sandbox": a.SandboxMode()})
	})
	mux.HandleFunc("GET /v1/instances", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, a.Instances())
	})
	mux.HandleFunc("POST /v1/instances", func(w http.ResponseWriter, r *http.Request) {
		var req StartRequest
		if !readJSON(w, r, &req) {
			return
		}
		in, err := a.Start(r.Context(), req)
		switch {
		case errors.Is(err, ErrExists):
			writeError(w, http.StatusConflict, err)
		case err != nil:
			writeError(w, http.StatusUnprocessableEntity, err)
		default:
			writeJSON(w, http.StatusCreated, in.Info())
		}
	})
	mux.HandleFunc("GET /v1/instances/{id}", func(w http.ResponseWriter, r *http.Request) {
		if in := a.lookup(w, r); in != nil {
			writeJSON(w, http.StatusOK, in.Info())
		}
	})
	mux.HandleFunc("DELETE /v1/instances/{id}", func(w http.ResponseWriter, r *http.Request) {
		if err := a.Stop(r.PathValue("id")); err != nil {
			writeError(w, http.StatusNotFound, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /v1/instances/{id}/invoke", func(w http.ResponseWriter, r *http.Request) {
		in := a.lookup(w, r)
		if in == nil {
			return
		}
		var req InvokeRequest
		if !readJSON(w, r, &req) {
			return
		}
		res, err := in.Invoke(r.Context(), req)
		switch {
		case errors.Is(err, ErrBusy), errors.Is(err, ErrUnavailable):
			writeError(w, http.StatusConflict, err)
		case err != nil:
			writeError(w, http.StatusBadRequest, err)
		default:
			writeJSON(w, http.StatusOK, res)
		}
	})
	mux.HandleFunc("POST /v1/instances/{id}/drop", func(w http.ResponseWriter, r *http.Request) {
		in := a.lookup(w, r)
		if in == nil {
			return
		}
		var req DropRequest
		if !readJSON(w, r, &req) {
			return
		}
		n, err := in.Drop(r.Context(), req.Bucket, req.Prefix)
		if err != nil {
			writeError(w, http.StatusBadGateway, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]int{"dropped": n})
	})
	mux.HandleFunc("POST /v1/instances/{id}/prewarm", func(w http.ResponseWriter, r *http.Request) {
		in := a.lookup(w, r)
		if in == nil {
			return
		}
		var req PrewarmRequest
		if !readJSON(w, r, &req) {
			return
		}
		in.Prewarm(req.Keys)
		w.WriteHeader(http.StatusAccepted)
	})
	return RequireToken(token, mux)
}

func (a *Agent) lookup(w http.ResponseWriter, r *http.Request) *Instance {
	in := a.Instance(r.PathValue("id"))
	if in == nil {
		writeError(w, http.StatusNotFound, fmt.Errorf("no instance %q on agent %s", r.PathValue("id"), a.cfg.ID))
	}
	return in
}

// RequireToken answers 401 to requests without "Authorization: Bearer
// TOKEN" (compared in constant time); /healthz is open.
func RequireToken(token string, next http.Handler) http.Handler {
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" && subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			writeError(w, http.StatusUnauthorized, errors.New("missing or wrong bearer token"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// MaxRequestBytes bounds a JSON request body (an invocation's event).
const MaxRequestBytes = 6 << 20

func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxRequestBytes+1))
	if err == nil && len(body) > MaxRequestBytes {
		err = fmt.Errorf("request body larger than %d MiB", MaxRequestBytes>>20)
	}
	if err == nil {
		err = json.Unmarshal(body, v)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, fmt.Errorf("bad request: %w", err))
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, err error) {
	writeJSON(w, status, map[string]string{"error": err.Error()})
}

// Register keeps the agent's entry (its API's URL) in etcd under a lease
// until ctx ends, re-registering after a lost lease.
func (a *Agent) Register(ctx context.Context, cli *clientv3.Client, url string, log *slog.Logger) {
	val, _ := json.Marshal(Registration{ID: a.cfg.ID, URL: url})
	for ctx.Err() == nil {
		err := func() error {
			lease, err := cli.Grant(ctx, 10)
			if err != nil {
				return err
			}
			if _, err := cli.Put(ctx, EtcdPrefix+a.cfg.ID, string(val), clientv3.WithLease(lease.ID)); err != nil {
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
	_, _ = cli.Delete(dctx, EtcdPrefix+a.cfg.ID)
}
