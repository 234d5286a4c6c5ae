package control

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/hoard-io/hoard/internal/cacheconfig"
	"github.com/hoard-io/hoard/internal/prewarm"
)

// DefaultTimeout bounds a call whose context has no deadline (pre-warm
// calls get MaxPrewarmTime instead).
const DefaultTimeout = 10 * time.Second

// Client calls one cachelet's control API. Safe for concurrent use; Close
// releases its idle connections.
type Client struct {
	token string
	http  *http.Client
	base  string
}

// NewClient returns a client of the control listener at ep.Socket, which
// it authenticates to with ep.Token.
func NewClient(ep Endpoint) *Client {
	var d net.Dialer
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "unix", ep.Socket)
		},
		MaxIdleConns:          4,
		IdleConnTimeout:       time.Minute,
		ResponseHeaderTimeout: MaxPrewarmTime,
	}
	return &Client{token: ep.Token, http: &http.Client{Transport: tr}, base: "http://cachelet"}
}

// Close releases the client's idle connections.
func (c *Client) Close() { c.http.CloseIdleConnections() }

// Ready returns where the cachelet serves. Any answer means it is serving
// and, in an application, joined to its ring; an error wrapping
// ErrUnavailable means it cannot be reached (yet).
func (c *Client) Ready(ctx context.Context) (Ready, error) {
	var r Ready
	err := c.do(ctx, http.MethodGet, "/v1/ready", nil, &r, DefaultTimeout)
	return r, err
}

// Config returns the cache settings the cachelet applied.
func (c *Client) Config(ctx context.Context) (cacheconfig.Settings, error) {
	var s cacheconfig.Settings
	err := c.do(ctx, http.MethodGet, "/v1/config", nil, &s, DefaultTimeout)
	return s, err
}

// Stats returns the cachelet's counters and its cache's occupancy.
func (c *Client) Stats(ctx context.Context) (Stats, error) {
	var s Stats
	err := c.do(ctx, http.MethodGet, "/v1/stats", nil, &s, DefaultTimeout)
	return s, err
}

// Drop has the cachelet drop its cached copies of bucket's objects whose
// keys start with prefix (empty: the whole bucket), and returns how many
// it dropped. Writes the store does not have yet stay.
func (c *Client) Drop(ctx context.Context, bucket, prefix string) (int, error) {
	if bucket == "" {
		return 0, badRequest("drop needs a bucket")
	}
	var res DropResult
	err := c.do(ctx, http.MethodPost, "/v1/drop", DropRequest{Bucket: bucket, Prefix: prefix}, &res, DefaultTimeout)
	return res.Dropped, err
}

// SetBudget sets the memory tier's budget to n >= 0 bytes.
func (c *Client) SetBudget(ctx context.Context, n int64) (BudgetResult, error) {
	if n < 0 {
		return BudgetResult{}, badRequest("negative budget")
	}
	var res BudgetResult
	err := c.do(ctx, http.MethodPost, "/v1/budget", BudgetRequest{Bytes: n}, &res, DefaultTimeout)
	return res, err
}

// SetAdmit says whether the cachelet keeps the misses of the function
// about to run (admission by predicted benefit).
func (c *Client) SetAdmit(ctx context.Context, admit bool) error {
	var res AdmissionRequest
	return c.do(ctx, http.MethodPost, "/v1/admission", AdmissionRequest{Admit: &admit}, &res, DefaultTimeout)
}

// Prewarm has the cachelet fetch into memory those of keys (at most
// MaxPrewarmKeys) it owns and lacks. Ending ctx stops it.
func (c *Client) Prewarm(ctx context.Context, keys []Key) (PrewarmResult, error) {
	if len(keys) > MaxPrewarmKeys {
		return PrewarmResult{}, badRequest("too many keys")
	}
	var res PrewarmResult
	err := c.do(ctx, http.MethodPost, "/v1/prewarm", PrewarmRequest{Keys: keys}, &res, MaxPrewarmTime)
	return res, err
}

// AccessMetadata returns the cachelet's access metadata.
func (c *Client) AccessMetadata(ctx context.Context) ([]prewarm.Object, error) {
	var res AccessMetadata
	err := c.do(ctx, http.MethodGet, "/v1/access", nil, &res, DefaultTimeout)
	return res.Objects, err
}

// do makes one call: the request body is in's JSON, the answer is decoded
// into out. A ctx without a deadline gets one of limit.
func (c *Client) do(ctx context.Context, method, path string, in, out any, limit time.Duration) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, limit)
		defer cancel()
	}
	var body io.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return err
		}
		if len(data) > MaxRequestBytes {
			return fmt.Errorf("%w: request of %d bytes", ErrTooLarge, len(data))
		}
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return fmt.Errorf("control %s: %w", path, ctxErr)
		}
		return fmt.Errorf("%w: %s: %v", ErrUnavailable, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes+1))
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return fmt.Errorf("control %s: %w", path, ctxErr)
		}
		return fmt.Errorf("%w: %s: %v", ErrUnavailable, path, err)
	}
	if len(data) > MaxResponseBytes {
		return fmt.Errorf("%w: the answer to %s exceeds %d bytes", ErrTooLarge, path, MaxResponseBytes)
	}
	if resp.StatusCode != http.StatusOK {
		return readError(resp.StatusCode, data)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%w: %s: bad answer: %v", ErrUnavailable, path, err)
	}
	return nil
}
