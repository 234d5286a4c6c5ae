package bench

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/hoard-io/hoard/internal/agent"
	"github.com/hoard-io/hoard/internal/hostnet"
	"github.com/hoard-io/hoard/internal/rig"
)

var refFaaSNetScale = Reference{Paper: "FaaSNet", Figure: "Fig. 14(a), §4.3 (2,500 containers on 1,000 VMs)", Section: "§4.3", Citation: CiteFaaSNet}

func treeScaleExperiment() Experiment {
	return Experiment{
		Name:       "tree-scale",
		Title:      "Provisioning N nodes at once down the function tree against every node reading from the store",
		Reproduces: []Reference{refFaaSNetScale},
		Quick:      Options{Iterations: 1},
		Full:       Options{Iterations: 1},
		Run:        runTreeScaleExperiment,
	}
}

// treeScaleNodes are the node counts of a full run and of a quick one.
var (
	treeScaleNodes      = []int{1, 2, 4, 8, 16, 32}
	treeScaleQuickNodes = []int{1, 2, 4}
)

// treeScaleModel is the artifact's size: FaaSNet's images are 428 MB to
// 1 GiB; a package is at most 64 MiB here, and 32 nodes share two cores.
const treeScaleModel = 32 << 20

// TreeScaleMethod says what the tree-scale experiment measures.
const TreeScaleMethod = "N node agents (N = 1, 2, 4, 8, 16, 32; 1, 2, 4 with --quick), each a `hoard agent` process in its own network " +
	"namespace behind a 400 Mbit/s link, the store behind one shared 160 Mbit/s link with 2 ms each way (the several-nodes rig, " +
	"ADR 13). A package holding a 32 MiB random model (scaled down from FaaSNet's 428 MB–1 GiB images for this machine) is " +
	"deployed and its function invoked once per node at once: each node starts one instance from the lazily mounted package and " +
	"reads the whole model, its SHA-256 checked. Ready is when the last instance began to run; all read when the last one had " +
	"read the whole model. Three ways, each on a fresh rig: the function tree with blocks pushed down as they complete (hoard's " +
	"default), the tree with blocks pulled from the parent on demand only (HOARD_CODE_PUSH=off), and every node reading from the " +
	"store (HOARD_CODE_RELAY=off). Bytes leaving the store from the agents' hoard_agent_lazy_code_relay_bytes_total{from=\"store\"}. " +
	"One node alone is the reference time."

type treeScaleWay struct {
	name, label string
	env         []string
}

var treeScaleWays = []treeScaleWay{
	{"tree", "function tree, blocks pushed", nil},
	{"pull", "function tree, blocks pulled", []string{agent.CodePushEnv + "=off"}},
	{"store", "every node from the store", []string{agent.CodeRelayEnv + "=off"}},
}

func runTreeScaleExperiment(ctx context.Context, o Options) (*Result, error) {
	started := time.Now()
	say := func(format string, args ...any) {
		fmt.Fprintf(o.Env.progress(), "tree-scale: "+format+"\n", args...)
	}
	if err := hostnet.Available(ctx); err != nil {
		return nil, fmt.Errorf("the several-nodes rig: %w", err)
	}
	counts := treeScaleNodes
	if o.Quick {
		counts = treeScaleQuickNodes
	}
	got := map[string]map[int]*rig.TreeDistribution{}
	var reached int
	var stopped error
	for _, nodes := range counts {
		for _, way := range treeScaleWays {
			if nodes == 1 && way.name != "tree" {
				continue // one node has no parent to read from
			}
			d, err := treeScaleRun(ctx, o.Env, nodes, way, uint64(nodes))
			if err != nil {
				stopped = fmt.Errorf("%d nodes, %s: %w", nodes, way.label, err)
				break
			}
			say("%d nodes, %s: ready %v, all read %v, %.2f packages from the store, %.2f from agents of which %.2f pushed",
				nodes, way.label, d.AllReady.Round(time.Millisecond), d.AllRead.Round(time.Millisecond),
				float64(d.FromStore)/float64(d.Size), float64(d.FromAgents)/float64(d.Size), float64(d.Pushed)/float64(d.Size))
			if got[way.name] == nil {
				got[way.name] = map[int]*rig.TreeDistribution{}
			}
			got[way.name][nodes] = d
		}
		if stopped != nil {
			say("stopped: %v", stopped)
			break
		}
		reached = nodes
	}
	one := got["tree"][1]
	if one == nil {
		return nil, stopped
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	cell := func(way string, nodes int, f func(*rig.TreeDistribution) string) string {
		if d := got[way][nodes]; d != nil {
			return f(d)
		}
		return "—"
	}
	var rows [][]string
	var cats []string
	series := map[string][]*float64{}
	for _, nodes := range counts {
		if got["tree"][nodes] == nil {
			continue
		}
		t := got["tree"][nodes]
		cats = append(cats, fmt.Sprintf("N=%d", nodes))
		for _, w := range treeScaleWays {
			if d := got[w.name][nodes]; d != nil {
				series[w.name] = append(series[w.name], F(ms(d.AllRead)))
			} else {
				series[w.name] = append(series[w.name], nil)
			}
		}
		rows = append(rows, []string{fmt.Sprint(nodes),
			fmt.Sprintf("%.0f", ms(t.AllReady)), fmt.Sprintf("%.0f", ms(t.AllRead)), fmt.Sprintf("%.2f", ms(t.AllRead)/ms(one.AllRead)),
			fmt.Sprintf("%.2f", float64(t.FromStore)/float64(t.Size)), fmt.Sprintf("%.2f (%.2f)", float64(t.FromAgents)/float64(t.Size), float64(t.Pushed)/float64(t.Size)),
			cell("pull", nodes, func(d *rig.TreeDistribution) string { return fmt.Sprintf("%.0f", ms(d.AllRead)) }),
			cell("store", nodes, func(d *rig.TreeDistribution) string { return fmt.Sprintf("%.0f", ms(d.AllRead)) }),
			cell("store", nodes, func(d *rig.TreeDistribution) string { return fmt.Sprintf("%.2f", float64(d.FromStore)/float64(d.Size)) }),
			cell("store", nodes, func(d *rig.TreeDistribution) string { return fmt.Sprintf("%.1f", ms(d.AllRead)/ms(t.AllRead)) }),
		})
	}
	res := &Result{Experiment: "tree-scale", Title: treeScaleExperiment().Title, Reproduces: []Reference{refFaaSNetScale},
		Status: StatusOK, Quick: o.Quick, StartedAt: started, Machine: DescribeMachine(), Method: TreeScaleMethod,
		Settings: RunSettings{Link: "several-nodes rig: nodes 400 Mbit/s, store 160 Mbit/s shared, 2 ms", ObjectSizes: []int64{treeScaleModel},
			Iterations: []Count{{What: "distributions per node count and way", N: 1}},
			Other:      []Setting{{Name: "nodes", Value: fmt.Sprintf("%v, one instance each; reached %d", counts, reached)}}},
		Tables: []Table{{ID: "tree-scale", Title: "N nodes read a 32 MiB model at once",
			Columns: []string{"N", "tree: all ready (ms)", "tree: all read (ms)", "tree ÷ one node", "tree: packages from the store",
				"tree: packages from agents (pushed)", "pulled only: all read (ms)", "from the store: all read (ms)", "from the store: packages from the store", "from the store ÷ tree"},
			Rows:    rows,
			Caption: "A fresh rig per N and way; \"from agents\" sums what the nodes took from their parents, \"pushed\" the part of it pushed (N−1 packages at most are needed)."}},
		Plots: []Plot{{Kind: PlotBar, ID: "tree-scale", Title: "Time until every node has read the whole 32 MiB model", Unit: "ms", YLabel: "ms",
			Categories: cats, Series: []Series{
				{Label: treeScaleWays[0].label, Values: series["tree"]},
				{Label: treeScaleWays[1].label, Values: series["pull"]},
				{Label: treeScaleWays[2].label, Values: series["store"]}},
			Caption: "The shared store link caps every node reading from the store; the tree takes one package from it."}},
	}
	if big := got["tree"][reached]; big != nil && reached > 1 {
		res.Rows = append(res.Rows,
			Compare(fmt.Sprintf("all read at N=%d ÷ one node alone", reached), "x", F(1.6), F(ms(big.AllRead)/ms(one.AllRead)), LowerIsBetter, 0.1,
				"FaaSNet §1: 2,500 containers in 1.6× one's time", "the issue's goal: ≤ 1.3×"))
		if st := got["store"][reached]; st != nil {
			res.Rows = append(res.Rows,
				Compare(fmt.Sprintf("every node from the store ÷ tree at N=%d", reached), "x", F(13.4), F(ms(st.AllRead)/ms(big.AllRead)), HigherIsBetter, 0.1,
					"FaaSNet Fig. 14(a): 13.4× the registry baseline", "the issue's goal: ≥ 10×"),
				Compare(fmt.Sprintf("packages leaving the store at N=%d, tree", reached), "packages", F(1), F(float64(big.FromStore)/float64(big.Size)), LowerIsBetter, 0.05,
					"one copy, whatever N", fmt.Sprintf("every node from the store: %.2f", float64(st.FromStore)/float64(st.Size))))
		}
		if pl := got["pull"][reached]; pl != nil {
			res.Rows = append(res.Rows,
				Compare(fmt.Sprintf("all read at N=%d, pushed ÷ pulled", reached), "x", nil, F(ms(big.AllRead)/ms(pl.AllRead)), LowerIsBetter, 0,
					"FaaSNet §3 (blocks forwarded as they complete)", ""))
		}
	}
	res.Seconds = time.Since(started).Seconds()
	if stopped != nil {
		return res, stopped
	}
	return res, nil
}

// treeScaleRun distributes one package to nodes nodes on a fresh rig.
func treeScaleRun(ctx context.Context, env Env, nodes int, way treeScaleWay, seed uint64) (*rig.TreeDistribution, error) {
	// "hbs": this experiment's prefix.
	n, dir, err := startTreeRig(ctx, env, nodes, "hbs", way.env)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	defer n.Close()
	pdir, err := os.MkdirTemp(dir, "pkg-")
	if err != nil {
		return nil, err
	}
	pkg, want, err := rig.TreeModelPackage(pdir, seed, 23, nodes, treeScaleModel)
	if err != nil {
		return nil, err
	}
	d, err := n.DistributeTree(ctx, pkg.Data, want, rig.TreeRun{})
	if err != nil {
		return nil, err
	}
	if d.OK != nodes {
		return d, fmt.Errorf("%d of %d nodes read the model (%d with the wrong digest, %d failed)", d.OK, nodes, d.Corrupted, d.Failed)
	}
	return d, nil
}
