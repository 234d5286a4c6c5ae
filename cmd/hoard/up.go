package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hoard-io/hoard/internal/control"
	"github.com/hoard-io/hoard/internal/etcdauth"
	"github.com/hoard-io/hoard/internal/etcdembed"
	"github.com/hoard-io/hoard/internal/hostnet"
	"github.com/hoard-io/hoard/internal/instance"
	"github.com/hoard-io/hoard/internal/localstore"
	etcdmembership "github.com/hoard-io/hoard/internal/membership/etcd"
	"github.com/hoard-io/hoard/internal/rig"
)

// The files `hoard up` keeps in its state directory.
const (
	envFile   = "env"              // connection settings, written when ready
	pidFile   = "hoard.pid"        // the serving process
	credsFile = "credentials.json" // generated once, reused
	logFile   = "hoard.log"        // the detached process's output
	logsDir   = "logs"             // every component's log (componentLogs)
)

// platformLogs routes the platform's components (package rig names them)
// to their files under DIR/logs; the platform's store client logs with
// the controller.
var platformLogs = map[string]string{"controller": "controller", "store": "controller", "agent": "agent", "sandbox": "agent"}

// nodesLogs routes the components of `hoard up --nodes` (package rig
// names them; each node's agent writes its own file in its directory).
var nodesLogs = map[string]string{"controller": "controller", "store": "controller", "etcd": "etcd", "minio": "minio",
	"hostnet": "hostnet", "netshape": "netshape"}

type upFlags struct {
	dir, listen, metricsListen, storeListen, region, logLevel string
	peerListen, peerAdvertise                                 string
	controllerListen, examples                                string
	cachelets                                                 int
	detach, noPlatform, demo, insecureSandbox                 bool
	diskBudget                                                int64
	tls                                                       bool
	demoScale                                                 float64
	cache                                                     cacheFlags
	nodesFlags
}

// tlsRenewCheck is how often `hoard up --tls` checks its certificates
// for renewal (a third of 90 days before they expire).
const tlsRenewCheck = 6 * time.Hour

// upApp is the application `hoard up`'s cachelets belong to.
const upApp = "default"

// runUp starts MinIO on loopback with its data under --dir, an embedded
// etcd for membership, and --cachelets cachelets of one application in
// front of MinIO sharing one ring; writes the connection settings to
// DIR/env; and serves until interrupted (or, with --detach, in the
// background until `hoard down`).
func runUp(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f upFlags
	fs.StringVar(&f.dir, "dir", ".hoard", "state directory: store data, credentials, env file, logs")
	fs.StringVar(&f.listen, "listen", "127.0.0.1:9200", "the first cachelet's S3 endpoint address; cachelet i listens on port+2i")
	fs.StringVar(&f.metricsListen, "metrics-listen", "127.0.0.1:9201", "the first cachelet's Prometheus /metrics address; cachelet i on port+2i")
	fs.StringVar(&f.peerListen, "peer-listen", "127.0.0.1:0", "the first cachelet's peer protocol address; cachelet i on port+i (port 0: free ports)")
	fs.StringVar(&f.peerAdvertise, "peer-advertise", "", "HOST:PORT the other cachelets dial to reach the first cachelet's peer listener, when that is not its --peer-listen address; cachelet i advertises port+i (default: each peer listener's address)")
	fs.IntVar(&f.cachelets, "cachelets", 1, "how many cachelets of the application to run, sharing one ring")
	fs.StringVar(&f.storeListen, "store-listen", "127.0.0.1:9300", "MinIO's address")
	fs.StringVar(&f.region, "region", "us-east-1", "region clients sign for")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error: the lowest level written to the components' logs in DIR/logs (errors also go to the terminal)")
	fs.BoolVar(&f.detach, "detach", false, "serve in the background; stop with `hoard down`")
	fs.StringVar(&f.controllerListen, "controller-listen", "127.0.0.1:9100", "the platform controller's API address (deploy, invoke, HTTP triggers)")
	fs.StringVar(&f.examples, "examples", "", "deploy every application under this directory (default: the examples/ of the hoard checkout, if any; \"none\" for none)")
	fs.BoolVar(&f.noPlatform, "no-platform", false, "run only MinIO, etcd and the cachelets: no controller, no agent, no applications")
	fs.Var((*byteSize)(&f.diskBudget), "disk-budget", "give each application a disk tier of this many bytes on each node (objects evicted from memory kept on disk, shared by the application's instances on the node); default: memory only")
	fs.BoolVar(&f.insecureSandbox, "insecure-sandbox", false, "where this host cannot jail functions (not root, no namespaces), run them unisolated instead of refusing to start (env HOARD_INSECURE_SANDBOX=on)")
	fs.BoolVar(&f.demo, "demo", false, "once up, prepare the examples' data, run a short workload against them and print a report")
	fs.Float64Var(&f.demoScale, "demo-scale", 1, "with --demo: scale of the examples' data (1 = the papers' sizes)")
	fs.BoolVar(&f.tls, "tls", false, "TLS on every listener (S3, peer, controller, agent, etcd, MinIO), with a local CA and certificates made under DIR/tls and reused across restarts; mutual TLS between the parts (docs/security.md)")
	f.cache.register(fs)
	f.nodesFlags.register(fs)
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
	if f.cachelets < 1 {
		return fmt.Errorf("%w: --cachelets must be at least 1", errUsage)
	}
	if f.nodes < 1 || f.nodes > hostnet.MaxNodes || f.nodes > 1 && (f.noPlatform || f.cachelets > 1) {
		return fmt.Errorf("%w: --nodes must be 1 to %d, and needs the platform (and no --cachelets)", errUsage, hostnet.MaxNodes)
	}
	dir, err := filepath.Abs(f.dir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if pid, ok := runningPID(dir); ok {
		return fmt.Errorf("hoard is already running from %s (pid %d); run `hoard down` first", dir, pid)
	}
	f.checkNodes(ctx, stdout)
	if f.detach {
		return detach(ctx, dir, args, stdout)
	}
	if err := serveUp(ctx, dir, f, stdout, stderr); err != nil {
		return fmt.Errorf("%w (the components' logs: %s)", err, filepath.Join(dir, logsDir))
	}
	return nil
}

func serveUp(ctx context.Context, dir string, f upFlags, stdout, stderr io.Writer) error {
	level, err := parseLogLevel(f.logLevel)
	if err != nil {
		return err
	}
	// Every component logs to its own file; the terminal gets the
	// progress lines, the banner and the demo's report.
	logs, err := newComponentLogs(filepath.Join(dir, logsDir), level, stderr)
	if err != nil {
		return err
	}
	defer logs.Close()
	creds, err := loadOrCreateCreds(filepath.Join(dir, credsFile))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, pidFile), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
		return err
	}
	defer os.Remove(filepath.Join(dir, pidFile))
	_ = os.Remove(filepath.Join(dir, envFile))
	var pkis *upTLS
	scheme := "http://"
	if f.tls {
		hosts := []string{}
		for _, a := range []string{f.listen, f.controllerListen, f.storeListen, f.peerListen} {
			if h, _, err := net.SplitHostPort(a); err == nil {
				hosts = append(hosts, h)
			}
		}
		if pkis, err = newUpTLS(dir, hosts...); err != nil {
			return fmt.Errorf("TLS: %w", err)
		}
		scheme = "https://"
	}
	if f.nodes > 1 {
		// Renewed at each start: rig.StartNodes names the bridge in
		// certificates this process's renewal would not.
		return serveNodes(ctx, dir, f, creds, pkis, logs.router(nodesLogs, "controller"), stdout)
	}
	if pkis != nil {
		defer pkis.renewEvery(ctx, tlsRenewCheck, logs.logger("controller"))()
	}

	bin, err := localstore.FindBinary(localstore.MinIOBinary)
	if err != nil {
		return err
	}
	// The controller's address is bound first: MinIO is started with a
	// webhook to it, so objects written to the store directly fire
	// triggers too.
	var controllerLn net.Listener
	var minioEnv []string
	// MinIO posts events with a token of its own, good for nothing else
	// (it is in MinIO's environment); a fresh one at every start.
	eventsToken := rand.Text()
	if !f.noPlatform {
		if controllerLn, err = net.Listen("tcp", f.controllerListen); err != nil {
			return fmt.Errorf("the controller's address: %w", err)
		}
		defer controllerLn.Close()
		minioEnv = rig.MinIOWebhookEnv(scheme+controllerLn.Addr().String(), eventsToken, filepath.Join(dir, "minio-events"))
		if pkis != nil {
			minioEnv = append(minioEnv, pkis.minioEnv()...)
		}
	}
	fmt.Fprintf(stdout, "starting MinIO on %s (data in %s, logs in %s)\n", f.storeListen, filepath.Join(dir, "minio"), filepath.Join(dir, logsDir))
	startCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	mcfg := localstore.Config{
		Binary: bin, DataDir: filepath.Join(dir, "minio"), Addr: f.storeListen,
		AccessKey: creds.StoreAccessKey, SecretKey: creds.StoreSecretKey,
		LogFile: filepath.Join(dir, logsDir, "minio.log"), Logger: logs.logger("minio"),
		Env: minioEnv,
	}
	if pkis != nil {
		mcfg.TLS = pkis.store
	}
	minio, err := localstore.StartMinIO(startCtx, mcfg)
	if err != nil {
		return fmt.Errorf("start MinIO: %w", err)
	}
	defer minio.Close()

	// The application's membership lives in an embedded etcd, as an
	// application's would in a production etcd cluster.
	fmt.Fprintf(stdout, "starting etcd (data in %s)\n", filepath.Join(dir, "etcd"))
	ecfg := etcdembed.Config{Dir: dir, Logger: logs.logger("etcd")}
	var etcdTLS *tls.Config
	if pkis != nil {
		ecfg.TLS = &etcdembed.TLSFiles{Cert: pkis.etcd.Cert, Key: pkis.etcd.Key, CA: pkis.etcd.CA}
		if etcdTLS, err = pkis.etcdClient(); err != nil {
			return err
		}
	}
	etcd, err := etcdembed.Start(startCtx, ecfg)
	if err != nil {
		return fmt.Errorf("start etcd: %w", err)
	}
	defer etcd.Close()
	root := etcdauth.Credentials{Username: etcdauth.Root, Password: creds.EtcdRootPassword}
	if err := etcdauth.EnableTLS(startCtx, etcd.Endpoints(), etcdTLS, root.Password); err != nil {
		return fmt.Errorf("etcd authentication: %w", err)
	}
	// hoard up's own cachelets live in this process, which holds root
	// anyway.
	reg, err := etcdmembership.New(etcdmembership.Config{Endpoints: etcd.Endpoints(), Username: root.Username, Password: root.Password,
		TLS: etcdTLS, Logger: logs.logger("etcd").With("component", "membership")})
	if err != nil {
		return err
	}
	defer reg.Close()

	var ins []*instance.Instance
	closeAll := func(ctx context.Context) error {
		var errs []error
		for _, in := range ins {
			errs = append(errs, in.Close(ctx))
		}
		return errors.Join(errs...)
	}
	for i := range f.cachelets {
		cfg := instance.Config{
			Region: f.region, AccessKey: creds.AccessKey, SecretKey: creds.SecretKey,
			Registry: reg, App: upApp, Secret: []byte(creds.PeerSecret),
		}
		if cfg.Listen, err = offsetPort(f.listen, 2*i); err != nil {
			return fmt.Errorf("%w: --listen: %v", errUsage, err)
		}
		if cfg.MetricsListen, err = offsetPort(f.metricsListen, 2*i); err != nil {
			return fmt.Errorf("%w: --metrics-listen: %v", errUsage, err)
		}
		if cfg.PeerListen, err = offsetPort(f.peerListen, i); err != nil {
			return fmt.Errorf("%w: --peer-listen: %v", errUsage, err)
		}
		if f.peerAdvertise != "" {
			if cfg.PeerAdvertise, err = offsetPort(f.peerAdvertise, i); err != nil {
				return fmt.Errorf("%w: --peer-advertise: %v", errUsage, err)
			}
		}
		cfg.Store.Endpoint = minio.Endpoint()
		cfg.Store.AccessKey, cfg.Store.SecretKey = creds.StoreAccessKey, creds.StoreSecretKey
		if err := f.cache.apply(&cfg); err != nil {
			_ = closeAll(context.Background())
			return err
		}
		if pkis != nil {
			if err := pkis.cachelet(&cfg, upApp, i); err != nil {
				_ = closeAll(context.Background())
				return fmt.Errorf("TLS: %w", err)
			}
		}
		in, err := instance.Start(startCtx, cfg, logs.logger(fmt.Sprintf("cachelet-%d", i)))
		if err != nil {
			_ = closeAll(context.Background())
			return fmt.Errorf("start cachelet %d: %w", i, err)
		}
		ins = append(ins, in)
	}
	var plat *rig.Platform
	if !f.noPlatform {
		fmt.Fprintln(stdout, "starting the platform: controller and node agent")
		rcfg := rig.Config{
			Controller: true, ControllerListener: controllerLn, Agent: true, Dir: dir, LogDir: filepath.Join(dir, logsDir, "instances"),
			EtcdEndpoints: etcd.Endpoints(), EtcdCredentials: root, StoreEndpoint: minio.Endpoint(),
			StoreAccessKey: creds.StoreAccessKey, StoreSecretKey: creds.StoreSecretKey, Region: f.region,
			ControllerToken: creds.ControllerToken, AgentToken: creds.AgentToken, StoreNotifications: true, StoreIdentities: "minio", StoreEventsToken: eventsToken,
			InsecureSandbox: f.insecureSandbox, DiskBudget: f.diskBudget,
		}
		if pkis != nil {
			rcfg.TLS = pkis.rig()
		}
		plat, err = rig.Start(startCtx, rcfg, logs.router(platformLogs, "controller"))
		if err != nil {
			_ = closeAll(context.Background())
			return fmt.Errorf("start the platform: %w", err)
		}
		defer plat.Close()
		if err := deployExamples(ctx, plat, f.examples, stdout); err != nil {
			_ = closeAll(context.Background())
			return err
		}
	}
	var endpoints, metricsURLs []string
	for _, in := range ins {
		endpoints = append(endpoints, in.Endpoint())
		metricsURLs = append(metricsURLs, in.MetricsURL())
	}
	first := ins[0]
	env := fmt.Sprintf("AWS_ENDPOINT_URL=%s\nAWS_ACCESS_KEY_ID=%s\nAWS_SECRET_ACCESS_KEY=%s\nAWS_DEFAULT_REGION=%s\nHOARD_STORE_ENDPOINT=%s\nHOARD_METRICS_URL=%s\nHOARD_ENDPOINTS=%s\nHOARD_METRICS_URLS=%s\n",
		first.Endpoint(), creds.AccessKey, creds.SecretKey, f.region, minio.Endpoint(), first.MetricsURL(),
		strings.Join(endpoints, ","), strings.Join(metricsURLs, ","))
	if plat != nil {
		env += fmt.Sprintf("HOARD_CONTROLLER_URL=%s\nHOARD_CONTROLLER_TOKEN=%s\n", plat.ControllerURL, creds.ControllerToken)
	}
	if pkis != nil {
		env += pkis.env()
	}
	if err := control.WriteFileAtomic(filepath.Join(dir, envFile), []byte(env), 0o600); err != nil {
		_ = closeAll(context.Background())
		return err
	}
	defer os.Remove(filepath.Join(dir, envFile))
	var banner strings.Builder
	fmt.Fprintf(&banner, "\nhoard is up.\n  S3 endpoint:  %s\n  access key:   %s\n  secret key:   %s\n  region:       %s\n  store:        %s (MinIO)\n  metrics:      %s\n",
		first.Endpoint(), creds.AccessKey, creds.SecretKey, f.region, minio.Endpoint(), first.MetricsURL())
	fmt.Fprintf(&banner, "  membership:   etcd %s, application %q\n  cachelets:    %d\n", strings.Join(etcd.Endpoints(), ","), upApp, len(ins))
	for i, in := range ins {
		fmt.Fprintf(&banner, "    %d  %-20s S3 %s  metrics %s  peer %s\n", i, in.ID(), in.Endpoint(), in.MetricsURL(), in.PeerAddr())
	}
	if plat != nil {
		fmt.Fprintf(&banner, "  platform:     controller %s (metrics %s/metrics, admin token), agent %s, sandboxes %s\n",
			plat.ControllerURL, plat.ControllerURL, plat.AgentURL, plat.Agent.SandboxMode())
		for _, a := range plat.Controller.Apps() {
			fmt.Fprintf(&banner, "    app %-16s functions %s\n", a.Name, strings.Join(a.Functions, ", "))
		}
		fmt.Fprintf(&banner, "  deploy yours: hoard deploy DIR; hoard invoke APP FUNCTION --data '{...}'; hoard apps; hoard logs APP\n")
		fmt.Fprintf(&banner, "  dashboard:    %s/dashboard/ (log in with the link `hoard dashboard --dir %s` prints)\n", plat.ControllerURL, dir)
	}
	logsCmd := "hoard logs"
	if f.dir != ".hoard" {
		logsCmd += " --dir " + f.dir
	}
	fmt.Fprintf(&banner, "  logs:         %s (%s --component controller|agent|cachelet|minio|etcd [-f])\n", filepath.Join(dir, logsDir), logsCmd)
	fmt.Fprintf(&banner, "\nPoint any S3 client at it:  set -a; . %s; set +a\nStop with Ctrl-C.\n", filepath.Join(dir, envFile))
	fmt.Fprint(stdout, banner.String())
	if plat != nil && f.demo {
		if err := runDemo(ctx, plat, f.demoScale, stdout); err != nil {
			fmt.Fprintf(stdout, "the demo failed: %v\n", err)
		}
		fmt.Fprintln(stdout, "\nStill serving; stop with Ctrl-C.")
	}

	<-ctx.Done()
	fmt.Fprintln(stdout, "shutting down")
	logs.Quiet()
	sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer scancel()
	// The platform first (its instances' cachelets leave their rings),
	// then the cachelets, membership, etcd, MinIO.
	if plat != nil {
		plat.Close()
	}
	err = closeAll(sctx)
	err = errors.Join(err, reg.Close())
	etcd.Close()
	return errors.Join(err, minio.Close())
}

// offsetPort returns addr with its port raised by n; port 0 (any free
// port) stays 0.
func offsetPort(addr string, n int) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return "", fmt.Errorf("bad port %q", port)
	}
	if p == 0 || n == 0 {
		return addr, nil
	}
	if p+n > 65535 {
		return "", fmt.Errorf("port %d+%d is out of range", p, n)
	}
	return net.JoinHostPort(host, strconv.Itoa(p+n)), nil
}

// detach re-runs `hoard up` in a new session with its output in the log
// file, waits for it to be ready, and prints its connection settings.
func detach(ctx context.Context, dir string, args []string, stdout io.Writer) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	var childArgs []string
	for _, a := range args {
		if a != "--detach" && a != "-detach" && a != "--detach=true" && a != "-detach=true" {
			childArgs = append(childArgs, a)
		}
	}
	childArgs = append([]string{"up", "--dir", dir}, childArgs...)
	logPath := filepath.Join(dir, logFile)
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer lf.Close()
	_ = os.Remove(filepath.Join(dir, envFile))
	cmd := exec.Command(exe, childArgs...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.NewTimer(3 * time.Minute)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-exited:
			return fmt.Errorf("hoard up exited before it was ready (%v); see %s:\n%s", err, logPath, tailFile(logPath, 2048))
		case <-deadline.C:
			_ = cmd.Process.Signal(syscall.SIGTERM)
			return fmt.Errorf("hoard up was not ready after 3 minutes; see %s", logPath)
		case <-ctx.Done():
			_ = cmd.Process.Signal(syscall.SIGTERM)
			return ctx.Err()
		case <-tick.C:
			env, err := os.ReadFile(filepath.Join(dir, envFile))
			if err != nil {
				continue
			}
			fmt.Fprintf(stdout, "hoard is up in the background (pid %d, log %s).\n\n%s\nUse it:  set -a; . %s; set +a\nStop it: hoard down --dir %s\n",
				cmd.Process.Pid, logPath, env, filepath.Join(dir, envFile), dir)
			_ = cmd.Process.Release()
			return nil
		}
	}
}

type credentials struct {
	AccessKey      string `json:"access_key"`
	SecretKey      string `json:"secret_key"`
	StoreAccessKey string `json:"store_access_key"`
	StoreSecretKey string `json:"store_secret_key"`
	// PeerSecret signs the peer protocol between the cachelets of `hoard
	// up`'s application. Files written before it existed get one on the
	// next start.
	PeerSecret string `json:"peer_secret"`
	// ControllerToken (the admin token) authenticates clients to the
	// platform's controller; AgentToken the controller to the agent.
	ControllerToken string `json:"controller_token"`
	AgentToken      string `json:"agent_token"`
	// EtcdRootPassword is the embedded etcd's root password (package
	// etcdauth): the controller and `hoard up` sign in as root, agents
	// and instances as users of their own. It lives only in this file
	// (mode 0600) and etcd's data.
	EtcdRootPassword string `json:"etcd_root_password"`
}

// loadOrCreateCreds keeps one set of generated credentials per state
// directory, so the env file stays valid across restarts.
func loadOrCreateCreds(path string) (credentials, error) {
	var c credentials
	data, err := os.ReadFile(path)
	if err == nil {
		if err := json.Unmarshal(data, &c); err != nil || c.AccessKey == "" || c.SecretKey == "" || c.StoreAccessKey == "" || c.StoreSecretKey == "" {
			return c, fmt.Errorf("%s is damaged; remove it to generate new credentials", path)
		}
		if c.PeerSecret != "" && c.ControllerToken != "" && c.AgentToken != "" && c.EtcdRootPassword != "" {
			return c, nil
		}
		if c.EtcdRootPassword == "" {
			c.EtcdRootPassword = etcdauth.NewPassword()
		}
		if c.PeerSecret == "" {
			c.PeerSecret = rand.Text()
		}
		if c.ControllerToken == "" {
			c.ControllerToken = rand.Text()
		}
		if c.AgentToken == "" {
			c.AgentToken = rand.Text()
		}
		return c, saveCreds(path, c)
	}
	if !errors.Is(err, os.ErrNotExist) {
		return c, err
	}
	c = credentials{
		// crypto/rand.Text: 26 base32 characters, 128 random bits.
		AccessKey: "HOARD" + rand.Text()[:16], SecretKey: rand.Text(),
		StoreAccessKey: "store" + strings.ToLower(rand.Text()[:12]), StoreSecretKey: rand.Text(),
		PeerSecret: rand.Text(), ControllerToken: rand.Text(), AgentToken: rand.Text(),
		EtcdRootPassword: etcdauth.NewPassword(),
	}
	return c, saveCreds(path, c)
}

func saveCreds(path string, c credentials) error {
	data, _ := json.MarshalIndent(c, "", "  ")
	return control.WriteFileAtomic(path, append(data, '\n'), 0o600)
}

// runningPID returns the pid of a live `hoard up` serving from dir.
func runningPID(dir string) (int, bool) {
	data, err := os.ReadFile(filepath.Join(dir, pidFile))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return 0, false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !bytes.Contains(cmdline, []byte("hoard")) {
		return 0, false // stale pid file
	}
	return pid, alive(pid)
}

// alive reports whether pid is a running (not zombie) process.
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2] != 'Z' && stat[i+2] != 'X'
	}
	return true
}

func tailFile(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > n {
		_, _ = f.Seek(-n, io.SeekEnd)
	}
	data, _ := io.ReadAll(f)
	return string(data)
}
