// Package instance assembles one application instance's data layer: a
// store client, a cachelet over it, the S3 front serving it on a listener,
// the Prometheus endpoint (with the cachelet's counters as JSON at /stats
// beside it), when configured the notifier of cache triggers, and, for a
// platform's node agent, the control API on a private Unix socket
// (package control; control.go adapts the cachelet to it). It is the
// composition root shared by `hoard serve`, `hoard up`, the benchmarks and
// the integration tests.
//
// With a membership Registry the instance is one cachelet of its
// application's cooperative cache: it also serves the peer protocol on its
// own listener, joins the application's ring (package cluster), and sends
// misses of keys other cachelets own to those owners. Without one it is a
// cachelet on its own, in front of the store.
package instance

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/hoard-io/hoard/internal/cachelet"
	"github.com/hoard-io/hoard/internal/cluster"
	"github.com/hoard-io/hoard/internal/control"
	"github.com/hoard-io/hoard/internal/disktier"
	"github.com/hoard-io/hoard/internal/grant"
	"github.com/hoard-io/hoard/internal/membership"
	"github.com/hoard-io/hoard/internal/notify"
	"github.com/hoard-io/hoard/internal/onewrite"
	"github.com/hoard-io/hoard/internal/peer"
	"github.com/hoard-io/hoard/internal/ring"
	"github.com/hoard-io/hoard/internal/s3api"
	"github.com/hoard-io/hoard/internal/s3auth"
	s3store "github.com/hoard-io/hoard/internal/store/s3"
	"github.com/hoard-io/hoard/internal/writelog"
)

// Config configures one instance.
type Config struct {
	// Listen is the S3 endpoint's address; default "127.0.0.1:0" (a free port).
	Listen string
	// S3Listener, when set, is a listener the S3 endpoint serves on too
	// (an inherited socket in another network namespace, the function's);
	// the instance closes it. Endpoint still names Listen's address.
	S3Listener net.Listener
	// TLS, when set, serves the S3 endpoint (Listen and S3Listener) over
	// TLS; Endpoint is then https. Clients sign with SigV4 as before and
	// present no certificate (pki.ServerConfig without a client CA).
	// Default nil: plain HTTP.
	TLS *tls.Config
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
	// Grants are the buckets the instance's clients may reach (s3api's
	// Config.Grants); default nil: every bucket the store keys reach.
	Grants *grant.Set
	// Cachelet configures the cache. A zero Cache.Budget means
	// DefaultBudget(). A zero MemoryLimitOverhead is read from
	// $HOARD_MEMORY_LIMIT_OVERHEAD (MemoryLimitOverheadEnv), if set; with
	// an overhead, a zero ResidentBase is this process's file-backed
	// resident memory (its binary's pages) at Validate.
	Cachelet cachelet.Config
	// Disk is the node's disk tier for this application (package
	// disktier): with a Dir, objects evicted from memory are kept there
	// and read back on a miss; Logger and Registerer are the instance's.
	// Default (no Dir): memory only.
	Disk disktier.Config
	// DurableWrites, under the owner and local write targets, appends
	// every write the cachelet holds for the store to a durable log
	// (package writelog, ADR 0030) before acknowledging it, and delivers
	// what a crashed predecessor left there on start. The log lives in
	// the disk tier's directory (Disk.Dir, required), under
	// writelog/ID (writelog/local without a Registry), so an instance
	// restarted on that node with the same ID finds it. DurableLog sets
	// its bound and segment size (Dir, Logger and Registerer are set
	// here). Default false: held writes live in memory only.
	DurableWrites bool
	DurableLog    writelog.Config
	// DurableBackup, with DurableWrites under the owner targets, has a
	// second member keep a copy of each write before it is acknowledged
	// (`durable_writes: replicated`, cachelet.Config.Backup). Default nil.
	DurableBackup *cachelet.BackupConfig
	// DurableShadow, with DurableWrites, puts a placeholder of each
	// durable write in the store before it is acknowledged
	// (cachelet.Config.Shadow). Default false.
	DurableShadow bool
	// Domains are base host names for virtual-host style requests
	// ("bucket.DOMAIN"); default none (path style only).
	Domains []string
	// MaxHeaderBytes is the HTTP server's hard limit on request headers
	// (answered with a bare 431); default 1 MiB. Below it, the S3 front
	// answers headers over 16 KiB with S3's RequestHeaderSectionTooLarge.
	MaxHeaderBytes int
	// BodyIdleTimeout, BodyMinRate and BodyRateGrace bound how slowly a
	// client may send a request body (s3api's Config); zero means
	// s3api's defaults (10 s idle; 16 KiB/s averaged after 10 s).
	BodyIdleTimeout time.Duration
	BodyMinRate     int64
	BodyRateGrace   time.Duration
	// NotifyURL, when set, receives an S3 event notification (package
	// notify) after every PutObject, CopyObject and
	// CompleteMultipartUpload the instance answered with success: the
	// platform's cache triggers. NotifyToken, when set, is sent with each
	// as a bearer token. Events name the sender by App and ID.
	NotifyURL, NotifyToken string
	// PlatformTLS, when set, is the TLS of the instance's calls to the
	// controller (NotifyURL, PlatformURL): the platform's CA and the
	// cachelet's certificate (pki.ClientConfig). Default nil: the
	// system's roots, no client certificate.
	PlatformTLS *tls.Config

	// Control, when its Socket is set, is the control API's listener
	// (package control): a Unix socket the instance binds with mode 0600
	// (its directory should be the instance's private one, 0700), whose
	// callers must present Control.Token. The platform's node agent
	// drives its cachelets there. Default: no control listener.
	Control control.Endpoint

	// Bandwidth turns on the bandwidth policy for a cachelet of an
	// application (with Registry): large objects are downloaded in byte
	// ranges by several cachelets at once. Ignored without Registry.
	Bandwidth bool
	// PlatformURL, when set with Bandwidth, is the platform's controller
	// (http://HOST:PORT; the application is App): the policy
	// reads the measured instance load time and limit there and sends
	// urgent scale-out votes. PlatformToken is its bearer token.
	PlatformURL, PlatformToken string
	// ChangesRelay, with Cachelet.External: follow the store's changes
	// through the controller's relay (changeFeed).
	ChangesRelay bool

	// The fields below make the instance one cachelet of its application's
	// cooperative cache. They are used only when Registry is set.

	// Registry is the membership store the cachelet joins. Default nil: no
	// cooperation (a cachelet on its own; the other fields are ignored).
	// The instance does not close it.
	Registry membership.Registry
	// App is the application's name: its ring, and the name peer requests
	// are signed for. Default "default".
	App string
	// ID names this cachelet among App's live members. Default
	// "<App>-<8 random hex digits>".
	ID string
	// PeerListen is the address of the peer protocol's listener; default
	// "127.0.0.1:0" (a free port). Without PeerAdvertise, peers dial the
	// address it is bound to, so it must then be reachable from them (not
	// a wildcard).
	PeerListen string
	// PeerAdvertise is the host:port the other cachelets dial to reach
	// this one's peer listener, published in the ring. Default: the
	// address the peer listener is bound to. Set it when peers reach the
	// listener through another address: behind NAT, a Kubernetes Service,
	// a proxy, or a listener bound to a wildcard. The host may be a name;
	// the port must be explicit (1-65535).
	PeerAdvertise string
	// Node names the machine this instance runs on, which the other
	// members read to place erasure-coded shards on distinct nodes.
	// Optional.
	Node string
	// PeerTLS and PeerClientTLS, when set, carry the peer protocol over
	// mutual TLS: the peer listener's configuration (pki.ServerConfig
	// with pki.AppOrPlatform(App): a caller must present a certificate of
	// this application or of the platform) and the peer client's
	// (pki.ClientConfig with the same rule for the peers it dials). Both
	// or neither. The peer MACs stay on: TLS adds to them (ADR 0017).
	PeerTLS, PeerClientTLS *tls.Config
	// Secret is the application's peer secret, shared by all its
	// cachelets; at least 16 bytes. Required with Registry.
	Secret []byte
	// Ring shapes the ring; all of App's cachelets must agree. Default:
	// ring's defaults.
	Ring ring.Config
}

// Validate checks the config and fills in defaults.
func (c *Config) Validate() error {
	if c.DurableBackup != nil && !c.DurableWrites {
		return errors.New("instance: replicated durable writes (DurableBackup) need DurableWrites")
	}
	if c.DurableShadow && !c.DurableWrites {
		return errors.New("instance: shadows of durable writes (DurableShadow) need DurableWrites")
	}
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
	if c.Cachelet.MemoryLimitOverhead == 0 {
		n, err := memoryLimitOverheadFromEnv()
		if err != nil {
			return err
		}
		c.Cachelet.MemoryLimitOverhead = n
	}
	if c.Cachelet.MemoryLimitOverhead > 0 && c.Cachelet.ResidentBase == 0 {
		c.Cachelet.ResidentBase = residentFileBytes()
	}
	if (c.Control.Socket == "") != (c.Control.Token == "") {
		return errors.New("instance: the control listener needs both a socket and a token")
	}
	if c.Control.Token != "" && len(c.Control.Token) < control.MinTokenLen {
		return fmt.Errorf("instance: the control token must be at least %d bytes", control.MinTokenLen)
	}
	if c.MaxHeaderBytes == 0 {
		c.MaxHeaderBytes = 1 << 20
	}
	if c.Registry != nil {
		if c.App == "" {
			c.App = "default"
		}
		if err := membership.ValidateName(c.App); err != nil {
			return fmt.Errorf("instance: app: %w", err)
		}
		if c.ID == "" {
			var b [4]byte
			_, _ = rand.Read(b[:])
			c.ID = c.App + "-" + hex.EncodeToString(b[:])
		}
		if err := membership.ValidateName(c.ID); err != nil {
			return fmt.Errorf("instance: id: %w", err)
		}
		if c.PeerListen == "" {
			c.PeerListen = "127.0.0.1:0"
		}
		if c.PeerAdvertise != "" {
			if err := validateAdvertise(c.PeerAdvertise); err != nil {
				return fmt.Errorf("instance: peer advertise address: %w", err)
			}
		}
		if (c.PeerTLS == nil) != (c.PeerClientTLS == nil) {
			return errors.New("instance: PeerTLS and PeerClientTLS go together")
		}
		if len(c.Secret) < 16 {
			return errors.New("instance: the application's peer secret (at least 16 bytes) is required with a membership registry")
		}
		if err := c.Ring.Validate(); err != nil {
			return fmt.Errorf("instance: %w", err)
		}
	}
	return c.Cachelet.Validate()
}

// validateAdvertise checks that a is a host:port peers can dial: a
// non-empty host (a name or an IP address, not a wildcard) and a numeric
// port in 1-65535, with nothing else (no scheme, path or user).
func validateAdvertise(a string) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %w", a, err)
	}
	if host == "" {
		return fmt.Errorf("%q has no host", a)
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return fmt.Errorf("%q is a wildcard address, which peers cannot dial", a)
	}
	if strings.ContainsAny(host, "/?#@ \t\r\n%") {
		return fmt.Errorf("%q: bad host %q", a, host)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 || strconv.Itoa(p) != port {
		return fmt.Errorf("%q: port must be a number in 1-65535", a)
	}
	return nil
}

// Instance is a running cachelet with its listeners.
type Instance struct {
	cfg      Config
	log      *slog.Logger
	store    *s3store.Store
	cachelet *cachelet.Cachelet
	s3       *http.Server
	metrics  *http.Server
	ctl      *http.Server // nil without Config.Control
	s3Addr   string
	s3Scheme string // "http://", or "https://" with Config.TLS
	metAddr  string
	reg      *prometheus.Registry
	notifier *notify.Notifier // nil without Config.NotifyURL
	disk     *disktier.Tier   // nil without Config.Disk.Dir
	wlog     *writelog.Log    // nil without Config.DurableWrites

	// Set with Config.Registry only.
	member   *cluster.Member
	peers    *peer.Client
	peerSrv  *http.Server
	peerAddr string // the listener's address
	peerAdv  string // what the ring publishes: PeerAdvertise, or peerAddr
	// current is the cachelet once built, for OnChange, which the cluster
	// may call (on its watch goroutine) before the cachelet exists.
	current atomic.Pointer[cachelet.Cachelet]

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

// starting holds what Start has built so far, to release it on failure.
type starting struct {
	lns    []net.Listener
	member *cluster.Member
	peers  *peer.Client
	cl     *cachelet.Cachelet
	st     *s3store.Store
	nt     *notify.Notifier
	disk   *disktier.Tier
	wlog   *writelog.Log
}

func (s *starting) release() {
	for _, ln := range s.lns {
		_ = ln.Close()
	}
	if s.member != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = s.member.Close(ctx)
		cancel()
	}
	if s.peers != nil {
		s.peers.Close()
	}
	if s.cl != nil {
		_ = s.cl.Close()
	}
	if s.disk != nil {
		_ = s.disk.Close()
	}
	if s.wlog != nil {
		_ = s.wlog.Close()
	}
	if s.st != nil {
		s.st.Close()
	}
	if s.nt != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = s.nt.Close(ctx) // nothing was queued
		cancel()
	}
}

// Start builds the instance and starts serving. ctx bounds start-up only.
//
// With cfg.Registry set, the order matters: the peer listener is bound
// first, because the ring publishes its address; the cachelet then joins
// its application (so the cachelet is built with its Router in place and
// classifies ownership from the first entry); then the cachelet is built;
// and only then do the listeners serve, so a peer that routes here before
// that waits in the listen backlog rather than reaching a missing cachelet.
func Start(ctx context.Context, cfg Config, log *slog.Logger) (in *Instance, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var s starting
	defer func() {
		if err != nil {
			s.release()
		}
	}()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	st, err := s3store.New(cfg.Store, log.With("component", "store"))
	if err != nil {
		return nil, fmt.Errorf("instance: store: %w", err)
	}
	s.st = st
	in = &Instance{cfg: cfg, log: log, store: st, reg: reg, s3Scheme: "http://"}

	var lc net.ListenConfig
	listen := func(addr string) (net.Listener, error) {
		ln, err := lc.Listen(ctx, "tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("instance: listen on %s: %w", addr, err)
		}
		s.lns = append(s.lns, ln)
		return ln, nil
	}
	s3ln, err := listen(cfg.Listen)
	if err != nil {
		return nil, err
	}
	in.s3Addr = s3ln.Addr().String()
	if cfg.S3Listener != nil {
		s.lns = append(s.lns, cfg.S3Listener)
	}
	// Small answers leave in one write (onewrite.Hold), beneath TLS.
	s3ln = onewrite.Listen(s3ln)
	s3Extra := cfg.S3Listener
	if s3Extra != nil {
		s3Extra = onewrite.Listen(s3Extra)
	}
	if cfg.TLS != nil {
		in.s3Scheme = "https://"
		s3ln = tls.NewListener(s3ln, cfg.TLS)
		if s3Extra != nil {
			s3Extra = tls.NewListener(s3Extra, cfg.TLS)
		}
	}
	var mln net.Listener
	if cfg.MetricsListen != "off" {
		if mln, err = listen(cfg.MetricsListen); err != nil {
			return nil, err
		}
		in.metAddr = mln.Addr().String()
	}

	var ctlLn net.Listener
	if cfg.Control.Socket != "" {
		if ctlLn, err = control.Listen(ctx, cfg.Control.Socket); err != nil {
			return nil, fmt.Errorf("instance: %w", err)
		}
		s.lns = append(s.lns, ctlLn)
	}

	var (
		peerLn net.Listener
		auth   *peer.Auth
	)
	if cfg.Registry != nil {
		if auth, err = peer.NewAuth(cfg.App, cfg.Secret, nil); err != nil {
			return nil, fmt.Errorf("instance: %w", err)
		}
		if peerLn, err = listen(cfg.PeerListen); err != nil {
			return nil, err
		}
		in.peerAddr = peerLn.Addr().String()
		peerLn = onewrite.Listen(peerLn)
		if cfg.PeerTLS != nil {
			peerLn = tls.NewListener(peerLn, cfg.PeerTLS)
		}
		in.peerAdv = cfg.PeerAdvertise
		if in.peerAdv == "" {
			in.peerAdv = in.peerAddr
		}
		in.member, err = cluster.Join(ctx, cluster.Config{
			App: cfg.App, ID: cfg.ID, PeerAddr: in.peerAdv, S3Addr: in.s3Addr, Node: cfg.Node,
			Registry: cfg.Registry, Ring: cfg.Ring, Logger: log.With("component", "cluster"),
			// Runs on the cluster's watch goroutine, possibly before the
			// cachelet exists: a change then is already reflected in the
			// ring the cachelet's cache consults when it is built.
			OnChange: func(_, _ *ring.Ring) {
				if cl := in.current.Load(); cl != nil {
					cl.OwnershipChanged()
				}
			},
			OnChanging: func() {
				if cl := in.current.Load(); cl != nil {
					cl.OwnershipChanging()
				}
			},
		})
		if err != nil {
			return nil, fmt.Errorf("instance: %w", err)
		}
		s.member = in.member
		in.peers = peer.NewClient(auth, peer.ClientConfig{TLS: cfg.PeerClientTLS})
		s.peers = in.peers
		cfg.Cachelet.Router, cfg.Cachelet.Peers = in.member, in.peers
		if cfg.Bandwidth && cfg.Cachelet.Bandwidth == nil {
			cfg.Cachelet.Bandwidth = &cachelet.BandwidthConfig{}
		}
		if b := cfg.Cachelet.Bandwidth; b != nil && b.Platform == nil && cfg.PlatformURL != "" {
			b.Platform = newPlatformClient(cfg.PlatformURL, cfg.PlatformToken, cfg.App, platformHTTP(cfg.PlatformTLS))
		}
	} else {
		cfg.Cachelet.Bandwidth = nil // one cachelet has no one to split with
	}

	if cfg.Disk.Dir != "" {
		dcfg := cfg.Disk
		dcfg.Logger, dcfg.Registerer, dcfg.Clock = log.With("component", "disk"), reg, cfg.Cachelet.Clock
		if in.disk, err = disktier.New(dcfg); err != nil {
			return nil, fmt.Errorf("instance: %w", err)
		}
		s.disk = in.disk
		cfg.Cachelet.Disk = in.disk
	}
	if cfg.DurableWrites {
		if err := openDurable(&cfg, &s, in, log, reg); err != nil {
			return nil, err
		}
	}
	if x := cfg.Cachelet.External; x != nil && x.Listener == nil {
		ext := *x
		if ext.Listener, err = changeFeed(cfg, st); err != nil {
			return nil, err
		}
		cfg.Cachelet.External = &ext
	}
	cl, err := cachelet.New(cfg.Cachelet, st, log.With("component", "cachelet"), reg)
	if err != nil {
		return nil, err
	}
	s.cl = cl
	in.cachelet = cl
	in.current.Store(cl)
	var owner peer.Owner
	if cfg.Registry != nil {
		var ok bool
		if owner, ok = any(cl).(peer.Owner); !ok {
			return nil, errors.New("instance: this cachelet cannot serve its peers (no peer.Owner implementation); run without a membership registry")
		}
	}
	ver, err := s3auth.New(s3auth.Config{Region: cfg.Region, Domains: cfg.Domains}, staticCreds{cfg.AccessKey, cfg.SecretKey})
	if err != nil {
		return nil, err
	}
	acfg := s3api.Config{Region: cfg.Region, Domains: cfg.Domains, Grants: cfg.Grants,
		BodyIdleTimeout: cfg.BodyIdleTimeout, BodyMinRate: cfg.BodyMinRate, BodyRateGrace: cfg.BodyRateGrace}
	if cfg.NotifyURL != "" {
		in.notifier, err = notify.New(notify.Config{URL: cfg.NotifyURL, Token: cfg.NotifyToken, App: cfg.App, Cachelet: cfg.ID, Client: platformHTTP(cfg.PlatformTLS),
			Logger: log.With("component", "notify"), Registerer: reg})
		if err != nil {
			return nil, fmt.Errorf("instance: %w", err)
		}
		s.nt = in.notifier
		acfg.Notifier = in.notifier
	}
	api, err := s3api.New(acfg, cl, ver, log.With("component", "s3api"), reg)
	if err != nil {
		return nil, err
	}

	if ctlLn != nil {
		h, err := control.NewHandler(cfg.Control.Token, controlTarget{in}, log.With("component", "control"))
		if err != nil {
			return nil, fmt.Errorf("instance: %w", err)
		}
		in.ctl = control.NewServer(h, log)
	}

	// Nothing fails from here on: serve.
	in.s3 = &http.Server{
		Handler:           api,
		ConnContext:       onewrite.ConnContext, // small answers in one write
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	in.serve(in.s3, s3ln)
	if s3Extra != nil {
		in.serve(in.s3, s3Extra)
	}
	if peerLn != nil {
		in.peerSrv = &http.Server{
			Handler:           peer.NewServer(auth, owner, log.With("component", "peer")),
			ConnContext:       onewrite.ConnContext, // small answers in one write
			ReadHeaderTimeout: 30 * time.Second,
			IdleTimeout:       2 * time.Minute,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		}
		in.serve(in.peerSrv, peerLn)
	}
	if mln != nil {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
		mux.HandleFunc("GET /stats", in.serveStats)
		in.dashboardRoutes(mux)
		in.metrics = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		in.serve(in.metrics, mln)
	}
	if ctlLn != nil {
		// Last: an answer on the control socket means everything else
		// serves.
		in.serve(in.ctl, ctlLn)
	}
	attrs := []any{"endpoint", in.Endpoint(), "metrics", in.MetricsURL(),
		"store", cfg.Store.Endpoint, "budget_bytes", cfg.Cachelet.Cache.Budget, "read_mode", cfg.Cachelet.ReadMode}
	if in.member != nil {
		attrs = append(attrs, "app", cfg.App, "id", cfg.ID, "peer", in.peerAddr, "peer_advertise", in.peerAdv, "members", in.member.Ring().Len())
	}
	log.Info("cachelet serving", attrs...)
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
func (in *Instance) Endpoint() string { return in.s3Scheme + in.s3Addr }

// serveStats answers /stats: the cachelet's counters (cachelet.Counters)
// as JSON, for the platform to diff around each invocation.
func (in *Instance) serveStats(w http.ResponseWriter, _ *http.Request) {
	body, err := json.Marshal(in.cachelet.Counters())
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	_, _ = w.Write(append(body, '\n'))
}

// StatsURL is the counters' JSON endpoint (/stats, next to /metrics), or
// "" when the metrics listener is disabled.
func (in *Instance) StatsURL() string {
	if in.metAddr == "" {
		return ""
	}
	return "http://" + in.metAddr + "/stats"
}

// MetricsURL is the Prometheus endpoint, or "" when disabled.
func (in *Instance) MetricsURL() string {
	if in.metAddr == "" {
		return ""
	}
	return "http://" + in.metAddr + "/metrics"
}

// PeerAddr is the host:port the other cachelets reach this one's peer
// listener at, as the ring publishes it (Config.PeerAdvertise, by default
// the listener's address), or "" without a membership registry. It is what
// the cluster's Owner returns for keys this cachelet owns.
func (in *Instance) PeerAddr() string { return in.peerAdv }

// PeerListenAddr is the host:port the peer listener is bound to, or ""
// without a membership registry. It differs from PeerAddr only when
// Config.PeerAdvertise is set.
func (in *Instance) PeerListenAddr() string { return in.peerAddr }

// ID is the cachelet's member ID in its application, or "" without a
// membership registry.
func (in *Instance) ID() string {
	if in.member == nil {
		return ""
	}
	return in.cfg.ID
}

// Cluster exposes the instance's view of its application (ring and
// members), or nil without a membership registry.
func (in *Instance) Cluster() *cluster.Member { return in.member }

// Cachelet exposes the instance's cachelet (for tests and benchmarks).
func (in *Instance) Cachelet() *cachelet.Cachelet { return in.cachelet }

// Registry exposes the instance's metrics registry.
func (in *Instance) Registry() *prometheus.Registry { return in.reg }

// Close stops accepting requests and lets those in flight finish within
// ctx; leaves the application (so peers stop routing here) before the peer
// listener stops (so peers that routed here meanwhile are still served);
// waits for cache fills; and releases the store client. Idempotent.
func (in *Instance) Close(ctx context.Context) error {
	in.closeOnce.Do(func() {
		var errs []error
		if err := in.s3.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("s3 listener: %w", err))
			_ = in.s3.Close()
		}
		if in.member != nil {
			// Deliver what this cachelet took as an owner before it
			// leaves the ring, refusing peers' writes meanwhile: the
			// members that take its keys over must find it in the store.
			if err := in.cachelet.Leave(ctx); err != nil {
				errs = append(errs, fmt.Errorf("queued writes before leaving: %w", err))
			}
			if err := in.member.Close(ctx); err != nil {
				errs = append(errs, err)
			}
		}
		if in.peerSrv != nil {
			// Peers keep pooled connections open; a new one counts as
			// active for seconds, so bound the wait and then close.
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			if err := in.peerSrv.Shutdown(sctx); err != nil {
				_ = in.peerSrv.Close()
			}
			cancel()
		}
		if in.metrics != nil {
			if err := in.metrics.Shutdown(ctx); err != nil {
				_ = in.metrics.Close()
			}
		}
		if in.ctl != nil {
			// The agent's calls in flight (a pre-warm) end with the
			// cachelet; it stops calling once it asked for the shutdown.
			_ = in.ctl.Close()
		}
		in.serving.Wait()
		errs = append(errs, in.cachelet.Close())
		if in.wlog != nil {
			// What the cachelet could not deliver stays logged for
			// the next start.
			errs = append(errs, in.wlog.Close())
		}
		if in.disk != nil {
			errs = append(errs, in.disk.Close()) // after the cachelet kept its memory there
		}
		if in.peers != nil {
			in.peers.Close()
		}
		errs = append(errs, in.store.Close())
		if in.notifier != nil {
			// Last: what is queued goes out while ctx lasts, and a
			// controller that is down must not take the time the
			// queued writes above needed.
			if err := in.notifier.Close(ctx); err != nil {
				errs = append(errs, err)
			}
		}
		in.closeErr = errors.Join(errs...)
	})
	return in.closeErr
}
