package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"time"

	"github.com/hoard-io/hoard/internal/hostnet"
	"github.com/hoard-io/hoard/internal/rig"
)

// CiteFaaSNet is FaaSNet's reference.
const CiteFaaSNet = "A. Wang, S. Chang, H. Tian, H. Wang, H. Yang, H. Li, R. Du, Y. Cheng: FaaSNet: Scalable and Fast Provisioning of Custom Serverless Container Runtimes at Alibaba Cloud Function Compute. USENIX ATC 2021"

var refFaaSNetFT = Reference{Paper: "FaaSNet", Figure: "§3.3 (FT fault tolerance)", Section: "§3.3", Citation: CiteFaaSNet}

func treeFailureExperiment() Experiment {
	return Experiment{
		Name:       "tree-failure",
		Title:      "A node killed in the middle of a distribution down the function tree: time to recover, nothing corrupted",
		Reproduces: []Reference{refFaaSNetFT},
		Quick:      Options{Iterations: 1},
		Full:       Options{Iterations: 3},
		Run:        runTreeFailureExperiment,
	}
}

// TreeFailureMethod says what the tree-failure experiment measures.
const TreeFailureMethod = "Six node agents, each a `hoard agent` process in its own network namespace behind a 400 Mbit/s link, " +
	"the store behind a shared 160 Mbit/s link (the several-nodes rig, ADR 13). Each round deploys a package holding a 32 MiB " +
	"random model and invokes its function once per node at once: each node starts an instance from the lazily mounted " +
	"package and reads the whole model, a MiB per 200 ms at most (blocks are pushed down the tree as a parent gets them, so the " +
	"parents must still be reading at the kill), its blocks relayed down the function tree. The round without a kill is the " +
	"baseline; in the next round (a new version, a new tree) the tree's middle node (a parent with a parent) is killed " +
	"(SIGKILL of its agent) once its child has an eighth of the package from it. Each distribution on a fresh rig. Recovery is the time from the kill to " +
	"the child's next bytes from another agent (it turns at once to the next agent up its chain, then reattaches where the " +
	"controller's rebalanced tree puts it); each surviving node's model is checked against its SHA-256."

func runTreeFailureExperiment(ctx context.Context, o Options) (*Result, error) {
	started := time.Now()
	rounds := max(o.Iterations, 1)
	say := func(format string, args ...any) {
		fmt.Fprintf(o.Env.progress(), "tree-failure: "+format+"\n", args...)
	}
	if err := hostnet.Available(ctx); err != nil {
		return nil, fmt.Errorf("the several-nodes rig: %w", err)
	}
	var base, killed []*rig.TreeDistribution
	for round := range rounds {
		b, k, err := treeFailureRound(ctx, o.Env, uint64(round+1))
		if err != nil {
			return nil, err
		}
		say("round %d: baseline %v; killed %s of %s: resumed %v after, child done %v after, all %v (tree %s after %v); corrupted %d",
			round+1, b.AllRead.Round(time.Millisecond), k.Victim, k.Shape, k.KillToResume.Round(time.Millisecond),
			k.KillToChild.Round(time.Millisecond), k.AllRead.Round(time.Millisecond), k.After, k.KillToTree.Round(time.Millisecond), k.Corrupted)
		base, killed = append(base, b), append(killed, k)
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	median := func(ds []*rig.TreeDistribution, f func(*rig.TreeDistribution) time.Duration) float64 {
		v := make([]float64, len(ds))
		for i, d := range ds {
			v[i] = ms(f(d))
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	var corrupted, survivorsShort, fromStore int64
	var rows [][]string
	for i := range base {
		b, k := base[i], killed[i]
		corrupted += int64(b.Corrupted + k.Corrupted)
		survivors := len(k.SurvivorsOK)
		if k.SurvivorsOK[k.Victim] {
			survivors-- // its read ended before the kill
		}
		survivorsShort += int64(treeFailureNodes - 1 - survivors)
		fromStore += k.ChildFromStore
		rows = append(rows, []string{fmt.Sprint(i + 1), fmt.Sprintf("%.0f", ms(b.AllRead)), k.Shape, k.Victim,
			fmt.Sprintf("%.1f", float64(k.ChildAtKill)/(1<<20)), fmt.Sprintf("%.0f", ms(k.KillToResume)), fmt.Sprintf("%.0f", ms(k.KillToChild)),
			fmt.Sprintf("%.0f", ms(k.AllRead)), fmt.Sprintf("%.0f", ms(k.KillToTree)), k.After, k.NewParent, k.ChildReadsFrom, fmt.Sprint(b.Corrupted + k.Corrupted)})
	}
	allBase := median(base, func(d *rig.TreeDistribution) time.Duration { return d.AllRead })
	allKill := median(killed, func(d *rig.TreeDistribution) time.Duration { return d.AllRead })
	resume := median(killed, func(d *rig.TreeDistribution) time.Duration { return d.KillToResume })
	treeFix := median(killed, func(d *rig.TreeDistribution) time.Duration { return d.KillToTree })
	res := &Result{Experiment: "tree-failure", Title: treeFailureExperiment().Title, Reproduces: []Reference{refFaaSNetFT},
		Status: StatusOK, Quick: o.Quick, StartedAt: started, Machine: DescribeMachine(), Method: TreeFailureMethod,
		Settings: RunSettings{Link: "several-nodes rig: nodes 400 Mbit/s, store 160 Mbit/s shared, 2 ms", ObjectSizes: []int64{32 << 20},
			Iterations: []Count{{What: "round pairs (baseline, kill)", N: rounds}},
			Other:      []Setting{{Name: "nodes", Value: "6, one instance each"}, {Name: "killed", Value: "the tree's middle node, SIGKILL"}}},
		Tables: []Table{{ID: "tree-failure", Title: "Distributions of a 32 MiB model to six nodes, without and with a node killed",
			Columns: []string{"round", "baseline all read (ms)", "tree", "killed", "child had (MiB)", "kill to resume (ms)",
				"kill to child done (ms)", "all survivors read (ms)", "kill to tree rebalanced (ms)", "tree after", "child's parent there", "child read from at the end", "corrupted"},
			Rows:    rows,
			Caption: "Each distribution on a fresh rig; after the kill the child reads from the next node up its chain, then from where the rebalanced tree puts it, if it is still reading then."}},
	}
	var cats []string
	var vb, vk, vr []*float64
	for i := range base {
		cats = append(cats, fmt.Sprintf("round %d", i+1))
		vb, vk, vr = append(vb, F(ms(base[i].AllRead))), append(vk, F(ms(killed[i].AllRead))), append(vr, F(ms(killed[i].KillToResume)))
	}
	res.Plots = append(res.Plots, Plot{Kind: PlotBar, ID: "tree-failure", Title: "Six nodes read a 32 MiB model down the function tree",
		Unit: "ms", YLabel: "ms", Categories: cats, Series: []Series{
			{Label: "all read, no kill", Values: vb}, {Label: "all survivors read, middle node killed", Values: vk},
			{Label: "kill to the child's next bytes", Values: vr}},
		Caption: "Baseline and kill in the same round, on the same rig."})
	if corrupted != 0 || survivorsShort != 0 {
		return res, fmt.Errorf("%d reads with the wrong digest, %d surviving nodes without the whole model", corrupted, survivorsShort)
	}
	res.Rows = append(res.Rows,
		Compare("kill to the child's next bytes from the tree (median)", "ms", nil, F(resume), LowerIsBetter, 0, "FaaSNet §3.3 (no figure)",
			fmt.Sprintf("the controller's tree without the killed node after %.0f ms; the child took %d bytes from the store", treeFix, fromStore)),
		Compare("all surviving nodes read, with a kill / without (median)", "x", nil, F(allKill/allBase), LowerIsBetter, 0, "FaaSNet §3.3 (no figure)",
			fmt.Sprintf("%.0f ms against %.0f ms, same rig", allKill, allBase)),
		Compare("reads with the wrong digest", "reads", F(0), F(float64(corrupted)), LowerIsBetter, 0, "nothing corrupted", ""))
	res.Seconds = time.Since(started).Seconds()
	return res, nil
}

// treeFailurePace is how long each instance sleeps after each MiB it
// reads, in both rounds: long enough that the killed node is still
// reading when its child has an eighth of the package.
const treeFailurePace = 200 * time.Millisecond

// treeFailureNodes is the rig's size: node-0(node-1(node-3,node-4),
// node-2(node-5,-)), whose middle node node-1 is killed.
const treeFailureNodes = 6

// treeFailureRound runs a baseline distribution and one with a kill,
// each on a fresh rig (the second version's instances would otherwise
// share the nodes with the first's).
func treeFailureRound(ctx context.Context, env Env, seed uint64) (base, killed *rig.TreeDistribution, err error) {
	for i, kill := range []bool{false, true} {
		d, err := treeFailureRun(ctx, env, seed, uint64(17+i), kill)
		if err != nil {
			return nil, nil, err
		}
		if kill {
			killed = d
		} else {
			base = d
		}
	}
	return base, killed, nil
}

func treeFailureRun(ctx context.Context, env Env, seed, stream uint64, kill bool) (*rig.TreeDistribution, error) {
	n, dir, err := startTreeRig(ctx, env, treeFailureNodes, "hbt", nil)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	defer n.Close()
	pdir, err := os.MkdirTemp(dir, "pkg-")
	if err != nil {
		return nil, err
	}
	pkg, want, err := rig.TreeModelPackage(pdir, seed, stream, treeFailureNodes, 32<<20)
	if err != nil {
		return nil, err
	}
	return n.DistributeTree(ctx, pkg.Data, want, rig.TreeRun{Kill: kill, Pace: treeFailurePace})
}

// startTreeRig starts the several-nodes rig of the tree benchmarks:
// nodes agents behind 400 Mbit/s links, the store behind one shared
// 160 Mbit/s link with 2 ms each way, the agents' environment extended by
// agentEnv. prefix keeps each experiment's namespaces apart from `hoard
// up`'s and the tests'. The caller closes the rig, then removes dir.
func startTreeRig(ctx context.Context, env Env, nodes int, prefix string, agentEnv []string, opts ...func(*rig.NodesConfig)) (*rig.Nodes, string, error) {
	hoardBin := env.HoardBinary
	if hoardBin == "" {
		hoardBin = os.Getenv("HOARD_BIN")
	}
	if hoardBin == "" {
		return nil, "", errors.New("the hoard binary is unknown (HOARD_BIN)")
	}
	dir, err := os.MkdirTemp(env.TempDir, "hoard-bench-tree-")
	if err != nil {
		return nil, "", err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.RemoveAll(dir)
		return nil, "", err
	}
	log := env.Log
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	secret := func() string {
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		return hex.EncodeToString(b)
	}
	sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cfg := rig.NodesConfig{
		Net:                hostnet.Config{Nodes: nodes, Prefix: prefix, NodeRate: 50_000_000, StoreRate: 20_000_000},
		Dir:                dir,
		HoardBin:           hoardBin,
		MinIOBin:           env.MinIOBinary,
		ControllerListener: ln,
		StoreAccessKey:     "benchtree", StoreSecretKey: secret(),
		ControllerToken: secret(), AgentToken: secret(), EtcdRootPassword: secret(),
		StoreLatency: 2 * time.Millisecond,
		AgentEnv:     agentEnv,
	}
	for _, o := range opts {
		o(&cfg)
	}
	n, err := rig.StartNodes(sctx, cfg, log)
	if err != nil {
		ln.Close()
		os.RemoveAll(dir)
		return nil, "", err
	}
	return n, dir, nil
}
