//go:build integration

package rig

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/controller"
	"github.com/hoard-io/hoard/internal/hostnet"
	"github.com/hoard-io/hoard/internal/store"
	s3store "github.com/hoard-io/hoard/internal/store/s3"
)

// erasureNodesSpec shards objects of 1 MiB and more as RS(2+1) over the
// application's cachelets.
const erasureNodesSpec = `
name: ec
memory: 128MiB
timeout: 30s
keep_alive: 1h
max_instances: 3
buckets: {data: read-write}
cache: {budget: 48MiB, erasure: {shards: 2+1, threshold: 1MiB, warm_up: 1h, backup: 1h}}
functions:
  digest: {handler: fns.digest}
`

// erasureNodesFns: digest holds its instance for hold seconds, then reads
// every key and returns their SHA-256 sums.
const erasureNodesFns = `
import hashlib, os, time
import boto3

s3 = boto3.client("s3")

def digest(event, context):
    time.sleep(event.get("hold", 0))
    out = {k: hashlib.sha256(s3.get_object(Bucket=event["bucket"], Key=k)["Body"].read()).hexdigest() for k in event["keys"]}
    return {"sha256": out, "instance": os.environ["HOARD_INSTANCE"]}
`

// TestErasureAcrossNodes shards a large object over three instances on
// three nodes of the several-nodes rig, one shard on each node, and reads
// it back right with one node lost: decoded from the two shards left, not
// read from the store again.
func TestErasureAcrossNodes(t *testing.T) {
	n := startNodes(t, 3)
	c := n.Controller
	ctx := context.Background()
	st, err := s3store.New(s3store.Config{Endpoint: n.Store.Endpoint(), AccessKey: "storekey", SecretKey: "storesecret123"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateBucket(ctx, "data", ""); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 6<<20)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(big)
	want := hex.EncodeToString(sum[:])
	if _, err := st.Put(ctx, "data", "big", bytes.NewReader(big), int64(len(big)), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	deploySpec(t, c, erasureNodesSpec, erasureNodesFns)

	digest := func(k int, hold float64) []*api.Invocation {
		out := make([]*api.Invocation, k)
		var wg sync.WaitGroup
		for i := range k {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ev, _ := json.Marshal(map[string]any{"bucket": "data", "keys": []string{"big"}, "hold": hold})
				ictx, cancel := context.WithTimeout(ctx, 2*time.Minute)
				defer cancel()
				rec, err := c.Invoke(ictx, "ec", "digest", ev, "test")
				if err != nil || !rec.OK {
					t.Errorf("digest: %v %+v", err, rec)
					return
				}
				var res struct {
					SHA256 map[string]string `json:"sha256"`
				}
				if err := json.Unmarshal(rec.Result, &res); err != nil || res.SHA256["big"] != want {
					t.Errorf("digest on %s: %s (%v); want %s", rec.Instance, rec.Result, err, want)
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

	// Three at once: three instances, one per node; each reads the
	// object, and its owner shards it over the three.
	digest(3, 1)
	agentOf := map[string]string{}
	for _, in := range appInstances(t, c, "ec") {
		agentOf[in.ID] = in.Agent
	}
	if nodes := distinct(agentOf); len(agentOf) != 3 || nodes != 3 {
		t.Fatalf("instances on %v; want one on each of 3 nodes", agentOf)
	}
	shards := func() map[string]int {
		held := map[string]int{}
		for _, a := range n.Agents {
			select {
			case <-a.Exited():
				continue
			default:
			}
			var infos []api.InstanceInfo
			if err := getJSON(a.URL+"/v1/instances", "agent-token-0123456789", &infos); err != nil {
				t.Fatal(err)
			}
			for _, in := range infos {
				if in.App == "ec" && in.Cache.Erasure != nil {
					held[a.ID] += in.Cache.Erasure.Shards
				}
			}
		}
		return held
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		held := shards()
		if len(held) == 3 && held["node-0"] == 1 && held["node-1"] == 1 && held["node-2"] == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("shards per node %v; want one on each of the 3", held)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// One node lost: every survivor decodes the object from the two
	// shards left, a hit across the links, no store read.
	metricsOf := map[string]string{}
	for _, a := range n.Agents {
		var infos []api.InstanceInfo
		if err := getJSON(a.URL+"/v1/instances", "agent-token-0123456789", &infos); err != nil {
			t.Fatal(err)
		}
		for _, in := range infos {
			metricsOf[in.ID] = in.MetricsURL
		}
	}
	nodeOf := map[string]hostnet.Node{}
	for _, a := range n.Agents {
		nodeOf[a.ID] = a.Node
	}
	const hitSeries = `hoard_erasure_reads_total{result="hit"}`
	decoded := func(id string) float64 { return scrapeIn(t, nodeOf[agentOf[id]], metricsOf[id])[hitSeries] }
	victim := n.Agents[1]
	before := map[string]float64{}
	for id, a := range agentOf {
		if a != victim.ID {
			before[id] = decoded(id)
		}
	}
	victim.Kill()
	reads := map[string]int{}
	for range 2 {
		for _, rec := range digest(2, 0.5) {
			if agentOf[rec.Instance] == victim.ID {
				t.Errorf("an invocation ran on %s, of the lost node", rec.Instance)
			}
			reads[rec.Instance]++
			if rec.Reads["remote_hit"].Count != 1 || rec.Reads["local_miss"].Count+rec.Reads["remote_miss"].Count != 0 {
				t.Errorf("%s read the object as %v with %s lost; want one hit decoded from the shards left", rec.Instance, rec.Reads, victim.ID)
			}
		}
	}
	for id, n0 := range before {
		if got := decoded(id) - n0; got != float64(reads[id]) {
			t.Errorf("%s decoded the object %v times with %s lost; it read it %d times", id, got, victim.ID, reads[id])
		}
	}
}

// scrapeIn reads the metrics page at url, a loopback address inside
// node's network namespace: its connection is made from a thread that
// joins the namespace for the dial and then returns to its own. (The
// thread must live on: a child process started from it, such as an
// agent, is killed by its parent-death signal when the thread ends.)
func scrapeIn(t *testing.T, node hostnet.Node, url string) map[string]float64 {
	t.Helper()
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		type result struct {
			c   net.Conn
			err error
		}
		ch := make(chan result, 1)
		go func() {
			runtime.LockOSThread()
			home, err := os.Open("/proc/thread-self/ns/net")
			if err != nil {
				runtime.UnlockOSThread()
				ch <- result{err: err}
				return
			}
			defer home.Close()
			ns, err := os.Open(filepath.Join("/run/netns", node.Name))
			if err != nil {
				runtime.UnlockOSThread()
				ch <- result{err: err}
				return
			}
			defer ns.Close()
			if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
				runtime.UnlockOSThread()
				ch <- result{err: fmt.Errorf("setns %s: %w", node.Name, err)}
				return
			}
			c, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
			if unix.Setns(int(home.Fd()), unix.CLONE_NEWNET) == nil {
				runtime.UnlockOSThread() // home again; else the thread ends with this goroutine
			}
			ch <- result{c, err}
		}()
		r := <-ch
		return r.c, r.err
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true}}
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return parseMetrics(string(body))
}

// appInstances are the application's instances as the controller lists
// them.
func appInstances(t *testing.T, c *controller.Controller, app string) []api.InstanceSummary {
	t.Helper()
	for _, a := range c.Apps() {
		if a.Name == app {
			return a.Instances
		}
	}
	t.Fatalf("no application %s", app)
	return nil
}

// distinct counts the distinct values of m.
func distinct(m map[string]string) int {
	seen := map[string]bool{}
	for _, v := range m {
		seen[v] = true
	}
	return len(seen)
}
