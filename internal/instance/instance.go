// Package instance assembles one application instance's data layer: a
// store client, a cachelet over it, the S3 front serving it on a listener,
// and the Prometheus endpoint. It is the composition root shared by
// `hoard serve`, `hoard up`, the benchmarks and the integration tests.
package instance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/hoard-io/hoard/internal/cachelet"
	"github.com/hoard-io/hoard/internal/s3api"
	"github.com/hoard-io/hoard/internal/s3auth"
	s3store "github.com/hoard-io/hoard/internal/store/s3"
)

// Config configures one instance.
type Config struct {
	// Listen is the S3 endpoint's address; default "127.0.0.1:0" (a free port).
	Listen string
	// MetricsListen is the address of /metrics; default "127.0.0.1:0".
	// "off" disables the metrics listener.
	MetricsListen string
	// Region clients sign for; default "us-east-1".
	Region string
	// AccessKey and SecretKey are the credentials clients of this
	// instance sign with. Required. They are not the store's.
	AccessKey, SecretKey string
	// Store is how the cachelet reaches the store, with its own credentials.
	Store s3store.Config
	// Cachelet configures the cache. A zero Cache.Budget means
	// DefaultBudget().
	Cachelet cachelet.Config
	// Domains are base host names for virtual-host style requests
	// ("bucket.DOMAIN"); default none (path style only).
	Domains []string
	// MaxHeaderBytes is the HTTP server's hard limit on request headers
	// (answered with a bare 431); default 1 MiB. Below it, the S3 front
	// answers headers over 16 KiB with S3's RequestHeaderSectionTooLarge.
	MaxHeaderBytes int
}

// Validate checks the config and fills in defaults.
func (c *Config) Validate() error {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:0"
	}
	if c.MetricsListen == "" {
		c.MetricsListen = "127.0.0.1:0"
	}
	if c.Region == "" {
		c.Region = "us-east-1"
	}
	if c.AccessKey == "" || c.SecretKey == "" {
		return errors.New("instance: client access key and secret key are required")
	}
	if c.Store.Region == "" {
		c.Store.Region = c.Region
	}
	if err := c.Store.Validate(); err != nil {
		return err
	}
	if c.Cachelet.Cache.Budget == 0 {
		c.Cachelet.Cache.Budget = DefaultBudget()
	}
	if c.MaxHeaderBytes == 0 {
		c.MaxHeaderBytes = 1 << 20
	}
	return c.Cachelet.Validate()
}

// Instance is a running cachelet with its listeners.
type Instance struct {
	cfg      Config
	log      *slog.Logger
	store    *s3store.Store
	cachelet *cachelet.Cachelet
	s3       *http.Server
	metrics  *http.Server
	s3Addr   string
	metAddr  string
	reg      *prometheus.Registry

	closeOnce sync.Once
	closeErr  error
	serving   sync.WaitGroup
}

// staticCreds is the one client credential of an instance.
type staticCreds struct{ ak, sk string }

func (c staticCreds) Secret(ak string) (string, bool) {
	if ak == c.ak {
		return c.sk, true
	}
	return "", false
}

// Start builds the instance and starts serving. ctx bounds start-up only.
func Start(ctx context.Context, cfg Config, log *slog.Logger) (*Instance, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	st, err := s3store.New(cfg.Store, log.With("component", "store"))
	if err != nil {
		return nil, fmt.Errorf("instance: store: %w", err)
	}
	cl, err := cachelet.New(cfg.Cachelet, st, log.With("component", "cachelet"), reg)
	if err != nil {
		st.Close()
		return nil, err
	}
	ver, err := s3auth.New(s3auth.Config{Region: cfg.Region, Domains: cfg.Domains}, staticCreds{cfg.AccessKey, cfg.SecretKey})
	if err != nil {
		st.Close()
		return nil, err
	}
	api, err := s3api.New(s3api.Config{Region: cfg.Region, Domains: cfg.Domains}, cl, ver, log.With("component", "s3api"), reg)
	if err != nil {
		st.Close()
		return nil, err
	}
	in := &Instance{cfg: cfg, log: log, store: st, cachelet: cl, reg: reg}

	var lc net.ListenConfig
	s3ln, err := lc.Listen(ctx, "tcp", cfg.Listen)
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("instance: listen on %s: %w", cfg.Listen, err)
	}
	in.s3Addr = s3ln.Addr().String()
	in.s3 = &http.Server{
		Handler:           api,
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	in.serve(in.s3, s3ln)

	if cfg.MetricsListen != "off" {
		mln, err := lc.Listen(ctx, "tcp", cfg.MetricsListen)
		if err != nil {
			_ = in.Close(context.Background())
			return nil, fmt.Errorf("instance: listen on %s: %w", cfg.MetricsListen, err)
		}
		in.metAddr = mln.Addr().String()
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
		in.metrics = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		in.serve(in.metrics, mln)
	}
	log.Info("cachelet serving", "endpoint", in.Endpoint(), "metrics", in.MetricsURL(),
		"store", cfg.Store.Endpoint, "budget_bytes", cfg.Cachelet.Cache.Budget, "read_mode", cfg.Cachelet.ReadMode)
	return in, nil
}

func (in *Instance) serve(srv *http.Server, ln net.Listener) {
	in.serving.Add(1)
	go func() {
		defer in.serving.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			in.log.Error("listener stopped", "addr", ln.Addr().String(), "err", err)
		}
	}()
}

// Endpoint is the S3 endpoint URL clients use.
func (in *Instance) Endpoint() string { return "http://" + in.s3Addr }

// MetricsURL is the Prometheus endpoint, or "" when disabled.
func (in *Instance) MetricsURL() string {
	if in.metAddr == "" {
		return ""
	}
	return "http://" + in.metAddr + "/metrics"
}

// Cachelet exposes the instance's cachelet (for tests and benchmarks).
func (in *Instance) Cachelet() *cachelet.Cachelet { return in.cachelet }

// Registry exposes the instance's metrics registry.
func (in *Instance) Registry() *prometheus.Registry { return in.reg }

// Close stops accepting requests, lets those in flight finish within ctx,
// waits for cache fills, and releases the store client. Idempotent.
func (in *Instance) Close(ctx context.Context) error {
	in.closeOnce.Do(func() {
		var errs []error
		if err := in.s3.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("s3 listener: %w", err))
			_ = in.s3.Close()
		}
		if in.metrics != nil {
			if err := in.metrics.Shutdown(ctx); err != nil {
				_ = in.metrics.Close()
			}
		}
		in.serving.Wait()
		errs = append(errs, in.cachelet.Close(), in.store.Close())
		in.closeErr = errors.Join(errs...)
	})
	return in.closeErr
}
