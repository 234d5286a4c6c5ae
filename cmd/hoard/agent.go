package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/hoard-io/hoard/internal/agent"
	"github.com/hoard-io/hoard/internal/bytesize"
	"github.com/hoard-io/hoard/internal/pki"
	"github.com/hoard-io/hoard/internal/rig"
)

// runAgent runs a node agent on its own.
func runAgent(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg rig.Config
	var logLevel string
	fs.StringVar(&cfg.AgentListen, "listen", "127.0.0.1:0", "the agent's API address")
	fs.StringVar(&cfg.AgentID, "id", "", "the agent's name (default agent-<hostname>)")
	fs.StringVar(&cfg.AgentPeerHost, "peer-host", "127.0.0.1", "the address its cachelets take peer traffic on (the node's address when cachelets on other nodes must reach them)")
	fs.StringVar(&cfg.Dir, "dir", ".hoard", "working directory: code, instance logs")
	etcd := etcdFlags(fs, &cfg, "the agent's own user")
	storeFlags(fs, &cfg)
	fs.StringVar(&cfg.ControllerURL, "controller", envDefault("HOARD_CONTROLLER_URL", ""), "the controller's URL, for cache triggers and votes: each instance calls it with its application's own token (env HOARD_CONTROLLER_URL)")
	fs.StringVar(&cfg.AgentToken, "token", envDefault("HOARD_AGENT_TOKEN", ""), "bearer token the controller sends (env HOARD_AGENT_TOKEN)")
	fs.BoolVar(&cfg.InsecureSandbox, "insecure-sandbox", false, "where this host cannot jail functions (not root, no namespaces), run them unisolated instead of refusing to start (env HOARD_INSECURE_SANDBOX=on)")
	fs.StringVar(&cfg.CodeFetch, "code-fetch", "", "how instances get their code: lazy (a read-only FUSE mount of the block package, each block fetched and verified on first read; needs root and /dev/fuse), whole (downloaded and unpacked before the start); default lazy where possible (env HOARD_CODE_FETCH)")
	fs.IntVar(&cfg.SandboxUIDBase, "sandbox-uid-base", agent.DefaultSandboxUIDBase, "the first uid (and gid) instances run as; agents sharing a machine need ranges of their own")
	fs.IntVar(&cfg.SandboxUIDCount, "sandbox-uid-count", agent.DefaultSandboxUIDCount, "how many uids from --sandbox-uid-base (two per instance: its function's and its cachelet's)")
	fs.Var((*byteSize)(&cfg.DiskBudget), "disk-budget", "give each application a disk tier of this many bytes on this node, in --dir's disk/ (objects evicted from memory kept there, shared by the application's instances on the node and kept across their restarts); default: memory only")
	fs.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	slack := fs.String("slack-pool", "100MiB", "memory the node lends running invocations that outgrow their predicted size (0: none)")
	var tf tlsFlags
	tf.register(fs, pki.Files{}, false)
	issuer := fs.String("tls-issuer", "", "with --tls-cert: a CA directory (ca.crt, ca.key mode 0600; an intermediate CA of the operator's, say) the agent issues its cachelets' certificates from; read again when its certificate file changes")
	secrets := secretsFlag(fs, "token", "store-access-key", "store-secret-key")
	if err := usageErr(fs.Parse(args)); err != nil {
		return err
	}
	if err := secrets(); err != nil {
		return err
	}
	n, err := bytesize.Parse(*slack)
	if err != nil || n < 0 {
		return fmt.Errorf("%w: --slack-pool %q: want a size such as 100MiB, or 0", errUsage, *slack)
	}
	cfg.SlackPool = n
	if n == 0 {
		cfg.SlackPool = -1 // none
	}
	if err := etcd(); err != nil {
		return err
	}
	if len(cfg.EtcdEndpoints) == 0 || cfg.StoreEndpoint == "" || len(cfg.AgentToken) < 16 {
		return fmt.Errorf("%w: --etcd-endpoints, --store-endpoint and a --token of at least 16 bytes are required", errUsage)
	}
	if err := tf.validate(); err != nil {
		return err
	}
	if tf.on() {
		// The agent's certificate (identity pki.Agent) serves its API,
		// to the controller alone (tf.ca's), and signs it in to etcd.
		if tf.ca == "" || *issuer == "" {
			return fmt.Errorf("%w: --tls-cert needs --tls-ca (the platform's CA) and --tls-issuer (the CA of its cachelets' certificates)", errUsage)
		}
		// Read again when renewed in place (a mounted Secret cert-manager
		// renews).
		ca, err := pki.OpenIssuer(*issuer, nil)
		if err != nil {
			return err
		}
		cfg.TLS = &rig.TLS{Agent: tf.files(), CA: tf.ca, Issuer: ca}
	}
	log, err := newLogger(stderr, logLevel, false)
	if err != nil {
		return err
	}
	cfg.Agent = true
	p, err := rig.Start(ctx, cfg, log)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "hoard agent %s serving at %s (sandboxes: %s)\n", p.Agent.ID(), p.AgentURL, p.Agent.SandboxMode())
	<-ctx.Done()
	p.Close()
	return nil
}
