package instance

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/cachelet"
	"github.com/hoard-io/hoard/internal/changerelay"
	"github.com/hoard-io/hoard/internal/scaling"
	"github.com/hoard-io/hoard/internal/store"
	s3store "github.com/hoard-io/hoard/internal/store/s3"
)

// platformClient is the cachelet's side of the platform's scaling API for
// the bandwidth policy (cachelet.Platform): the application's measured
// instance load time and instance limit, and urgent scale-out votes,
// through the controller's client.
type platformClient struct {
	api *api.ControllerClient
	app string

	mu      sync.Mutex
	hints   cachelet.Hints
	fetched time.Time
}

// hintsMaxAge is how long an answer to Hints is reused.
const hintsMaxAge = 5 * time.Second

// platformTimeout is the deadline of one call to the controller.
const platformTimeout = 5 * time.Second

func newPlatformClient(url, token, app string, hc *http.Client) *platformClient {
	return &platformClient{api: api.NewControllerClient(url, token, hc), app: app}
}

// platformHTTP is the client of the instance's calls to the controller:
// nil (each caller's default) without TLS.
func platformHTTP(tc *tls.Config) *http.Client {
	if tc == nil {
		return nil
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tc.Clone(), TLSHandshakeTimeout: 10 * time.Second, IdleConnTimeout: 90 * time.Second}}
}

func (p *platformClient) Hints(ctx context.Context) (cachelet.Hints, error) {
	p.mu.Lock()
	if !p.fetched.IsZero() && time.Since(p.fetched) < hintsMaxAge {
		h := p.hints
		p.mu.Unlock()
		return h, nil
	}
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, platformTimeout)
	defer cancel()
	si, err := p.api.Scaling(ctx, p.app)
	if err != nil {
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
	ctx, cancel := context.WithTimeout(ctx, platformTimeout)
	defer cancel()
	return p.api.Vote(ctx, p.app, v)
}

// changeFeed is where the cachelet follows the store's changes from
// (Cachelet.External): the store's own change stream (ADR 0028), or with
// ChangesRelay the controller's relay of the store's event notifications
// (GET /v1/changes at PlatformURL with PlatformToken; ADR 0033). The
// relay's stream is long: its client has no overall timeout, only the
// relay's deadlines.
func changeFeed(cfg Config, st *s3store.Store) (store.Listener, error) {
	if !cfg.ChangesRelay {
		return st, nil
	}
	if cfg.PlatformURL == "" || cfg.PlatformToken == "" {
		return nil, errors.New("instance: the change relay needs PlatformURL and PlatformToken")
	}
	return &changerelay.Client{URL: cfg.PlatformURL, Token: cfg.PlatformToken, HTTP: platformHTTP(cfg.PlatformTLS)}, nil
}
