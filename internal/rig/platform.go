// Package rig assembles hoard's local serverless platform: a
// controller (package controller) and a node agent (package agent) over
// one etcd and one store. `hoard up` runs both in its process; `hoard
// controller` and `hoard agent` run one each. ADR 9 and docs/platform.md
// describe the design.
package rig

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hoard-io/hoard/internal/agent"
	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/controller"
	"github.com/hoard-io/hoard/internal/etcdauth"
	"github.com/hoard-io/hoard/internal/pki"
	"github.com/hoard-io/hoard/internal/predict"
	"github.com/hoard-io/hoard/internal/sandbox"
	s3store "github.com/hoard-io/hoard/internal/store/s3"
)

// Config configures the parts of the platform this process runs.
type Config struct {
	// Controller runs the controller, serving its API on
	// ControllerListener (required then).
	Controller         bool
	ControllerListener net.Listener
	// ControllerAlsoOn are more listeners serving the same API (the
	// bridge address nodes in namespaces reach it on); ControllerURL
	// stays the first listener's.
	ControllerAlsoOn []net.Listener
	// ControllerURL is where agents' cachelets post object-created events
	// (its /v1/events); default the listener's address.
	ControllerURL string
	// Agent runs a node agent serving on AgentListen (default a free
	// loopback port), keeping its files in Dir.
	Agent       bool
	AgentListen string
	AgentID     string
	Dir         string
	// AgentPeerHost is the address the agent's cachelets take peer
	// traffic on (agent.Config.PeerHost); default 127.0.0.1.
	AgentPeerHost string
	// InsecureSandbox and Unjailed are the agent's
	// (agent.Config.InsecureSandbox, agent.Config.Unjailed): functions
	// unisolated where the host cannot jail them, or always (benchmarks).
	InsecureSandbox, Unjailed bool
	// SandboxUIDBase and SandboxUIDCount are the uids the agent's
	// instances run as (agent.Config); default agent's defaults. Agents
	// sharing a machine need ranges of their own (agent.NodeUIDs).
	SandboxUIDBase, SandboxUIDCount int
	// DiskBudget, when positive, gives each application a disk tier of
	// this many bytes on the node (agent.Config.DiskBudget). Default 0:
	// memory only.
	DiskBudget int64
	// LogDir is where the agent writes each instance's log (its
	// cachelet's and its worker's output); default Dir/agent/logs.
	LogDir string
	// HoardBin is the binary agents start cachelets from; default the
	// running one.
	HoardBin string
	// CodeFetch is the agent's (agent.Config.CodeFetch): lazy, whole, or
	// "" for lazy where FUSE mounts are possible.
	CodeFetch string
	// NoCodeRelay is the agent's (agent.Config.NoCodeRelay).
	NoCodeRelay bool

	EtcdEndpoints []string
	// EtcdCredentials sign the platform's etcd client in, where etcd has
	// authentication on (package etcdauth): root for a controller, which
	// then gives every instance an etcd user of its own; an agent's own
	// user for an agent alone. Zero: no user.
	EtcdCredentials                               etcdauth.Credentials
	StoreEndpoint, StoreAccessKey, StoreSecretKey string
	Region                                        string
	// ControllerToken (the admin token) authenticates clients (and the
	// store's webhook) to the controller; AgentToken the controller to
	// agents. Neither reaches an instance: its cachelet calls the
	// controller with its application's own token (api.Credentials).
	ControllerToken, AgentToken string
	// StoreIdentities is where the controller gets each application's
	// store identity (ParseStoreIdentities): "minio" makes a MinIO user
	// per application with the store keys, which must be MinIO's root or
	// an admin's; "file:PATH" reads the keys the operator made from PATH.
	// Required with Controller.
	StoreIdentities string
	// StoreEventsToken is the token the store's webhook posts events with
	// (MinIOWebhookEnv): events only. Empty: the store uses
	// ControllerToken.
	StoreEventsToken string
	// StoreNotifications: the store is a MinIO started with the
	// MinIOWebhookEnv target, so buckets with object triggers get
	// notification configurations.
	StoreNotifications bool
	// TLS, when set, puts the platform's listeners and clients on TLS
	// (ADR 0017). Default nil: plain HTTP.
	TLS *TLS
	// Prediction configures the controller's memory models
	// (controller.Config.Prediction); DisablePrediction turns them off.
	// SlackPool is the agent's (agent.Config.SlackPool).
	Prediction        predict.Config
	DisablePrediction bool
	SlackPool         int64
	// DisableDataRouting is the controller's
	// (controller.Config.DisableDataRouting).
	DisableDataRouting bool
	// MaxPackage and UploadDir are the controller's
	// (controller.Config.MaxPackage, controller.Config.UploadDir):
	// the largest code package it takes (default 1 GiB), and where it
	// spools uploads (default Dir/uploads with Dir, else the system's
	// temporary directory).
	MaxPackage int64
	UploadDir  string
}

// TLS is the platform's TLS: each role's files, and how the agent's
// cachelets get theirs.
type TLS struct {
	// Controller is the controller's certificate and key (its identity
	// pki.Controller), and the CA bundle its API's clients must present
	// certificates of (mutual TLS; empty: none asked, the bearer tokens
	// alone authenticate).
	Controller pki.Files
	// Agent is the agent's certificate and key (pki.Agent), and the CA
	// bundle of the controller's certificate: the controller alone may
	// call the agent.
	Agent pki.Files
	// CA is the platform's CA bundle: what the parts trust of etcd, the
	// store (on https), the controller and the agents. Required.
	CA string
	// Issuer issues the agent's cachelets their certificates (agent.TLS).
	// Required with Agent.
	Issuer agent.Issuer
}

// own is the files this process presents to etcd: the controller's where
// it runs one, else the agent's.
func (t *TLS) own(c *Config) pki.Files {
	f := t.Agent
	if c.Controller {
		f = t.Controller
	}
	return pki.Files{Cert: f.Cert, Key: f.Key, CA: t.CA}
}

// agentOnly is the controller's check of the agents it calls.
func agentOnly(id pki.Identity) bool { return id.Role == pki.RoleAgent }

// MinIOWebhookEnv is the environment that makes a MinIO post its bucket
// notifications to a controller's /v1/events, queueing them in queueDir
// while the controller is unreachable. With a queue, MinIO sends from it
// on a 3-second poll (its store's retry interval), so a notification
// takes up to 3 s; with queueDir "", it is sent at once, and one raised
// while the controller is unreachable is lost (the change relay's probe
// then cuts the bucket's subscriptions: ADR 0033).
func MinIOWebhookEnv(controllerURL, token, queueDir string) []string {
	id := controller.MinIOWebhookID
	env := []string{
		"MINIO_NOTIFY_WEBHOOK_ENABLE_" + id + "=on",
		"MINIO_NOTIFY_WEBHOOK_ENDPOINT_" + id + "=" + controllerURL + "/v1/events",
		"MINIO_NOTIFY_WEBHOOK_AUTH_TOKEN_" + id + "=" + token,
	}
	if queueDir != "" {
		env = append(env, "MINIO_NOTIFY_WEBHOOK_QUEUE_DIR_"+id+"="+queueDir)
	}
	return env
}

// MinIOWebhookClientEnv makes MinIO's webhook present f's certificate to
// a controller that requires one (TLS.Controller.CA); MinIO trusts the
// controller's CA through its certificate directory
// (localstore.Config.TLS).
func MinIOWebhookClientEnv(f pki.Files) []string {
	id := controller.MinIOWebhookID
	return []string{
		"MINIO_NOTIFY_WEBHOOK_CLIENT_CERT_" + id + "=" + f.Cert,
		"MINIO_NOTIFY_WEBHOOK_CLIENT_KEY_" + id + "=" + f.Key,
	}
}

// Platform is the running parts.
type Platform struct {
	Controller *controller.Controller
	Agent      *agent.Agent
	// ControllerURL and AgentURL are the APIs' base URLs.
	ControllerURL, AgentURL string

	etcd      *clientv3.Client
	servers   []*http.Server
	closeOnce sync.Once
	cancel    context.CancelFunc
	done      chan struct{}
}

// Start starts the configured parts.
// Validate checks the config and fills in the defaults (Region).
func (c *Config) Validate() error {
	switch {
	case !c.Controller && !c.Agent:
		return errors.New("rig: nothing to run: neither the controller nor an agent")
	case c.Controller && c.ControllerListener == nil:
		return errors.New("rig: the controller needs a listener")
	case c.Agent && c.Dir == "":
		return errors.New("rig: an agent needs Dir")
	case len(c.EtcdEndpoints) == 0:
		return errors.New("rig: EtcdEndpoints are required")
	case c.StoreEndpoint == "":
		return errors.New("rig: StoreEndpoint is required")
	case c.Controller && c.StoreIdentities == "":
		return errors.New(`rig: the controller needs StoreIdentities ("minio" or "file:PATH")`)
	case c.TLS != nil && c.TLS.CA == "":
		return errors.New("rig: TLS needs the platform's CA bundle")
	case c.TLS != nil && c.Agent && (c.TLS.Issuer == nil || c.TLS.Agent.Cert == ""):
		return errors.New("rig: TLS for an agent needs its certificate and an issuer for its cachelets")
	case c.TLS != nil && c.Controller && c.TLS.Controller.Cert == "":
		return errors.New("rig: TLS for the controller needs its certificate")
	}
	if c.Region == "" {
		c.Region = "us-east-1"
	}
	return nil
}

func Start(ctx context.Context, cfg Config, log *slog.Logger) (_ *Platform, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var etcdTLS, storeTLS, agentTLS, agentClientTLS, controllerTLS, peerTLS *tls.Config
	scheme := "http://"
	if t := cfg.TLS; t != nil {
		scheme = "https://"
		if etcdTLS, err = pki.ClientConfig(t.own(&cfg), nil); err != nil {
			return nil, err
		}
		// The store may be a public endpoint (AWS S3) as well as one of
		// the platform's CA.
		if storeTLS, err = pki.StoreClientConfig(t.CA); err != nil {
			return nil, err
		}
		if cfg.Agent {
			// The controller, and other agents for code relaying only
			// (agent.Handler keeps them to it).
			if agentTLS, err = pki.ServerConfig(t.Agent, pki.PlatformOnly); err != nil {
				return nil, err
			}
			if peerTLS, err = pki.ClientConfig(pki.Files{Cert: t.Agent.Cert, Key: t.Agent.Key, CA: t.CA}, agentOnly); err != nil {
				return nil, err
			}
		}
		if cfg.Controller {
			if controllerTLS, err = pki.ServerConfig(t.Controller, nil); err != nil {
				return nil, err
			}
			if agentClientTLS, err = pki.ClientConfig(pki.Files{Cert: t.Controller.Cert, Key: t.Controller.Key, CA: t.CA}, agentOnly); err != nil {
				return nil, err
			}
		}
	}
	cli, err := etcdauth.ClientTLS(cfg.EtcdEndpoints, cfg.EtcdCredentials, etcdTLS)
	if err != nil {
		return nil, fmt.Errorf("platform: etcd: %w", err)
	}
	st, err := s3store.New(s3store.Config{Endpoint: cfg.StoreEndpoint, AccessKey: cfg.StoreAccessKey, SecretKey: cfg.StoreSecretKey, Region: cfg.Region, TLS: storeTLS}, log.With("component", "store"))
	if err != nil {
		cli.Close()
		return nil, err
	}
	rctx, cancel := context.WithCancel(context.Background())
	p := &Platform{etcd: cli, cancel: cancel, done: make(chan struct{})}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	reg := prometheus.NewRegistry()
	if cfg.Agent {
		boxes, err := sandbox.NewManager("hoard", log.With("component", "sandbox"))
		if err != nil {
			return nil, err
		}
		controllerURL := cfg.ControllerURL
		if controllerURL == "" && cfg.ControllerListener != nil {
			controllerURL = scheme + cfg.ControllerListener.Addr().String()
		}
		acfg := agent.Config{
			ID: cfg.AgentID, Dir: filepath.Join(cfg.Dir, "agent"), LogDir: cfg.LogDir, HoardBin: cfg.HoardBin, Store: st,
			StoreEndpoint: cfg.StoreEndpoint,
			Region:        cfg.Region, EtcdEndpoints: cfg.EtcdEndpoints, Sandboxes: boxes, Registerer: reg,
			PeerHost: cfg.AgentPeerHost, InsecureSandbox: cfg.InsecureSandbox, Unjailed: cfg.Unjailed,
			SandboxUIDBase: cfg.SandboxUIDBase, SandboxUIDCount: cfg.SandboxUIDCount, SlackPool: cfg.SlackPool,
			DiskBudget: cfg.DiskBudget,
			CodeFetch:  cfg.CodeFetch, NoCodeRelay: cfg.NoCodeRelay, PeerTLS: peerTLS,
			Trees: agent.EtcdTrees(cli),
		}
		if t := cfg.TLS; t != nil {
			acfg.TLS = &agent.TLS{Issuer: t.Issuer, CA: t.CA}
		}
		if controllerURL != "" {
			acfg.NotifyURL, acfg.ControllerURL = controllerURL+"/v1/events", controllerURL
		}
		p.Agent, err = agent.New(acfg, log.With("component", "agent"))
		if err != nil {
			return nil, err
		}
		addr := cfg.AgentListen
		if addr == "" {
			addr = "127.0.0.1:0"
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("platform: agent listener: %w", err)
		}
		p.AgentURL = scheme + ln.Addr().String()
		if agentTLS != nil {
			ln = tls.NewListener(ln, agentTLS)
		}
		p.serve(ln, p.Agent.Handler(cfg.AgentToken, promhttp.HandlerFor(reg, promhttp.HandlerOpts{})), log)
		go func() {
			defer close(p.done)
			p.Agent.Register(rctx, cli, p.AgentURL, log.With("component", "agent"))
		}()
		if err := waitRegistered(ctx, cli, p.Agent.ID()); err != nil {
			return nil, err
		}
	} else {
		close(p.done)
	}
	if cfg.Controller {
		if cfg.ControllerListener == nil {
			return nil, errors.New("platform: the controller needs a listener")
		}
		ids, err := ParseStoreIdentities(cfg.StoreIdentities, cfg.StoreEndpoint, cfg.StoreAccessKey, cfg.StoreSecretKey, storeTLS)
		if err != nil {
			return nil, err
		}
		ccfg := controller.Config{Etcd: cli, Store: st, Identities: ids, AgentToken: cfg.AgentToken, AgentTLS: agentClientTLS,
			StoreEventsToken: cfg.StoreEventsToken, Registerer: reg, Prediction: cfg.Prediction, DisablePrediction: cfg.DisablePrediction,
			DisableDataRouting: cfg.DisableDataRouting, MaxPackage: cfg.MaxPackage, UploadDir: cfg.UploadDir}
		if ccfg.UploadDir == "" && cfg.Dir != "" {
			ccfg.UploadDir = filepath.Join(cfg.Dir, "uploads")
			if err := os.MkdirAll(ccfg.UploadDir, 0o700); err != nil {
				return nil, err
			}
		}
		if cfg.EtcdCredentials.Username == etcdauth.Root {
			ccfg.EtcdUsers = etcdauth.NewAdmin(cli, "")
		}
		if cfg.StoreNotifications {
			n, err := controller.NewMinIONotifier(cfg.StoreEndpoint, cfg.StoreAccessKey, cfg.StoreSecretKey, cfg.Region, storeTLS)
			if err != nil {
				return nil, err
			}
			ccfg.Notifications = n
		}
		p.Controller, err = controller.New(ctx, ccfg, log.With("component", "controller"))
		if err != nil {
			return nil, err
		}
		p.ControllerURL = scheme + cfg.ControllerListener.Addr().String()
		h := p.Controller.Handler(cfg.ControllerToken, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		for _, ln := range append([]net.Listener{cfg.ControllerListener}, cfg.ControllerAlsoOn...) {
			if controllerTLS != nil {
				ln = tls.NewListener(ln, controllerTLS)
			}
			p.serve(ln, h, log)
		}
	}
	return p, nil
}

// ParseStoreIdentities makes the controller's source of application
// store identities from its setting: "minio" (the MinIO at endpoint, with
// the admin keys given, over tc's TLS on https) or "file:PATH"
// (controller.FileIdentities).
func ParseStoreIdentities(setting, endpoint, accessKey, secretKey string, tc *tls.Config) (controller.StoreIdentities, error) {
	switch {
	case setting == "minio":
		return controller.NewMinIOIdentities(endpoint, accessKey, secretKey, tc)
	case strings.HasPrefix(setting, "file:") && len(setting) > len("file:"):
		return controller.FileIdentities{Path: strings.TrimPrefix(setting, "file:")}, nil
	}
	return nil, fmt.Errorf(`rig: store identities %q: want "minio" or "file:PATH"`, setting)
}

// serve serves h on ln; the server's own errors (refused TLS handshakes
// among them) go to log at debug level.
func (p *Platform) serve(ln net.Listener, h http.Handler, log *slog.Logger) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	p.servers = append(p.servers, srv)
	go func() { _ = srv.Serve(ln) }()
}

// waitRegistered waits until the agent's registration is visible.
func waitRegistered(ctx context.Context, cli *clientv3.Client, id string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		resp, err := cli.Get(ctx, api.EtcdPrefix+id)
		if err == nil && len(resp.Kvs) > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("platform: the agent did not register in etcd: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Close stops the controller, then the agent (unloading its instances:
// each cachelet leaves its ring), then the listeners.
func (p *Platform) Close() { p.closeOnce.Do(p.close) }

func (p *Platform) close() {
	if p.Controller != nil {
		p.Controller.Close()
	}
	if p.Agent != nil {
		p.Agent.Close()
	}
	p.cancel()
	<-p.done
	for _, s := range p.servers {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = s.Shutdown(ctx)
		cancel()
	}
	p.etcd.Close()
}
