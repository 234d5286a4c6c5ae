package control

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/hoard-io/hoard/internal/cacheconfig"
	"github.com/hoard-io/hoard/internal/prewarm"
)

// Cachelet is what the control API drives: one instance's cachelet.
// Implementations are called concurrently, one goroutine per request.
type Cachelet interface {
	// Ready says where the cachelet serves.
	Ready() Ready
	// Settings is the cache settings the cachelet applied (from its
	// configuration document, flags overriding).
	Settings() cacheconfig.Settings
	// Stats is a snapshot of the counters and the cache's occupancy.
	Stats() Stats
	// Drop drops the cached copies of bucket's objects under prefix,
	// keeping writes the store does not have yet, and says how many went.
	Drop(bucket, prefix string) int
	// SetBudget sets the memory tier's budget to n >= 0 bytes, evicting by
	// the eviction policy what no longer fits.
	SetBudget(n int64) BudgetResult
	// Prewarm fetches into memory those of keys the cachelet owns and
	// lacks, until ctx ends.
	Prewarm(ctx context.Context, keys []Key) (PrewarmResult, error)
	// AccessMetadata is the access metadata recorded so far.
	AccessMetadata() []prewarm.Object
	// SetAdmit says whether misses are kept from now on (admission by
	// predicted benefit: false for a function whose inputs are not worth
	// caching).
	SetAdmit(admit bool)
}

// MaxPrewarmTime bounds one pre-warm request on the server's side,
// whatever the caller's deadline.
const MaxPrewarmTime = 10 * time.Minute

// maxCallTime bounds every other request on the server's side.
const maxCallTime = time.Minute

// Handler serves the control API for one cachelet. It is an http.Handler.
type Handler struct {
	token []byte
	c     Cachelet
	log   *slog.Logger
	mux   *http.ServeMux
}

// NewHandler returns the handler of c's control API, which answers only
// requests bearing token (at least MinTokenLen bytes). log may be nil.
func NewHandler(token string, c Cachelet, log *slog.Logger) (*Handler, error) {
	if len(token) < MinTokenLen {
		return nil, errors.New("control: the token must be at least 32 bytes")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &Handler{token: []byte(token), c: c, log: log, mux: http.NewServeMux()}
	h.mux.HandleFunc("GET /v1/ready", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, h.c.Ready()) })
	h.mux.HandleFunc("GET /v1/config", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, h.c.Settings()) })
	h.mux.HandleFunc("GET /v1/stats", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, h.c.Stats()) })
	h.mux.HandleFunc("GET /v1/access", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, AccessMetadata{Objects: h.c.AccessMetadata()})
	})
	h.mux.HandleFunc("POST /v1/drop", h.drop)
	h.mux.HandleFunc("POST /v1/budget", h.budget)
	h.mux.HandleFunc("POST /v1/prewarm", h.prewarm)
	h.mux.HandleFunc("POST /v1/admission", h.admission)
	return h, nil
}

// NewServer returns an http.Server for h with bounded header, read and
// idle times; requests' own deadlines come from the handler.
func NewServer(h http.Handler, log *slog.Logger) *http.Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       time.Minute,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.authorized(r) {
		h.log.Warn("control request refused: no valid token", "path", r.URL.Path)
		writeError(w, ErrUnauthorized)
		return
	}
	limit := maxCallTime
	if r.URL.Path == "/v1/prewarm" {
		limit = MaxPrewarmTime
	}
	ctx, cancel := context.WithTimeout(r.Context(), limit)
	defer cancel()
	r = r.WithContext(ctx)
	r.Body = http.MaxBytesReader(w, r.Body, MaxRequestBytes)
	h.mux.ServeHTTP(w, r)
}

func (h *Handler) authorized(r *http.Request) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), h.token) == 1
}

func (h *Handler) drop(w http.ResponseWriter, r *http.Request) {
	var req DropRequest
	if !decode(w, r, &req) {
		return
	}
	if req.Bucket == "" {
		writeError(w, badRequest("drop needs a bucket"))
		return
	}
	n := h.c.Drop(req.Bucket, req.Prefix)
	h.log.Info("dropped cached objects at the agent's request", "bucket", req.Bucket, "prefix", req.Prefix, "objects", n)
	writeJSON(w, DropResult{Dropped: n})
}

func (h *Handler) budget(w http.ResponseWriter, r *http.Request) {
	var req BudgetRequest
	if !decode(w, r, &req) {
		return
	}
	if req.Bytes < 0 {
		writeError(w, badRequest("budget needs bytes >= 0"))
		return
	}
	writeJSON(w, h.c.SetBudget(req.Bytes))
}

func (h *Handler) admission(w http.ResponseWriter, r *http.Request) {
	var req AdmissionRequest
	if !decode(w, r, &req) {
		return
	}
	if req.Admit == nil {
		writeError(w, badRequest("admission needs admit: true or false"))
		return
	}
	h.c.SetAdmit(*req.Admit)
	writeJSON(w, req)
}

func (h *Handler) prewarm(w http.ResponseWriter, r *http.Request) {
	var req PrewarmRequest
	if !decode(w, r, &req) {
		return
	}
	if len(req.Keys) > MaxPrewarmKeys {
		writeError(w, badRequest("at most 1000 keys a request"))
		return
	}
	res, err := h.c.Prewarm(r.Context(), req.Keys)
	if err != nil && r.Context().Err() == nil {
		writeError(w, err)
		return
	}
	writeJSON(w, res) // cut short by the caller: what was done so far
}

// decode reads a JSON body into v, answering the error itself when it
// cannot.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if _, err = io.Copy(io.Discard, r.Body); err == nil {
			return true
		}
	}
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		writeError(w, ErrTooLarge)
	} else {
		writeError(w, badRequest(err.Error()))
	}
	return false
}

func writeJSON(w http.ResponseWriter, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(append(body, '\n'))
}
