// Package api is the platform's wire contract: the JSON types of the
// controller's and the node agents' HTTP APIs, the one client of each
// (ControllerClient, AgentClient), and the few helpers both servers share
// (bearer-token authentication, bounded JSON bodies, the error document).
//
// It sits below the roles: the controller and the agent import it, never
// each other, and so does everything that talks to them (cmd/hoard, the
// instances' cachelets, the benchmarks). It imports only pure packages.
package api

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// MaxRequestBytes bounds a JSON request body (an invocation's event, a
// pipeline's input).
const MaxRequestBytes = 6 << 20

// maxResponseBytes bounds an answer a client reads (a list of instances,
// an invocation's log and result).
const maxResponseBytes = 64 << 20

// DefaultTimeout is a client's deadline for one call when its context has
// none. An invocation's context should carry its own (its function's
// timeout and some).
const DefaultTimeout = 10 * time.Minute

// ErrConflict is the sentinel behind a 409 answer: an agent's instance is
// busy or gone, an agent already has an instance of that id.
var ErrConflict = errors.New("conflict")

// ErrNotFound is the sentinel behind a 404 answer.
var ErrNotFound = errors.New("not found")

// Error is a non-2xx answer: the status and the server's message. It
// unwraps to ErrConflict for 409 and ErrNotFound for 404.
type Error struct {
	Status  int    // the HTTP status code
	Message string // the server's "error", or the status text
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s (%d %s)", e.Message, e.Status, http.StatusText(e.Status))
}

// Unwrap maps the status to the package's sentinels.
func (e *Error) Unwrap() error {
	switch e.Status {
	case http.StatusConflict:
		return ErrConflict
	case http.StatusNotFound:
		return ErrNotFound
	}
	return nil
}

// RequireToken answers 401 to requests without "Authorization: Bearer
// TOKEN" (compared in constant time); /healthz is open. An empty token
// lets nothing else through.
func RequireToken(token string, next http.Handler) http.Handler {
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" && (token == "" || subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1) {
			WriteError(w, http.StatusUnauthorized, errors.New("missing or wrong bearer token"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// ReadBody reads a request body of at most MaxRequestBytes; a larger one
// is answered 413 and false is returned.
func ReadBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxRequestBytes+1))
	if err == nil && len(body) > MaxRequestBytes {
		err = fmt.Errorf("request body larger than %d MiB", MaxRequestBytes>>20)
	}
	if err != nil {
		WriteError(w, http.StatusRequestEntityTooLarge, err)
		return nil, false
	}
	return body, true
}

// ReadJSON decodes a request body of at most MaxRequestBytes into v; a
// bad one is answered 400 (413 when too large) and false is returned.
func ReadJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	body, ok := ReadBody(w, r)
	if !ok {
		return false
	}
	if err := json.Unmarshal(body, v); err != nil {
		WriteError(w, http.StatusBadRequest, fmt.Errorf("bad request: %w", err))
		return false
	}
	return true
}

// WriteJSON answers v as JSON with the status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// WriteError answers {"error": err} with the status.
func WriteError(w http.ResponseWriter, status int, err error) {
	WriteJSON(w, status, map[string]string{"error": err.Error()})
}

// caller is what both clients share: a base URL, a token, an HTTP client.
type caller struct {
	base, token string
	http        *http.Client
}

// call sends body (JSON-encoded unless it is raw []byte with a content
// type) and decodes a JSON answer into out (when not nil). A context
// without a deadline gets DefaultTimeout. A non-2xx answer is an *Error.
// upload is a request body of n bytes that r reads, streamed, not held.
type upload struct {
	r io.Reader
	n int64
}

func (c *caller) call(ctx context.Context, method, path, contentType string, in, out any) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	var body io.Reader
	length := int64(-1)
	switch b := in.(type) {
	case nil:
	case []byte:
		body = bytes.NewReader(b)
	case upload:
		body, length = b.r, b.n
	default:
		data, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body, contentType = bytes.NewReader(data), "application/json"
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return err
	}
	if length >= 0 {
		// Sent as it is read; a server that refuses it at once (too
		// large) answers before any of it is sent.
		req.ContentLength = length
		req.Header.Set("Expect", "100-continue")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return err
	}
	if len(data) > maxResponseBytes {
		return fmt.Errorf("%s %s: answer larger than %d MiB", method, c.base+path, maxResponseBytes>>20)
	}
	if resp.StatusCode/100 != 2 {
		e := &Error{Status: resp.StatusCode}
		var doc struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(data, &doc) == nil && doc.Error != "" {
			e.Message = doc.Error
		} else if e.Message = strings.TrimSpace(string(data)); e.Message == "" {
			e.Message = http.StatusText(resp.StatusCode)
		}
		return e
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("%s %s: %w", method, c.base+path, err)
		}
	}
	return nil
}
