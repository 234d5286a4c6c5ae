package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/bytesize"
	"github.com/hoard-io/hoard/internal/hostnet"
	"github.com/hoard-io/hoard/internal/rig"
	"github.com/hoard-io/hoard/internal/store"
)

// The erasure latency benchmark on the several-nodes rig: the GETs of
// `erasure` (RS(10+2) over 12 cachelets, one cachelet holding the whole
// object, the store), each cachelet an instance of the platform on a node
// of its own behind its own capped link.

func erasureRigExperiment() Experiment {
	return Experiment{
		Name: "erasure-rig",
		Title: "Erasure-coded large objects on the several-nodes rig: GET latency of RS(10+2) over 12 nodes vs one cachelet " +
			"holding the whole object vs the store, each node's uplink capped",
		Reproduces: []Reference{refInfiniCache},
		// Sizes are the objects'; Iterations the timed GETs per target
		// and size. 1 GB: --sizes 1GB.
		Quick: Options{Iterations: 4, Sizes: []int64{10_000_000, 100_000_000}},
		Full:  Options{Iterations: 20, Sizes: []int64{10_000_000, 100_000_000}},
		Run:   runErasureRig,
	}
}

// The rig's links: each node's uplink (what it sends: a shard, the whole
// object, a function's writes) is capped at ecRigRate, the issue's
// 100 MB/s; its downlink is not capped, as InfiniCache's client (the
// proxy) takes ten Lambdas' links at once. The store sits behind its own
// link of ecRigRate both ways.
const (
	ecRigNodes = 12
	ecRigRate  = 100_000_000
	// ecRigRateLow is the full run's second setting: links slow enough
	// that they, not the machine's two cores, bound the RS path (the
	// single-host `erasure` experiment's 25 MB/s).
	ecRigRateLow = 25_000_000
)

// ErasureRigMethod says what the erasure-rig experiment measures.
var ErasureRigMethod = fmt.Sprintf("Twelve node agents of the several-nodes rig (ADR 13), each in its own network namespace whose uplink "+
	"(what the node sends) is capped at %s by tc tbf, its downlink uncapped (a reader takes ten nodes' links at once, as "+
	"InfiniCache's client does); the store (MinIO) in a namespace of its own behind a link of %s each way. Two applications, "+
	"each with one instance (a cachelet) on every node: `ec` keeps objects of 1 MiB and more as RS(10+2) shards, one per node; "+
	"`whole` keeps them whole at their owner. The bench is the S3 client, connecting from inside a node's namespace to that "+
	"node's cachelet on its loopback, as the node's functions do. Per GET, in turn: store direct (from node 0, through the "+
	"store's link); one cachelet (a `whole` instance that has not read the object yet, served by the owner holding it whole, "+
	"through the owner's uplink; each timed GET by another reader, a new object when they run out); RS(10+2) (node 0's `ec` "+
	"instance, which checks the version with the store, asks all 12 holders for 4 stripes at a time and decodes from the first "+
	"10). Every GET's body's length and CRC32C are checked, and its x-hoard-read: a one-cachelet GET must be a remote_hit; "+
	"an RS GET not decoded from the shards (erasure_hit) was served by the ordinary path and is counted and timed as served "+
	"(more than half of a setting's fails the run). The objects are read "+
	"once through each application before the timed GETs (the owner fills it; `ec` shards it). Last, every node's link is "+
	"uncapped and the RS GETs are repeated (`rs-10+2 uncapped`): the ceiling the machine's cores set on that path.",
	mbps(ecRigRate), mbps(ecRigRate))

// mbps says a rate of bytes per second in MB/s and Mbit/s.
func mbps(rate int64) string { return fmt.Sprintf("%d MB/s (%d Mbit/s)", rate/1e6, rate*8/1e6) }

// ecRigSpec is an application of the experiment; erasure is its
// cache.erasure or "".
func ecRigSpec(name string, budget int64, erasure string) string {
	return ecNodesSpec(name, "64MiB", "60s", ecRigNodes, fmt.Sprintf("%dMiB", budget>>20), erasure, "hold")
}

// ecRigFns: hold keeps its instance busy for a while, so that twelve at
// once load twelve instances.
const ecRigFns = `
import os, time

def hold(event, context):
    time.sleep(event.get("hold", 0))
    return {"instance": os.environ["HOARD_INSTANCE"]}
`

// ecRigReader is one instance as the bench reads through it.
type ecRigReader struct {
	id   string
	node hostnet.Node
	c    *minio.Core
}

func runErasureRig(ctx context.Context, o Options) (*Result, error) {
	started := time.Now()
	load0 := loadAverage()
	say := func(format string, args ...any) { fmt.Fprintf(o.Env.progress(), "erasure-rig: "+format+"\n", args...) }
	if err := hostnet.Available(ctx); err != nil {
		return nil, fmt.Errorf("the several-nodes rig: %w", err)
	}
	sizes := o.Sizes
	if len(sizes) == 0 {
		sizes = erasureRigExperiment().Full.Sizes
	}
	iters := max(o.Iterations, 1)
	var biggest int64
	for _, s := range sizes {
		biggest = max(biggest, s)
	}
	r, err := startECNodes(ctx, o.Env, ecRigNodes, "hrg", "benchecrig", func(c *rig.NodesConfig) {
		c.Net.NodeRate, c.Net.NodeInRate, c.Net.StoreRate = ecRigRate, -1, ecRigRate
		c.StoreLatency = 0 // no proxy in front of the store: its link alone
	})
	if err != nil {
		return nil, err
	}
	defer r.close()
	n, dir, st, storeKey, storeSK := r.Nodes, r.dir, r.st, r.storeKey, r.storeSecret
	say("%d nodes up (%.0fs)", len(n.Agents), time.Since(started).Seconds())
	ctl := n.Controller
	const bucket = ecBucket
	put := func(key string, size int64) error {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Minute+time.Duration(size/ecRigRateLow*4)*time.Second)
		defer cancel()
		_, err := st.Put(pctx, bucket, key, &patternReader{n: size}, size, store.PutOptions{})
		return err
	}
	for _, s := range sizes {
		if err := put(objName(s), s); err != nil {
			return nil, fmt.Errorf("uploading %s: %w", bytesize.Human(s), err)
		}
	}

	// Memory: `ec` holds a tenth of each object per node (twice over, and
	// a fill's stripe and pieces at the owner); `whole` holds objects
	// whole, at most half its budget each (cache.MaxObjectSize), at the
	// owner and at every reader that read them.
	var total int64
	for _, s := range sizes {
		total += s
	}
	ecMem := total/5 + 32<<20
	ecBudget := ecMem + 160<<20
	wholeBudget := 3*biggest + 64<<20
	apps := []struct{ name, spec string }{
		{"ec", ecRigSpec("ec", ecBudget, fmt.Sprintf("{shards: 10+2, threshold: 1MiB, memory: %dMiB, backup_memory: 16MiB, warm_up: 1h, backup: 1h}", ecMem>>20))},
		{"whole", ecRigSpec("whole", wholeBudget, "")},
	}
	readers := map[string][]ecRigReader{}
	for _, a := range apps {
		if err := deploySpecDir(ctx, ctl, dir, a.spec, ecRigFns); err != nil {
			return nil, err
		}
		t := time.Now()
		if readers[a.name], err = ecRigPlace(ctx, n, a.name); err != nil {
			return nil, err
		}
		say("%s: an instance on each of %d nodes (%.0fs)", a.name, ecRigNodes, time.Since(t).Seconds())
	}
	node0 := n.Agents[0].Node
	direct, err := nodeS3Client(node0, n.StoreEndpoint, storeKey, storeSK)
	if err != nil {
		return nil, err
	}
	rs := readers["ec"][0] // on node 0

	// get reads key through c, checks the body's length and CRC32C, and
	// says how it was served (x-hoard-read).
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	crcs := map[int64]uint32{}
	for _, s := range sizes {
		h := crc32.New(castagnoli)
		if _, err := io.Copy(h, &patternReader{n: s}); err != nil {
			return nil, err
		}
		crcs[s] = h.Sum32()
	}
	buf := make([]byte, 1<<20)
	get := func(c *minio.Core, key string, size int64) (time.Duration, string, error) {
		gctx, cancel := context.WithTimeout(ctx, time.Minute+time.Duration(size/ecRigRateLow*4)*time.Second)
		defer cancel()
		t := time.Now()
		body, _, hdr, err := c.GetObject(gctx, bucket, key, minio.GetObjectOptions{})
		if err != nil {
			return 0, "", err
		}
		defer body.Close()
		h := crc32.New(castagnoli)
		got, err := io.CopyBuffer(h, body, buf)
		took := time.Since(t)
		switch {
		case err != nil:
			return 0, "", err
		case got != size || h.Sum32() != crcs[size]:
			return 0, "", fmt.Errorf("%s: read %d bytes of CRC32C %08x, want %d of %08x", key, got, h.Sum32(), size, crcs[size])
		}
		return took, hdr.Get("x-hoard-read"), nil
	}

	// Shard each object: its first read makes the owner fill it from the
	// store and shard it over the twelve; wait for the twelve shards.
	for _, size := range sizes {
		_, before, err := shardsHeld(ctx, n, "ec")
		if err != nil {
			return nil, err
		}
		if _, _, err := get(rs.c, objName(size), size); err != nil {
			return nil, fmt.Errorf("ec: first read of %s: %w", bytesize.Human(size), err)
		}
		if _, err := waitShards(ctx, n, "ec", before+ecRigNodes, 2*time.Minute); err != nil {
			return nil, fmt.Errorf("ec: %s: %w", bytesize.Human(size), err)
		}
	}
	// rsGet is one RS GET. One not decoded from the shards (fewer than
	// k arrived in time, or the placement changed: a member's lease
	// lapsed on the loaded machine) was served by the ordinary path,
	// right bytes, and is timed as the client saw it; it is counted in
	// fallbacks, and a setting where it is most GETs fails the run.
	fallbacks := map[string]int{} // by setting and size, "100 MB/s links, 95.4 MiB"
	rsGet := func(size int64, setting string) (time.Duration, error) {
		d, how, err := get(rs.c, objName(size), size)
		if err != nil {
			return 0, fmt.Errorf("RS %s, %s: %w", bytesize.Human(size), setting, err)
		}
		if how != "erasure_hit" {
			at := setting + ", " + bytesize.Human(size)
			fallbacks[at]++
			say("%s: an RS GET served as %q, not decoded from the shards", at, how)
			if fallbacks[at] > iters/2 {
				return 0, fmt.Errorf("RS %s: %d of %d GETs not decoded from the shards (the last served as %q)", at, fallbacks[at], iters, how)
			}
		}
		return d, nil
	}
	// setLinks caps every node's uplink and the store's link at rate
	// (negative: uncapped); downlinks stay uncapped.
	setLinks := func(rate int64) error {
		for _, a := range n.Agents {
			if err := n.Net.SetRates(ctx, a.Node, rate, -1); err != nil {
				return err
			}
		}
		return n.Net.SetRates(ctx, *n.Net.Store, rate, 0)
	}

	rates := []int64{ecRigRate}
	if !o.Quick {
		rates = append(rates, ecRigRateLow)
	}
	times := map[int64]map[int64]map[string][]time.Duration{} // rate, size, target
	wholeObjects := 0
	for _, rate := range rates {
		if err := setLinks(rate); err != nil {
			return nil, err
		}
		times[rate] = map[int64]map[string][]time.Duration{}
		for _, size := range sizes {
			key := objName(size)
			tm := map[string][]time.Duration{}
			times[rate][size] = tm
			one := &ecRigWhole{readers: readers["whole"], prefix: fmt.Sprintf("whole-%d-", rate/1e6), size: size, get: get, put: put}
			for range iters {
				d, _, err := get(direct, key, size)
				if err != nil {
					return nil, fmt.Errorf("store %s: %w", bytesize.Human(size), err)
				}
				tm[targetStore] = append(tm[targetStore], d)
				if d, err = one.next(); err != nil {
					return nil, fmt.Errorf("one cachelet %s: %w", bytesize.Human(size), err)
				}
				tm[targetOne] = append(tm[targetOne], d)
				if d, err = rsGet(size, fmt.Sprintf("%d MB/s links", rate/1e6)); err != nil {
					return nil, err
				}
				tm[targetRS] = append(tm[targetRS], d)
			}
			wholeObjects += one.objects
			for _, tg := range []string{targetStore, targetOne, targetRS} {
				say("%d MB/s links, %-8s %-13s p50 %v p99 %v", rate/1e6, bytesize.Human(size), tg, quantileD(tm[tg], 0.5).Round(time.Millisecond),
					quantileD(tm[tg], 0.99).Round(time.Millisecond))
			}
		}
	}
	// The same RS GETs with every link uncapped: what the machine's
	// CPUs allow that path, whatever the links. Shown with the first
	// rate's figures.
	if err := setLinks(-1); err != nil {
		return nil, err
	}
	cpuPerGet := map[int64]map[string]time.Duration{}
	for _, size := range sizes {
		tm := times[rates[0]][size]
		cpu0 := treeCPUBy(os.Getpid(), ecRigPart)
		for range iters {
			d, err := rsGet(size, "links uncapped")
			if err != nil {
				return nil, err
			}
			tm[targetRSFree] = append(tm[targetRSFree], d)
		}
		cpu1 := treeCPUBy(os.Getpid(), ecRigPart)
		cpuPerGet[size] = map[string]time.Duration{}
		for part, d := range cpu1 {
			cpuPerGet[size][part] = (d - cpu0[part]) / time.Duration(iters)
		}
		say("uncapped, %-8s %-13s p50 %v p99 %v", bytesize.Human(size), targetRSFree, quantileD(tm[targetRSFree], 0.5).Round(time.Millisecond),
			quantileD(tm[targetRSFree], 0.99).Round(time.Millisecond))
	}
	held, err := shardsPerNode(ctx, n, "ec")
	if err != nil {
		return nil, err
	}
	var rows []Comparison
	var plots []Plot
	var tables []Table
	var linkText []string
	for _, rate := range rates {
		r, p, t := erasureLatencyFigures(sizes, times[rate], fmt.Sprintf("%d MB/s links", rate/1e6), fmt.Sprintf("%dmbs", rate/1e6),
			"The store here is a local MinIO behind one link capped like each node's uplink, not S3 over the Internet: the gap is the links' ratio, at most k = 10.")
		rows, plots, tables = append(rows, r...), append(plots, p...), append(tables, t)
		linkText = append(linkText, mbps(rate))
	}
	for _, size := range sizes {
		var c time.Duration
		var split []string
		for _, part := range ecRigParts {
			c += cpuPerGet[size][part]
			split = append(split, fmt.Sprintf("%s %.3f s", part, cpuPerGet[size][part].Seconds()))
		}
		if c > 0 {
			rate := float64(size) / 1e6 / c.Seconds() // MB per CPU-second
			rows = append(rows, Compare(fmt.Sprintf("%s: CPU seconds per RS(10+2) GET, links uncapped, over the rig's processes", bytesize.Human(size)), "s",
				nil, F(c.Seconds()), LowerIsBetter, 0, "",
				fmt.Sprintf("%s. %.0f MB per CPU-second: on this machine's 2 cores, with nothing else running, at most %.0f MB/s; the load average says how much of them the rig had.",
					strings.Join(split, ", "), rate, 2*rate)))
		}
	}
	var perNode []string
	for _, a := range n.Agents {
		perNode = append(perNode, fmt.Sprint(held[a.ID]))
	}
	res := &Result{
		Experiment: "erasure-rig", Title: erasureRigExperiment().Title, Reproduces: []Reference{refInfiniCache},
		Status: StatusOK, Quick: o.Quick, StartedAt: started, Machine: DescribeMachine(), Method: ErasureRigMethod,
		Settings: RunSettings{ObjectSizes: sizes,
			Link: fmt.Sprintf("%d nodes, each uplink and the store's link %s in turn (downlinks uncapped); then every link uncapped for %q",
				ecRigNodes, strings.Join(linkText, ", then "), targetRSFree),
			Iterations: []Count{{What: "GETs per target, size and link rate", N: iters}},
			Other: []Setting{
				{Name: "erasure", Value: "RS(10+2), 1 MiB chunks, one instance per node"},
				{Name: "shards held per node at the end", Value: strings.Join(perNode, " ")},
				{Name: "objects the one-cachelet GETs read (a new one when every reader has read one)", Value: fmt.Sprint(wholeObjects)},
				{Name: "RS GETs not decoded from the shards (served by the ordinary path, timed as served)", Value: fallbackText(fallbacks)},
				{Name: "load average (1, 5, 15 min) at the start", Value: load0},
				{Name: "load average at the end", Value: loadAverage()},
			}},
		Rows: rows, Plots: plots, Tables: tables,
	}
	res.Seconds = time.Since(started).Seconds()
	return res, nil
}

// ecRigWhole hands out the one-cachelet GETs: each by a `whole` instance
// that has not read the object, which its owner serves whole (a remote
// hit; the reader keeps a copy, so it reads the object once). When every
// reader has read it, a new object of the same size is written and read
// once through the first reader, which makes its owner fill it.
type ecRigWhole struct {
	readers []ecRigReader
	prefix  string // of its objects' keys
	size    int64
	get     func(c *minio.Core, key string, size int64) (time.Duration, string, error)
	put     func(key string, size int64) error

	objects int
	key     string
	left    []ecRigReader
}

func (w *ecRigWhole) next() (time.Duration, error) {
	for {
		if len(w.left) == 0 {
			if err := w.newObject(); err != nil {
				return 0, err
			}
		}
		r := w.left[0]
		w.left = w.left[1:]
		d, how, err := w.get(r.c, w.key, w.size)
		switch {
		case err != nil:
			return 0, fmt.Errorf("%s through %s: %w", w.key, r.id, err)
		case how == "remote_hit":
			return d, nil
		case how == "local_hit":
			// The owner itself, which holds it: not a read from
			// another node.
			continue
		}
		return 0, fmt.Errorf("%s through %s: served as %q; want remote_hit (the owner holding it whole)", w.key, r.id, how)
	}
}

// newObject writes the next object to the store; its first read, through
// the reader after the last object's first, makes its owner fill it.
func (w *ecRigWhole) newObject() error {
	w.key = fmt.Sprintf("%s%s-%d", w.prefix, objName(w.size), w.objects)
	if err := w.put(w.key, w.size); err != nil {
		return err
	}
	first := w.objects % len(w.readers)
	w.objects++
	if _, _, err := w.get(w.readers[first].c, w.key, w.size); err != nil {
		return fmt.Errorf("%s: first read through %s: %w", w.key, w.readers[first].id, err)
	}
	w.left = nil
	for i := 1; i < len(w.readers); i++ {
		w.left = append(w.left, w.readers[(first+i)%len(w.readers)])
	}
	return nil
}

// ecRigPlace loads an instance of app on every node (twelve invocations
// at once, each holding its instance for a while) and returns them in
// the order of the nodes, each with an S3 client that connects from
// inside its node to its cachelet.
func ecRigPlace(ctx context.Context, n *rig.Nodes, app string) ([]ecRigReader, error) {
	ctl := n.Controller
	var wg sync.WaitGroup
	errs := make([]error, ecRigNodes)
	for i := range ecRigNodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ev, _ := json.Marshal(map[string]any{"hold": 3})
			ictx, cancel := context.WithTimeout(ctx, 5*time.Minute)
			defer cancel()
			rec, err := ctl.Invoke(ictx, app, "hold", ev, "bench")
			if err == nil && !rec.OK {
				err = fmt.Errorf("%s/hold on %s: %+v\n%s", app, rec.Instance, rec.Error, rec.Log)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	creds, err := ctl.Credentials(app)
	if err != nil {
		return nil, err
	}
	var out []ecRigReader
	for _, a := range n.Agents {
		infos, err := n.AgentInstances(ctx, a)
		if err != nil {
			return nil, err
		}
		var mine []api.InstanceInfo
		for _, in := range infos {
			if in.App == app {
				mine = append(mine, in)
			}
		}
		if len(mine) != 1 {
			return nil, fmt.Errorf("%s: %d instances on %s, want one on each node", app, len(mine), a.ID)
		}
		c, err := nodeS3Client(a.Node, mine[0].Endpoint, creds.AccessKey, creds.SecretKey)
		if err != nil {
			return nil, err
		}
		out = append(out, ecRigReader{id: mine[0].ID, node: a.Node, c: c})
	}
	return out, nil
}

// nodeS3Client is an S3 client whose connections are made from inside
// node's network namespace.
func nodeS3Client(node hostnet.Node, endpoint, accessKey, secretKey string) (*minio.Core, error) {
	host, secure, err := splitEndpoint(endpoint)
	if err != nil {
		return nil, err
	}
	tr, err := minio.DefaultTransport(secure)
	if err != nil {
		return nil, err
	}
	tr.DialContext = node.DialContext
	tr.MaxIdleConnsPerHost = 16
	tr.DisableCompression = true
	return minio.NewCore(host, &minio.Options{
		Creds: credentials.NewStaticV4(accessKey, secretKey, ""), Secure: secure, Region: benchRegion,
		BucketLookup: minio.BucketLookupPath, Transport: tr, MaxRetries: 1,
	})
}

// The parts of the rig whose CPU time erasure-rig reports.
var ecRigParts = []string{"the bench (client, controller, etcd)", "node 0's cachelets (the reader)",
	"the other nodes' cachelets (holders)", "agents", "the rest (store, workers)"}

// ecRigPart names the part of the rig a process is, from its command
// line and its ancestors' (chain, up to the bench's own process).
func ecRigPart(chain [][]string) string {
	hoard := func(args []string, sub string) bool {
		return len(args) > 1 && filepath.Base(args[0]) == "hoard" && args[1] == sub
	}
	switch {
	case len(chain) == 0:
		return ecRigParts[0]
	case hoard(chain[0], "serve"):
		for _, up := range chain[1:] {
			if hoard(up, "agent") && slices.Contains(up, "node-0") {
				return ecRigParts[1]
			}
		}
		return ecRigParts[2]
	case hoard(chain[0], "agent"):
		return ecRigParts[3]
	}
	return ecRigParts[4]
}

// fallbackText lists the RS GETs not decoded from the shards, by setting.
func fallbackText(f map[string]int) string {
	if len(f) == 0 {
		return "none"
	}
	var out []string
	for _, at := range slices.Sorted(maps.Keys(f)) {
		out = append(out, fmt.Sprintf("%s: %d", at, f[at]))
	}
	return strings.Join(out, "; ")
}

// loadAverage is /proc/loadavg's three load averages, or "unknown".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}
