package control

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// Errors a control call returns, each tied to one status.
var (
	// ErrUnauthorized: the request bore no token, or the wrong one (401).
	ErrUnauthorized = errors.New("control: unauthorized")
	// ErrBadRequest: the request was malformed (400).
	ErrBadRequest = errors.New("control: bad request")
	// ErrTooLarge: the request body exceeded MaxRequestBytes, or the
	// answer MaxResponseBytes (413).
	ErrTooLarge = errors.New("control: body too large")
	// ErrUnavailable: the cachelet could not be reached or failed (5xx).
	ErrUnavailable = errors.New("control: cachelet unavailable")
)

// errorTable is the one mapping between errors, wire codes and statuses.
var errorTable = []struct {
	err    error
	code   string
	status int
}{
	{ErrUnauthorized, "Unauthorized", http.StatusUnauthorized},
	{ErrBadRequest, "BadRequest", http.StatusBadRequest},
	{ErrTooLarge, "TooLarge", http.StatusRequestEntityTooLarge},
	{ErrUnavailable, "Unavailable", http.StatusServiceUnavailable},
}

// wireError is the body of a failed answer.
type wireError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func badRequest(msg string) error { return fmt.Errorf("%w: %s", ErrBadRequest, msg) }

func writeError(w http.ResponseWriter, err error) {
	code, status := "Internal", http.StatusInternalServerError
	for _, e := range errorTable {
		if errors.Is(err, e.err) {
			code, status = e.code, e.status
			break
		}
	}
	body, _ := json.Marshal(wireError{Code: code, Message: err.Error()})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// readError turns a failed answer back into its sentinel.
func readError(status int, body []byte) error {
	var we wireError
	_ = json.Unmarshal(body, &we)
	for _, e := range errorTable {
		if e.code == we.Code || (we.Code == "" && e.status == status) {
			return fmt.Errorf("%w (%d: %s)", e.err, status, we.Message)
		}
	}
	return fmt.Errorf("%w: answered %d: %s", ErrUnavailable, status, we.Message)
}
