// Package rig assembles hoard's local serverless platform: a
// controller (package controller) and a node agent (package agent) over
// one etcd and one store. `hoard up` runs both in its process; `hoard
// controller` and `hoard agent` run one each. ADR 9 and docs/platform.md
// describe the design.
package rig

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
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
	// LogDir is where the agent writes each instance's log (its
	// cachelet's and its worker's output); default Dir/agent/logs.
	LogDir string
	// HoardBin is the binary agents start cachelets from; default the
	// running one.
	HoardBin string

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
}

// MinIOWebhookEnv is the environment that makes a MinIO post its bucket
// notifications to a controller's /v1/events, queueing them in queueDir
// while the controller is unreachable.
func MinIOWebhookEnv(controllerURL, token, queueDir string) []string {
	id := controller.MinIOWebhookID
	return []string{
		"MINIO_NOTIFY_WEBHOOK_ENABLE_" + id + "=on",
		"MINIO_NOTIFY_WEBHOOK_ENDPOINT_" + id + "=" + controllerURL + "/v1/events",
		"MINIO_NOTIFY_WEBHOOK_AUTH_TOKEN_" + id + "=" + token,
		"MINIO_NOTIFY_WEBHOOK_QUEUE_DIR_" + id + "=" + queueDir,
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
	cli, err := etcdauth.Client(cfg.EtcdEndpoints, cfg.EtcdCredentials)
	if err != nil {
		return nil, fmt.Errorf("platform: etcd: %w", err)
	}
	st, err := s3store.New(s3store.Config{Endpoint: cfg.StoreEndpoint, AccessKey: cfg.StoreAccessKey, SecretKey: cfg.StoreSecretKey, Region: cfg.Region}, log.With("component", "store"))
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
			controllerURL = "http://" + cfg.ControllerListener.Addr().String()
		}
		acfg := agent.Config{
			ID: cfg.AgentID, Dir: filepath.Join(cfg.Dir, "agent"), LogDir: cfg.LogDir, HoardBin: cfg.HoardBin, Store: st,
			StoreEndpoint: cfg.StoreEndpoint,
			Region:        cfg.Region, EtcdEndpoints: cfg.EtcdEndpoints, Sandboxes: boxes, Registerer: reg,
			PeerHost: cfg.AgentPeerHost, InsecureSandbox: cfg.InsecureSandbox, Unjailed: cfg.Unjailed,
			SandboxUIDBase: cfg.SandboxUIDBase, SandboxUIDCount: cfg.SandboxUIDCount,
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
		p.AgentURL = "http://" + ln.Addr().String()
		p.serve(ln, p.Agent.Handler(cfg.AgentToken, promhttp.HandlerFor(reg, promhttp.HandlerOpts{})))
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
		ids, err := ParseStoreIdentities(cfg.StoreIdentities, cfg.StoreEndpoint, cfg.StoreAccessKey, cfg.StoreSecretKey)
		if err != nil {
			return nil, err
		}
		ccfg := controller.Config{Etcd: cli, Store: st, Identities: ids, AgentToken: cfg.AgentToken, StoreEventsToken: cfg.StoreEventsToken, Registerer: reg}
		if cfg.EtcdCredentials.Username == etcdauth.Root {
			ccfg.EtcdUsers = etcdauth.NewAdmin(cli, "")
		}
		if cfg.StoreNotifications {
			n, err := controller.NewMinIONotifier(cfg.StoreEndpoint, cfg.StoreAccessKey, cfg.StoreSecretKey, cfg.Region)
			if err != nil {
				return nil, err
			}
			ccfg.Notifications = n
		}
		p.Controller, err = controller.New(ctx, ccfg, log.With("component", "controller"))
		if err != nil {
			return nil, err
		}
		p.ControllerURL = "http://" + cfg.ControllerListener.Addr().String()
		h := p.Controller.Handler(cfg.ControllerToken, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		p.serve(cfg.ControllerListener, h)
		for _, ln := range cfg.ControllerAlsoOn {
			p.serve(ln, h)
		}
	}
	return p, nil
}

// ParseStoreIdentities makes the controller's source of application
// store identities from its setting: "minio" (the MinIO at endpoint, with
// the admin keys given) or "file:PATH" (controller.FileIdentities).
func ParseStoreIdentities(setting, endpoint, accessKey, secretKey string) (controller.StoreIdentities, error) {
	switch {
	case setting == "minio":
		return controller.NewMinIOIdentities(endpoint, accessKey, secretKey)
	case strings.HasPrefix(setting, "file:") && len(setting) > len("file:"):
		return controller.FileIdentities{Path: strings.TrimPrefix(setting, "file:")}, nil
	}
	return nil, fmt.Errorf(`rig: store identities %q: want "minio" or "file:PATH"`, setting)
}

func (p *Platform) serve(ln net.Listener, h http.Handler) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
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
