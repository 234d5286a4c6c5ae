package instance

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/hoard-io/hoard/internal/cachelet"
	"github.com/hoard-io/hoard/internal/scaling"
)

// platformClient is the cachelet's side of the platform's scaling API for
// the bandwidth policy (cachelet.Platform): GET URL/scaling for the
// measured instance load time and the instance limit, POST URL/votes for
// an urgent scale-out. URL is the application's controller resource,
// http://controller/v1/apps/APP.
type platformClient struct {
	url, token string
	http       *http.Client

	mu      sync.Mutex
	hints   cachelet.Hints
	fetched time.Time
}

// hintsMaxAge is how long an answer to Hints is reused.
const hintsMaxAge = 5 * time.Second

func newPlatformClient(url, token string) *platformClient {
	return &platformClient{url: url, token: token, http: &http.Client{Timeout: 5 * time.Second}}
}

// scalingInfo is the controller's answer to GET /v1/apps/APP/scaling.
type scalingInfo struct {
	LoadTimeMS   *float64 `json:"load_time_ms"`
	MaxInstances int      `json:"max_instances"`
}

func (p *platformClient) Hints(ctx context.Context) (cachelet.Hints, error) {
	p.mu.Lock()
	if !p.fetched.IsZero() && time.Since(p.fetched) < hintsMaxAge {
		h := p.hints
		p.mu.Unlock()
		return h, nil
	}
	p.mu.Unlock()
	var si scalingInfo
	if err := p.do(ctx, http.MethodGet, "/scaling", nil, &si); err != nil {
		return cachelet.Hints{}, err
	}
	h := cachelet.Hints{LoadTime: -1, MaxInstances: si.MaxInstances}
	if si.LoadTimeMS != nil && *si.LoadTimeMS >= 0 {
		h.LoadTime = time.Duration(*si.LoadTimeMS * float64(time.Millisecond))
	}
	p.mu.Lock()
	p.hints, p.fetched = h, time.Now()
	p.mu.Unlock()
	return h, nil
}

func (p *platformClient) Vote(ctx context.Context, v scaling.Vote) error {
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return p.do(ctx, http.MethodPost, "/votes", body, nil)
}

func (p *platformClient) do(ctx context.Context, method, path string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, p.url+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if p.token != "" {
		req.Header.Set("Authorization", "Bearer "+p.token)
	}
	resp, err := p.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("platform %s %s: %s: %s", method, p.url+path, resp.Status, bytes.TrimSpace(data))
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("platform %s %s: %w", method, p.url+path, err)
		}
	}
	return nil
}
