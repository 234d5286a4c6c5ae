package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/appspec"
	"github.com/hoard-io/hoard/internal/hostnet"
	"github.com/hoard-io/hoard/internal/rig"
	"github.com/hoard-io/hoard/internal/store"
)

var refInfiniCacheNodes = Reference{Paper: "InfiniCache", Figure: "large objects served by many instances' links at once", Section: "design: erasure coding over function instances (slides)",
	Citation: refInfiniCache.Citation}

func erasureNodesExperiment() Experiment {
	return Experiment{
		Name:       "erasure-nodes",
		Title:      "A large object read by an instance on every node at once: erasure-coded over the nodes against held whole by its owner",
		Reproduces: []Reference{refInfiniCacheNodes},
		Quick:      Options{Iterations: 2, Sizes: []int64{32 << 20}},
		Full:       Options{Iterations: 5, Sizes: []int64{64 << 20}},
		Run:        runErasureNodesExperiment,
	}
}

// erasureNodesCount is the nodes of the run, one instance of each
// application on each; RS(4+2) puts one shard on each node.
const (
	erasureNodesCount  = 6
	erasureNodesShards = "4+2"
)

// ErasureNodesMethod says what the erasure-nodes experiment measures.
const ErasureNodesMethod = "Six node agents of the several-nodes rig (ADR 13), each in its own network namespace behind a 400 Mbit/s " +
	"link (both directions capped), the store behind one shared 160 Mbit/s link with 2 ms each way. Two applications of the same " +
	"function, each with one instance on every node (placed by six invocations at once): `ec` keeps objects of 1 MiB and more as " +
	"RS(4+2) shards over its six cachelets, one per node; `whole` keeps them whole at their owner. A random object is read once " +
	"through each application's owner of it (which fills it from the store; `ec` shards it), then by all six instances at once, " +
	"none of the others holding it yet (a new object each round): each reads the whole object through its cachelet and checks its " +
	"SHA-256. Under `whole` every reader but the owner is served " +
	"through the owner's one link; under `ec` each reader takes four shards from four nodes, so six links serve. The round's time " +
	"is from the moment all six start reading (they wait for it) to the last one's end; each function reports its own read time."

// erasureNodesSpec is an application of the experiment; erasure is its
// cache.erasure or "".
func erasureNodesSpec(name, erasure string) string {
	return ecNodesSpec(name, "448MiB", "120s", erasureNodesCount, "192MiB", erasure, "read")
}

// erasureNodesFns: read waits until the wall-clock time "at" (so that the
// readers of a round start together), then reads the key and says when
// it was done, how long it took and the body's SHA-256.
const erasureNodesFns = `
import hashlib, os, time
import boto3

s3 = boto3.client("s3")

def read(event, context):
    time.sleep(max(0.0, event.get("at", 0) - time.time()))
    start = time.perf_counter()
    body = s3.get_object(Bucket=event["bucket"], Key=event["object"])["Body"].read()
    took = time.perf_counter() - start
    return {"sha256": hashlib.sha256(body).hexdigest(), "seconds": took, "end": time.time(), "instance": os.environ["HOARD_INSTANCE"]}
`

// erasureNodesRound is one round of reads at once.
type erasureNodesRound struct {
	wall   time.Duration   // start to the last end
	reads  []time.Duration // each function's own read time
	rh, lh int64           // reads served by peers (shards or the owner), and from the reader's own memory
}

func runErasureNodesExperiment(ctx context.Context, o Options) (*Result, error) {
	started := time.Now()
	say := func(format string, args ...any) {
		fmt.Fprintf(o.Env.progress(), "erasure-nodes: "+format+"\n", args...)
	}
	if err := hostnet.Available(ctx); err != nil {
		return nil, fmt.Errorf("the several-nodes rig: %w", err)
	}
	size := int64(64 << 20)
	if len(o.Sizes) > 0 && o.Sizes[0] > 0 {
		size = o.Sizes[0]
	}
	rounds := max(o.Iterations, 1)
	r, err := startECNodes(ctx, o.Env, erasureNodesCount, "hen", "benchec")
	if err != nil {
		return nil, err
	}
	defer r.close()
	n, dir, c, st := r.Nodes, r.dir, r.Controller, r.st
	// put writes a new random object of size under key and returns its
	// SHA-256.
	put := func(key string) (string, error) {
		obj := make([]byte, size)
		if _, err := rand.Read(obj); err != nil {
			return "", err
		}
		sum := sha256.Sum256(obj)
		if _, err := st.Put(ctx, ecBucket, key, bytes.NewReader(obj), size, store.PutOptions{}); err != nil {
			return "", err
		}
		return hex.EncodeToString(sum[:]), nil
	}

	// Shard memory for every round's object (six objects of 64 MiB at
	// RS(4+2) are 96 MiB a node): none is evicted during the run.
	apps := []struct{ name, erasure string }{{"ec", "{shards: " + erasureNodesShards + ", threshold: 1MiB, memory: 128MiB, backup_memory: 16MiB, warm_up: 1h, backup: 1h}"}, {"whole", ""}}
	for _, a := range apps {
		if err := deploySpecDir(ctx, c, dir, erasureNodesSpec(a.name, a.erasure), erasureNodesFns); err != nil {
			return nil, err
		}
	}
	// readAll runs one read of key on each of k instances of app at
	// once: each waits for the same moment, then reads.
	readAll := func(app, key, want string, k int) (*erasureNodesRound, error) {
		recs := make([]*api.Invocation, k)
		errs := make([]error, k)
		var wg sync.WaitGroup
		at := time.Now().Add(2 * time.Second)
		for i := range k {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// "object", not "key": the controller does not route
				// by it, so the six go to the six idle instances.
				ev, _ := json.Marshal(map[string]any{"bucket": ecBucket, "object": key, "at": float64(at.UnixNano()) / 1e9})
				ictx, cancel := context.WithTimeout(ctx, 5*time.Minute)
				defer cancel()
				rec, err := c.Invoke(ictx, app, "read", ev, "bench")
				if err == nil && !rec.OK {
					err = fmt.Errorf("%s/read on %s: %+v\n%s", app, rec.Instance, rec.Error, rec.Log)
				}
				recs[i], errs[i] = rec, err
			}()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				return nil, err
			}
		}
		r := &erasureNodesRound{}
		ran := map[string]bool{}
		for _, rec := range recs {
			var res struct {
				SHA256  string  `json:"sha256"`
				Seconds float64 `json:"seconds"`
				End     float64 `json:"end"`
			}
			if err := json.Unmarshal(rec.Result, &res); err != nil || res.SHA256 != want {
				return nil, fmt.Errorf("%s: %s read the object wrong (%v): %s", app, rec.Instance, err, rec.Result)
			}
			ran[rec.Instance] = true
			r.reads = append(r.reads, time.Duration(res.Seconds*float64(time.Second)))
			if end := time.Unix(0, int64(res.End*1e9)); end.Sub(at) > r.wall {
				r.wall = end.Sub(at)
			}
			r.rh += rec.Reads["remote_hit"].Count
			r.lh += rec.Reads["local_hit"].Count
		}
		if len(ran) != k {
			return nil, fmt.Errorf("%s: %d reads ran on %d instances, want one each", app, k, len(ran))
		}
		return r, nil
	}
	first, err := put("place")
	if err != nil {
		return nil, err
	}
	for _, a := range apps {
		say("%s: placing an instance on each of %d nodes", a.name, erasureNodesCount)
		if _, err := readAll(a.name, "place", first, erasureNodesCount); err != nil {
			return nil, err
		}
		nodes := map[string]bool{}
		for _, in := range appInstancesOf(c, a.name) {
			nodes[in.Agent] = true
		}
		if len(nodes) != erasureNodesCount {
			return nil, fmt.Errorf("%s: instances on %d nodes, want one on each of %d", a.name, len(nodes), erasureNodesCount)
		}
	}
	// Each round a new object: read once through its owner (which fills
	// it from the store and, under ec, shards it), then by all at once,
	// none of the others holding it yet.
	results := map[string][]*erasureNodesRound{}
	var held map[string]int
	for round := range rounds {
		key := fmt.Sprintf("big-%d", round)
		want, err := put(key)
		if err != nil {
			return nil, err
		}
		for _, a := range apps {
			before := 0
			if a.name == "ec" {
				if held, before, err = shardsHeld(ctx, n, "ec"); err != nil {
					return nil, err
				}
			}
			if _, err := readAll(a.name, key, want, 1); err != nil {
				return nil, err
			}
			if a.name == "ec" {
				// Sharding streams from the owner's fill, after the
				// read: wait for this object's six shards.
				if held, err = waitShards(ctx, n, "ec", before+6, 30*time.Second); err != nil {
					return nil, fmt.Errorf("ec: %s not sharded (%d before): %w", key, before, err)
				}
			}
			r, err := readAll(a.name, key, want, erasureNodesCount)
			if err != nil {
				return nil, err
			}
			say("round %d, %s: all read in %v (slowest reader %v); reads from peers %d, local %d", round+1, a.name,
				r.wall.Round(time.Millisecond), slices.Max(r.reads).Round(time.Millisecond), r.rh, r.lh)
			results[a.name] = append(results[a.name], r)
		}
		say("ec: shards per node %v", held)
	}
	return erasureNodesResult(o, started, size, held, results), nil
}

// erasureNodesResult summarises the rounds.
func erasureNodesResult(o Options, started time.Time, size int64, held map[string]int, results map[string][]*erasureNodesRound) *Result {
	median := func(rs []*erasureNodesRound, f func(*erasureNodesRound) time.Duration) time.Duration {
		v := make([]time.Duration, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	wall := func(r *erasureNodesRound) time.Duration { return r.wall }
	p50 := func(r *erasureNodesRound) time.Duration {
		v := slices.Clone(r.reads)
		slices.Sort(v)
		return v[len(v)/2]
	}
	slowest := func(r *erasureNodesRound) time.Duration { return slices.Max(r.reads) }
	ecWall, wholeWall := median(results["ec"], wall), median(results["whole"], wall)
	ms := func(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d.Microseconds())/1000) }
	table := Table{ID: "rounds", Title: "Six readers at once, median over rounds", Columns: []string{"application", "all read", "reader p50", "slowest reader", "aggregate MB/s", "reads from peers / local, all rounds"}}
	for _, name := range []string{"ec", "whole"} {
		rs := results[name]
		w := median(rs, wall)
		var rh, lh int64
		for _, r := range rs {
			rh, lh = rh+r.rh, lh+r.lh
		}
		table.Rows = append(table.Rows, []string{name, ms(w), ms(median(rs, p50)), ms(median(rs, slowest)),
			fmt.Sprintf("%.0f", float64(size)*erasureNodesCount/1e6/w.Seconds()), fmt.Sprintf("%d / %d", rh, lh)})
	}
	holders := 0
	for _, k := range held {
		if k > 0 {
			holders++
		}
	}
	res := &Result{Experiment: "erasure-nodes", Title: erasureNodesExperiment().Title, Reproduces: []Reference{refInfiniCacheNodes},
		Status: StatusOK, Quick: o.Quick, StartedAt: started, Machine: DescribeMachine(), Method: ErasureNodesMethod,
		Settings: RunSettings{Link: "6 nodes at 400 Mbit/s; store 160 Mbit/s shared, 2 ms each way",
			Iterations: []Count{{What: "rounds", N: len(results["ec"])}},
			Other:      []Setting{{Name: "object", Value: fmt.Sprintf("%d MiB", size>>20)}, {Name: "erasure", Value: "RS(" + erasureNodesShards + ")"}}},
		Tables: []Table{table},
	}
	res.Rows = append(res.Rows,
		Compare("six readers at once: held whole ÷ erasure-coded, all read", "x", nil, F(wholeWall.Seconds()/ecWall.Seconds()), HigherIsBetter, 0, "",
			fmt.Sprintf("%s against %s (median of %d rounds)", ms(wholeWall), ms(ecWall), len(results["ec"]))),
		Compare("nodes holding a shard", "", F(erasureNodesCount), F(float64(holders)), HigherIsBetter, 0, "one shard on each instance", fmt.Sprintf("%v", held)),
	)
	res.Seconds = time.Since(started).Seconds()
	return res
}

// deploySpecDir deploys a package of spec and fns.py, made under dir.
func deploySpecDir(ctx context.Context, c interface {
	Deploy(context.Context, []byte) (*api.AppInfo, error)
}, dir, spec, fns string) error {
	pdir, err := os.MkdirTemp(dir, "app-")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(pdir, appspec.FileName), []byte(spec), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(pdir, "fns.py"), []byte(fns), 0o644); err != nil {
		return err
	}
	pkg, err := appspec.Pack(pdir)
	if err != nil {
		return err
	}
	_, err = c.Deploy(ctx, pkg.Data)
	return err
}

// appInstancesOf lists app's instances as the controller has them.
func appInstancesOf(c interface{ Apps() []api.AppInfo }, app string) []api.InstanceSummary {
	for _, a := range c.Apps() {
		if a.Name == app {
			return a.Instances
		}
	}
	return nil
}

// shardsPerNode counts the erasure shards app's instances hold, per node.
func shardsPerNode(ctx context.Context, n *rig.Nodes, app string) (map[string]int, error) {
	held := map[string]int{}
	for _, a := range n.Agents {
		infos, err := n.AgentInstances(ctx, a)
		if err != nil {
			return nil, err
		}
		for _, in := range infos {
			if in.App == app && in.Cache.Erasure != nil {
				held[a.ID] += in.Cache.Erasure.Shards
			}
		}
	}
	return held, nil
}
