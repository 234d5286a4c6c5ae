package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/scaling"
)

// fakeController serves a few of the controller's routes behind the real
// RequireToken, recording what reached it.
func fakeController(t *testing.T, token string) (*httptest.Server, *[]string) {
	t.Helper()
	var seen []string
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/apps/{app}/functions/{fn}/invoke", func(w http.ResponseWriter, r *http.Request) {
		body, ok := ReadBody(w, r)
		if !ok {
			return
		}
		seen = append(seen, r.PathValue("app")+"/"+r.PathValue("fn")+" "+string(body))
		WriteJSON(w, http.StatusOK, Invocation{App: r.PathValue("app"), Function: r.PathValue("fn"), OK: true, Result: body})
	})
	mux.HandleFunc("POST /v1/apps/{app}/votes", func(w http.ResponseWriter, r *http.Request) {
		var v scaling.Vote
		if !ReadJSON(w, r, &v) {
			return
		}
		seen = append(seen, "vote "+r.PathValue("app")+" "+v.Policy)
		w.WriteHeader(http.StatusAccepted)
	})
	mux.HandleFunc("GET /v1/apps/{app}", func(w http.ResponseWriter, r *http.Request) {
		WriteError(w, http.StatusNotFound, errors.New("no application "+r.PathValue("app")))
	})
	mux.HandleFunc("GET /v1/apps/{app}/logs", func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, "logs "+r.URL.RawQuery)
		WriteJSON(w, http.StatusOK, []*Invocation{})
	})
	mux.HandleFunc("POST /v1/instances/{id}/invoke", func(w http.ResponseWriter, r *http.Request) {
		WriteError(w, http.StatusConflict, errors.New("busy"))
	})
	mux.HandleFunc("GET /v1/instances/{id}", func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	})
	srv := httptest.NewServer(RequireToken(token, mux))
	t.Cleanup(srv.Close)
	return srv, &seen
}

func TestControllerClient(t *testing.T) {
	srv, seen := fakeController(t, "s3cret")
	c := NewControllerClient(srv.URL+"/", "s3cret", nil)
	ctx := context.Background()

	rec, err := c.Invoke(ctx, "shop", "cart", json.RawMessage(`{"n":1}`))
	if err != nil || !rec.OK || rec.App != "shop" || string(rec.Result) != `{"n":1}` {
		t.Fatalf("Invoke = %+v, %v", rec, err)
	}
	if err := c.Vote(ctx, "shop", scaling.Vote{Policy: "bandwidth", Delta: 2, Urgent: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Logs(ctx, "shop", LogsQuery{Function: "cart", N: 5, OnlyErrors: true}); err != nil {
		t.Fatal(err)
	}
	want := []string{`shop/cart {"n":1}`, "vote shop bandwidth", "logs errors=1&function=cart&n=5"}
	if strings.Join(*seen, "|") != strings.Join(want, "|") {
		t.Fatalf("the controller saw %q, want %q", *seen, want)
	}

	_, err = c.App(ctx, "nope")
	var e *Error
	if !errors.As(err, &e) || e.Status != http.StatusNotFound || !errors.Is(err, ErrNotFound) || e.Message != "no application nope" {
		t.Fatalf("App(unknown) = %v, want a 404 *Error naming it", err)
	}
}

func TestWrongTokenRefused(t *testing.T) {
	srv, seen := fakeController(t, "s3cret")
	for _, token := range []string{"", "s3cre", "s3crett"} {
		_, err := NewControllerClient(srv.URL, token, nil).Invoke(context.Background(), "shop", "cart", json.RawMessage(`{}`))
		var e *Error
		if !errors.As(err, &e) || e.Status != http.StatusUnauthorized {
			t.Errorf("token %q: %v, want 401", token, err)
		}
	}
	if len(*seen) != 0 {
		t.Fatalf("requests with a wrong token reached the handler: %q", *seen)
	}
}

func TestOversizedBodyRefused(t *testing.T) {
	srv, seen := fakeController(t, "t")
	big := json.RawMessage(`"` + strings.Repeat("x", MaxRequestBytes) + `"`)
	_, err := NewControllerClient(srv.URL, "t", nil).Invoke(context.Background(), "shop", "cart", big)
	var e *Error
	if !errors.As(err, &e) || e.Status != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversized event: %v, want 413", err)
	}
	if len(*seen) != 0 {
		t.Fatal("an oversized body reached the handler")
	}
}

func TestAgentClientConflictAndDeadline(t *testing.T) {
	srv, _ := fakeController(t, "t")
	a := NewAgentClient(srv.URL, "t", nil)
	if _, err := a.Invoke(context.Background(), "i-1", InvokeRequest{Function: "f"}); !errors.Is(err, ErrConflict) {
		t.Fatalf("busy instance: %v, want ErrConflict", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := a.Instance(ctx, "i-1"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hung agent: %v, want the caller's deadline", err)
	}
}
