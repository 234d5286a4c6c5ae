package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/hoard-io/hoard/internal/appspec"
	"github.com/hoard-io/hoard/internal/etcdauth"
	"github.com/hoard-io/hoard/internal/pki"
	"github.com/hoard-io/hoard/internal/rig"
)

// runController runs the platform's controller on its own.
func runController(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("controller", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg rig.Config
	var listen, logLevel string
	fs.StringVar(&listen, "listen", "127.0.0.1:9100", "the controller's API address")
	etcd := etcdFlags(fs, &cfg, "root, to give every instance an etcd user of its own")
	storeFlags(fs, &cfg)
	fs.StringVar(&cfg.ControllerToken, "token", envDefault("HOARD_CONTROLLER_TOKEN", ""), "bearer token clients must send (env HOARD_CONTROLLER_TOKEN)")
	fs.StringVar(&cfg.AgentToken, "agent-token", envDefault("HOARD_AGENT_TOKEN", ""), "bearer token the agents expect (env HOARD_AGENT_TOKEN)")
	fs.StringVar(&cfg.StoreIdentities, "store-identities", envDefault("HOARD_STORE_IDENTITIES", ""), `where each application's own store identity comes from: "minio" (a MinIO user per application, made with the --store keys, MinIO's root or an admin's) or "file:PATH" (keys the operator made, per application; env HOARD_STORE_IDENTITIES)`)
	fs.StringVar(&cfg.StoreEventsToken, "store-events-token", "", "a token (16 bytes or more) the store's event notifications may be posted to POST /v1/events with, and nothing else: AWS S3's through SNS (HTTP Basic, its password) or an EventBridge API destination (bearer); give it in the --secrets file (docs/design/external-writers.md)")
	fs.BoolVar(&cfg.StoreNotifications, "store-notifications", false, "the store is a MinIO with hoard's webhook target: configure bucket notifications for object triggers")
	fs.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	fs.BoolVar(&cfg.DisablePrediction, "no-prediction", false, "give every invocation its booked memory: no memory models, no sized sandboxes")
	fs.IntVar(&cfg.Prediction.MinInvocations, "prediction-min-invocations", 100, "invocations a function's memory model must have seen before its predictions size sandboxes")
	cfg.MaxPackage = appspec.DefaultMaxPackageBytes
	fs.Func("max-package", "the largest code package a deploy may upload, compressed (its files together may be 4 times that); uploads are spooled to --upload-dir, not held in memory (default 1GiB)", func(s string) error {
		n, err := parseBytes(s)
		if err == nil && n <= 0 {
			err = fmt.Errorf("%q: want a positive size", s)
		}
		cfg.MaxPackage = n
		return err
	})
	fs.StringVar(&cfg.UploadDir, "upload-dir", "", "where uploaded code packages are spooled while they are checked and stored, each in a file of mode 0600 (default the system's temporary directory)")
	enableAuth := fs.Bool("etcd-enable-auth", false, "turn etcd's authentication on at start, root's password that of --etcd-credentials (user root), unless it is on already; then check that password (what `hoard up` does)")
	agentsCreds := fs.String("etcd-agents-credentials", "", `with --etcd-credentials of root: a file (mode 0600) of {"username", "password"} for the etcd user every agent shares (made or given this password at start; it registers agents and reads their registrations and the function trees)`)
	var tf tlsFlags
	tf.register(fs, pki.Files{}, true)
	secrets := secretsFlag(fs, "token", "agent-token", "store-access-key", "store-secret-key", "store-events-token")
	if err := usageErr(fs.Parse(args)); err != nil {
		return err
	}
	if err := secrets(); err != nil {
		return err
	}
	if err := etcd(); err != nil {
		return err
	}
	if len(cfg.EtcdEndpoints) == 0 || cfg.StoreEndpoint == "" || cfg.StoreIdentities == "" || len(cfg.ControllerToken) < 16 || len(cfg.AgentToken) < 16 {
		return fmt.Errorf("%w: --etcd-endpoints, --store-endpoint, --store-identities, and tokens of at least 16 bytes are required", errUsage)
	}
	if cfg.StoreEventsToken != "" && len(cfg.StoreEventsToken) < 16 {
		return fmt.Errorf("%w: --store-events-token: at least 16 bytes", errUsage)
	}
	if err := tf.validate(); err != nil {
		return err
	}
	if tf.on() {
		// The controller's certificate (identity pki.Controller) serves
		// its API and signs it in to etcd and to agents.
		if tf.ca == "" {
			return fmt.Errorf("%w: --tls-cert needs --tls-ca, the CA of etcd, the store and the agents", errUsage)
		}
		clientCA := tf.clientCA
		switch clientCA {
		case "":
			clientCA = tf.ca
		case "none":
			clientCA = ""
		}
		cfg.TLS = &rig.TLS{Controller: pki.Files{Cert: tf.cert, Key: tf.key, CA: clientCA}, CA: tf.ca}
	}
	log, err := newLogger(stderr, logLevel, false)
	if err != nil {
		return err
	}
	if *enableAuth || *agentsCreds != "" {
		if err := prepareEtcdAuth(ctx, cfg, &tf, *enableAuth, *agentsCreds); err != nil {
			return err
		}
		log.Info("etcd's users prepared", "auth_checked_on", *enableAuth, "agents_user", *agentsCreds != "")
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	cfg.Controller, cfg.ControllerListener = true, ln
	p, err := rig.Start(ctx, cfg, log)
	if err != nil {
		ln.Close()
		return err
	}
	fmt.Fprintf(stdout, "hoard controller serving at %s\n", p.ControllerURL)
	<-ctx.Done()
	p.Close()
	return nil
}

// etcdAuthTimeout bounds turning etcd's authentication on and making the
// agents' user at the controller's start.
const etcdAuthTimeout = 30 * time.Second

// prepareEtcdAuth turns etcd's authentication on (enable) and makes the
// user the agents share (agentsFile), signed in as root with
// cfg.EtcdCredentials, over TLS where the endpoints are https (the
// controller's certificate: etcd asks for one first).
func prepareEtcdAuth(ctx context.Context, cfg rig.Config, tf *tlsFlags, enable bool, agentsFile string) error {
	if cfg.EtcdCredentials.Username != etcdauth.Root {
		return fmt.Errorf("%w: --etcd-enable-auth and --etcd-agents-credentials need --etcd-credentials of etcd's root user", errUsage)
	}
	var agents etcdauth.Credentials
	if agentsFile != "" {
		var err error
		if agents, err = etcdauth.ReadFile(agentsFile); err != nil {
			return fmt.Errorf("%w: --etcd-agents-credentials: %v", errUsage, err)
		}
		if agents.Username == etcdauth.Root {
			return fmt.Errorf("%w: --etcd-agents-credentials: the agents' user may not be root", errUsage)
		}
	}
	tc, err := tf.client(cfg.EtcdEndpoints...)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, etcdAuthTimeout)
	defer cancel()
	if enable {
		if err := etcdauth.EnableTLS(ctx, cfg.EtcdEndpoints, tc, cfg.EtcdCredentials.Password); err != nil {
			return err
		}
	}
	if agentsFile == "" {
		return nil
	}
	cli, err := etcdauth.ClientTLS(cfg.EtcdEndpoints, cfg.EtcdCredentials, tc)
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	defer cli.Close()
	return etcdauth.NewAdmin(cli, "").AddAgents(ctx, agents)
}
