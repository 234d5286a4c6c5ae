package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hoard-io/hoard/internal/instance"
	etcdmembership "github.com/hoard-io/hoard/internal/membership/etcd"
)

// runServe runs one cachelet in front of an existing S3 endpoint until the
// context ends. With --etcd-endpoints it joins its application's ring
// (membership in that etcd) and cooperates with the application's other
// cachelets over the peer protocol. Secrets may come from the environment
// so they stay out of process listings: HOARD_SECRET_KEY,
// HOARD_STORE_SECRET_KEY, HOARD_PEER_SECRET, HOARD_NOTIFY_TOKEN.
//
// For the platform's node agent: --ready-file names a file written (whole,
// by rename) once every listener is bound and the ring joined, saying
// where the cachelet serves (readyInfo), and removed at shutdown;
// --notify-url sends cache triggers (package notify).
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg instance.Config
	var cf cacheFlags
	var logLevel, domains, etcdEndpoints, peerSecret, readyFile string
	var logJSON bool
	fs.StringVar(&cfg.Listen, "listen", "127.0.0.1:9200", "S3 endpoint address")
	fs.StringVar(&cfg.MetricsListen, "metrics-listen", "127.0.0.1:9201", "Prometheus /metrics address, or off")
	fs.StringVar(&cfg.Region, "region", envDefault("HOARD_REGION", "us-east-1"), "region clients sign for")
	fs.StringVar(&cfg.AccessKey, "access-key", envDefault("HOARD_ACCESS_KEY", ""), "access key clients sign with (env HOARD_ACCESS_KEY)")
	fs.StringVar(&cfg.SecretKey, "secret-key", envDefault("HOARD_SECRET_KEY", ""), "secret key clients sign with (env HOARD_SECRET_KEY)")
	fs.StringVar(&cfg.Store.Endpoint, "store-endpoint", envDefault("HOARD_STORE_ENDPOINT", ""), "the store's S3 endpoint URL (env HOARD_STORE_ENDPOINT)")
	fs.StringVar(&cfg.Store.AccessKey, "store-access-key", envDefault("HOARD_STORE_ACCESS_KEY", ""), "the store's access key (env HOARD_STORE_ACCESS_KEY)")
	fs.StringVar(&cfg.Store.SecretKey, "store-secret-key", envDefault("HOARD_STORE_SECRET_KEY", ""), "the store's secret key (env HOARD_STORE_SECRET_KEY)")
	fs.StringVar(&cfg.Store.Region, "store-region", "", "region the store signs for (default: --region)")
	fs.StringVar(&domains, "domains", "", "comma-separated base domains for virtual-host style requests (bucket.DOMAIN)")
	fs.StringVar(&cfg.App, "app", envDefault("HOARD_APP", "default"), "with --etcd-endpoints: the application whose ring this cachelet joins (env HOARD_APP)")
	fs.StringVar(&cfg.ID, "id", "", "with --etcd-endpoints: this cachelet's member ID (default: <app>-<random>)")
	fs.StringVar(&cfg.PeerListen, "peer-listen", "127.0.0.1:0", "with --etcd-endpoints: peer protocol address, reachable by the other cachelets (or see --peer-advertise)")
	fs.StringVar(&cfg.PeerAdvertise, "peer-advertise", "", "with --etcd-endpoints: HOST:PORT the other cachelets dial to reach this one's peer listener, when that is not --peer-listen's address (NAT, a Kubernetes Service, a proxy, a wildcard listener); default: the peer listener's address")
	fs.StringVar(&etcdEndpoints, "etcd-endpoints", envDefault("HOARD_ETCD_ENDPOINTS", ""), "comma-separated etcd client URLs holding membership; empty: a cachelet on its own (env HOARD_ETCD_ENDPOINTS)")
	fs.StringVar(&peerSecret, "peer-secret", envDefault("HOARD_PEER_SECRET", ""), "with --etcd-endpoints: the application's peer secret, at least 16 bytes (env HOARD_PEER_SECRET)")
	fs.StringVar(&readyFile, "ready-file", "", "once serving (listeners bound, ring joined), write this JSON file: id, app, endpoint, metrics_url, peer_addr, pid")
	fs.StringVar(&cfg.NotifyURL, "notify-url", envDefault("HOARD_NOTIFY_URL", ""), "post an S3 event notification here after every successful PutObject, CopyObject and CompleteMultipartUpload (cache triggers; env HOARD_NOTIFY_URL)")
	fs.StringVar(&cfg.NotifyToken, "notify-token", envDefault("HOARD_NOTIFY_TOKEN", ""), "with --notify-url: bearer token sent with each event (env HOARD_NOTIFY_TOKEN)")
	fs.BoolVar(&cfg.Bandwidth, "bandwidth-policy", envDefault("HOARD_BANDWIDTH_POLICY", "on") != "off", "with --etcd-endpoints: download large objects (>= 16 MiB) in byte ranges by several of the application's cachelets when the profiled bandwidths say it is faster (env HOARD_BANDWIDTH_POLICY=off turns it off)")
	fs.StringVar(&cfg.PlatformURL, "platform-url", envDefault("HOARD_PLATFORM_URL", ""), "with --etcd-endpoints: the platform's controller (http://HOST:PORT; the application is --app): the bandwidth policy reads instance load time and limit there and asks for instances (env HOARD_PLATFORM_URL; token in HOARD_PLATFORM_TOKEN)")
	fs.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	fs.BoolVar(&logJSON, "log-json", false, "log as JSON lines")
	cf.register(fs)
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
	cfg.PlatformToken = os.Getenv("HOARD_PLATFORM_TOKEN")
	if err := cf.apply(&cfg); err != nil {
		return err
	}
	for _, d := range strings.Split(domains, ",") {
		if d = strings.TrimSpace(d); d != "" {
			cfg.Domains = append(cfg.Domains, strings.ToLower(d))
		}
	}
	log, err := newLogger(stderr, logLevel, logJSON)
	if err != nil {
		return err
	}
	var reg *etcdmembership.Registry
	if eps := splitList(etcdEndpoints); len(eps) > 0 {
		if len(peerSecret) < 16 {
			return fmt.Errorf("%w: --etcd-endpoints needs the application's --peer-secret (or HOARD_PEER_SECRET), at least 16 bytes", errUsage)
		}
		reg, err = etcdmembership.New(etcdmembership.Config{Endpoints: eps, Logger: log.With("component", "membership")})
		if err != nil {
			return err
		}
		defer reg.Close()
		cfg.Registry, cfg.Secret = reg, []byte(peerSecret)
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
		id := in.ID()
		if id == "" {
			id = cfg.ID // on its own: the --id given, if any
		}
		info := readyInfo{ID: id, App: cfg.App, Endpoint: in.Endpoint(), MetricsURL: in.MetricsURL(),
			PeerAddr: in.PeerAddr(), PID: os.Getpid()}
		if err := writeReadyFile(readyFile, info); err != nil {
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

// readyInfo is the JSON document of --ready-file.
type readyInfo struct {
	// ID is the cachelet's member ID (its --id, or the one generated).
	ID  string `json:"id"`
	App string `json:"app"`
	// Endpoint is the S3 endpoint, "http://127.0.0.1:PORT".
	Endpoint string `json:"endpoint"`
	// MetricsURL is ".../metrics" on the metrics listener, whose /stats
	// serves the read counters; "" with --metrics-listen off.
	MetricsURL string `json:"metrics_url"`
	// PeerAddr is the host:port of the peer protocol (Drop), "" without
	// --etcd-endpoints.
	PeerAddr string `json:"peer_addr"`
	PID      int    `json:"pid"`
}

// writeReadyFile writes info to path atomically: a reader sees no file or
// the whole document, never part of it.
func writeReadyFile(path string, info readyInfo) (err error) {
	data, err := json.Marshal(info)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err = tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
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
