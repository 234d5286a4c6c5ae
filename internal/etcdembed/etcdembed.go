// Package etcdembed runs a single-member etcd server inside the hoard process.
//
// It is the single-machine default of `hoard up`: membership and controller
// state live in etcd (DESIGN.md §1, §9), and on one machine a separate etcd
// process would be one more thing to install and supervise. On many machines
// hoard is pointed at an external etcd cluster instead and this package is not
// used. Clients reach the embedded server through its ordinary client URL, so
// the code above it cannot tell the two apart.
package etcdembed

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"google.golang.org/grpc"

	"github.com/hoard-io/hoard/internal/etcdembed/zapslog"
)

// Defaults of Config.
const (
	// DefaultClientAddr picks a free loopback port for clients.
	DefaultClientAddr = "127.0.0.1:0"
	// DefaultPeerAddr picks a free loopback port for the raft peer listener,
	// which a single-member cluster never dials but etcd insists on opening.
	DefaultPeerAddr = "127.0.0.1:0"
	// DefaultLogLevel keeps etcd's chatty info logs (one line per raft step at
	// start-up) out of hoard's log; warnings and errors still come through.
	DefaultLogLevel = slog.LevelWarn
	// DefaultCompactionRetention bounds the key history kept. Membership
	// churns keys under leases; an hour of history is plenty for watchers to
	// resume after a reconnect, and they re-list when it is not.
	DefaultCompactionRetention = time.Hour
	// DefaultStartTimeout bounds how long Start waits for the server to elect
	// itself leader and serve; a single member usually needs well under 2 s.
	DefaultStartTimeout = 30 * time.Second
	// DefaultMaxLeaseTTL caps every lease's time to live: the platform's
	// own live seconds (membership.DefaultTTL, agents' 10 s).
	DefaultMaxLeaseTTL = 5 * time.Minute
)

// Config configures the embedded server. The zero value of every field but
// Dir selects its default.
type Config struct {
	// Dir is hoard's state directory; etcd keeps its data in Dir/etcd, which
	// is created if missing and reused on the next start. Required.
	Dir string
	// ClientAddr is the host:port clients connect to (HTTP/2 gRPC, over
	// TLS with TLS).
	// Port 0 picks a free port; Endpoints reports the one chosen. Default
	// DefaultClientAddr.
	ClientAddr string
	// PeerAddr is the host:port of the raft peer listener. Default
	// DefaultPeerAddr.
	PeerAddr string
	// Logger receives etcd's logs at LogLevel and above. Default: discard.
	Logger *slog.Logger
	// LogLevel is the lowest level of etcd's logs passed on to Logger.
	// Default (nil) DefaultLogLevel.
	LogLevel slog.Leveler
	// CompactionRetention is how much key history etcd keeps (periodic
	// compaction). Default DefaultCompactionRetention.
	CompactionRetention time.Duration
	// MaxLeaseTTL is the longest lease any client may grant, in whole
	// seconds; longer grants are refused (capLeaseTTL). Default
	// DefaultMaxLeaseTTL.
	MaxLeaseTTL time.Duration
	// TLS, when set, serves the client and peer URLs over TLS (https)
	// with this certificate and key, and requires every client to present
	// a certificate chaining to TLS.CA (client certificate authentication,
	// in addition to etcd's users and roles where those are on). Default:
	// plain HTTP.
	TLS *TLSFiles
}

// TLSFiles are the PEM files of the server's TLS: its certificate, its
// key (0600), and the CA bundle client certificates must chain to.
type TLSFiles struct {
	Cert, Key, CA string
}

// Validate reports whether c can be used, after defaults are applied.
func (c Config) Validate() error {
	if c.Dir == "" {
		return errors.New("etcdembed: Dir is required")
	}
	for _, a := range []string{c.ClientAddr, c.PeerAddr} {
		if a == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("etcdembed: address %q: %w", a, err)
		}
	}
	if c.TLS != nil && (c.TLS.Cert == "" || c.TLS.Key == "" || c.TLS.CA == "") {
		return errors.New("etcdembed: TLS needs a certificate, a key and a client CA")
	}
	if c.CompactionRetention < 0 || c.MaxLeaseTTL < 0 {
		return errors.New("etcdembed: CompactionRetention and MaxLeaseTTL must not be negative")
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.ClientAddr == "" {
		c.ClientAddr = DefaultClientAddr
	}
	if c.PeerAddr == "" {
		c.PeerAddr = DefaultPeerAddr
	}
	if c.LogLevel == nil {
		c.LogLevel = DefaultLogLevel
	}
	if c.CompactionRetention == 0 {
		c.CompactionRetention = DefaultCompactionRetention
	}
	if c.MaxLeaseTTL == 0 {
		c.MaxLeaseTTL = DefaultMaxLeaseTTL
	}
	return c
}

// Server is a running embedded etcd. Its methods are safe for concurrent use.
type Server struct {
	etcd      *embed.Etcd
	endpoints []string
	closeOnce sync.Once
}

// Start starts an etcd server with one member and waits until it serves
// clients, or until ctx ends (then the partly started server is stopped and
// ctx's error returned). The caller must Close the server.
func Start(ctx context.Context, c Config) (*Server, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("etcdembed: start: %w", err)
	}
	c = c.withDefaults()

	dir := filepath.Join(c.Dir, "etcd")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("etcdembed: %w", err)
	}
	scheme := "http"
	if c.TLS != nil {
		scheme = "https"
	}
	clientURL := url.URL{Scheme: scheme, Host: c.ClientAddr}
	peerURL := url.URL{Scheme: scheme, Host: c.PeerAddr}

	ec := embed.NewConfig()
	ec.Name = "hoard"
	ec.Dir = dir
	ec.ListenClientUrls = []url.URL{clientURL}
	ec.AdvertiseClientUrls = []url.URL{clientURL}
	ec.ListenPeerUrls = []url.URL{peerURL}
	ec.AdvertisePeerUrls = []url.URL{peerURL}
	ec.InitialCluster = ec.InitialClusterFromName(ec.Name)
	ec.InitialClusterToken = "hoard"
	if c.TLS != nil {
		info := transport.TLSInfo{CertFile: c.TLS.Cert, KeyFile: c.TLS.Key, TrustedCAFile: c.TLS.CA,
			ClientCertAuth: true, MinVersion: tls.VersionTLS13}
		ec.ClientTLSInfo, ec.PeerTLSInfo = info, info
		ec.TlsMinVersion = "TLS1.3"
	}
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zapslog.New(c.Logger, c.LogLevel.Level()))
	// The HTTP gateway and the metrics listener are for humans and
	// Prometheus scrapers of a stand-alone etcd; hoard talks gRPC only.
	ec.EnableGRPCGateway = false
	// With authentication on (package etcdauth), every user's password
	// is 32 random bytes: a slow hash adds nothing against guessing and
	// costs every instance start (a user added) and every client's
	// sign-in. 4 is bcrypt's minimum.
	ec.BcryptCost = 4
	ec.AutoCompactionMode = embed.CompactorModePeriodic
	ec.AutoCompactionRetention = c.CompactionRetention.String()
	ec.GRPCAdditionalServerOptions = append(ec.GRPCAdditionalServerOptions,
		grpc.ChainUnaryInterceptor(capLeaseTTL(int64(c.MaxLeaseTTL/time.Second))))

	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("etcdembed: start: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultStartTimeout)
	defer cancel()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("etcdembed: start: %w", err)
	case <-ctx.Done():
		e.Close()
		return nil, fmt.Errorf("etcdembed: start: %w", ctx.Err())
	}

	s := &Server{etcd: e}
	for _, l := range e.Clients {
		// The listeners carry the real port when ClientAddr asked for 0.
		s.endpoints = append(s.endpoints, scheme+"://"+l.Addr().String())
	}
	return s, nil
}

// Endpoints returns the client URLs of the server, for clientv3.Config.
// The slice is a copy.
func (s *Server) Endpoints() []string {
	return append([]string(nil), s.endpoints...)
}

// Err returns a channel that receives an error if the server fails while
// running; it is closed once Close has finished.
func (s *Server) Err() <-chan error { return s.etcd.Err() }

// Close stops the server and waits for its goroutines and listeners to end.
// Connected clients see their connections drop. Close is idempotent: later
// or concurrent calls wait for the first to finish and do nothing more.
func (s *Server) Close() {
	s.closeOnce.Do(s.etcd.Close)
}
