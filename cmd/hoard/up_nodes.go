package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hoard-io/hoard/internal/control"
	"github.com/hoard-io/hoard/internal/hostnet"
	"github.com/hoard-io/hoard/internal/rig"
)

// netFile in the state directory names the namespace prefix of a `hoard
// up --nodes` run, so that `hoard down` can remove what a killed run left.
const netFile = "net-prefix"

// nodesFlags are `hoard up`'s multi-node settings.
type nodesFlags struct {
	nodes               int
	nodeRate, storeRate int
	storeLatency        time.Duration
	netPrefix           string
}

func (n *nodesFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&n.nodes, "nodes", 1, "run this many node agents, each in its own network namespace behind a shaped link (needs root; falls back to one node)")
	fs.IntVar(&n.nodeRate, "node-rate", hostnet.DefaultNodeRate/1e6, "with --nodes: each node's link in MB/s each way (0: unshaped)")
	fs.IntVar(&n.storeRate, "store-rate", hostnet.DefaultStoreRate/1e6, "with --nodes: the store's link in MB/s each way, shared by all its connections (0: unshaped)")
	fs.DurationVar(&n.storeLatency, "store-latency", 0, "with --nodes: latency added each way to the store, by a toxiproxy in front of it (whole milliseconds; 0: none)")
	fs.StringVar(&n.netPrefix, "net-prefix", hostnet.DefaultPrefix, "with --nodes: 1-4 letters starting the names of the namespaces, veths and bridge")
}

// checkNodes says, in one line, why --nodes falls back to one node, and
// makes it so.
func (n *nodesFlags) checkNodes(ctx context.Context, stdout io.Writer) {
	if n.nodes <= 1 {
		return
	}
	if err := hostnet.Available(ctx); err != nil {
		fmt.Fprintf(stdout, "hoard up: --nodes %d: %v; running one node\n", n.nodes, err)
		n.nodes = 1
	}
}

func rateOf(mbps int) int64 {
	if mbps <= 0 {
		return -1
	}
	return int64(mbps) * 1_000_000
}

// serveNodes is `hoard up --nodes N`: rig.StartNodes, the examples, the
// env file, and serving until interrupted.
func serveNodes(ctx context.Context, dir string, f upFlags, creds credentials, pkis *upTLS, log *slog.Logger, stdout io.Writer) error {
	_, storePort, err := net.SplitHostPort(f.storeListen)
	if err != nil {
		return fmt.Errorf("%w: --store-listen: %v", errUsage, err)
	}
	port, _ := strconv.Atoi(storePort)
	controllerLn, err := net.Listen("tcp", f.controllerListen)
	if err != nil {
		return fmt.Errorf("the controller's address: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, netFile), []byte(f.nodesFlags.netPrefix+"\n"), 0o600); err != nil {
		controllerLn.Close()
		return err
	}
	fmt.Fprintf(stdout, "starting %d nodes: namespaces %s*, the store (MinIO) in its own, etcd and the controller on the bridge\n", f.nodes, f.netPrefix)
	startCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	ncfg := rig.NodesConfig{
		Net: hostnet.Config{Nodes: f.nodes, Prefix: f.netPrefix, NodeRate: rateOf(f.nodeRate), StoreRate: rateOf(f.storeRate)},
		Dir: dir, ControllerListener: controllerLn, StorePort: port,
		StoreAccessKey: creds.StoreAccessKey, StoreSecretKey: creds.StoreSecretKey, Region: f.region,
		ControllerToken: creds.ControllerToken, AgentToken: creds.AgentToken, StoreLatency: f.storeLatency,
		EtcdRootPassword: creds.EtcdRootPassword, DiskBudget: f.diskBudget,
	}
	if pkis != nil {
		ncfg.TLS = pkis.ca
	}
	nodes, err := rig.StartNodes(startCtx, ncfg, log)
	if err != nil {
		controllerLn.Close()
		return fmt.Errorf("start the nodes: %w", err)
	}
	defer nodes.Close()
	if err := deployExamples(ctx, nodes.Platform, f.examples, stdout); err != nil {
		return err
	}
	env := fmt.Sprintf("AWS_DEFAULT_REGION=%s\nHOARD_STORE_ENDPOINT=%s\nHOARD_CONTROLLER_URL=%s\nHOARD_CONTROLLER_TOKEN=%s\nHOARD_NODES=%d\n",
		f.region, nodes.StoreEndpoint, nodes.ControllerURL, creds.ControllerToken, len(nodes.Agents))
	if pkis != nil {
		env += pkis.env()
	}
	if err := control.WriteFileAtomic(filepath.Join(dir, envFile), []byte(env), 0o600); err != nil {
		return err
	}
	defer os.Remove(filepath.Join(dir, envFile))
	var b strings.Builder
	hn := nodes.Net
	latency := ""
	if nodes.StoreEndpoint != nodes.Store.Endpoint() {
		latency = fmt.Sprintf(", through %s adding %s each way", nodes.StoreEndpoint, f.storeLatency)
	}
	fmt.Fprintf(&b, "\nhoard is up on %d nodes.\n  controller:   %s (nodes reach it at %s)\n  store:        %s (MinIO in %s, link %s%s)\n  membership:   etcd %s\n  bridge:       %s %s\n  nodes:\n",
		len(nodes.Agents), nodes.ControllerURL, nodes.NodesControllerURL, nodes.Store.Endpoint(), hn.Store.Name, rateText(hn.Store.Rate), latency,
		strings.Join(nodes.Etcd.Endpoints(), ","), hn.Bridge, hn.Subnet)
	for _, a := range nodes.Agents {
		fmt.Fprintf(&b, "    %-7s namespace %-14s agent %-24s link %s  log %s\n", a.ID, a.Node.Name, a.URL, rateText(a.Node.Rate), a.LogPath)
	}
	for _, a := range nodes.Controller.Apps() {
		fmt.Fprintf(&b, "  app %-16s functions %s\n", a.Name, strings.Join(a.Functions, ", "))
	}
	fmt.Fprintf(&b, "  deploy yours: hoard deploy DIR; hoard invoke APP FUNCTION --data '{...}'; hoard apps; hoard logs APP\n")
	fmt.Fprintf(&b, "  see a link:   ip netns exec %s tc qdisc show dev eth0\n", hn.Nodes[0].Name)
	fmt.Fprintf(&b, "\nThe controller's address and token are in %s.\nStop with Ctrl-C.\n", filepath.Join(dir, envFile))
	fmt.Fprint(stdout, b.String())
	if f.demo {
		if err := runDemo(ctx, nodes.Platform, f.demoScale, stdout); err != nil {
			fmt.Fprintf(stdout, "the demo failed: %v\n", err)
		}
		fmt.Fprintln(stdout, "\nStill serving; stop with Ctrl-C.")
	}
	<-ctx.Done()
	fmt.Fprintln(stdout, "shutting down: the controller, the node agents (unloading their instances), the store, etcd, the namespaces")
	nodes.Close()
	_ = os.Remove(filepath.Join(dir, netFile))
	return nil
}

func rateText(r int64) string {
	if r <= 0 {
		return "unshaped"
	}
	return fmt.Sprintf("%d MB/s", r/1_000_000)
}

// sweepNodes removes the namespaces and devices a killed `hoard up
// --nodes` from dir left behind (hostnet.Sweep: runs whose process is
// gone).
func sweepNodes(ctx context.Context, dir string, stdout io.Writer) error {
	b, err := os.ReadFile(filepath.Join(dir, netFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	n, err := hostnet.Sweep(ctx, "", strings.TrimSpace(string(b)), nil)
	if err != nil {
		return err
	}
	if n > 0 {
		fmt.Fprintf(stdout, "removed the namespaces and devices of %d stopped run(s)\n", n)
	}
	return os.Remove(filepath.Join(dir, netFile))
}
