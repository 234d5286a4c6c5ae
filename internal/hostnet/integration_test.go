//go:build integration

// Tests against the kernel: real namespaces, veth pairs, a bridge and
// tbf qdiscs. They need root and iproute2; where those are missing they
// fail, unless HOARD_SKIP_NETNS=1 says to skip them.
package hostnet

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func requireNetns(t *testing.T) {
	t.Helper()
	if err := Available(context.Background()); err != nil {
		if os.Getenv("HOARD_SKIP_NETNS") == "1" {
			t.Skipf("%v (HOARD_SKIP_NETNS=1)", err)
		}
		t.Fatalf("%v: these tests need root and iproute2; set HOARD_SKIP_NETNS=1 to skip them", err)
	}
}

// TestHelperProcess is not a test: the tests run it as a child, in a
// namespace or as a run to be killed.
func TestHelperProcess(t *testing.T) {
	switch os.Getenv("HOSTNET_HELPER") {
	case "dial":
		c, err := net.DialTimeout("tcp", os.Getenv("HOSTNET_ADDR"), 5*time.Second)
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		fmt.Fprintf(c, "hello from %s\n", c.LocalAddr())
		c.Close()
		os.Exit(0)
	case "listen":
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		fmt.Println(ln.Addr())
		c, err := ln.Accept()
		if err != nil {
			os.Exit(1)
		}
		fmt.Fprintln(c, "hello from the node's loopback")
		c.Close()
		os.Exit(0)
	case "up":
		n, err := Up(context.Background(), Config{Nodes: 2, Store: true, Prefix: "hny"}, nil)
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println("ready", n.Bridge)
		time.Sleep(time.Minute) // killed before
		os.Exit(0)
	}
}

func helper(t *testing.T, cmd *exec.Cmd, env ...string) *exec.Cmd {
	t.Helper()
	cmd.Env = append(os.Environ(), env...)
	return cmd
}

func TestUpAndClose(t *testing.T) {
	requireNetns(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := Up(ctx, Config{Nodes: 2, Store: true, Prefix: "hnx", NodeRate: 12_500_000, StoreRate: 1_250_000}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	for _, nd := range n.all() {
		if _, err := os.Stat(filepath.Join("/run/netns", nd.Name)); err != nil {
			t.Errorf("namespace %s: %v", nd.Name, err)
		}
		inside, host, err := n.Qdiscs(ctx, nd)
		if err != nil {
			t.Fatal(err)
		}
		want := "rate 100Mbit"
		if nd.Name == n.Store.Name {
			want = "rate 10Mbit"
		}
		if !strings.Contains(inside, "qdisc tbf") || !strings.Contains(inside, want) || !strings.Contains(host, want) {
			t.Errorf("%s: qdiscs %q and %q; want tbf %s", nd.Name, inside, host, want)
		}
		t.Logf("%s: %s", nd.Name, strings.TrimSpace(inside))
	}

	// A process in node 1's namespace reaches the host on the bridge,
	// from its own address.
	ln, err := net.Listen("tcp", net.JoinHostPort(n.Gateway.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cmd := helper(t, n.Command(n.Nodes[1], os.Args[0], "-test.run=^TestHelperProcess$"), "HOSTNET_HELPER=dial", "HOSTNET_ADDR="+ln.Addr().String())
	out := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			out <- err.Error()
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(c)
		out <- string(b)
	}()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("dial from %s: %v %s", n.Nodes[1].Name, err, b)
	}
	if got := <-out; !strings.HasPrefix(got, "hello from "+n.Nodes[1].Addr.String()+":") {
		t.Errorf("the host heard %q; want a hello from %s", got, n.Nodes[1].Addr)
	}

	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	for _, nd := range n.all() {
		if _, err := os.Stat(filepath.Join("/run/netns", nd.Name)); err == nil {
			t.Errorf("namespace %s outlived Close", nd.Name)
		}
		if _, err := os.Stat(filepath.Join("/sys/class/net", nd.HostVeth)); err == nil {
			t.Errorf("veth %s outlived Close", nd.HostVeth)
		}
	}
	if _, err := os.Stat(filepath.Join("/sys/class/net", n.Bridge)); err == nil {
		t.Errorf("bridge %s outlived Close", n.Bridge)
	}
	if _, err := os.Stat(n.record); err == nil {
		t.Errorf("record %s outlived Close", n.record)
	}
}

// TestDialContext reaches a listener on a node's loopback from this
// process, which runs outside the node, through Node.DialContext; and
// checks that NodeInRate shapes the node's downlink apart from its
// uplink (unshaped here: no qdisc on the host's end), and SetRates
// either while the node runs.
func TestDialContext(t *testing.T) {
	requireNetns(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := Up(ctx, Config{Nodes: 1, Prefix: "hnx", NodeRate: 12_500_000, NodeInRate: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	node := n.Nodes[0]
	inside, host, err := n.Qdiscs(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(inside, "qdisc tbf") || !strings.Contains(inside, "rate 100Mbit") || strings.Contains(host, "tbf") {
		t.Errorf("qdiscs %q inside and %q on the host's end; want tbf 100Mbit inside only", inside, host)
	}

	cmd := helper(t, n.Command(node, os.Args[0], "-test.run=^TestHelperProcess$"), "HOSTNET_HELPER=listen")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	addr, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	addr = strings.TrimSpace(addr)
	// From this process's own namespace the port is not the node's
	// listener (nothing, or something else, listens there).
	if c2, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		_ = c2.SetReadDeadline(time.Now().Add(time.Second))
		b, _ := io.ReadAll(c2)
		c2.Close()
		if strings.HasPrefix(string(b), "hello from the node") {
			t.Fatalf("a plain dial of %s reached the node's listener", addr)
		}
	}
	c, err := node.DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Fatalf("dial %s in %s: %v", addr, node.Name, err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, _ := io.ReadAll(c)
	if string(b) != "hello from the node's loopback\n" {
		t.Errorf("read %q from %s in %s", b, addr, node.Name)
	}

	// The link changed while it runs: uplink uncapped, downlink capped;
	// then back.
	for _, r := range []struct {
		out, in      int64
		inside, host string // the tbf's rate, or "" for none
	}{{-1, 2_500_000, "", "rate 20Mbit"}, {12_500_000, -1, "rate 100Mbit", ""}} {
		if err := n.SetRates(ctx, node, r.out, r.in); err != nil {
			t.Fatal(err)
		}
		inside, host, err := n.Qdiscs(ctx, node)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range []struct{ got, want string }{{inside, r.inside}, {host, r.host}} {
			if (q.want == "") == strings.Contains(q.got, "tbf") || !strings.Contains(q.got, q.want) {
				t.Errorf("SetRates(%d, %d): qdisc %q; want tbf %q (none for \"\")", r.out, r.in, q.got, q.want)
			}
		}
		if got := n.Nodes[0]; got.Rate != r.out || got.InRate != r.in {
			t.Errorf("SetRates(%d, %d): layout has %d, %d", r.out, r.in, got.Rate, got.InRate)
		}
	}
}

// TestCrashedRunIsSwept kills a run that made its namespaces, and checks
// that the next run of the same prefix removes them.
func TestCrashedRunIsSwept(t *testing.T) {
	requireNetns(t)
	cmd := helper(t, exec.Command(os.Args[0], "-test.run=^TestHelperProcess$"), "HOSTNET_HELPER=up")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	bridge, ok := strings.CutPrefix(strings.TrimSpace(line), "ready ")
	if !ok {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the run said %q", line)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if _, err := os.Stat(filepath.Join("/sys/class/net", bridge)); err != nil {
		t.Fatalf("the killed run's bridge %s is not there: %v", bridge, err)
	}
	base := strings.TrimSuffix(bridge, "br")

	n, err := Up(context.Background(), Config{Nodes: 1, Prefix: "hny"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	for _, p := range []string{"/sys/class/net/" + bridge, "/sys/class/net/" + base + "h0", "/run/netns/" + base + "-n0", "/run/netns/" + base + "-store",
		filepath.Join(DefaultRegistryDir, base+".json")} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s outlived the run that made it", p)
		}
	}
}
