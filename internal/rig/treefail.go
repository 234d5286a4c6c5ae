package rig

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/appspec"
)

// The function-tree benchmarks' application, "big": one function that
// reads the package's whole model.bin, a MiB at a time (sleeping "pace"
// seconds after each where the event says), and returns its SHA-256;
// or, where the event says "skip", reads nothing.
const benchTreeSpec = `
name: big
memory: 128MiB
timeout: 10m
keep_alive: 1h
max_instances: %d
buckets: {data: read-only}
cache: {budget: 16MiB}
functions:
  read: {handler: fns.read}
`

const benchTreeFns = `
import hashlib, os, time

HERE = os.path.dirname(os.path.abspath(__file__))

def read(event, context):
    if (event or {}).get("skip"):
        return {"skipped": True}
    pace = float((event or {}).get("pace", 0))
    h = hashlib.sha256()
    with open(os.path.join(HERE, "model.bin"), "rb") as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                break
            h.update(b)
            if pace:
                time.sleep(pace)
    return {"sha256": h.hexdigest()}
`

// TreeModelPackage packs the function-tree benchmarks' application "big"
// in dir (for up to nodes instances) with a model of size random bytes
// from (seed, stream), in the block format; want is the model's SHA-256.
func TreeModelPackage(dir string, seed, stream uint64, nodes, size int) (pkg *appspec.Package, want [32]byte, err error) {
	model := RandomBytes(size, seed, stream)
	want = sha256.Sum256(model)
	pkg, err = PackFiles(dir, map[string][]byte{appspec.FileName: fmt.Appendf(nil, benchTreeSpec, nodes), "fns.py": []byte(benchTreeFns), "model.bin": model})
	return pkg, want, err
}

// RandomBytes returns n random bytes from (seed, stream): a model that
// does not compress.
func RandomBytes(n int, seed, stream uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, stream))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// PackFiles writes files (name to content) into dir and packs dir in the
// block format.
func PackFiles(dir string, files map[string][]byte) (*appspec.Package, error) {
	for f, body := range files {
		if err := os.WriteFile(filepath.Join(dir, f), body, 0o644); err != nil {
			return nil, err
		}
	}
	return appspec.PackBlocks(dir)
}

// TreeDistribution is one run of Nodes.DistributeTree.
type TreeDistribution struct {
	// Victim is the node killed, Child its child and Parent its parent
	// in the tree ("" without a kill); Shape the tree at the kill, After
	// the controller's tree once it no longer holds the victim, and
	// NewParent the child's parent there.
	Victim, Child, Parent, Shape, After, NewParent string
	// AllRead: from the start to the last surviving node's read of the
	// whole model; AllReady: to the last instance ready (its invocation
	// began to run); AllWhole: to the last node's agent holding the
	// whole package (api.CodeInfo.Whole), Whole the nodes that did.
	AllRead, AllReady, AllWhole time.Duration
	Whole                       int
	// AgentCPU sums the agents' CPU time over the distribution (user
	// and system, from /proc), AgentCPUMax the largest one's; HostBusy
	// is the machine's cores busy on average (every process, from
	// /proc/stat) and Load1 its one-minute load average at the end.
	AgentCPU, AgentCPUMax time.Duration
	HostBusy, Load1       float64
	// NotWhole says, for each node that did not hold the whole package
	// at the end, what it held or why it is not known.
	NotWhole []string
	// FromStore: bytes the agents fetched from the store; FromAgents:
	// from other agents, of which Pushed they kept as their parents
	// pushed them (the rest they asked for).
	FromStore, FromAgents, Pushed int64
	// ChildReadsFrom is the agent the child fetched from at the end:
	// the last parent it reattached to where the tree said (its log),
	// else the next one up the chain its start request named.
	ChildReadsFrom string
	// KillToResume: from the kill to the child's next bytes from an
	// agent (it turned elsewhere in the tree); KillToChild: to its read
	// done; KillToTree: to the controller's tree without the victim.
	KillToResume, KillToChild, KillToTree time.Duration
	// ChildAtKill: bytes the child had from agents at the kill;
	// ChildFromAgents and ChildFromStore: what it took in all.
	ChildAtKill, ChildFromAgents, ChildFromStore int64
	// Invocations: OK with the model's digest, OK with another (corrupted),
	// failed (FirstFailure says how the first did). SurvivorsOK: the
	// nodes with a right read.
	OK, Corrupted, Failed int
	FirstFailure          string
	SurvivorsOK           map[string]bool
	// Size is the package's.
	Size int64
}

const (
	fromParentSeries = `hoard_agent_lazy_code_relay_bytes_total{from="parent"}`
	fromStoreSeries  = `hoard_agent_lazy_code_relay_bytes_total{from="store"}`
	pushedSeries     = `hoard_agent_lazy_code_pushed_bytes_total{way="received"}`
)

// StoreBytes sums the running agents' bytes of lazily read packages
// fetched from the store.
func (n *Nodes) StoreBytes(ctx context.Context) int64 {
	var sum int64
	for _, a := range n.Agents {
		v, _ := n.agentCounter(ctx, a, fromStoreSeries)
		sum += v
	}
	return sum
}

// Invoked is one invocation of InvokeAtOnce: its record or error, and
// when its answer came.
type Invoked struct {
	Rec *api.Invocation
	Err error
	At  time.Time
}

// Invoker is what InvokeAtOnce calls: the controller (in-process or
// several nodes').
type Invoker interface {
	Invoke(ctx context.Context, app, fn string, event json.RawMessage, trigger string) (*api.Invocation, error)
}

// InvokeAtOnce invokes app's fn n times at once (the tree benchmarks'
// distribution: each invocation needs an instance, one per node); wait
// returns every outcome once all have answered.
func InvokeAtOnce(ctx context.Context, c Invoker, app, fn string, event json.RawMessage, n int) (wait func() []Invoked) {
	out := make([]Invoked, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rec, err := c.Invoke(ctx, app, fn, event, "bench")
			out[i] = Invoked{rec, err, time.Now()}
		}()
	}
	return func() []Invoked {
		wg.Wait()
		return out
	}
}

// agentCounter reads one series of a node agent's metrics; false when
// the agent does not answer (it was killed).
func (n *Nodes) agentCounter(ctx context.Context, a *NodeAgent, series string) (int64, bool) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.URL+"/metrics", nil)
	if err != nil {
		return 0, false
	}
	req.Header.Set("Authorization", "Bearer "+n.agentToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, false
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	resp.Body.Close()
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int64(f), true
		}
	}
	return 0, true
}

// TreeRun says how DistributeTree runs.
type TreeRun struct {
	// Kill kills the tree's middle node (the one with a parent and the
	// most children) in the middle of the distribution.
	Kill bool
	// Pace is how long each instance sleeps after each MiB it reads
	// (0: none), which stretches the distribution.
	Pace time.Duration
	// NoRead has the instances start and answer without reading the
	// model: the package reaches the nodes only as the agents fetch it
	// (agent.Config.CodeFetchAhead). AllRead is then the last answer.
	NoRead bool
}

// DistributeTree deploys pkg (TreeModelPackage's application, whose
// model's SHA-256 is want) and invokes its function once per agent at
// once, so that each node starts an instance and reads the whole model
// through the function tree. With run.Kill, the tree's middle node (one
// with a parent and the most children) is killed (SIGKILL of its agent) as soon as its
// child has an eighth of the package from it: in the middle of the
// distribution. Agents killed before take no part.
func (n *Nodes) DistributeTree(ctx context.Context, pkg []byte, want [32]byte, run TreeRun) (*TreeDistribution, error) {
	kill := run.Kill
	event, _ := json.Marshal(map[string]any{"pace": run.Pace.Seconds(), "skip": run.NoRead})
	agents := map[string]*NodeAgent{}
	for _, a := range n.Agents {
		select {
		case <-a.Exited(): // killed by an earlier run
		default:
			agents[a.ID] = a
		}
	}
	nodes := len(agents)
	info, err := n.Controller.Deploy(ctx, pkg)
	if err != nil {
		return nil, err
	}
	d := &TreeDistribution{Size: int64(len(pkg)), SurvivorsOK: map[string]bool{}}
	baseParent, baseStore, basePushed := map[string]int64{}, map[string]int64{}, map[string]int64{}
	for _, a := range agents {
		baseParent[a.ID], _ = n.agentCounter(ctx, a, fromParentSeries)
		baseStore[a.ID], _ = n.agentCounter(ctx, a, fromStoreSeries)
		basePushed[a.ID], _ = n.agentCounter(ctx, a, pushedSeries)
	}
	cpu0 := map[string]time.Duration{}
	for id, a := range agents {
		cpu0[id], _ = a.CPUTime()
	}
	busy0, total0, _ := hostCPU()
	t0 := time.Now()
	wait := InvokeAtOnce(ctx, n.Controller, "big", "read", event, nodes)
	var killed time.Time
	if kill {
		if err := n.killMiddle(ctx, d, info.Rev, agents, baseParent); err != nil {
			wait()
			return nil, err
		}
		killed = time.Now()
		v0, _ := n.agentCounter(ctx, agents[d.Child], fromParentSeries)
		// Watched from the kill on: the child's next bytes from an agent
		// and the controller's tree without the victim.
		watched := make(chan struct{})
		defer func() { <-watched }()
		go func() {
			defer close(watched)
			for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline) && (d.KillToResume == 0 || d.KillToTree == 0); time.Sleep(5 * time.Millisecond) {
				if v, _ := n.agentCounter(ctx, agents[d.Child], fromParentSeries); d.KillToResume == 0 && v > v0 {
					d.KillToResume = time.Since(killed)
				}
				if d.KillToTree != 0 {
					continue
				}
				if tr := n.treeOf("big"); tr != nil && tr.Rev == info.Rev && len(tr.Nodes) == nodes-1 {
					d.KillToTree, d.After = time.Since(killed), tr.Shape
					for _, nd := range tr.Nodes {
						if nd.ID == d.Child {
							d.NewParent = nd.Parent
						}
					}
				}
			}
		}()
	}
	results := wait()
	// When each node held the whole package. Without reads, the agents
	// may still be fetching it when the instances answer: asked until
	// every node holds it (at most ten minutes).
	wholeAt, why := map[string]time.Time{}, map[string]string{}
	for deadline := time.Now().Add(10 * time.Minute); ; {
		for id, a := range agents {
			if _, ok := wholeAt[id]; !ok {
				at, ok, w := n.wholeAt(ctx, a, info.Rev)
				if ok {
					wholeAt[id] = at
					delete(why, id)
				} else {
					why[id] = w
				}
			}
		}
		if !run.NoRead || len(wholeAt) == len(agents) || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second): // each ask costs every agent a listing of its instances
		}
	}
	for _, at := range wholeAt {
		d.Whole++
		d.AllWhole = max(d.AllWhole, at.Sub(t0))
	}
	for id, w := range why {
		d.NotWhole = append(d.NotWhole, id+": "+w)
	}
	slices.Sort(d.NotWhole)
	// The machine's work until the end (the last node whole, without
	// reads).
	busy1, total1, hostOK := hostCPU()
	if hostOK && total1 > total0 {
		d.HostBusy = float64(busy1-busy0) / float64(total1-total0) * float64(runtime.NumCPU())
	}
	d.Load1 = loadAverage()
	for id, a := range agents {
		if c, ok := a.CPUTime(); ok {
			d.AgentCPU += c - cpu0[id]
			d.AgentCPUMax = max(d.AgentCPUMax, c-cpu0[id])
		}
	}
	where := map[string]string{}
	for _, a := range n.Controller.Apps() {
		for _, in := range a.Instances {
			where[in.ID] = in.Agent
		}
	}
	wantHex := []byte(hex.EncodeToString(want[:]))
	for _, r := range results {
		switch {
		case r.Err != nil || r.Rec == nil || !r.Rec.OK:
			d.Failed++
			if d.FirstFailure == "" {
				switch {
				case r.Err != nil:
					d.FirstFailure = r.Err.Error()
				case r.Rec != nil && r.Rec.Error != nil:
					d.FirstFailure = r.Rec.Error.Type + ": " + r.Rec.Error.Message
				default:
					d.FirstFailure = "no record"
				}
			}
		case bytes.Contains(r.Rec.Result, wantHex) || run.NoRead && bytes.Contains(r.Rec.Result, []byte(`"skipped"`)):
			d.OK++
			d.SurvivorsOK[where[r.Rec.Instance]] = true
			d.AllRead = max(d.AllRead, r.At.Sub(t0))
			// Ready: the invocation began to run, its instance started.
			d.AllReady = max(d.AllReady, r.Rec.Start.Add(time.Duration(r.Rec.QueueMS*float64(time.Millisecond))).Sub(t0))
			if kill && where[r.Rec.Instance] == d.Child {
				d.KillToChild = r.At.Sub(killed)
			}
		default:
			d.Corrupted++
		}
	}
	// A loaded machine's agent may answer late: asked up to three times.
	counter := func(a *NodeAgent, series string) (v int64, ok bool) {
		for try := 0; !ok && try < 3 && ctx.Err() == nil; try++ {
			v, ok = n.agentCounter(ctx, a, series)
		}
		return v, ok
	}
	for id, a := range agents {
		if v, ok := counter(a, fromStoreSeries); ok {
			d.FromStore += v - baseStore[id]
		}
		if v, ok := counter(a, pushedSeries); ok {
			d.Pushed += v - basePushed[id]
		}
		if v, ok := counter(a, fromParentSeries); ok {
			d.FromAgents += v - baseParent[id]
		}
	}
	if kill {
		p, _ := n.agentCounter(ctx, agents[d.Child], fromParentSeries)
		s, _ := n.agentCounter(ctx, agents[d.Child], fromStoreSeries)
		d.ChildFromAgents, d.ChildFromStore = p-baseParent[d.Child], s-baseStore[d.Child]
		d.ChildReadsFrom = d.Parent
		if log, err := os.ReadFile(agents[d.Child].LogPath); err == nil {
			for _, line := range strings.Split(string(log), "\n") {
				if strings.Contains(line, "reattached where the function tree says") && strings.Contains(line, "package="+info.Rev) {
					if _, after, ok := strings.Cut(line, " parent="); ok {
						d.ChildReadsFrom = strings.Fields(after)[0]
					}
				}
			}
		}
	}
	return d, nil
}

// wholeAt is when agent a first held the whole package rev of the
// benchmarks' application (api.CodeInfo.Whole); false when it does not
// (yet), or does not answer (asked three times: a loaded machine's
// agent may answer late).
func (n *Nodes) wholeAt(ctx context.Context, a *NodeAgent, rev string) (at time.Time, ok bool, why string) {
	ins, err := n.AgentInstances(ctx, a)
	for try := 1; err != nil && try < 3 && ctx.Err() == nil; try++ {
		select {
		case <-a.Exited():
			return time.Time{}, false, "exited"
		case <-time.After(time.Second):
			ins, err = n.AgentInstances(ctx, a)
		}
	}
	if err != nil {
		return time.Time{}, false, err.Error()
	}
	why = "no instance of the package"
	for _, in := range ins {
		switch {
		case in.App != "big" || in.Rev != rev:
		case in.Code == nil:
			why = "its instance has no lazily mounted package"
		case in.Code.Whole != nil:
			return *in.Code.Whole, true, ""
		default:
			c := in.Code
			why = fmt.Sprintf("held %d of %d bytes (%d from agents, %d pushed, %d from the store)", c.Held, c.Bytes, c.FromParent, c.Pushed, c.FromStore)
		}
	}
	return time.Time{}, false, why
}

// killMiddle waits for the tree of version rev to hold every agent,
// picks its middle node, waits until that node's child has an eighth of
// the package from it, and kills the node.
func (n *Nodes) killMiddle(ctx context.Context, d *TreeDistribution, rev string, agents map[string]*NodeAgent, baseParent map[string]int64) error {
	deadline := time.Now().Add(60 * time.Second)
	for d.Victim == "" {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("rig: no tree of %d nodes with a middle node", len(agents))
		}
		if tr := n.treeOf("big"); tr != nil && tr.Rev == rev && len(tr.Nodes) == len(agents) {
			most := 0
			for _, nd := range tr.Nodes {
				if nd.Parent != "" && len(nd.Children) > most {
					most = len(nd.Children)
					d.Victim, d.Parent, d.Child, d.Shape = nd.ID, nd.Parent, nd.Children[0], tr.Shape
				}
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	for {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("rig: %s took no eighth of the package from %s", d.Child, d.Victim)
		}
		if v, _ := n.agentCounter(ctx, agents[d.Child], fromParentSeries); v-baseParent[d.Child] >= d.Size/8 {
			d.ChildAtKill = v - baseParent[d.Child]
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	agents[d.Victim].Kill()
	return nil
}

// treeOf is app's function tree as the controller holds it, or nil.
func (n *Nodes) treeOf(app string) *api.FuncTree {
	for _, a := range n.Controller.Apps() {
		if a.Name == app {
			return a.Tree
		}
	}
	return nil
}

// AgentInstances lists the instances a node agent runs (its
// /v1/instances, with the agents' token).
func (n *Nodes) AgentInstances(ctx context.Context, a *NodeAgent) ([]api.InstanceInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.URL+"/v1/instances", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+n.agentToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s/v1/instances: %s", a.URL, resp.Status)
	}
	var out []api.InstanceInfo
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&out); err != nil {
		return nil, err
	}
	return out, nil
}
