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
		Quick:      Options{Iterations: 1, Sizes: []int64{treeScaleQuickModel}, Nodes: treeScaleQuickNodes},
		Full:       Options{Iterations: 1, Sizes: []int64{treeScaleModel}, Nodes: treeScaleNodes},
		Run:        runTreeScaleExperiment,
	}
}

// treeScaleNodes are the node counts of a full run and of a quick one
// (--nodes replaces them).
var (
	treeScaleNodes      = []int{1, 2, 4, 8, 16, 32}
	treeScaleQuickNodes = []int{1, 2, 4}
)

// treeScaleModel and treeScaleQuickModel are the model's size in a full
// and a quick run (--sizes replaces it: the first size given).
// FaaSNet's images are 428 MB to 1 GiB; 32 nodes share two cores here.
const (
	treeScaleModel      = 128 << 20
	treeScaleQuickModel = 32 << 20
)

// TreeScaleMethod says what the tree-scale experiment measures.
const TreeScaleMethod = "N node agents (N = 1, 2, 4, 8, 16, 32; 1, 2, 4 with --quick; --nodes replaces them), each a `hoard agent` process in its own network " +
	"namespace behind a 400 Mbit/s link, the store behind one shared 160 Mbit/s link with 2 ms each way (the several-nodes rig, " +
	"ADR 13). A package holding a random model (128 MiB; 32 MiB with --quick; --sizes replaces it) is " +
	"deployed and its function invoked once per node at once: each node starts one instance from the lazily mounted package and " +
	"reads the whole model, its SHA-256 checked. Ready is when the last instance began to run; all whole when the last node's agent " +
	"held every block of the package (api.CodeInfo.Whole: blocks from other agents each matched against its SHA-256, whoever asked " +
	"for them, the instance or the parent's pushes); all read when the last instance had read and hashed the whole model. Five ways, " +
	"each on a fresh rig: the function tree with blocks pushed down as they complete (hoard's " +
	"default: the root fetches what its instance reads), the same with the root fetching the whole package ahead of its readers " +
	"(HOARD_CODE_FETCH_AHEAD=on), the same with the instances starting and answering without reading the model (provisioning alone; not with --quick), the tree with blocks pulled from the parent on demand only (HOARD_CODE_PUSH=off; not with --quick), and every node reading from the " +
	"store (HOARD_CODE_RELAY=off). Bytes leaving the store from the agents' hoard_agent_lazy_code_relay_bytes_total{from=\"store\"}; " +
	"the agents' CPU time from /proc/PID/stat, the machine's busy cores from /proc/stat (every process, other work included) and its " +
	"load average at the end of each distribution. One node alone is the reference time."

type treeScaleWay struct {
	name, label string
	env         []string
	noRead      bool // the instances do not read the model
}

var treeScaleWays = []treeScaleWay{
	{"tree", "function tree, blocks pushed", nil, false},
	{"ahead", "function tree, root fetching ahead", []string{agent.CodeFetchAheadEnv + "=on"}, false},
	{"provision", "function tree, root fetching ahead, instances not reading", []string{agent.CodeFetchAheadEnv + "=on"}, true},
	{"pull", "function tree, blocks pulled", []string{agent.CodePushEnv + "=off"}, false},
	{"store", "every node from the store", []string{agent.CodeRelayEnv + "=off"}, false},
}

func runTreeScaleExperiment(ctx context.Context, o Options) (*Result, error) {
	started := time.Now()
	say := func(format string, args ...any) {
		fmt.Fprintf(o.Env.progress(), "tree-scale: "+format+"\n", args...)
	}
	if err := hostnet.Available(ctx); err != nil {
		return nil, fmt.Errorf("the several-nodes rig: %w", err)
	}
	counts := o.Nodes
	if len(counts) == 0 {
		counts = treeScaleNodes
	}
	model := treeScaleModel
	if len(o.Sizes) > 0 {
		model = int(o.Sizes[0])
	}
	if model < 1<<20 || model > 1<<30 {
		return nil, fmt.Errorf("a model of %s: want 1 MiB to 1 GiB", FormatSize(int64(model)))
	}
	got := map[string]map[int]*rig.TreeDistribution{}
	var reached int
	var stopped error
	for _, nodes := range counts {
		for _, way := range treeScaleWays {
			if nodes == 1 && way.name != "tree" && way.name != "ahead" && way.name != "provision" {
				continue // one node has no parent to read from
			}
			if o.Quick && (way.name == "pull" || way.name == "provision") {
				continue // the quick run's time as before this way was added
			}
			d, err := treeScaleRun(ctx, o.Env, nodes, way, uint64(nodes), model)
			if err != nil {
				stopped = fmt.Errorf("%d nodes, %s: %w", nodes, way.label, err)
				break
			}
			say("%d nodes, %s: ready %v, all whole %v (%d nodes), all read %v, %.2f packages from the store, %.2f from agents of which %.2f pushed; "+
				"agents' CPU %.1f s (largest %.2f s), machine %.2f cores busy, load %.1f",
				nodes, way.label, d.AllReady.Round(time.Millisecond), d.AllWhole.Round(time.Millisecond), d.Whole, d.AllRead.Round(time.Millisecond),
				float64(d.FromStore)/float64(d.Size), float64(d.FromAgents)/float64(d.Size), float64(d.Pushed)/float64(d.Size),
				d.AgentCPU.Seconds(), d.AgentCPUMax.Seconds(), d.HostBusy, d.Load1)
			for _, w := range d.NotWhole {
				say("%d nodes, %s: not whole: %s", nodes, way.label, w)
			}
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
	one := got["tree"][counts[0]]
	if one == nil {
		return nil, stopped
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	// alone is the reference of a way: itself at the first node count
	// (one node), the default tree's for the ways one node has not.
	alone := func(way string) *rig.TreeDistribution {
		if d := got[way][counts[0]]; d != nil {
			return d
		}
		return one
	}
	var rows [][]string
	var cats []string
	wholeSeries, readSeries := map[string][]*float64{}, map[string][]*float64{}
	for _, nodes := range counts {
		if got["tree"][nodes] == nil {
			continue
		}
		cats = append(cats, fmt.Sprintf("N=%d", nodes))
		for _, w := range treeScaleWays {
			d := got[w.name][nodes]
			var wv, rv *float64
			if d != nil {
				wv = F(ms(d.AllWhole))
				if !w.noRead {
					rv = F(ms(d.AllRead))
				}
			}
			wholeSeries[w.name] = append(wholeSeries[w.name], wv)
			readSeries[w.name] = append(readSeries[w.name], rv)
			if d == nil {
				continue
			}
			wholeCell := fmt.Sprintf("%.0f", ms(d.AllWhole))
			if d.Whole < nodes {
				wholeCell += fmt.Sprintf(" (%d of %d nodes)", d.Whole, nodes)
			}
			ref := alone(w.name)
			readCell, readRatio := fmt.Sprintf("%.0f", ms(d.AllRead)), fmt.Sprintf("%.2f", ms(d.AllRead)/ms(ref.AllRead))
			if w.noRead {
				readCell, readRatio = "—", "—"
			}
			rows = append(rows, []string{fmt.Sprint(nodes), w.label,
				fmt.Sprintf("%.0f", ms(d.AllReady)), wholeCell, fmt.Sprintf("%.2f", ms(d.AllWhole)/ms(ref.AllWhole)),
				readCell, readRatio,
				fmt.Sprintf("%.2f", float64(d.FromStore)/float64(d.Size)),
				fmt.Sprintf("%.2f (%.2f)", float64(d.FromAgents)/float64(d.Size), float64(d.Pushed)/float64(d.Size)),
				fmt.Sprintf("%.1f", d.AgentCPU.Seconds()), fmt.Sprintf("%.2f", d.AgentCPUMax.Seconds()),
				fmt.Sprintf("%.2f", d.HostBusy), fmt.Sprintf("%.1f", d.Load1)})
		}
	}
	size := FormatSize(int64(model))
	var wholeBars, readBars []Series
	for _, w := range treeScaleWays {
		wholeBars = append(wholeBars, Series{Label: w.label, Values: wholeSeries[w.name]})
		readBars = append(readBars, Series{Label: w.label, Values: readSeries[w.name]})
	}
	res := &Result{Experiment: "tree-scale", Title: treeScaleExperiment().Title, Reproduces: []Reference{refFaaSNetScale},
		Status: StatusOK, Quick: o.Quick, StartedAt: started, Machine: DescribeMachine(), Method: TreeScaleMethod,
		Settings: RunSettings{Link: "several-nodes rig: nodes 400 Mbit/s, store 160 Mbit/s shared, 2 ms", ObjectSizes: []int64{int64(model)},
			Iterations: []Count{{What: "distributions per node count and way", N: 1}},
			Other:      []Setting{{Name: "nodes", Value: fmt.Sprintf("%v, one instance each; reached %d", counts, reached)}}},
		Tables: []Table{{ID: "tree-scale", Title: fmt.Sprintf("N nodes provisioned with a %s model at once", size),
			Columns: []string{"N", "way", "all ready (ms)", "all whole (ms)", "whole ÷ one node", "all read (ms)", "read ÷ one node",
				"packages from the store", "packages from agents (pushed)", "agents' CPU (s)", "largest agent's CPU (s)", "machine: cores busy", "load average"},
			Rows: rows,
			Caption: "A fresh rig per N and way. Whole: the last node's agent held every block of the package; read: the last instance had read and hashed the model. " +
				"One node: the same way on one node (the default tree's for the ways one node has not). \"From agents\" sums what the nodes took from their parents, " +
				"\"pushed\" the part of it pushed (N−1 packages at most are needed). Cores busy counts every process on the machine, other work included; " +
				"the instances' own processes (cachelets, Python workers) are not in the agents' CPU."}},
		Plots: []Plot{{Kind: PlotBar, ID: "tree-scale", Title: fmt.Sprintf("Time until every node holds the whole %s package", size), Unit: "ms", YLabel: "ms",
			Categories: cats, Series: wholeBars,
			Caption: "The shared store link caps every node reading from the store; the tree takes one package from it."},
			{Kind: PlotBar, ID: "tree-scale-read", Title: fmt.Sprintf("Time until every instance has read the whole %s model", size), Unit: "ms", YLabel: "ms",
				Categories: cats, Series: readBars,
				Caption: "Reading adds the instances' own work: N Python processes reading through FUSE and hashing on this machine's cores."}},
	}
	st := got["store"][reached]
	for _, w := range treeScaleWays[:3] {
		big := got[w.name][reached]
		if big == nil || reached <= counts[0] {
			continue
		}
		ref := alone(w.name)
		if counts[0] == 1 {
			res.Rows = append(res.Rows,
				Compare(fmt.Sprintf("all whole at N=%d ÷ one node alone, %s", reached, w.label), "x", F(1.6), F(ms(big.AllWhole)/ms(ref.AllWhole)), LowerIsBetter, 0.1,
					"FaaSNet §1: 2,500 containers in 1.6× one's time", "the issue's goal: ≤ 1.3×"))
			if !w.noRead {
				res.Rows = append(res.Rows,
					Compare(fmt.Sprintf("all read at N=%d ÷ one node alone, %s", reached, w.label), "x", F(1.6), F(ms(big.AllRead)/ms(ref.AllRead)), LowerIsBetter, 0.1,
						"FaaSNet §1: 2,500 containers in 1.6× one's time", "the issue's goal: ≤ 1.3×; reading adds N instances hashing on this machine's cores"))
			}
		}
		if st != nil {
			res.Rows = append(res.Rows,
				Compare(fmt.Sprintf("every node from the store ÷ %s at N=%d, all whole", w.label, reached), "x", F(13.4), F(ms(st.AllWhole)/ms(big.AllWhole)), HigherIsBetter, 0.1,
					"FaaSNet Fig. 14(a): 13.4× the registry baseline", "the issue's goal: ≥ 10×"))
			if !w.noRead {
				res.Rows = append(res.Rows,
					Compare(fmt.Sprintf("every node from the store ÷ %s at N=%d, all read", w.label, reached), "x", F(13.4), F(ms(st.AllRead)/ms(big.AllRead)), HigherIsBetter, 0.1,
						"FaaSNet Fig. 14(a): 13.4× the registry baseline", "the issue's goal: ≥ 10×"))
			}
		}
	}
	if big := got["tree"][reached]; big != nil && reached > 1 {
		if st != nil {
			res.Rows = append(res.Rows,
				Compare(fmt.Sprintf("packages leaving the store at N=%d, tree", reached), "packages", F(1), F(float64(big.FromStore)/float64(big.Size)), LowerIsBetter, 0.05,
					"one copy, whatever N", fmt.Sprintf("every node from the store: %.2f", float64(st.FromStore)/float64(st.Size))))
		}
		if pl := got["pull"][reached]; pl != nil {
			res.Rows = append(res.Rows,
				Compare(fmt.Sprintf("all whole at N=%d, pushed ÷ pulled", reached), "x", nil, F(ms(big.AllWhole)/ms(pl.AllWhole)), LowerIsBetter, 0,
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
func treeScaleRun(ctx context.Context, env Env, nodes int, way treeScaleWay, seed uint64, model int) (*rig.TreeDistribution, error) {
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
	pkg, want, err := rig.TreeModelPackage(pdir, seed, 23, nodes, model)
	if err != nil {
		return nil, err
	}
	d, err := n.DistributeTree(ctx, pkg.Data, want, rig.TreeRun{NoRead: way.noRead})
	if err != nil {
		return nil, err
	}
	if d.OK != nodes {
		return d, fmt.Errorf("%d of %d nodes read the model (%d with the wrong digest, %d failed, the first: %s)", d.OK, nodes, d.Corrupted, d.Failed, d.FirstFailure)
	}
	return d, nil
}
