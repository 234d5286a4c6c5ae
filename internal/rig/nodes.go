package rig

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hoard-io/hoard/internal/agent"
	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/control"
	"github.com/hoard-io/hoard/internal/etcdauth"
	"github.com/hoard-io/hoard/internal/etcdembed"
	"github.com/hoard-io/hoard/internal/hostnet"
	"github.com/hoard-io/hoard/internal/localstore"
	"github.com/hoard-io/hoard/internal/netshape"
	"github.com/hoard-io/hoard/internal/pki"
	"github.com/hoard-io/hoard/internal/predict"
)

// Defaults of NodesConfig.
const (
	// DefaultAgentPort is each node agent's port on its node's address
	// (every node has a namespace, so every one can take the same port).
	DefaultAgentPort = 7000
	// DefaultStorePort is MinIO's port on the store's address.
	DefaultStorePort = 9000
	// agentStopGrace is how long a node agent may take to unload its
	// instances on SIGTERM before it is killed.
	agentStopGrace = 30 * time.Second
)

// NodesConfig configures a platform of several nodes on one machine
// (ADR 13): the store (MinIO) in a network namespace of its own, behind
// its own shaped link; a node agent process in the namespace of each
// node; and, in this process, the embedded etcd and the controller,
// reached by the nodes on the bridge's address.
type NodesConfig struct {
	// Net is the namespaces to make: Nodes (required), the links' rates,
	// the prefix of their names. Net.Store is set: the store always has
	// its own link.
	Net hostnet.Config
	// Dir holds the state: minio/, etcd/, nodes/<i>/ (each agent's
	// directory and agent.log). Required.
	Dir string
	// HoardBin is the binary run as each node's agent (`hoard agent`,
	// which starts its cachelets from the same binary); default the
	// running executable.
	HoardBin string
	// DiskBudget, when positive, gives each application a disk tier of
	// this many bytes on every node (agent.Config.DiskBudget).
	DiskBudget int64
	// MinIOBin is the store's binary; default localstore.FindBinary.
	MinIOBin string
	// ControllerListener, when set, also serves the controller's API
	// (for clients on loopback); Nodes.ControllerURL is then its address.
	ControllerListener net.Listener
	// StoreAccessKey and StoreSecretKey are the store's root keys.
	// Required.
	StoreAccessKey, StoreSecretKey string
	// Region; default us-east-1.
	Region string
	// ControllerToken and AgentToken as in Config. Required (16 bytes or
	// more).
	ControllerToken, AgentToken string
	// EtcdRootPassword is etcd's root password (package etcdauth): etcd
	// runs with authentication on, the controller signs in as root, each
	// agent as its own user (its credentials in a file of mode 0600 in
	// its directory, named by --etcd-credentials), each instance as its
	// own. Keep it to restart on the same Dir; default a random one.
	EtcdRootPassword string
	// AgentPort and StorePort; defaults DefaultAgentPort and
	// DefaultStorePort. MinIO's console takes StorePort+1 inside the
	// store's namespace.
	AgentPort, StorePort int
	// AgentEnv is added to each agent's environment (e.g. HOARD_PYTHON).
	AgentEnv []string
	// StoreLatency, when set (whole milliseconds), puts a toxiproxy on
	// the bridge's address in front of the store, adding this latency
	// each way (the kernel has no netem; ADR 10); the nodes and the
	// controller reach the store through it. Its bandwidth stays the
	// store link's.
	StoreLatency time.Duration
	// Prediction and DisablePrediction configure the controller's memory
	// models, as in Config.
	Prediction        predict.Config
	DisablePrediction bool
	// TLS, when set, is the local CA that puts every listener on TLS
	// (ADR 17), as `hoard up --tls` does on one node: etcd, the store
	// and the controller get certificates naming the bridge's addresses,
	// each agent one naming its node's and an intermediate CA of its own
	// (nodes/<i>/tls/issuer) that issues its cachelets' certificates, so
	// that no agent holds the platform's CA key. Default nil: plain HTTP.
	TLS *pki.CA
}

// Validate reports whether c can be started.
func (c NodesConfig) Validate() error {
	if err := c.Net.Validate(); err != nil {
		return err
	}
	if c.Dir == "" || c.StoreAccessKey == "" || c.StoreSecretKey == "" {
		return errors.New("rig: Dir, StoreAccessKey and StoreSecretKey are required")
	}
	if len(c.ControllerToken) < 16 || len(c.AgentToken) < 16 {
		return errors.New("rig: ControllerToken and AgentToken need 16 bytes or more")
	}
	if c.StoreLatency != 0 {
		if err := (netshape.Link{Latency: c.StoreLatency}).Validate(); err != nil {
			return err
		}
	}
	if c.AgentPort < 0 || c.AgentPort > 65535 || c.StorePort < 0 || c.StorePort > 65534 {
		return fmt.Errorf("rig: ports %d and %d(+1, MinIO's console) out of range", c.AgentPort, c.StorePort)
	}
	return nil
}

// Nodes is a running multi-node platform.
type Nodes struct {
	// Platform is the controller (Platform.Controller, ControllerURL).
	*Platform
	// NodesControllerURL is the controller as the nodes reach it.
	NodesControllerURL string
	// StoreEndpoint is where the nodes and the controller reach the
	// store: Store's endpoint, or the proxy adding StoreLatency.
	StoreEndpoint string
	// StoreProxy shapes the link to the store (with
	// NodesConfig.StoreLatency; nil without): a test may slow it down
	// (Update) or cut it while the platform runs.
	StoreProxy *netshape.Proxy
	Net        *hostnet.Net
	Etcd       *etcdembed.Server
	Store      *localstore.Server
	Agents     []*NodeAgent

	shaper     *netshape.Server
	tls        *nodesPKI // nil without NodesConfig.TLS
	agentToken string    // to read the agents' metrics

	closeOnce sync.Once
}

// NodeAgent is one node's agent process.
type NodeAgent struct {
	ID, URL string
	Node    hostnet.Node
	LogPath string

	cmd    *exec.Cmd
	exited chan struct{}
}

// Exited is closed when the agent's process has ended.
func (a *NodeAgent) Exited() <-chan struct{} { return a.exited }

// Kill ends the agent at once (SIGKILL): its cachelets and workers die
// with it (they are started with a parent-death signal), as when a host
// is lost. It waits for the process.
func (a *NodeAgent) Kill() {
	_ = a.cmd.Process.Kill()
	<-a.exited
}

// stop asks the agent to unload its instances and end (SIGTERM), and
// kills it after agentStopGrace.
func (a *NodeAgent) stop() {
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.exited:
	case <-time.After(agentStopGrace):
		a.Kill()
	}
}

// StartNodes starts a platform of cfg.Net.Nodes nodes. Where namespaces
// cannot be made, the error wraps hostnet.ErrUnavailable (the caller
// may fall back to Start's one node).
func StartNodes(ctx context.Context, cfg NodesConfig, log *slog.Logger) (_ *Nodes, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	if cfg.AgentPort == 0 {
		cfg.AgentPort = DefaultAgentPort
	}
	if cfg.StorePort == 0 {
		cfg.StorePort = DefaultStorePort
	}
	if cfg.HoardBin == "" {
		if cfg.HoardBin, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("rig: finding the hoard binary: %w", err)
		}
	}
	if cfg.MinIOBin == "" {
		if cfg.MinIOBin, err = localstore.FindBinary(localstore.MinIOBinary); err != nil {
			return nil, err
		}
	}
	cfg.Net.Store = true
	hn, err := hostnet.Up(ctx, cfg.Net, log.With("component", "hostnet"))
	if err != nil {
		return nil, err
	}
	n := &Nodes{Net: hn, agentToken: cfg.AgentToken}
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	gw := hn.Gateway.String()
	tf, err := nodesTLS(cfg.TLS, gw, hn.Store.Addr.String())
	if err != nil {
		return nil, err
	}
	n.tls = tf

	ecfg := etcdembed.Config{Dir: cfg.Dir, ClientAddr: net.JoinHostPort(gw, "0"), Logger: log.With("component", "etcd")}
	var etcdTLS *tls.Config
	if tf != nil {
		ecfg.TLS = &etcdembed.TLSFiles{Cert: tf.etcd.Cert, Key: tf.etcd.Key, CA: tf.etcd.CA}
		if etcdTLS, err = pki.ClientConfig(tf.controller, nil); err != nil {
			return nil, err
		}
	}
	n.Etcd, err = etcdembed.Start(ctx, ecfg)
	if err != nil {
		return nil, fmt.Errorf("rig: etcd: %w", err)
	}
	root := etcdauth.Credentials{Username: etcdauth.Root, Password: cfg.EtcdRootPassword}
	if root.Password == "" {
		root.Password = etcdauth.NewPassword()
	}
	if err := etcdauth.EnableTLS(ctx, n.Etcd.Endpoints(), etcdTLS, root.Password); err != nil {
		return nil, fmt.Errorf("rig: etcd: %w", err)
	}
	bridgeLn, err := net.Listen("tcp", net.JoinHostPort(gw, "0"))
	if err != nil {
		return nil, fmt.Errorf("rig: the controller's listener on the bridge: %w", err)
	}
	n.NodesControllerURL = "http://" + bridgeLn.Addr().String()
	if tf != nil {
		n.NodesControllerURL = "https://" + bridgeLn.Addr().String()
	}
	// The store posts events with a token that can do nothing else.
	eventsToken := etcdauth.NewPassword()

	storeAddr := netip.AddrPortFrom(hn.Store.Addr, uint16(cfg.StorePort)).String()
	mcfg := localstore.Config{
		Binary: cfg.MinIOBin, DataDir: filepath.Join(cfg.Dir, "minio"), Addr: storeAddr,
		ConsoleAddr: "127.0.0.1:" + strconv.Itoa(cfg.StorePort+1), Wrapper: hn.Wrapper(*hn.Store),
		AccessKey: cfg.StoreAccessKey, SecretKey: cfg.StoreSecretKey,
		LogFile: filepath.Join(cfg.Dir, "minio.log"), Logger: log.With("component", "minio"),
		Env: MinIOWebhookEnv(n.NodesControllerURL, eventsToken, filepath.Join(cfg.Dir, "minio-events")),
	}
	if tf != nil {
		mcfg.TLS = tf.store
		mcfg.Env = append(mcfg.Env, MinIOWebhookClientEnv(tf.store)...)
	}
	n.Store, err = localstore.StartMinIO(ctx, mcfg)
	if err != nil {
		bridgeLn.Close()
		return nil, fmt.Errorf("rig: the store: %w", err)
	}

	n.StoreEndpoint = n.Store.Endpoint()
	if cfg.StoreLatency > 0 {
		n.shaper, err = netshape.Start(ctx, netshape.Config{ListenHost: gw, LogFile: filepath.Join(cfg.Dir, "toxiproxy.log"),
			Logger: log.With("component", "netshape")})
		if err != nil {
			bridgeLn.Close()
			return nil, err
		}
		link := netshape.Link{Latency: cfg.StoreLatency}
		p, err := n.shaper.Shape(ctx, "store", n.Store.Endpoint(), link, link)
		if err != nil {
			bridgeLn.Close()
			return nil, err
		}
		n.StoreEndpoint, n.StoreProxy = p.Endpoint, p
	}

	pcfg := Config{
		Controller: true, ControllerListener: bridgeLn, EtcdEndpoints: n.Etcd.Endpoints(), EtcdCredentials: root,
		StoreEndpoint: n.StoreEndpoint, StoreAccessKey: cfg.StoreAccessKey, StoreSecretKey: cfg.StoreSecretKey,
		Region: cfg.Region, ControllerToken: cfg.ControllerToken, AgentToken: cfg.AgentToken, StoreNotifications: true, StoreIdentities: "minio",
		StoreEventsToken: eventsToken, Prediction: cfg.Prediction, DisablePrediction: cfg.DisablePrediction,
	}
	if tf != nil {
		pcfg.TLS = &TLS{Controller: tf.controller, CA: tf.controller.CA}
	}
	if cfg.ControllerListener != nil {
		pcfg.ControllerListener, pcfg.ControllerAlsoOn = cfg.ControllerListener, []net.Listener{bridgeLn}
	}
	n.Platform, err = Start(ctx, pcfg, log)
	if err != nil {
		bridgeLn.Close()
		return nil, err
	}

	admin := etcdauth.NewAdmin(n.Platform.etcd, "")
	for i, node := range hn.Nodes {
		a, err := n.startAgent(ctx, cfg, admin, i, node)
		if err != nil {
			return nil, err
		}
		n.Agents = append(n.Agents, a)
	}
	for _, a := range n.Agents {
		if err := waitAgent(ctx, n.Platform.etcd, a); err != nil {
			return nil, err
		}
	}
	log.Info("nodes up", "nodes", len(n.Agents), "bridge", hn.Bridge, "subnet", hn.Subnet, "store", n.StoreEndpoint,
		"controller", n.NodesControllerURL)
	return n, nil
}

// startAgent runs `hoard agent` in node's namespace, listening on the
// node's address; secrets go in its environment, not its command line,
// and its etcd user's password in a file of mode 0600 in its directory.
func (n *Nodes) startAgent(ctx context.Context, cfg NodesConfig, admin *etcdauth.Admin, i int, node hostnet.Node) (*NodeAgent, error) {
	dir := filepath.Join(cfg.Dir, "nodes", strconv.Itoa(i))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	a := &NodeAgent{ID: fmt.Sprintf("node-%d", i), Node: node, LogPath: filepath.Join(dir, "agent.log"), exited: make(chan struct{})}
	creds, err := admin.AddAgent(ctx, a.ID)
	if err != nil {
		return nil, fmt.Errorf("rig: the etcd user of %s: %w", a.ID, err)
	}
	credsPath := filepath.Join(dir, "etcd-credentials.json")
	if err := etcdauth.WriteFile(credsPath, creds); err != nil {
		return nil, err
	}
	listen := netip.AddrPortFrom(node.Addr, uint16(cfg.AgentPort)).String()
	a.URL = "http://" + listen
	var tlsArgs []string
	if n.tls != nil {
		a.URL = "https://" + listen
		f, issuer, err := n.tls.agent(dir, a.ID, node.Addr.String())
		if err != nil {
			return nil, err
		}
		tlsArgs = []string{"--tls-cert", f.Cert, "--tls-key", f.Key, "--tls-ca", f.CA, "--tls-issuer", issuer}
	}
	lf, err := os.OpenFile(a.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer lf.Close() // the child has its own copy
	// The agent's token and store keys go in a file only it (root) reads,
	// not on its command line or in its environment (`hoard agent
	// --secrets`).
	secretsPath := filepath.Join(dir, "secrets.json")
	secrets, _ := json.Marshal(map[string]string{
		"token": cfg.AgentToken, "store-access-key": cfg.StoreAccessKey, "store-secret-key": cfg.StoreSecretKey,
	})
	if err := control.WriteFileAtomic(secretsPath, secrets, 0o600); err != nil {
		return nil, err
	}
	uidBase, uidCount := agent.NodeUIDs(i)
	a.cmd = n.Net.Command(node, cfg.HoardBin, "agent", "--id", a.ID, "--listen", listen, "--peer-host", node.Addr.String(),
		"--dir", dir, "--etcd-endpoints", strings.Join(n.Etcd.Endpoints(), ","), "--etcd-credentials", credsPath,
		"--secrets", secretsPath, "--store-endpoint", n.StoreEndpoint,
		"--controller", n.NodesControllerURL, "--region", cfg.Region,
		// Agents on one machine never share a uid.
		"--sandbox-uid-base", strconv.Itoa(uidBase), "--sandbox-uid-count", strconv.Itoa(uidCount))
	a.cmd.Args = append(a.cmd.Args, tlsArgs...)
	if cfg.DiskBudget > 0 {
		a.cmd.Args = append(a.cmd.Args, "--disk-budget", strconv.FormatInt(cfg.DiskBudget, 10))
	}
	a.cmd.Env = append(os.Environ(), cfg.AgentEnv...)
	a.cmd.Stdout, a.cmd.Stderr = lf, lf
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := a.cmd.Start(); err != nil {
		return nil, fmt.Errorf("rig: starting the agent of %s: %w", node.Name, err)
	}
	go func() {
		_ = a.cmd.Wait()
		close(a.exited)
	}()
	return a, nil
}

// nodesPKI is the certificates of a multi-node platform on TLS.
type nodesPKI struct {
	ca                      *pki.CA
	etcd, store, controller pki.Files
}

// nodesTLS issues etcd, the store and the controller their certificates,
// naming the bridge's gateway (and the store's node address); nil
// without a CA.
func nodesTLS(ca *pki.CA, gw, storeAddr string) (*nodesPKI, error) {
	if ca == nil {
		return nil, nil
	}
	p := &nodesPKI{ca: ca}
	hosts := []string{"127.0.0.1", "localhost", gw}
	var err error
	if p.etcd, err = ca.Issue("etcd", pki.Request{Identity: pki.Client("etcd"), Hosts: hosts, Server: true, Client: true}); err != nil {
		return nil, err
	}
	if p.store, err = ca.Issue("store", pki.Request{Identity: pki.Client("store"), Hosts: append(hosts, storeAddr), Server: true, Client: true}); err != nil {
		return nil, err
	}
	if p.controller, err = ca.Issue("controller", pki.Request{Identity: pki.Controller(), Hosts: hosts, Server: true, Client: true}); err != nil {
		return nil, err
	}
	return p, nil
}

// agent issues node agent id its certificate (naming its node's address)
// and its intermediate CA, in its directory's tls/.
func (p *nodesPKI) agent(dir, id, addr string) (pki.Files, string, error) {
	tdir := filepath.Join(dir, "tls")
	issuer := filepath.Join(tdir, "issuer")
	if err := p.ca.IssueCA(issuer); err != nil {
		return pki.Files{}, "", err
	}
	f, err := p.ca.IssueIn(tdir, "agent", pki.Request{Identity: pki.Agent(id), Hosts: []string{addr}, Server: true, Client: true})
	return f, issuer, err
}

// waitAgent waits until the agent has registered in etcd.
func waitAgent(ctx context.Context, cli *clientv3.Client, a *NodeAgent) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		resp, err := cli.Get(ctx, api.EtcdPrefix+a.ID)
		if err == nil && len(resp.Kvs) > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("rig: the agent of %s did not register: %w; its log:\n%s", a.Node.Name, ctx.Err(), logTail(a.LogPath))
		case <-a.exited:
			return fmt.Errorf("rig: the agent of %s exited while starting; its log:\n%s", a.Node.Name, logTail(a.LogPath))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func logTail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	return strings.TrimSpace(string(b))
}

// Close stops the controller, then the agents (each unloads its
// instances), the store, etcd, and removes the namespaces and the bridge.
func (n *Nodes) Close() {
	n.closeOnce.Do(func() {
		if n.Platform != nil {
			n.Platform.Close()
		}
		var wg sync.WaitGroup
		for _, a := range n.Agents {
			wg.Add(1)
			go func() { defer wg.Done(); a.stop() }()
		}
		wg.Wait()
		if n.shaper != nil {
			_ = n.shaper.Close()
		}
		if n.Store != nil {
			_ = n.Store.Close()
		}
		if n.Etcd != nil {
			n.Etcd.Close()
		}
		_ = n.Net.Close()
	})
}
