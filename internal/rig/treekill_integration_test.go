//go:build integration

package rig

import (
	"bytes"
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/api"
)

// agentCounter reads one series of a node agent's metrics ("" when the
// agent does not answer: it was killed).
func agentCounter(tb testing.TB, a *NodeAgent, series string) (int64, bool) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, a.URL+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer agent-token-0123456789")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, false
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int64(f), true
		}
	}
	return 0, true
}

const (
	fromParentSeries = `hoard_agent_lazy_code_relay_bytes_total{from="parent"}`
	fromStoreSeries  = `hoard_agent_lazy_code_relay_bytes_total{from="store"}`
)

// distribution is one run of treeDistribution.
type distribution struct {
	victim, child, parent string        // the node killed, its child, its parent ("" without a kill)
	allRead               time.Duration // start to every surviving node's read done
	killToResume          time.Duration // the kill to the child's next bytes from an agent
	killToChild           time.Duration // the kill to the victim's child's read done
	killToTree            time.Duration // the kill to the controller's tree without the victim
	childAtKill           int64         // bytes the child had from a parent at the kill
	childParent           int64         // bytes the child took from agents (its parent, then up the tree)
	childStore            int64         // bytes the child took from the store
	newParent             string        // the child's parent in the tree after
	shapeBefore, after    string
	ok, corrupted, failed int // invocations: right digest, wrong digest, failed
	survivorsOK           map[string]bool
	size                  int64
}

// treeDistribution deploys a fresh 32 MiB model package to n's four
// nodes and starts one instance on each at once, each reading the whole
// model; with kill, the node in the middle of the tree (a parent with a
// parent) is killed (SIGKILL, its agent process) as soon as its child has
// taken bytes from it.
func treeDistribution(tb testing.TB, n *Nodes, seed uint64, kill bool) distribution {
	tb.Helper()
	const nodes = 4
	pkg, want := treeBenchPackage(tb, seed, 13, nodes)
	info, err := n.Controller.Deploy(context.Background(), pkg.Data)
	if err != nil {
		tb.Fatal(err)
	}
	d := distribution{size: int64(len(pkg.Data)), survivorsOK: map[string]bool{}}
	agents := map[string]*NodeAgent{}
	for _, a := range n.Agents {
		agents[a.ID] = a
	}
	baseParent, baseStore := map[string]int64{}, map[string]int64{}
	for _, a := range n.Agents {
		baseParent[a.ID], _ = agentCounter(tb, a, fromParentSeries)
		baseStore[a.ID], _ = agentCounter(tb, a, fromStoreSeries)
	}
	type result struct {
		rec *api.Invocation
		err error
		at  time.Time
	}
	results := make(chan result, nodes)
	t0 := time.Now()
	var wg sync.WaitGroup
	for range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rec, err := n.Controller.Invoke(context.Background(), "big", "read", nil, "bench")
			results <- result{rec, err, time.Now()}
		}()
	}
	var killed time.Time
	if kill {
		// The tree, once all four joined; its middle node, and that node's child.
		deadline := time.Now().Add(60 * time.Second)
		for d.victim == "" && time.Now().Before(deadline) {
			if apps := n.Controller.Apps(); len(apps) > 0 && apps[0].Tree != nil && apps[0].Tree.Rev == info.Rev && len(apps[0].Tree.Nodes) == nodes {
				for _, nd := range apps[0].Tree.Nodes {
					if nd.Parent != "" && len(nd.Children) > 0 {
						d.victim, d.parent, d.child, d.shapeBefore = nd.ID, nd.Parent, nd.Children[0], apps[0].Tree.Shape
					}
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
		if d.victim == "" {
			tb.Fatalf("no tree of four nodes with a middle node: %+v", n.Controller.Apps())
		}
		// Relaying: the child has an eighth of the package from it
		// (its instance is running and reading the model).
		for time.Now().Before(deadline) {
			if v, _ := agentCounter(tb, agents[d.child], fromParentSeries); v-baseParent[d.child] >= d.size/8 {
				d.childAtKill = v - baseParent[d.child]
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		agents[d.victim].Kill()
		killed = time.Now()
		v0, _ := agentCounter(tb, agents[d.child], fromParentSeries)
		// Watched from the kill on: the child's next bytes from an agent
		// (it turned elsewhere), and the controller's tree without the
		// victim.
		wg.Add(1)
		go func() {
			defer wg.Done()
			for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline) && (d.killToResume == 0 || d.killToTree == 0); time.Sleep(5 * time.Millisecond) {
				if v, _ := agentCounter(tb, agents[d.child], fromParentSeries); d.killToResume == 0 && v > v0 {
					d.killToResume = time.Since(killed)
				}
				if d.killToTree != 0 {
					continue
				}
				if tr := n.Controller.Apps()[0].Tree; tr != nil && len(tr.Nodes) == nodes-1 {
					d.killToTree, d.after = time.Since(killed), tr.Shape
					for _, nd := range tr.Nodes {
						if nd.ID == d.child {
							d.newParent = nd.Parent
						}
					}
				}
			}
		}()
	}
	wg.Wait()
	close(results)
	// Which agent ran which instance.
	where := map[string]string{}
	for _, in := range n.Controller.Apps()[0].Instances {
		where[in.ID] = in.Agent
	}
	wantHex := []byte(hex.EncodeToString(want[:]))
	for r := range results {
		switch {
		case r.err != nil || r.rec == nil || !r.rec.OK:
			d.failed++
		case bytes.Contains(r.rec.Result, wantHex):
			d.ok++
			d.survivorsOK[where[r.rec.Instance]] = true
			d.allRead = max(d.allRead, r.at.Sub(t0))
			if kill && where[r.rec.Instance] == d.child {
				d.killToChild = r.at.Sub(killed)
			}
		default:
			d.corrupted++
		}
	}
	if !kill {
		return d
	}
	p, _ := agentCounter(tb, agents[d.child], fromParentSeries)
	s, _ := agentCounter(tb, agents[d.child], fromStoreSeries)
	d.childParent, d.childStore = p-baseParent[d.child], s-baseStore[d.child]
	return d
}

// TestFunctionTreeNodeKilled: four node agents (processes in network
// namespaces, the store behind a shared capped link) start an instance
// each of one package at once; the node in the middle of the function
// tree is killed (SIGKILL) while its child is taking the package's blocks
// from it. The child turns to the next node up the tree, which is where
// the controller's rebalanced tree puts it once the killed node's
// registration expires; every surviving node reads the whole model with
// the right digest (0 corrupted), and the child takes nothing from the
// store.
func TestFunctionTreeNodeKilled(t *testing.T) {
	n := startNodes(t, 4)
	d := treeDistribution(t, n, 1, true)
	t.Logf("tree %s, killed %s (child %s had %d bytes from it): all survivors read in %v; the child resumed %v after the kill and finished %v after it; tree %s %v after it",
		d.shapeBefore, d.victim, d.child, d.childAtKill, d.allRead, d.killToResume, d.killToChild, d.after, d.killToTree)
	t.Logf("child: %d bytes from agents, %d from the store; invocations: %d ok, %d corrupted, %d failed", d.childParent, d.childStore, d.ok, d.corrupted, d.failed)
	if d.corrupted != 0 {
		t.Errorf("%d invocations read a model with the wrong digest", d.corrupted)
	}
	for _, a := range n.Agents {
		if a.ID != d.victim && !d.survivorsOK[a.ID] {
			t.Errorf("surviving node %s did not read the whole model", a.ID)
		}
	}
	if d.childAtKill <= 0 || d.childAtKill >= d.size {
		t.Errorf("the child had %d of %d bytes at the kill: not in the middle of the distribution", d.childAtKill, d.size)
	}
	if d.childStore != 0 || d.childParent < d.size/2 {
		t.Errorf("the child took %d bytes from the store and %d from agents: want every byte from the tree", d.childStore, d.childParent)
	}
	if d.newParent != d.parent {
		t.Errorf("after the kill the tree is %s, the child's parent %q; want the killed node's parent %q, where the child turned", d.after, d.newParent, d.parent)
	}
}
