//go:build integration

package rig

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/agent"
	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/appspec"
	"github.com/hoard-io/hoard/internal/lazyfs"
	"github.com/hoard-io/hoard/internal/netshape"
	"github.com/hoard-io/hoard/internal/pki"
	"github.com/hoard-io/hoard/internal/store"
)

const lazySpec = `
name: %s
memory: 96MiB
timeout: 20s
keep_alive: 1h
max_instances: 1
buckets: {data: read-only}
cache: {budget: 16MiB}
functions:
  hello: {handler: fns.hello}
  head: {handler: fns.head}
`

// lazyFns reads a range of the package's large file from where the
// function runs (through the lazy mount, inside its jail).
const lazyFns = `
import hashlib, os

HERE = os.path.dirname(os.path.abspath(__file__))

def hello(event, context):
    return {"hello": "from a lazily fetched package"}

def head(event, context):
    with open(os.path.join(HERE, "model.bin"), "rb") as f:
        f.seek(event["off"])
        b = f.read(event["n"])
    return {"sha256": hashlib.sha256(b).hexdigest(), "n": len(b)}
`

// deployModel deploys an application whose package holds a large,
// incompressible model.bin its functions do not need to start.
func deployModel(t testing.TB, e *env, name string, modelBytes int, seed uint64) (*api.AppInfo, []byte, []byte) {
	t.Helper()
	model := RandomBytes(modelBytes, seed, 7)
	pkg := packFiles(t, map[string][]byte{appspec.FileName: fmt.Appendf(nil, lazySpec, name), "fns.py": []byte(lazyFns), "model.bin": model})
	info, err := e.p.Controller.Deploy(context.Background(), pkg.Data)
	if err != nil {
		t.Fatal(err)
	}
	return info, model, pkg.Data
}

func mountOf(a *agent.Agent, sha string) (agent.CodeMount, bool) {
	for _, m := range a.CodeMounts() {
		if m.SHA256 == sha {
			return m, true
		}
	}
	return agent.CodeMount{}, false
}

// TestLazyCode starts instances from packages mounted lazily through the
// real agent and its jails: the start reads only the files it opens; the
// bytes a function reads are the package's; a corrupt block in the store
// fails the function's import (EIO) and runs nothing of it.
func TestLazyCode(t *testing.T) {
	if err := lazyfs.Available(); err != nil {
		t.Skipf("lazy code needs FUSE mounts (CI runs as root): %v", err)
	}
	e := startShaped(t, netshape.Link{}, func(c *Config) { c.CodeFetch = agent.CodeFetchLazy })
	c := e.p.Controller

	t.Run("start and run", func(t *testing.T) {
		info, model, pkg := deployModel(t, e, "lz1", 8<<20, 1)
		rec := invoke(t, c, "lz1", "hello", nil)
		if !rec.OK || !rec.Cold {
			t.Fatalf("first invocation: ok %v cold %v error %+v log %s", rec.OK, rec.Cold, rec.Error, rec.Log)
		}
		m, ok := mountOf(e.p.Agent, info.Rev)
		if !ok {
			t.Fatalf("package %s is not mounted lazily: %+v", info.Rev, e.p.Agent.CodeMounts())
		}
		if m.PackageBytes != int64(len(pkg)) {
			t.Errorf("package bytes %d, want %d", m.PackageBytes, len(pkg))
		}
		if slices.Contains(m.Opened, "model.bin") || !slices.Contains(m.Opened, "fns.py") {
			t.Errorf("files opened at start: %v", m.Opened)
		}
		// The start read the index and the first block (fns.py), nothing of the model beyond it.
		if m.Fetched > m.PackageBytes/8 {
			t.Errorf("the start fetched %d of %d bytes", m.Fetched, m.PackageBytes)
		}
		start := m.Fetched
		t.Logf("start: fetched %d of %d bytes (%.1f%%), opened %v", m.Fetched, m.PackageBytes, 100*float64(m.Fetched)/float64(m.PackageBytes), m.Opened)

		// A MiB in the middle of the model, read by the jailed function.
		off, n := 5<<20+123, 1<<20
		rec = invoke(t, c, "lz1", "head", map[string]int{"off": off, "n": n})
		if !rec.OK || rec.Cold {
			t.Fatalf("head: ok %v cold %v error %+v log %s", rec.OK, rec.Cold, rec.Error, rec.Log)
		}
		var out struct {
			SHA256 string `json:"sha256"`
			N      int    `json:"n"`
		}
		json.Unmarshal(rec.Result, &out)
		want := sha256.Sum256(model[off : off+n])
		if out.N != n || out.SHA256 != hex.EncodeToString(want[:]) {
			t.Fatalf("the function read %d bytes with digest %s, want %d with %s", out.N, out.SHA256, n, hex.EncodeToString(want[:]))
		}
		m, _ = mountOf(e.p.Agent, info.Rev)
		read := m.Fetched - start
		if read < int64(n) || read > int64(n)+4<<20 {
			t.Errorf("reading 1 MiB of the model fetched %d bytes", read)
		}
		t.Logf("after a 1 MiB read: fetched %d of %d bytes (%.1f%%)", m.Fetched, m.PackageBytes, 100*float64(m.Fetched)/float64(m.PackageBytes))
	})

	t.Run("corrupt block", func(t *testing.T) {
		info, _, pkg := deployModel(t, e, "lz2", 1<<20, 2)
		// The object in the store changes after deploy: a byte of the
		// first block (fns.py's) flipped; the index is intact, so the
		// package still opens and its digest matches.
		bad := bytes.Clone(pkg)
		bad[20] ^= 0xff
		key := "apps/lz2/" + info.Rev + "." + appspec.FormatBlocks
		if _, err := e.st.Put(context.Background(), appspec.PlatformBucket, key, bytes.NewReader(bad), int64(len(bad)), store.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		rec := invoke(t, c, "lz2", "hello", nil)
		if rec.OK {
			t.Fatalf("an instance ran from a corrupt package: result %s", rec.Result)
		}
		m, ok := mountOf(e.p.Agent, info.Rev)
		if !ok || m.Stats.ReadErrors == 0 {
			t.Fatalf("mount %+v (found %v): no read error counted", m, ok)
		}
		t.Logf("refused: %+v", rec.Error)
	})

	t.Run("unused mounts go", func(t *testing.T) {
		// lz1 and lz2 removed (their instances unloaded): the next package
		// mounted unmounts both.
		lz1 := e.p.Controller.Apps()[0].Rev
		for _, app := range []string{"lz1", "lz2"} {
			if err := c.Remove(context.Background(), app); err != nil {
				t.Fatal(err)
			}
		}
		eventually(t, "lz1's and lz2's instances unloaded", 20*time.Second, func() bool {
			return len(e.p.Agent.Instances()) == 0
		})
		info, _, _ := deployModel(t, e, "lz3", 1<<20, 3)
		if rec := invoke(t, c, "lz3", "hello", nil); !rec.OK {
			t.Fatalf("lz3: %+v", rec.Error)
		}
		mounts := e.p.Agent.CodeMounts()
		if len(mounts) != 1 || mounts[0].SHA256 != info.Rev {
			t.Fatalf("mounts after lz1 went (%s): %+v", lz1, mounts)
		}
	})
}

// BenchmarkCodeFetch is an instance's cold start (deploy of a new
// package, then its first invocation) with a package holding a 48 MiB
// model the function does not read at start, the store behind the faast
// preset's store link (90 MB/s, 10 ms each way): lazy against whole, in
// the same run.
//
//	go test -tags integration -run '^$' -bench CodeFetch -benchtime 3x ./internal/rig
func BenchmarkCodeFetch(b *testing.B) {
	if err := lazyfs.Available(); err != nil {
		b.Skipf("lazy code needs FUSE mounts: %v", err)
	}
	preset, err := netshape.LookupPreset("faast")
	if err != nil {
		b.Fatal(err)
	}
	link := preset.Store
	for _, mode := range []string{agent.CodeFetchWhole, agent.CodeFetchLazy} {
		b.Run(mode, func(b *testing.B) {
			e := startShaped(b, link, func(c *Config) { c.CodeFetch = mode })
			var total time.Duration
			var fetched, size int64
			i := 0
			for b.Loop() {
				i++
				info, _, pkg := deployModel(b, e, "bench", 48<<20, uint64(i))
				t0 := time.Now()
				rec, err := e.p.Controller.Invoke(context.Background(), "bench", "hello", nil, "bench")
				if err != nil || !rec.OK || !rec.Cold {
					b.Fatalf("cold invocation: %v %+v", err, rec)
				}
				total += time.Since(t0)
				size += int64(len(pkg))
				if m, ok := mountOf(e.p.Agent, info.Rev); ok {
					fetched += m.Fetched
				} else {
					fetched += int64(len(pkg)) // downloaded whole
				}
			}
			b.ReportMetric(float64(total.Milliseconds())/float64(i), "ms/cold-start")
			b.ReportMetric(float64(fetched)/float64(i)/(1<<20), "MiB-fetched/start")
			b.ReportMetric(float64(size)/float64(i)/(1<<20), "MiB-package")
		})
	}
}

// treeSpec runs two instances at once (nap holds one busy), so the
// second lands on the second node.
const treeSpec = `
name: tr
memory: 96MiB
timeout: 20s
keep_alive: 1h
max_instances: 2
buckets: {data: read-only}
cache: {budget: 16MiB}
functions:
  hello: {handler: fns.hello}
  nap: {handler: fns.nap}
`

const treeFns = lazyFns + `
def nap(event, context):
    import time
    time.sleep(event["s"])
    return {"napped": event["s"]}
`

// startNode starts a second node agent of e's platform (the same etcd,
// store and controller) with its own uids.
func startNode(t testing.TB, e *env, id, codeFetch string) *Platform {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := e.cfg
	cfg.Controller, cfg.ControllerListener, cfg.Agent, cfg.AgentID = false, nil, true, id
	cfg.Dir, cfg.LogDir, cfg.CodeFetch = t.TempDir(), "", codeFetch
	cfg.ControllerURL = e.p.ControllerURL
	cfg.SandboxUIDBase = agent.DefaultSandboxUIDBase + int(nodeCount.Add(1))*agent.DefaultSandboxUIDCount
	p, err := Start(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// nodeCount gives each extra node its own uids.
var nodeCount atomic.Int64

// spread deploys treeSpec with a 4 MiB model and runs two instances at
// once: one on each node. It returns the package digest.
func spread(t *testing.T, e *env) string {
	t.Helper()
	pkg := packFiles(t, map[string][]byte{appspec.FileName: []byte(treeSpec), "fns.py": []byte(treeFns), "model.bin": RandomBytes(4<<20, 3, 4)})
	info, err := e.p.Controller.Deploy(context.Background(), pkg.Data)
	if err != nil {
		t.Fatal(err)
	}
	first := invoke(t, e.p.Controller, "tr", "hello", nil)
	if !first.OK {
		t.Fatalf("first: %+v %s", first.Error, first.Log)
	}
	done := make(chan *api.Invocation, 1)
	go func() {
		rec, _ := e.p.Controller.Invoke(context.Background(), "tr", "nap", json.RawMessage(`{"s": 3}`), "test")
		done <- rec
	}()
	// The first instance is busy napping: the next needs a second instance.
	eventually(t, "the first instance busy", 10*time.Second, func() bool {
		for _, in := range e.p.Controller.Apps()[0].Instances {
			if in.State == api.StateBusy {
				return true
			}
		}
		return false
	})
	second := invoke(t, e.p.Controller, "tr", "hello", nil)
	if !second.OK || !second.Cold {
		t.Fatalf("second: ok %v cold %v %+v %s", second.OK, second.Cold, second.Error, second.Log)
	}
	if rec := <-done; rec == nil || !rec.OK {
		t.Fatalf("nap: %+v", rec)
	}
	return info.Rev
}

// TestFunctionTreeRelay: the second node's agent is the first's child in
// the application's tree and reads the package's blocks from it, not
// from the store; `hoard apps --trees`' data shows the two.
func TestFunctionTreeRelay(t *testing.T) {
	if err := lazyfs.Available(); err != nil {
		t.Skipf("lazy code needs FUSE mounts (CI runs as root): %v", err)
	}
	e := startShaped(t, netshape.Link{}, func(c *Config) { c.CodeFetch = agent.CodeFetchLazy; c.AgentID = "node-a" })
	b := startNode(t, e, "node-b", agent.CodeFetchLazy)
	rev := spread(t, e)
	ma, okA := mountOf(e.p.Agent, rev)
	mb, okB := mountOf(b.Agent, rev)
	if !okA || !okB {
		t.Fatalf("mounts: a %v b %v", okA, okB)
	}
	t.Logf("node-a: %d from the store, %d from a parent; node-b: %d from the store, %d from node-a", ma.FromStore, ma.FromParent, mb.FromStore, mb.FromParent)
	if ma.FromParent != 0 || ma.FromStore == 0 {
		t.Errorf("the root fetched %d from a parent, %d from the store", ma.FromParent, ma.FromStore)
	}
	if mb.FromStore != 0 || mb.FromParent == 0 {
		t.Errorf("node-b fetched %d bytes from the store and %d from node-a: want all from node-a", mb.FromStore, mb.FromParent)
	}
	// As `hoard apps --trees` reads it: the controller's API.
	apps, err := api.NewControllerClient(e.p.ControllerURL, e.cfg.ControllerToken, nil).Apps(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if tr := apps[0].Tree; tr == nil || tr.Shape != "node-a(node-b,-)" || tr.Rev != rev || len(tr.Nodes) != 2 || tr.Nodes[1].Parent != "node-a" {
		t.Fatalf("tree %+v", tr)
	}
}

// TestFunctionTreeParentFails: a parent that cannot serve the package
// (its agent downloads code whole, so it has no mount to relay) leaves
// its child to the store; the instance starts all the same.
func TestFunctionTreeParentFails(t *testing.T) {
	if err := lazyfs.Available(); err != nil {
		t.Skipf("lazy code needs FUSE mounts (CI runs as root): %v", err)
	}
	e := startShaped(t, netshape.Link{}, func(c *Config) { c.CodeFetch = agent.CodeFetchWhole; c.AgentID = "node-a" })
	b := startNode(t, e, "node-b", agent.CodeFetchLazy)
	rev := spread(t, e)
	mb, ok := mountOf(b.Agent, rev)
	if !ok {
		t.Fatal("node-b has no mount")
	}
	if mb.FromParent != 0 || mb.FromStore == 0 {
		t.Errorf("node-b fetched %d from the store and %d from its parent", mb.FromStore, mb.FromParent)
	}
}

// BenchmarkCodeTree: N node agents (in one process, loopback between
// them, the store behind the faast preset's store link: 90 MB/s, 10 ms
// each way) each start an instance of one package at once, and each
// reads the package's whole 32 MiB model: the time until all have read
// it, and the bytes leaving the store, with the package relayed down the
// function tree against every node reading from the store
// ($HOARD_CODE_RELAY=off), in the same run.
//
//	go test -tags integration -run '^$' -bench CodeTree -benchtime 1x ./internal/rig
func BenchmarkCodeTree(b *testing.B) {
	if err := lazyfs.Available(); err != nil {
		b.Skipf("lazy code needs FUSE mounts: %v", err)
	}
	preset, err := netshape.LookupPreset("faast")
	if err != nil {
		b.Fatal(err)
	}
	const nodes = 4
	for _, mode := range []string{"store", "tree"} {
		b.Run(fmt.Sprintf("%s/nodes=%d", mode, nodes), func(b *testing.B) {
			if mode == "store" {
				b.Setenv(agent.CodeRelayEnv, "off")
			}
			e := startShaped(b, preset.Store, func(c *Config) { c.CodeFetch = agent.CodeFetchLazy; c.AgentID = "node-0" })
			ps := []*Platform{e.p}
			for i := 1; i < nodes; i++ {
				ps = append(ps, startNode(b, e, fmt.Sprintf("node-%d", i), agent.CodeFetchLazy))
			}
			var total time.Duration
			var fromStore, size int64
			it := 0
			for b.Loop() {
				it++
				pkg, want := treeBenchPackage(b, uint64(it), 9, nodes)
				info, err := e.p.Controller.Deploy(context.Background(), pkg.Data)
				if err != nil {
					b.Fatal(err)
				}
				t0 := time.Now()
				results := InvokeAtOnce(context.Background(), e.p.Controller, "big", "read", nil, nodes)()
				total += time.Since(t0)
				for _, r := range results {
					if r.Err != nil || !r.Rec.OK || !bytes.Contains(r.Rec.Result, []byte(hex.EncodeToString(want[:]))) {
						b.Fatalf("%v %+v", r.Err, r.Rec)
					}
				}
				size += int64(len(pkg.Data))
				for _, p := range ps {
					if m, ok := mountOf(p.Agent, info.Rev); ok {
						fromStore += m.FromStore
					}
				}
			}
			b.ReportMetric(float64(total.Milliseconds())/float64(it), "ms/all-read")
			b.ReportMetric(float64(fromStore)/float64(size), "packages-from-store")
			if tr := e.p.Controller.Apps()[0].Tree; tr != nil {
				b.Logf("tree %s", tr.Shape)
			}
		})
	}
}

// TestFunctionTreeRelayTLS: on TLS (ADR 0017) the second node reads the
// package from the first over mutual TLS with its agent certificate; an
// agent's certificate reaches only the relay route of another agent's
// API, never its instances.
func TestFunctionTreeRelayTLS(t *testing.T) {
	if err := lazyfs.Available(); err != nil {
		t.Skipf("lazy code needs FUSE mounts (CI runs as root): %v", err)
	}
	te := startTLS(t)
	b := startNode(t, te.env, "node-b", agent.CodeFetchLazy)
	rev := spread(t, te.env)
	mb, ok := mountOf(b.Agent, rev)
	if !ok || mb.FromStore != 0 || mb.FromParent == 0 {
		t.Fatalf("node-b over TLS: %+v (found %v): want every byte from its parent", mb, ok)
	}
	agentCert, err := te.ca.Issue("other-agent", pki.Request{Identity: pki.Agent("other"), Hosts: []string{"127.0.0.1"}, Client: true})
	if err != nil {
		t.Fatal(err)
	}
	cl := httpsClient(t, agentCert)
	for path, want := range map[string]int{
		"/v1/instances": http.StatusForbidden,
		"/v1/packages/" + rev + "/raw?off=0&len=16": http.StatusOK,
	} {
		req, _ := http.NewRequest(http.MethodGet, te.agentURL+path, nil)
		req.Header.Set("Authorization", "Bearer "+te.cfg.AgentToken)
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("an agent's certificate on %s: %d, want %d", path, resp.StatusCode, want)
		}
	}
}

// TestFunctionTreeAncestor: four nodes start an instance each at once,
// forming node-a(node-b(node-d,-),node-c); node-b cannot serve the
// package (its agent downloads code whole), so node-d, its child, turns
// to its grandparent node-a, not to the store.
func TestFunctionTreeAncestor(t *testing.T) {
	if err := lazyfs.Available(); err != nil {
		t.Skipf("lazy code needs FUSE mounts (CI runs as root): %v", err)
	}
	e := startShaped(t, netshape.Link{}, func(c *Config) { c.CodeFetch = agent.CodeFetchLazy; c.AgentID = "node-a" })
	nodes := map[string]*Platform{"node-a": e.p}
	for _, n := range []struct{ id, fetch string }{{"node-b", agent.CodeFetchWhole}, {"node-c", agent.CodeFetchLazy}, {"node-d", agent.CodeFetchLazy}} {
		nodes[n.id] = startNode(t, e, n.id, n.fetch)
	}
	pkg := packFiles(t, map[string][]byte{
		appspec.FileName: []byte(strings.Replace(treeSpec, "max_instances: 2", "max_instances: 4", 1)),
		"fns.py":         []byte(treeFns), "model.bin": bytes.Repeat([]byte("model "), 200_000),
	})
	info, err := e.p.Controller.Deploy(context.Background(), pkg.Data)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rec, err := e.p.Controller.Invoke(context.Background(), "tr", "nap", json.RawMessage(`{"s": 2}`), "test")
			if err != nil || !rec.OK {
				t.Errorf("nap: %v %+v", err, rec)
			}
		}()
	}
	wg.Wait()
	tr := e.p.Controller.Apps()[0].Tree
	if tr == nil || tr.Shape != "node-a(node-b(node-d,-),node-c)" {
		t.Fatalf("tree %+v", tr)
	}
	md, ok := mountOf(nodes["node-d"].Agent, info.Rev)
	if !ok || md.FromStore != 0 || md.FromParent == 0 {
		t.Fatalf("node-d: %+v (found %v): want every byte from node-a", md, ok)
	}
}

// BenchmarkCodeTreeNodes is BenchmarkCodeTree on the several-nodes rig
// (ADR 13) through Nodes.DistributeTree, as `hoard bench all --only
// tree-scale` runs it at more node counts: 1, 4 and 8 agents, each in its
// own network namespace behind its own 400 Mbit/s link, the store behind
// a shared 160 Mbit/s link (tc), each agent a `hoard agent` process. One
// instance per node, all started at once, each reads the package's whole
// 32 MiB model; bytes leaving the store are read from the agents'
// metrics. One node alone is the reference time (FaaSNet: 1.6x of it for
// 2,500 containers).
//
//	go test -tags integration -run '^$' -bench CodeTreeNodes -benchtime 1x ./internal/rig
func BenchmarkCodeTreeNodes(b *testing.B) {
	for _, run := range []struct {
		mode  string
		nodes int
	}{{"tree", 1}, {"store", 4}, {"tree", 4}, {"store", 8}, {"tree", 8}} {
		mode, nodes := run.mode, run.nodes
		b.Run(fmt.Sprintf("%s/nodes=%d", mode, nodes), func(b *testing.B) {
			n := startNodes(b, nodes, func(c *NodesConfig) {
				if mode == "store" {
					c.AgentEnv = append(c.AgentEnv, agent.CodeRelayEnv+"=off")
				}
			})
			var total time.Duration
			var fromStore, size int64
			it := 0
			for b.Loop() {
				it++
				pkg, want := treeBenchPackage(b, uint64(it), 11, nodes)
				d, err := n.DistributeTree(context.Background(), pkg.Data, want, TreeRun{})
				if err != nil {
					b.Fatal(err)
				}
				if d.OK != nodes {
					b.Fatalf("%d of %d nodes read the model (%d corrupted, %d failed)", d.OK, nodes, d.Corrupted, d.Failed)
				}
				total += d.AllRead
				size += d.Size
				fromStore += d.FromStore
			}
			b.ReportMetric(float64(total.Milliseconds())/float64(it), "ms/all-read")
			b.ReportMetric(float64(fromStore)/float64(size), "packages-from-store")
			if tr := n.Controller.Apps()[0].Tree; tr != nil {
				b.Logf("tree %s", tr.Shape)
			}
		})
	}
}

// packFiles packs files (name to content) in the block format.
func packFiles(t testing.TB, files map[string][]byte) *appspec.Package {
	t.Helper()
	pkg, err := PackFiles(t.TempDir(), files)
	if err != nil {
		t.Fatal(err)
	}
	return pkg
}

// treeBenchPackage packs the tree benchmarks' application
// (TreeModelPackage) with a 32 MiB model; want is the model's SHA-256.
func treeBenchPackage(tb testing.TB, seed, stream uint64, nodes int) (pkg *appspec.Package, want [32]byte) {
	tb.Helper()
	pkg, want, err := TreeModelPackage(tb.TempDir(), seed, stream, nodes, 32<<20)
	if err != nil {
		tb.Fatal(err)
	}
	return pkg, want
}
