package s3store

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/hoard-io/hoard/internal/httpfetch"
)

// Defaults for the zero fields of Config.
const (
	DefaultRegion                = "us-east-1"
	DefaultMaxIdleConnsPerHost   = 256
	DefaultDialTimeout           = 5 * time.Second
	DefaultTLSHandshakeTimeout   = 10 * time.Second
	DefaultResponseHeaderTimeout = 2 * time.Minute
	DefaultIdleConnTimeout       = 90 * time.Second
	DefaultMaxAttempts           = 3
	DefaultCallTimeout           = 3 * time.Second
	DefaultIdleTimeout           = 5 * time.Second
)

// Config says how to reach one S3-compatible store.
type Config struct {
	// Endpoint is the store's base URL, "http://host:port" or
	// "https://host". Required. A path is not allowed.
	Endpoint string
	// AccessKey and SecretKey sign every request (SigV4). Both empty
	// means anonymous requests.
	AccessKey string
	SecretKey string
	// Region signs requests; default DefaultRegion. Setting it also
	// spares a GetBucketLocation round trip per bucket.
	Region string
	// VirtualHostStyle addresses buckets as bucket.host instead of
	// host/bucket. Default false: path style, which every S3-compatible
	// store (MinIO, versitygw, Ceph) accepts and which needs no DNS.
	VirtualHostStyle bool

	// MaxIdleConnsPerHost is the keep-alive pool per store host; default
	// DefaultMaxIdleConnsPerHost. A cachelet talks to one host with many
	// concurrent requests, so Go's default of 2 would churn connections.
	MaxIdleConnsPerHost int
	// DialTimeout bounds TCP connect; default DefaultDialTimeout.
	DialTimeout time.Duration
	// TLSHandshakeTimeout; default DefaultTLSHandshakeTimeout.
	TLSHandshakeTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for response headers after
	// the request (body included) was sent; default
	// DefaultResponseHeaderTimeout. It is the last resort, and the bound
	// of the calls that may take long on a healthy store: a copy's answer
	// (Copy: CallTimeout plus the source's size at 8 MiB/s, at most this;
	// a copy passed through: this), whereas DeleteMany and
	// CompleteMultipartUpload get a CallTimeout per hundred keys or
	// thousand parts.
	// There is deliberately no overall timeout: bodies can be
	// arbitrarily large, and callers bound requests with their context.
	ResponseHeaderTimeout time.Duration
	// IdleConnTimeout closes pooled connections idle this long; default
	// DefaultIdleConnTimeout.
	IdleConnTimeout time.Duration
	// MaxAttempts is how many times a request is tried when the store is
	// unreachable or answers a retryable error (5xx, SlowDown); default
	// DefaultMaxAttempts, 1 disables retries. Requests whose body cannot
	// be rewound are tried once whatever this says.
	MaxAttempts int
	// CallTimeout bounds a small request, every attempt included: a
	// HEAD, the wait for a GET's response headers (the validation of a
	// cached copy among them), a DELETE, the bucket calls. Default
	// DefaultCallTimeout. A call cut short fails with
	// store.ErrUnavailable, which clients see as 503 with Retry-After.
	CallTimeout time.Duration
	// IdleTimeout aborts a body in flight, a GET's download or a PUT's
	// upload (and the wait for its answer), when no byte moved for this
	// long. Default DefaultIdleTimeout. It is not a total: a large body
	// takes as long as it needs while it keeps moving. Only the store's
	// share counts: a download's reader that pauses between reads (a
	// slow client) or an upload whose own source is slow is not cut off.
	IdleTimeout time.Duration
	// InsecureSkipVerify disables TLS certificate checks, for stores
	// with self-signed certificates in development.
	InsecureSkipVerify bool
	// TLS, when set, is the client's TLS to an https store: the CA bundle
	// its certificate chains to (a store started with the platform's
	// local CA, ADR 0017). Cloned. Default nil: the system's roots.
	TLS *tls.Config
}

// withDefaults returns a copy with every defaulted field filled in.
func (c Config) withDefaults() Config {
	if c.Region == "" {
		c.Region = DefaultRegion
	}
	if c.MaxIdleConnsPerHost == 0 {
		c.MaxIdleConnsPerHost = DefaultMaxIdleConnsPerHost
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.TLSHandshakeTimeout == 0 {
		c.TLSHandshakeTimeout = DefaultTLSHandshakeTimeout
	}
	if c.ResponseHeaderTimeout == 0 {
		c.ResponseHeaderTimeout = DefaultResponseHeaderTimeout
	}
	if c.IdleConnTimeout == 0 {
		c.IdleConnTimeout = DefaultIdleConnTimeout
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = DefaultCallTimeout
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	return c
}

// Validate reports the first problem with the configuration.
func (c Config) Validate() error {
	if c.Endpoint == "" {
		return errors.New("s3store: Endpoint is required")
	}
	u, err := url.Parse(c.Endpoint)
	if err != nil {
		return fmt.Errorf("s3store: Endpoint %q: %w", c.Endpoint, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("s3store: Endpoint %q: scheme must be http or https", c.Endpoint)
	}
	if u.Host == "" {
		return fmt.Errorf("s3store: Endpoint %q: no host", c.Endpoint)
	}
	if u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.User != nil {
		return fmt.Errorf("s3store: Endpoint %q: only scheme://host[:port] is allowed", c.Endpoint)
	}
	if (c.AccessKey == "") != (c.SecretKey == "") {
		return errors.New("s3store: AccessKey and SecretKey must be set together")
	}
	for name, d := range map[string]time.Duration{
		"DialTimeout":           c.DialTimeout,
		"TLSHandshakeTimeout":   c.TLSHandshakeTimeout,
		"ResponseHeaderTimeout": c.ResponseHeaderTimeout,
		"IdleConnTimeout":       c.IdleConnTimeout,
		"CallTimeout":           c.CallTimeout,
		"IdleTimeout":           c.IdleTimeout,
	} {
		if d < 0 {
			return fmt.Errorf("s3store: %s must not be negative", name)
		}
	}
	if c.MaxIdleConnsPerHost < 0 {
		return errors.New("s3store: MaxIdleConnsPerHost must not be negative")
	}
	if c.MaxAttempts < 0 {
		return errors.New("s3store: MaxAttempts must not be negative")
	}
	return nil
}

// newFetchTransport is the read path's transport (ADR 0041): the same
// dialer, TLS settings, bounds and pool size as t, with requests written
// and answers read in the caller's goroutine. It speaks the endpoint's
// scheme only.
func newFetchTransport(cfg Config, scheme string, t *http.Transport) *httpfetch.Transport {
	var tc *tls.Config
	if scheme == "https" {
		if tc = t.TLSClientConfig; tc == nil {
			tc = &tls.Config{MinVersion: tls.VersionTLS12}
		}
	}
	return httpfetch.New(httpfetch.Config{
		// Through t's field, read at each dial: tests point it elsewhere.
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return t.DialContext(ctx, network, addr)
		},
		TLS:            tc,
		DialTimeout:    cfg.DialTimeout + cfg.TLSHandshakeTimeout,
		HeaderTimeout:  cfg.ResponseHeaderTimeout,
		MaxIdlePerHost: cfg.MaxIdleConnsPerHost,
		IdleTimeout:    cfg.IdleConnTimeout,
		ReadBuffer:     fetchReadBuffer,
		// send makes nothing of a 304 but store.ErrNotModified.
		HeadlessNotModified: true,
	})
}

// fetchReadBuffer is the read path's connection buffer: it holds an
// answer's head with a small object's body (one read from the socket);
// a fill's larger reads go from the socket into the cache entry.
const fetchReadBuffer = 16 << 10

// newTransport builds the HTTP transport for one store. cfg has its
// defaults applied.
func newTransport(cfg Config) *http.Transport {
	dialer := &net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second}
	t := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           dialer.DialContext,
		ForceAttemptHTTP2:     false, // S3 stores speak HTTP/1.1; h2 multiplexing one conn hurts throughput
		MaxIdleConns:          0,     // no global cap: the per-host cap is what matters
		MaxIdleConnsPerHost:   cfg.MaxIdleConnsPerHost,
		IdleConnTimeout:       cfg.IdleConnTimeout,
		TLSHandshakeTimeout:   cfg.TLSHandshakeTimeout,
		ResponseHeaderTimeout: cfg.ResponseHeaderTimeout,
		ExpectContinueTimeout: time.Second,
		// The bytes and lengths hoard sees must be the store's: with
		// compression on, Go would ask for gzip and transparently
		// inflate, changing Content-Length and breaking ranges.
		DisableCompression: true,
		WriteBufferSize:    64 << 10,
		ReadBufferSize:     64 << 10,
	}
	if cfg.TLS != nil {
		t.TLSClientConfig = cfg.TLS.Clone()
	}
	if cfg.InsecureSkipVerify {
		if t.TLSClientConfig == nil {
			t.TLSClientConfig = &tls.Config{}
		}
		t.TLSClientConfig.InsecureSkipVerify = true //nolint:gosec // opt-in for development stores
	}
	return t
}
