package changerelay

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/hoard-io/hoard/internal/store"
)

// maxLine bounds one line of the stream; a longer one breaks it.
const maxLine = 1 << 20

var errSilent = errors.New("changerelay: change stream silent past its heartbeat")

// Client follows a bucket's changes through the controller's relay (GET
// /v1/changes) with an application's platform token: a store.Listener.
type Client struct {
	// URL is the controller's base URL; Token the application's
	// platform token. Required.
	URL, Token string
	// HTTP makes the calls (its TLS is the platform's); default a
	// client of its own. Its Timeout must be 0: the stream is long.
	HTTP *http.Client
	// CallTimeout bounds the answer to the subscription; default 5 s.
	CallTimeout time.Duration
}

var _ store.Listener = (*Client)(nil)

// Listen follows bucket's changes until ctx ends or the stream breaks
// (store.Listener). ready is called on the relay's ready line, which
// comes once the store's notifications of the bucket are confirmed to
// reach the controller; a stream silent for heartbeat (the controller
// pings every heartbeat/3) is cut.
func (c *Client) Listen(ctx context.Context, bucket string, heartbeat time.Duration, ready func(), each func(store.Change)) error {
	if c.URL == "" || c.Token == "" {
		return fmt.Errorf("changerelay: %w: no controller or token", store.ErrListenUnsupported)
	}
	if heartbeat < 3*time.Second {
		heartbeat = 3 * time.Second
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	callTimeout := c.CallTimeout
	if callTimeout <= 0 {
		callTimeout = 5 * time.Second
	}
	q := url.Values{"bucket": {bucket}, "heartbeat": {heartbeat.String()}}
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// One watchdog: the answer within the call timeout, then some bytes
	// at least every heartbeat.
	wd := time.AfterFunc(callTimeout, func() { cancel(errSilent) })
	defer wd.Stop()
	req, err := http.NewRequestWithContext(cctx, http.MethodGet, strings.TrimSuffix(c.URL, "/")+"/v1/changes?"+q.Encode(), nil)
	if err != nil {
		return fmt.Errorf("changerelay: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	resp, err := hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("changerelay: subscribe %s: %w: %v", bucket, store.ErrUnavailable, causeOr(cctx, err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return refused(bucket, resp)
	}
	wd.Reset(heartbeat)
	r := bufio.NewReaderSize(kickReader{resp.Body, wd, heartbeat}, 64<<10)
	for {
		raw, err := readLine(r)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("changerelay: %s: %w: %v", bucket, store.ErrUnavailable, causeOr(cctx, err))
		}
		var l line
		if err := json.Unmarshal(raw, &l); err != nil {
			return fmt.Errorf("changerelay: %s: %w: malformed line (%d bytes): %v", bucket, store.ErrUnavailable, len(raw), err)
		}
		if l.Error != "" {
			return fmt.Errorf("changerelay: %s: %w: cut by the controller: %s", bucket, store.ErrUnavailable, l.Error)
		}
		for _, ch := range l.Changes {
			each(store.Change{Bucket: bucket, Key: ch.Key, ETag: strings.Trim(ch.ETag, `"`), Removed: ch.Removed, Time: ch.Time})
		}
		if l.Ready && ready != nil {
			ready()
			ready = nil
		}
	}
}

func causeOr(ctx context.Context, err error) error {
	if c := context.Cause(ctx); c != nil {
		return c
	}
	return err
}

// refused turns a refusal to subscribe into the error store.Listener
// names.
func refused(bucket string, resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	msg := strings.TrimSpace(string(body))
	switch resp.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden:
		return &store.APIError{Code: "AccessDenied", Message: msg, StatusCode: resp.StatusCode}
	case http.StatusNotFound, http.StatusMethodNotAllowed:
		return fmt.Errorf("changerelay: subscribe %s: %w (%d %s)", bucket, store.ErrListenUnsupported, resp.StatusCode, msg)
	}
	return fmt.Errorf("changerelay: subscribe %s: %w: %d %s", bucket, store.ErrUnavailable, resp.StatusCode, msg)
}

// readLine reads one whole line of at most maxLine bytes; a line the
// stream ends in the middle of is an error, never a change.
func readLine(r *bufio.Reader) ([]byte, error) {
	var b []byte
	for {
		part, err := r.ReadSlice('\n')
		if len(b)+len(part) > maxLine {
			return nil, errors.New("line too long")
		}
		b = append(b, part...)
		switch {
		case err == nil:
			return b, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			return nil, io.ErrUnexpectedEOF
		default:
			return nil, err
		}
	}
}

// kickReader pushes the watchdog back on every read that brings bytes.
type kickReader struct {
	r  io.Reader
	wd *time.Timer
	hb time.Duration
}

func (k kickReader) Read(p []byte) (int, error) {
	n, err := k.r.Read(p)
	if n > 0 {
		k.wd.Reset(k.hb)
	}
	return n, err
}
