package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hoard-io/hoard/internal/cacheconfig"
	"github.com/hoard-io/hoard/internal/control"
	"github.com/hoard-io/hoard/internal/instance"
	etcdmembership "github.com/hoard-io/hoard/internal/membership/etcd"
	"github.com/hoard-io/hoard/internal/pki"
)

// runServe runs one cachelet in front of an existing S3 endpoint until the
// context ends. With --etcd-endpoints it joins its application's ring
// (membership in that etcd) and cooperates with the application's other
// cachelets over the peer protocol. Secrets may come from the environment
// so they stay out of process listings: HOARD_SECRET_KEY,
// HOARD_STORE_SECRET_KEY, HOARD_PEER_SECRET, HOARD_NOTIFY_TOKEN.
//
// --document names a configuration document (control.Document, JSON,
// mode 0600): the whole configuration in one file, which is how the
// platform's node agent starts its cachelets. Flags given beside it
// override it; the environment is not read. --config names an operator's
// YAML file of the flags' settings (docs/configuration.md), applied to the
// flags the command line did not set. A document naming a control socket also serves
// the control API there (package control), for the agent alone.
//
// --ready-file names a file written (whole, by rename) once every
// listener is bound and the ring joined, saying where the cachelet serves
// (control.Ready), and removed at shutdown; --notify-url sends cache
// triggers (package notify).
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	doc := &control.Document{}
	env := envDefault
	if p := documentFlag(args); p != "" {
		d, err := control.ReadDocument(p)
		if err != nil {
			return fmt.Errorf("%w: --document: %v", errUsage, err)
		}
		doc, env = d, func(_, def string) string { return def }
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg instance.Config
	var cf cacheFlags
	var logLevel, domains, etcdEndpoints, peerSecret, readyFile string
	var logJSON bool
	var tf tlsFlags
	var docTLS pki.Files
	if t := doc.TLS; t != nil {
		docTLS = pki.Files{Cert: t.Cert, Key: t.Key, CA: t.CA}
	}
	bandwidth := doc.Bandwidth
	if doc.Version == 0 {
		bandwidth = env("HOARD_BANDWIDTH_POLICY", "on") != "off"
	}
	cfg.SecretKey = or(doc.SecretKey, env("HOARD_SECRET_KEY", ""))
	cfg.Store.SecretKey = or(doc.Store.SecretKey, env("HOARD_STORE_SECRET_KEY", ""))
	peerSecret = or(doc.PeerSecret, env("HOARD_PEER_SECRET", ""))
	cfg.NotifyToken = or(doc.NotifyToken, env("HOARD_NOTIFY_TOKEN", ""))
	cfg.PlatformToken = or(doc.PlatformToken, env("HOARD_PLATFORM_TOKEN", ""))
	cfg.Control = doc.Control
	cfg.Grants = doc.Grants
	fs.String("document", "", "a configuration document (JSON, mode 0600: every setting below, the secrets, the control socket), as the node agent hands it over; flags given beside it override it")
	fs.StringVar(&cfg.Listen, "listen", or(doc.Listen, "127.0.0.1:9200"), "S3 endpoint address")
	fs.StringVar(&cfg.MetricsListen, "metrics-listen", or(doc.MetricsListen, "127.0.0.1:9201"), "Prometheus /metrics address, or off")
	fs.StringVar(&cfg.Region, "region", or(doc.Region, env("HOARD_REGION", "us-east-1")), "region clients sign for")
	fs.StringVar(&cfg.AccessKey, "access-key", or(doc.AccessKey, env("HOARD_ACCESS_KEY", "")), "access key clients sign with (env HOARD_ACCESS_KEY)")
	fs.Var(secretFlag{&cfg.SecretKey}, "secret-key", "secret key clients sign with (env HOARD_SECRET_KEY)")
	fs.StringVar(&cfg.Store.Endpoint, "store-endpoint", or(doc.Store.Endpoint, env("HOARD_STORE_ENDPOINT", "")), "the store's S3 endpoint URL (env HOARD_STORE_ENDPOINT)")
	fs.StringVar(&cfg.Store.AccessKey, "store-access-key", or(doc.Store.AccessKey, env("HOARD_STORE_ACCESS_KEY", "")), "the store's access key (env HOARD_STORE_ACCESS_KEY)")
	fs.Var(secretFlag{&cfg.Store.SecretKey}, "store-secret-key", "the store's secret key (env HOARD_STORE_SECRET_KEY)")
	fs.StringVar(&cfg.Store.Region, "store-region", doc.Store.Region, "region the store signs for (default: --region)")
	fs.DurationVar(&cfg.Store.CallTimeout, "store-call-timeout", 0, "deadline of a small store call (HEAD, validation, list page, delete), every retry included; past it, 503 (default 3s)")
	fs.DurationVar(&cfg.Store.IdleTimeout, "store-idle-timeout", 0, "how long a store body (download or upload) may make no progress before the call fails with 503 (default 5s)")
	fs.DurationVar(&cfg.BodyIdleTimeout, "body-idle-timeout", 0, "how long a client's request body may send nothing before the request fails with 400 RequestTimeout (default 10s; negative: no limit)")
	fs.Var((*byteSize)(&cfg.BodyMinRate), "body-min-rate", "the slowest a client's request body may arrive, per second, after --body-rate-grace (default 16KiB)")
	fs.DurationVar(&cfg.BodyRateGrace, "body-rate-grace", 0, "how long a request body may run before --body-min-rate applies (default 10s)")
	fs.StringVar(&domains, "domains", "", "comma-separated base domains for virtual-host style requests (bucket.DOMAIN)")
	fs.StringVar(&cfg.App, "app", or(doc.App, env("HOARD_APP", "default")), "with --etcd-endpoints: the application whose ring this cachelet joins (env HOARD_APP)")
	fs.StringVar(&cfg.Node, "node", doc.Node, "with --etcd-endpoints: the name of this machine, which the other cachelets read to place erasure-coded shards on distinct nodes first (default: none)")
	fs.StringVar(&cfg.ID, "id", doc.ID, "with --etcd-endpoints: this cachelet's member ID (default: <app>-<random>)")
	fs.StringVar(&cfg.PeerListen, "peer-listen", or(doc.PeerListen, "127.0.0.1:0"), "with --etcd-endpoints: peer protocol address, reachable by the other cachelets (or see --peer-advertise)")
	fs.StringVar(&cfg.PeerAdvertise, "peer-advertise", "", "with --etcd-endpoints: HOST:PORT the other cachelets dial to reach this one's peer listener, when that is not --peer-listen's address (NAT, a Kubernetes Service, a proxy, a wildcard listener); default: the peer listener's address")
	fs.StringVar(&etcdEndpoints, "etcd-endpoints", or(strings.Join(doc.EtcdEndpoints, ","), env("HOARD_ETCD_ENDPOINTS", "")), "comma-separated etcd client URLs holding membership; empty: a cachelet on its own (env HOARD_ETCD_ENDPOINTS)")
	fs.Var(secretFlag{&peerSecret}, "peer-secret", "with --etcd-endpoints: the application's peer secret, at least 16 bytes (env HOARD_PEER_SECRET)")
	fs.StringVar(&readyFile, "ready-file", "", "once serving (listeners bound, ring joined), write this JSON file: id, app, endpoint, metrics_url, peer_addr, pid")
	fs.StringVar(&cfg.NotifyURL, "notify-url", or(doc.NotifyURL, env("HOARD_NOTIFY_URL", "")), "post an S3 event notification here after every successful PutObject, CopyObject and CompleteMultipartUpload (cache triggers; env HOARD_NOTIFY_URL)")
	fs.Var(secretFlag{&cfg.NotifyToken}, "notify-token", "with --notify-url: bearer token sent with each event (env HOARD_NOTIFY_TOKEN)")
	fs.BoolVar(&cfg.Bandwidth, "bandwidth-policy", bandwidth, "with --etcd-endpoints: download large objects (>= 16 MiB) in byte ranges by several of the application's cachelets when the profiled bandwidths say it is faster (env HOARD_BANDWIDTH_POLICY=off turns it off)")
	fs.StringVar(&cfg.PlatformURL, "platform-url", or(doc.PlatformURL, env("HOARD_PLATFORM_URL", "")), "with --etcd-endpoints: the platform's controller (http://HOST:PORT; the application is --app): the bandwidth policy reads instance load time and limit there and asks for instances (env HOARD_PLATFORM_URL; token in HOARD_PLATFORM_TOKEN)")
	fs.StringVar(&logLevel, "log-level", or(doc.LogLevel, "info"), "debug, info, warn or error")
	fs.BoolVar(&logJSON, "log-json", doc.LogJSON, "log as JSON lines")
	tf.register(fs, docTLS, false)
	cf.registerWith(fs, doc.Cache)
	overhead := memoryOverhead(cmp.Or(doc.Cache.MemoryLimitOverhead, cacheconfig.DefaultMemoryOverhead))
	fs.Var(&overhead, "memory-overhead", "what the process may hold besides --budget: Go's soft memory limit follows the budget so that resident memory stays within budget + this; off: no limit (default 64MiB)")
	var df diskFlags
	df.register(fs, doc.Disk, doc.Cache)
	var ef erasureFlags
	ef.register(fs, doc.Cache.Erasure)
	var chf changeFlags
	chf.register(fs, doc.Cache.StoreChanges)
	var pool poolFlag
	fs.Var(&pool, "buffer-pool", "free memory kept for fills and uploads to reuse besides the budget, whose unused room keeps free memory too (default: budget/8, at most 8MiB); off: no pool")
	var pageSize poolFlag // a size, or off (-1), as --buffer-pool
	fs.Var(&pageSize, "page-size", "ranged reads of objects not cached whole fetch and keep whole pages of this size (4KiB to 64MiB; default 128KiB); off: ranges fetch the whole object")
	config := configFlag(fs)
	if err := usageErr(fs.Parse(args)); err != nil {
		return err
	}
	if err := applyConfig(fs, *config); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	if err := cf.apply(&cfg); err != nil {
		return err
	}
	if err := df.apply(&cfg); err != nil {
		return err
	}
	if err := chf.apply(&cfg); err != nil {
		return err
	}
	cfg.Cachelet.MemoryLimitOverhead = int64(overhead)
	cfg.Cachelet.Cache.PoolBytes = int64(pool)
	cfg.Cachelet.PageSize = int64(pageSize)
	for _, d := range strings.Split(domains, ",") {
		if d = strings.TrimSpace(d); d != "" {
			cfg.Domains = append(cfg.Domains, strings.ToLower(d))
		}
	}
	log, err := newLogger(stderr, logLevel, logJSON)
	if err != nil {
		return err
	}
	if err := serveTLS(&cfg, tf); err != nil {
		return err
	}
	if doc.DrainLog {
		return drainLog(ctx, cfg, peerSecret, log, stdout)
	}
	var reg *etcdmembership.Registry
	if eps := splitList(etcdEndpoints); len(eps) > 0 {
		if len(peerSecret) < 16 {
			return fmt.Errorf("%w: --etcd-endpoints needs the application's --peer-secret (or HOARD_PEER_SECRET), at least 16 bytes", errUsage)
		}
		etcdTLS, err := tf.client(eps...)
		if err != nil {
			return err
		}
		// The instance's own etcd user comes in the document only: a
		// secret, never a flag or a variable.
		reg, err = etcdmembership.New(etcdmembership.Config{Endpoints: eps, Username: doc.EtcdUsername, Password: doc.EtcdPassword,
			TLS: etcdTLS, Logger: log.With("component", "membership")})
		if err != nil {
			return err
		}
		defer reg.Close()
		cfg.Registry, cfg.Secret = reg, []byte(peerSecret)
	}
	if err := ef.apply(&cfg); err != nil {
		return err
	}
	if doc.S3ListenFD > 0 {
		if cfg.S3Listener, err = inheritedListener(doc.S3ListenFD); err != nil {
			return err
		}
	}
	in, err := instance.Start(ctx, cfg, log)
	if err != nil {
		return err
	}
	if reg != nil {
		peerAt := in.PeerAddr()
		if in.PeerListenAddr() != peerAt {
			peerAt = in.PeerListenAddr() + " advertised as " + peerAt
		}
		fmt.Fprintf(stdout, "hoard cachelet %s of %q serving S3 at %s (metrics %s, peer %s), store %s, %d members\n",
			in.ID(), cfg.App, in.Endpoint(), in.MetricsURL(), peerAt, cfg.Store.Endpoint, in.Cluster().Ring().Len())
	} else {
		fmt.Fprintf(stdout, "hoard cachelet serving S3 at %s (metrics %s), store %s\n", in.Endpoint(), in.MetricsURL(), cfg.Store.Endpoint)
	}
	if readyFile != "" {
		if err := writeReadyFile(readyFile, in.Ready()); err != nil {
			sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			return errors.Join(fmt.Errorf("ready file: %w", err), in.Close(sctx))
		}
	}
	<-ctx.Done()
	log.Info("shutting down")
	if readyFile != "" {
		_ = os.Remove(readyFile) // no longer ready
	}
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return in.Close(sctx)
}

// serveTLS puts the cachelet on TLS as tf says (ADR 0017): with a
// certificate, the S3 endpoint serves https (no client certificate asked:
// functions sign with SigV4); with a CA bundle too, the peer protocol is
// mutual TLS (a peer must present a certificate of this application or of
// the platform, and must be one when dialled), the calls to the
// controller trust the bundle and present the certificate, and an https
// store is trusted by the bundle or the system's roots (a public S3).
func serveTLS(cfg *instance.Config, tf tlsFlags) error {
	if err := tf.validate(); err != nil {
		return err
	}
	var err error
	if tf.on() {
		if cfg.TLS, err = pki.ServerConfig(pki.Files{Cert: tf.cert, Key: tf.key}, nil); err != nil {
			return err
		}
	}
	if tf.on() && tf.ca != "" {
		app := cfg.App
		if app == "" {
			app = "default"
		}
		if cfg.PeerTLS, err = pki.ServerConfig(tf.files(), pki.AppOrPlatform(app)); err != nil {
			return err
		}
		if cfg.PeerClientTLS, err = pki.ClientConfig(tf.files(), pki.AppOrPlatform(app)); err != nil {
			return err
		}
	}
	if cfg.PlatformTLS, err = tf.client(cfg.NotifyURL, cfg.PlatformURL); err != nil {
		return err
	}
	if strings.HasPrefix(cfg.Store.Endpoint, "https://") && tf.ca != "" {
		// A public endpoint (AWS S3) as well as one of the platform's CA.
		cfg.Store.TLS, err = pki.StoreClientConfig(tf.ca)
	}
	return err
}

// writeReadyFile writes info to path atomically (mode 0644): a reader
// sees no file or the whole document, never part of it.
func writeReadyFile(path string, info control.Ready) error {
	data, err := json.Marshal(info)
	if err != nil {
		return err
	}
	return control.WriteFileAtomic(path, append(data, '\n'), 0o644)
}

// documentFlag finds --document's value among args before they are parsed,
// so that the document's settings become the other flags' defaults.
func documentFlag(args []string) string {
	for i, a := range args {
		if a == "--" {
			break
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "document" {
			continue
		}
		if hasVal {
			return val
		}
		if i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// inheritedListener is the listening socket open at fd (a document's
// S3ListenFD).
func inheritedListener(fd int) (net.Listener, error) {
	if fd < 3 {
		return nil, fmt.Errorf("%w: s3_listen_fd %d: must be 3 or more", errUsage, fd)
	}
	f := os.NewFile(uintptr(fd), "s3-listener")
	defer f.Close()
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("s3_listen_fd %d: %w", fd, err)
	}
	return ln, nil
}

// memoryOverhead is --memory-overhead: a size, or off (0: no memory limit).
type memoryOverhead int64

func (m *memoryOverhead) String() string {
	if *m == 0 {
		return "off"
	}
	return strconv.FormatInt(int64(*m), 10)
}

func (m *memoryOverhead) Set(s string) error {
	n, err := sizeOrOff(s)
	if err == nil {
		*m = memoryOverhead(max(n, 0))
	}
	return err
}

// sizeOrOff parses a flag that takes a positive size or "off" (-1).
func sizeOrOff(s string) (int64, error) {
	if strings.TrimSpace(s) == "off" {
		return -1, nil
	}
	n, err := parseBytes(s)
	if err != nil {
		return 0, err
	}
	if n <= 0 {
		return 0, fmt.Errorf("want a positive size or off")
	}
	return n, nil
}

// poolFlag is --buffer-pool: a size, or off (-1: no pool); 0 is the
// default, a share of the budget.
type poolFlag int64

func (p *poolFlag) String() string {
	switch {
	case *p < 0:
		return "off"
	case *p == 0:
		return ""
	}
	return strconv.FormatInt(int64(*p), 10)
}

func (p *poolFlag) Set(s string) error {
	n, err := sizeOrOff(s)
	if err == nil {
		*p = poolFlag(n)
	}
	return err
}
