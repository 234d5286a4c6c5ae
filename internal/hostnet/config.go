// Package hostnet makes several hosts out of one Linux machine: a network
// namespace per node and one for the store, each joined to a bridge of
// its own by a veth pair whose two ends are shaped with tc's token bucket
// filter (tbf), so that every node and the store sit behind a link of
// known bandwidth. `hoard up --nodes N` and the rig's multi-node tests
// run one node agent in each node's namespace; ADR 13 records the design.
//
// Everything is done with iproute2 (`ip`, `tc`) under a deadline per
// command. The plan of commands is computed without I/O (Config.Plan), so
// it can be read and tested; Up runs it. Names carry a prefix and a run
// id, and every run records what it made in a registry directory, so
// that the next run removes what a crashed one left behind and never
// touches devices of another prefix or of a live run.
package hostnet

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"time"
)

// Defaults of Config.
const (
	// DefaultPrefix starts every device and namespace name ("hn" for
	// hoard nodes); a test or a second `hoard up` can pick another so
	// that runs never clean up each other's devices.
	DefaultPrefix = "hn"
	// DefaultNodeRate is each node's link, each way: Faa$T's 500 MB/s
	// between instances (§6.1, ADR 10's faast peer link).
	DefaultNodeRate = 500_000_000
	// DefaultStoreRate is the store's link, each way, shared by every
	// connection to the store: Faa$T's 90 MB/s to remote storage.
	DefaultStoreRate = 90_000_000
	// DefaultRegistryDir holds one record per live run (tmpfs: emptied
	// on boot, when every namespace and device is gone anyway).
	DefaultRegistryDir = "/run/hoard-hostnet"
	// DefaultCommandTimeout bounds each ip/tc command.
	DefaultCommandTimeout = 10 * time.Second
	// subnetBase is where automatic subnets are taken from:
	// 10.213.0.0/24 to 10.213.255.0/24, the first one no interface of
	// the machine and no live run uses.
	subnetBase = "10.213.0.0/16"
	// MaxNodes bounds Config.Nodes: node addresses are .10 to .10+N-1 of
	// a /24, and names carry the node's index in two digits.
	MaxNodes = 64
)

// Config describes the nodes to make. The zero value of every field but
// Nodes selects its default.
type Config struct {
	// Nodes is how many node namespaces to make (1 to MaxNodes).
	Nodes int
	// Store adds a namespace for the store, behind its own link.
	Store bool
	// Prefix starts every name: 1-4 of [a-z]. Default DefaultPrefix.
	Prefix string
	// ID names the run: 4 of [0-9a-f]. Default random.
	ID string
	// Subnet is the /24 the bridge and the namespaces take their
	// addresses from: the bridge (the host's side) .1, the store .2, node
	// i .10+i. Default: the first 10.213.X.0/24 not in use on the machine.
	Subnet netip.Prefix
	// NodeRate and StoreRate are the links' bandwidths in bytes per
	// second, each way. Defaults DefaultNodeRate and DefaultStoreRate; a
	// negative rate leaves that link unshaped.
	NodeRate, StoreRate int64
	// NodeInRate, when set, caps what each node receives apart from what
	// it sends (NodeRate then caps its sending only): a negative rate
	// leaves that direction unshaped. Default 0: NodeRate both ways.
	// A node whose readers take many senders' bytes at once (erasure-
	// coded reads) needs a downlink wider than one sender's uplink.
	NodeInRate int64
	// RegistryDir holds the records of live runs. Default
	// DefaultRegistryDir.
	RegistryDir string
	// CommandTimeout bounds each command. Default DefaultCommandTimeout.
	CommandTimeout time.Duration
}

var (
	prefixRE = regexp.MustCompile(`^[a-z]{1,4}$`)
	idRE     = regexp.MustCompile(`^[0-9a-f]{4}$`)
)

// withDefaults returns c with every default filled in; the subnet only
// when pick is true (Up picks it under the registry's lock).
func (c Config) withDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.ID == "" {
		var b [2]byte
		_, _ = rand.Read(b[:])
		c.ID = hex.EncodeToString(b[:])
	}
	if c.NodeRate == 0 {
		c.NodeRate = DefaultNodeRate
	}
	if c.StoreRate == 0 {
		c.StoreRate = DefaultStoreRate
	}
	if c.RegistryDir == "" {
		c.RegistryDir = DefaultRegistryDir
	}
	if c.CommandTimeout == 0 {
		c.CommandTimeout = DefaultCommandTimeout
	}
	return c
}

// Validate reports whether c can be used.
func (c Config) Validate() error {
	if c.Nodes < 1 || c.Nodes > MaxNodes {
		return fmt.Errorf("hostnet: Nodes must be 1 to %d, not %d", MaxNodes, c.Nodes)
	}
	if c.Prefix != "" && !prefixRE.MatchString(c.Prefix) {
		return fmt.Errorf("hostnet: Prefix %q: want 1-4 of a-z", c.Prefix)
	}
	if c.ID != "" && !idRE.MatchString(c.ID) {
		return fmt.Errorf("hostnet: ID %q: want 4 of 0-9a-f", c.ID)
	}
	if c.Subnet.IsValid() && (c.Subnet.Bits() != 24 || !c.Subnet.Addr().Is4() || c.Subnet.Masked() != c.Subnet) {
		return fmt.Errorf("hostnet: Subnet %s: want an IPv4 /24 such as 10.213.7.0/24", c.Subnet)
	}
	if c.CommandTimeout < 0 {
		return errors.New("hostnet: CommandTimeout must not be negative")
	}
	return nil
}

// Node is one namespace and its link.
type Node struct {
	// Name is the namespace's name (`ip netns exec NAME ...`).
	Name string
	// Addr is its address on the bridge.
	Addr netip.Addr
	// HostVeth is the veth end on the host (a bridge port); the other
	// end is eth0 inside the namespace.
	HostVeth string
	// Rate is the link's bandwidth in bytes per second each way, or -1;
	// InRate, when not 0, replaces it for what the node receives.
	Rate, InRate int64
}

// inRate is the bandwidth of what n receives: InRate when set, else Rate.
func (n Node) inRate() int64 {
	if n.InRate != 0 {
		return n.InRate
	}
	return n.Rate
}

// Layout is the names and addresses a Config gives.
type Layout struct {
	Bridge  string
	Gateway netip.Addr // the bridge's (the host's) address
	Subnet  netip.Prefix
	Nodes   []Node
	Store   *Node
}

// Layout names the bridge, namespaces and devices of c, which must be
// valid and have a run ID and a subnet.
func (c Config) Layout() Layout {
	base := c.Prefix + c.ID
	a := c.Subnet.Addr().As4()
	at := func(last byte) netip.Addr { return netip.AddrFrom4([4]byte{a[0], a[1], a[2], last}) }
	l := Layout{Bridge: base + "br", Gateway: at(1), Subnet: c.Subnet}
	for i := range c.Nodes {
		l.Nodes = append(l.Nodes, Node{Name: fmt.Sprintf("%s-n%d", base, i), Addr: at(byte(10 + i)),
			HostVeth: fmt.Sprintf("%sh%d", base, i), Rate: c.NodeRate, InRate: c.NodeInRate})
	}
	if c.Store {
		l.Store = &Node{Name: base + "-store", Addr: at(2), HostVeth: base + "hs", Rate: c.StoreRate}
	}
	return l
}

// all lists the store's namespace first, then the nodes'.
func (l Layout) all() []Node {
	var out []Node
	if l.Store != nil {
		out = append(out, *l.Store)
	}
	return append(out, l.Nodes...)
}

// Plan is the commands that make a layout (Up) and those that remove it
// (Down), each an argv.
type Plan struct {
	Up, Down [][]string
}

// Plan computes the commands for c's layout: no I/O.
func (l Layout) Plan() Plan {
	var p Plan
	up := func(args ...string) { p.Up = append(p.Up, args) }
	up("ip", "link", "add", l.Bridge, "type", "bridge")
	up("ip", "addr", "add", prefixAddr(l.Gateway, l.Subnet), "dev", l.Bridge)
	up("ip", "link", "set", l.Bridge, "up")
	for _, n := range l.all() {
		peer := n.HostVeth + "p"
		up("ip", "netns", "add", n.Name)
		up("ip", "-n", n.Name, "link", "set", "lo", "up")
		up("ip", "link", "add", n.HostVeth, "type", "veth", "peer", "name", peer)
		up("ip", "link", "set", peer, "netns", n.Name)
		up("ip", "-n", n.Name, "link", "set", peer, "name", "eth0")
		up("ip", "-n", n.Name, "addr", "add", prefixAddr(n.Addr, l.Subnet), "dev", "eth0")
		up("ip", "-n", n.Name, "link", "set", "eth0", "up")
		up("ip", "link", "set", n.HostVeth, "master", l.Bridge)
		up("ip", "link", "set", n.HostVeth, "up")
		// Into the node: the host end's egress; out of it: eth0's.
		if in := n.inRate(); in > 0 {
			up(append([]string{"tc", "qdisc", "replace", "dev", n.HostVeth, "root"}, TBF(in)...)...)
		}
		if n.Rate > 0 {
			up(append([]string{"tc", "-n", n.Name, "qdisc", "replace", "dev", "eth0", "root"}, TBF(n.Rate)...)...)
		}
	}
	// Down: namespaces first (their veth ends go with them, and the host
	// ends with their peers), then the bridge. Each step is tried even
	// when an earlier one failed.
	for _, n := range l.all() {
		p.Down = append(p.Down, []string{"ip", "netns", "del", n.Name})
	}
	for _, n := range l.all() {
		p.Down = append(p.Down, []string{"ip", "link", "del", n.HostVeth})
	}
	p.Down = append(p.Down, []string{"ip", "link", "del", l.Bridge})
	return p
}

func prefixAddr(a netip.Addr, p netip.Prefix) string {
	return netip.PrefixFrom(a, p.Bits()).String()
}

// TBF is the tc arguments of a token bucket filter of rate bytes per
// second: the rate in bits per second (tc's "bps" would be bytes), a
// bucket of 10 ms at that rate (at least 64 KiB, so that one TSO segment
// fits), and 50 ms of queue before packets are dropped.
func TBF(rate int64) []string {
	burst := max(rate/100, 64<<10)
	return []string{"tbf", "rate", fmt.Sprintf("%dbit", rate*8), "burst", fmt.Sprint(burst), "latency", "50ms"}
}
