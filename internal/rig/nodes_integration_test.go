//go:build integration

package rig

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hoard-io/hoard/internal/agent"
	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/appspec"
	"github.com/hoard-io/hoard/internal/controller"
	"github.com/hoard-io/hoard/internal/hostnet"
	"github.com/hoard-io/hoard/internal/ring"
	"github.com/hoard-io/hoard/internal/sandbox"
	"github.com/hoard-io/hoard/internal/store"
	s3store "github.com/hoard-io/hoard/internal/store/s3"
)

// skipNodesEnv opts out of the multi-node tests where network namespaces
// cannot be made (not root, no iproute2); without it they fail there.
const skipNodesEnv = "HOARD_SKIP_NETNS"

const nodesSpec = `
name: spread
memory: 96MiB
timeout: 30s
keep_alive: 1h
max_instances: 3
buckets: {data: read-write}
cache: {budget: 32MiB}
functions:
  read: {handler: fns.read}
  upper: {handler: fns.upper}
`

// Rates of the test's links, in bytes per second each way.
const (
	testNodeRate  = 50_000_000 // 400 Mbit/s
	testStoreRate = 20_000_000 // 160 Mbit/s
)

func startNodes(t testing.TB, nodes int, opts ...func(*NodesConfig)) *Nodes {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := hostnet.Available(ctx); err != nil {
		if os.Getenv(skipNodesEnv) == "1" {
			t.Skipf("%v (%s=1)", err, skipNodesEnv)
		}
		t.Fatalf("%v: the multi-node tests need root and iproute2; set %s=1 to skip them", err, skipNodesEnv)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := NodesConfig{
		// "hnt": this test's prefix, so that it never sweeps a `hoard up`.
		Net:                hostnet.Config{Nodes: nodes, Prefix: "hnt", NodeRate: testNodeRate, StoreRate: testStoreRate},
		Dir:                t.TempDir(),
		HoardBin:           hoardBinary(t),
		ControllerListener: ln,
		StoreAccessKey:     "storekey", StoreSecretKey: "storesecret123",
		ControllerToken: "controller-token-0123456789", AgentToken: "agent-token-0123456789",
		EtcdRootPassword: testEtcdRoot,
		StoreLatency:     2 * time.Millisecond,
	}
	for _, o := range opts {
		o(&cfg)
	}
	n, err := StartNodes(ctx, cfg, log)
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		n.Close()
		for _, nd := range append(n.Net.Nodes, *n.Net.Store) {
			if _, err := os.Stat(filepath.Join("/run/netns", nd.Name)); err == nil {
				t.Errorf("namespace %s outlived Close", nd.Name)
			}
		}
		if _, err := os.Stat(filepath.Join("/sys/class/net", n.Net.Bridge)); err == nil {
			t.Errorf("bridge %s outlived Close", n.Net.Bridge)
		}
	})
	return n
}

func deploySpec(t *testing.T, c *controller.Controller, spec, fns string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, appspec.FileName), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "fns.py"), []byte(fns), 0o644); err != nil {
		t.Fatal(err)
	}
	pkg, err := appspec.Pack(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Deploy(context.Background(), pkg.Data); err != nil {
		t.Fatal(err)
	}
}

// concurrently runs k invocations of read at once; hold keeps each
// instance busy long enough that they cannot share one.
func concurrently(t *testing.T, c *controller.Controller, k int, event map[string]any) []*api.Invocation {
	t.Helper()
	out := make([]*api.Invocation, k)
	var wg sync.WaitGroup
	for i := range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ev, _ := json.Marshal(event)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			rec, err := c.Invoke(ctx, "spread", "read", ev, "test")
			if err != nil {
				t.Errorf("invoke: %v", err)
				return
			}
			if !rec.OK {
				t.Errorf("read on %s: %+v %s", rec.Instance, rec.Error, rec.Log)
			}
			out[i] = rec
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return out
}

// TestNodes runs three nodes, each a network namespace with its own
// agent, and the store behind its own link: an application's instances
// land on different nodes, its cachelets hit each other across the
// links, and losing a node leaves the others serving.
// testEtcdRoot is etcd's root password in the nodes tests.
const testEtcdRoot = "etcd-root-password-0123456789"

func TestNodes(t *testing.T) {
	n := startNodes(t, 3)
	c := n.Controller
	ctx := context.Background()

	t.Run("every node registers its agent", func(t *testing.T) {
		// etcd has authentication on: a client signed in as nobody reads
		// nothing; the controller's (root) reads the registrations.
		anon, err := clientv3.New(clientv3.Config{Endpoints: n.Etcd.Endpoints(), DialTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer anon.Close()
		if _, err := anon.Get(ctx, api.EtcdPrefix, clientv3.WithPrefix()); err == nil {
			t.Error("an unauthenticated etcd client read the agents' registrations")
		}
		resp, err := n.Platform.etcd.Get(ctx, api.EtcdPrefix, clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		urls := map[string]string{}
		for _, kv := range resp.Kvs {
			var r api.Registration
			if err := json.Unmarshal(kv.Value, &r); err != nil {
				t.Fatal(err)
			}
			urls[r.ID] = r.URL
		}
		for _, a := range n.Agents {
			if urls[a.ID] != "http://"+a.Node.Addr.String()+":7000" {
				t.Errorf("agent %s registered %q; want its node's address %s", a.ID, urls[a.ID], a.Node.Addr)
			}
		}
		if len(urls) != 3 {
			t.Errorf("registered agents %v; want 3", urls)
		}
		// Each agent signs in to etcd as its own user, and reads its token
		// and store keys, from files of mode 0600; no token, key or
		// password is in its command line or environment.
		for _, a := range n.Agents {
			path := filepath.Join(filepath.Dir(a.LogPath), "etcd-credentials.json")
			if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("agent %s's etcd credentials: %v; want a file of mode 0600", a.ID, err)
			}
			secrets := filepath.Join(filepath.Dir(a.LogPath), "secrets.json")
			if fi, err := os.Stat(secrets); err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("agent %s's secrets: %v; want a file of mode 0600", a.ID, err)
			}
			for _, f := range []string{"cmdline", "environ"} {
				data, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", a.cmd.Process.Pid, f))
				if err != nil {
					t.Fatal(err)
				}
				for _, secret := range []string{"controller-token-0123456789", testEtcdRoot, "agent-token-0123456789", "storesecret123"} {
					if bytes.Contains(data, []byte(secret)) {
						t.Errorf("agent %s's %s holds a secret", a.ID, f)
					}
				}
			}
		}
	})

	t.Run("links are shaped", func(t *testing.T) {
		check := func(nd hostnet.Node, rate string) {
			inside, host, err := n.Net.Qdiscs(ctx, nd)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s eth0: %s%s: %s", nd.Name, inside, nd.HostVeth, host)
			for _, out := range []string{inside, host} {
				if !strings.Contains(out, "qdisc tbf") || !strings.Contains(out, "rate "+rate) {
					t.Errorf("%s: qdisc %q; want tbf at %s", nd.Name, out, rate)
				}
			}
		}
		for _, nd := range n.Net.Nodes {
			check(nd, "400Mbit")
		}
		check(*n.Net.Store, "160Mbit")
		if !strings.HasPrefix(n.Store.Endpoint(), "http://"+n.Net.Store.Addr.String()+":") {
			t.Errorf("store at %s; want the store namespace's %s", n.Store.Endpoint(), n.Net.Store.Addr)
		}
		// The latency proxy listens on the bridge, where nodes reach it.
		if !strings.HasPrefix(n.StoreEndpoint, "http://"+n.Net.Gateway.String()+":") {
			t.Errorf("nodes reach the store at %s; want the latency proxy on %s", n.StoreEndpoint, n.Net.Gateway)
		}
	})

	st, err := s3store.New(s3store.Config{Endpoint: n.Store.Endpoint(), AccessKey: "storekey", SecretKey: "storesecret123"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateBucket(ctx, "data", ""); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for i := range 12 {
		k := fmt.Sprintf("obj/%d", i)
		body := strings.Repeat("n", 100_000+i)
		if _, err := st.Put(ctx, "data", k, strings.NewReader(body), int64(len(body)), store.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	deploySpec(t, c, nodesSpec, testFns)

	t.Run("instances spread and hit each other across nodes", func(t *testing.T) {
		// Three at once: three instances, placed one per node.
		concurrently(t, c, 3, map[string]any{"bucket": "data", "keys": []string{}, "hold": 1.0})
		byAgent := map[string]string{}
		for _, in := range c.Apps()[0].Instances {
			if prev, ok := byAgent[in.Agent]; ok {
				t.Errorf("instances %s and %s both on %s", prev, in.ID, in.Agent)
			}
			byAgent[in.Agent] = in.ID
		}
		if len(byAgent) != 3 {
			t.Fatalf("instances on %v; want one on each of 3 nodes", byAgent)
		}
		// Each cachelet takes peer traffic on its node's address, and
		// its instance's memory limit is enforced wherever this host has
		// memory cgroups: an agent in a node's namespace sees the host's
		// cgroup hierarchies.
		host, err := sandbox.NewManager("hoard-probe", nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range n.Agents {
			var infos []api.InstanceInfo
			if err := getJSON(a.URL+"/v1/instances", "agent-token-0123456789", &infos); err != nil {
				t.Fatal(err)
			}
			for _, in := range infos {
				if in.Enforced != (host.Mode() != sandbox.ModeNone) {
					t.Errorf("instance %s on %s: memory limit enforced %v; this host's memory cgroups: %s %s", in.ID, a.ID, in.Enforced, host.Mode(), host.Reason())
				}
				if host, _, _ := net.SplitHostPort(in.PeerAddr); host != a.Node.Addr.String() {
					t.Errorf("instance %s on %s takes peer traffic on %s; want %s", in.ID, a.ID, in.PeerAddr, a.Node.Addr)
				}
			}
		}
		// Agents on one machine hand out uids from ranges of their own:
		// the processes under each agent (its instances' cachelets and
		// jails) run as uids of its range, none of another's.
		owner := map[int]string{}
		for i, a := range n.Agents {
			base, count := agent.NodeUIDs(i)
			uids := map[int]bool{}
			for _, pid := range descendants(a.cmd.Process.Pid) {
				if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
					for _, l := range strings.Split(string(st), "\n") {
						if f := strings.Fields(l); len(f) == 5 && f[0] == "Uid:" {
							if uid, _ := strconv.Atoi(f[2]); uid != 0 {
								uids[uid] = true
							}
						}
					}
				}
			}
			if len(uids) < 2 {
				t.Errorf("agent %s runs processes as uids %v; want its instance's function's and cachelet's", a.ID, uids)
			}
			for uid := range uids {
				if uid < base || uid >= base+count {
					t.Errorf("agent %s runs a process as uid %d, outside its range %d-%d", a.ID, uid, base, base+count-1)
				}
				if prev, ok := owner[uid]; ok && prev != a.ID {
					t.Errorf("uid %d is used under agents %s and %s", uid, prev, a.ID)
				}
				owner[uid] = a.ID
			}
		}
		// One instance reads every key: the owners fetch theirs from the
		// store (remote misses) and keep them.
		first := concurrently(t, c, 1, map[string]any{"bucket": "data", "keys": keys})[0]
		if first.Reads["remote_miss"].Count == 0 {
			t.Errorf("first read %v: no remote misses over 3 cachelets", first.Reads)
		}
		// Then all three at once: what another node owns is a remote hit.
		var rh, total int64
		for _, rec := range concurrently(t, c, 3, map[string]any{"bucket": "data", "keys": keys, "hold": 1.0}) {
			rh += rec.Reads["remote_hit"].Count
			for _, r := range rec.Reads {
				total += r.Count
			}
			t.Logf("%s: %v", rec.Instance, rec.Reads)
		}
		t.Logf("remote hits across nodes: %d of %d reads", rh, total)
		if total != 36 || rh == 0 {
			t.Errorf("%d reads, %d remote hits; want 36 reads and remote hits", total, rh)
		}
	})

	t.Run("an invocation goes to the node holding its input", func(t *testing.T) {
		// Three idle instances, one per node. An input no instance has
		// read goes to the instance whose cachelet owns it on the
		// application's ring, on that owner's node, though another was
		// used last; read again, it is a local hit there.
		var ids []string
		agentOf := map[string]string{}
		for _, in := range c.Apps()[0].Instances {
			ids = append(ids, in.ID)
			agentOf[in.ID] = in.Agent
		}
		if len(ids) != 3 {
			t.Fatalf("instances %v; want the three the subtest above placed", ids)
		}
		r, err := ring.New(ring.Config{}, ids)
		if err != nil {
			t.Fatal(err)
		}
		input := map[string]string{} // instance → a key it owns
		for i := 0; len(input) < len(ids); i++ {
			k := fmt.Sprintf("loc/%d", i)
			if o := r.Owner("data", k); input[o] == "" {
				input[o] = k
				body := "input of " + o
				if _, err := st.Put(ctx, "data", k, strings.NewReader(body), int64(len(body)), store.PutOptions{}); err != nil {
					t.Fatal(err)
				}
			}
		}
		upper := func(key string) *api.Invocation {
			ev, _ := json.Marshal(map[string]any{"bucket": "data", "key": key})
			ictx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			rec, err := c.Invoke(ictx, "spread", "upper", ev, "test")
			if err != nil || !rec.OK {
				t.Fatalf("upper %s: %v %+v", key, err, rec)
			}
			return rec
		}
		last := ""
		for round, want := range []string{"local_miss", "local_hit"} {
			for _, id := range ids {
				rec := upper(input[id])
				if rec.Instance != id || agentOf[rec.Instance] != agentOf[id] {
					t.Errorf("round %d: %s's input ran on %s (node %s, route %s); want %s on %s",
						round, id, rec.Instance, agentOf[rec.Instance], rec.Route, id, agentOf[id])
				}
				if last != "" && last != id && rec.Route != "owner" && rec.Route != "reader" {
					t.Errorf("round %d: %s's input routed as %q; want owner or reader", round, id, rec.Route)
				}
				if rec.Reads[want].Count != 1 {
					t.Errorf("round %d: %s read its input as %v; want one %s", round, id, rec.Reads, want)
				}
				last = rec.Instance
			}
		}
		var said int
		for _, ev := range c.Apps()[0].Events {
			if ev.Kind == "route" && strings.Contains(ev.Detail, "loc/") {
				said++
			}
		}
		if said == 0 {
			t.Error("no event says an invocation went to its data")
		}
	})

	t.Run("a lost node leaves the others serving", func(t *testing.T) {
		instances := c.Apps()[0].Instances
		victim := n.Agents[1]
		victim.Kill()
		dead := map[string]bool{}
		for _, in := range instances {
			if in.Agent == victim.ID {
				dead[in.ID] = true
			}
		}
		if len(dead) != 1 {
			t.Fatalf("instances %+v: want one on %s", instances, victim.ID)
		}
		for range 3 {
			recs := concurrently(t, c, 3, map[string]any{"bucket": "data", "keys": keys, "hold": 0.5})
			for _, rec := range recs {
				if dead[rec.Instance] {
					t.Errorf("an invocation ran on %s, of the killed node", rec.Instance)
				}
				var total int64
				for _, r := range rec.Reads {
					total += r.Count
				}
				if total != 12 {
					t.Errorf("%s read %v; want 12 reads", rec.Instance, rec.Reads)
				}
			}
		}
		for _, in := range c.Apps()[0].Instances {
			if in.Agent == victim.ID {
				t.Errorf("instance %s still placed on the killed %s", in.ID, victim.ID)
			}
		}
	})
}

func getJSON(url, token string, out any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// descendants are the pids of every process below pid.
func descendants(pid int) []int {
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) > 1 {
			ppid, _ := strconv.Atoi(f[1])
			children[ppid] = append(children[ppid], p)
		}
	}
	var out []int
	for next := []int{pid}; len(next) > 0; {
		p := next[0]
		next = next[1:]
		out = append(out, children[p]...)
		next = append(next, children[p]...)
	}
	return out
}
