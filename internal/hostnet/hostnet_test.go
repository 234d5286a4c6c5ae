package hostnet

import (
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"defaults", Config{Nodes: 3}, true},
		{"no nodes", Config{}, false},
		{"too many", Config{Nodes: MaxNodes + 1}, false},
		{"prefix", Config{Nodes: 1, Prefix: "hoard"}, false},
		{"prefix chars", Config{Nodes: 1, Prefix: "h-"}, false},
		{"id", Config{Nodes: 1, ID: "xyz1"}, false},
		{"subnet /16", Config{Nodes: 1, Subnet: netip.MustParsePrefix("10.213.0.0/16")}, false},
		{"subnet unmasked", Config{Nodes: 1, Subnet: netip.MustParsePrefix("10.213.0.5/24")}, false},
		{"subnet", Config{Nodes: 1, Subnet: netip.MustParsePrefix("10.213.9.0/24")}, true},
		{"timeout", Config{Nodes: 1, CommandTimeout: -1}, false},
	} {
		if err := tc.cfg.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: Validate() = %v", tc.name, err)
		}
	}
}

func testConfig() Config {
	return Config{Nodes: 3, Store: true, Prefix: "hn", ID: "00ab", Subnet: netip.MustParsePrefix("10.213.7.0/24"),
		NodeRate: 100_000_000, StoreRate: 10_000_000}.withDefaults()
}

func TestLayout(t *testing.T) {
	l := testConfig().Layout()
	if l.Bridge != "hn00abbr" || l.Gateway.String() != "10.213.7.1" {
		t.Errorf("bridge %s gateway %s", l.Bridge, l.Gateway)
	}
	if l.Store == nil || l.Store.Name != "hn00ab-store" || l.Store.Addr.String() != "10.213.7.2" || l.Store.HostVeth != "hn00abhs" {
		t.Errorf("store %+v", l.Store)
	}
	for i, n := range l.Nodes {
		want := Node{Name: "hn00ab-n" + string(rune('0'+i)), Addr: netip.AddrFrom4([4]byte{10, 213, 7, byte(10 + i)}),
			HostVeth: "hn00abh" + string(rune('0'+i)), Rate: 100_000_000}
		if n != want {
			t.Errorf("node %d: %+v, want %+v", i, n, want)
		}
	}
	// Interface names must fit IFNAMSIZ (15), with the peer's "p".
	long := Config{Nodes: MaxNodes, Store: true, Prefix: "abcd", ID: "ffff", Subnet: netip.MustParsePrefix("10.0.0.0/24")}.Layout()
	for _, n := range long.all() {
		if len(n.HostVeth)+1 > 15 {
			t.Errorf("%s+p is longer than 15", n.HostVeth)
		}
	}
}

// TestPlan reads the commands for three nodes and a store as a person
// would type them.
func TestPlan(t *testing.T) {
	p := testConfig().Layout().Plan()
	var got []string
	for _, argv := range p.Up {
		got = append(got, strings.Join(argv, " "))
	}
	want := []string{
		"ip link add hn00abbr type bridge",
		"ip addr add 10.213.7.1/24 dev hn00abbr",
		"ip link set hn00abbr up",
	}
	link := func(ns, veth, addr, tbf string) []string {
		return []string{
			"ip netns add " + ns,
			"ip -n " + ns + " link set lo up",
			"ip link add " + veth + " type veth peer name " + veth + "p",
			"ip link set " + veth + "p netns " + ns,
			"ip -n " + ns + " link set " + veth + "p name eth0",
			"ip -n " + ns + " addr add " + addr + " dev eth0",
			"ip -n " + ns + " link set eth0 up",
			"ip link set " + veth + " master hn00abbr",
			"ip link set " + veth + " up",
			"tc qdisc replace dev " + veth + " root " + tbf,
			"tc -n " + ns + " qdisc replace dev eth0 root " + tbf,
		}
	}
	want = append(want, link("hn00ab-store", "hn00abhs", "10.213.7.2/24", "tbf rate 80000000bit burst 100000 latency 50ms")...)
	for i, a := range []string{"10", "11", "12"} {
		d := string(rune('0' + i))
		want = append(want, link("hn00ab-n"+d, "hn00abh"+d, "10.213.7."+a+"/24", "tbf rate 800000000bit burst 1000000 latency 50ms")...)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("up plan:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var down []string
	for _, argv := range p.Down {
		down = append(down, strings.Join(argv, " "))
	}
	wantDown := "ip netns del hn00ab-store|ip netns del hn00ab-n0|ip netns del hn00ab-n1|ip netns del hn00ab-n2|" +
		"ip link del hn00abhs|ip link del hn00abh0|ip link del hn00abh1|ip link del hn00abh2|ip link del hn00abbr"
	if strings.Join(down, "|") != wantDown {
		t.Errorf("down plan %q", strings.Join(down, "|"))
	}
	// A node's downlink apart from its uplink: the host end's qdisc
	// (into the node) takes NodeInRate; unshaped, it has none.
	for _, tc := range []struct {
		in   int64
		want []string
	}{
		{25_000_000, []string{"tc qdisc replace dev hn00abh0 root tbf rate 200000000bit burst 250000 latency 50ms",
			"tc -n hn00ab-n0 qdisc replace dev eth0 root tbf rate 800000000bit burst 1000000 latency 50ms"}},
		{-1, []string{"tc -n hn00ab-n0 qdisc replace dev eth0 root tbf rate 800000000bit burst 1000000 latency 50ms"}},
	} {
		cfg := testConfig()
		cfg.Nodes, cfg.Store, cfg.NodeInRate = 1, false, tc.in
		var tcs []string
		for _, argv := range cfg.Layout().Plan().Up {
			if argv[0] == "tc" {
				tcs = append(tcs, strings.Join(argv, " "))
			}
		}
		if strings.Join(tcs, "\n") != strings.Join(tc.want, "\n") {
			t.Errorf("NodeInRate %d: qdiscs\n%s\nwant\n%s", tc.in, strings.Join(tcs, "\n"), strings.Join(tc.want, "\n"))
		}
	}
	// An unshaped link has no qdisc.
	cfg := testConfig()
	cfg.NodeRate, cfg.Store = -1, false
	for _, argv := range cfg.Layout().Plan().Up {
		if argv[0] == "tc" {
			t.Errorf("unshaped plan has %v", argv)
		}
	}
}

func TestTBF(t *testing.T) {
	if got := strings.Join(TBF(1_000_000), " "); got != "tbf rate 8000000bit burst 65536 latency 50ms" {
		t.Errorf("TBF(1 MB/s) = %s", got)
	}
}

// fakeRunner records commands; "ip link show" fails (no such device) and
// "ip -o -4 addr show" lists addresses.
type fakeRunner struct {
	mu    sync.Mutex
	cmds  []string
	addrs string
}

func (f *fakeRunner) Run(ctx context.Context, argv []string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := strings.Join(argv, " ")
	f.cmds = append(f.cmds, s)
	switch {
	case strings.HasPrefix(s, "ip link show"):
		return nil, os.ErrNotExist
	case s == "ip -o -4 addr show":
		return []byte(f.addrs), nil
	}
	return nil, nil
}

func TestUpRecordsAndPicksSubnet(t *testing.T) {
	reg := t.TempDir()
	// A dead run of this prefix (pid 0 is never alive) and a run of
	// another prefix, whose subnet is taken too.
	writeRecord(t, filepath.Join(reg, "hndead.json"), record{Owner: 0, Prefix: "hn", Subnet: "10.213.1.0/24"})
	writeRecord(t, filepath.Join(reg, "zz0001.json"), record{Owner: 0, Prefix: "zz", Subnet: "10.213.2.0/24"})
	f := &fakeRunner{addrs: "1: lo    inet 127.0.0.1/8 scope host lo\n5: br0    inet 10.213.0.1/24 brd 10.213.0.255 scope global br0\n"}
	n, err := up(context.Background(), Config{Nodes: 2, Prefix: "hn", ID: "0001", RegistryDir: reg}, nil, f)
	if err != nil {
		t.Fatal(err)
	}
	// 10.213.0 is on an interface, .2 recorded by a live-or-not run of
	// another prefix; .1 was the dead run's, swept before picking.
	if n.Subnet.String() != "10.213.1.0/24" {
		t.Errorf("subnet %s", n.Subnet)
	}
	if _, err := os.Stat(filepath.Join(reg, "hndead.json")); !os.IsNotExist(err) {
		t.Errorf("the dead run's record is still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(reg, "zz0001.json")); err != nil {
		t.Errorf("another prefix's record was swept: %v", err)
	}
	var r record
	data, err := os.ReadFile(filepath.Join(reg, "hn0001.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	if r.Owner != os.Getpid() || r.OwnerStart == 0 || strings.Join(r.Namespaces, ",") != "hn0001-n0,hn0001-n1" ||
		strings.Join(r.Devices, ",") != "hn0001h0,hn0001h1,hn0001br" {
		t.Errorf("record %+v", r)
	}
	if len(deadRuns(reg, "hn")) != 0 {
		t.Error("this live run counts as dead")
	}
	plan := n.Layout.Plan().Up
	if got := f.cmds[len(f.cmds)-len(plan):]; strings.Join(got, "\n") != joinAll(plan) {
		t.Errorf("ran:\n%s", strings.Join(got, "\n"))
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(reg, "hn0001.json")); !os.IsNotExist(err) {
		t.Errorf("the record outlived Close: %v", err)
	}
}

func writeRecord(t *testing.T, path string, r record) {
	t.Helper()
	data, _ := json.Marshal(r)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func joinAll(argvs [][]string) string {
	var s []string
	for _, a := range argvs {
		s = append(s, strings.Join(a, " "))
	}
	return strings.Join(s, "\n")
}
