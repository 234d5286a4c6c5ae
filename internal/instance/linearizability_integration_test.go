//go:build integration

package instance_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/minio/minio-go/v7"
	mcreds "github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/hoard-io/hoard/internal/cachelet"
	"github.com/hoard-io/hoard/internal/disktier"
	"github.com/hoard-io/hoard/internal/etcdembed"
	"github.com/hoard-io/hoard/internal/instance"
	"github.com/hoard-io/hoard/internal/localstore"
	etcdmembership "github.com/hoard-io/hoard/internal/membership/etcd"
	"github.com/hoard-io/hoard/internal/ring"
)

// The linearizability check drives one application's cachelets with
// concurrent S3 clients, records every operation's invocation and
// response, and asks porcupine whether some total order of the operations,
// consistent with real time, explains every read as a register would.

// Shape of the workload: per setting, linClients clients (linClients /
// linCachelets per cachelet), each doing linOps operations on two keys
// owned by different cachelets.
const (
	linCachelets = 3
	linClients   = 6
	linOps       = 60
	linCheck     = 20 * time.Second // porcupine's time limit per history
)

// regInput is one register operation: a write of value, or a read.
type regInput struct {
	key   string
	write bool
	value string
}

// regOutput is what a read returned ("" for a missing object).
type regOutput struct{ value string }

// registerModel is a set of registers, one per key, all initially empty
// (a missing object reads as ""). A read returns the value of the last
// write linearized before it.
var registerModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(regInput).key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		var parts [][]porcupine.Operation
		for _, k := range keys {
			parts = append(parts, byKey[k])
		}
		return parts
	},
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		in := input.(regInput)
		if in.write {
			return true, in.value
		}
		return output.(regOutput).value == state.(string), state
	},
	Equal: func(a, b any) bool { return a.(string) == b.(string) },
	DescribeOperation: func(input, output any) string {
		in := input.(regInput)
		if in.write {
			return fmt.Sprintf("put(%s, %q)", in.key, in.value)
		}
		return fmt.Sprintf("get(%s) -> %q", in.key, output.(regOutput).value)
	},
	DescribeState: func(state any) string { return fmt.Sprintf("%q", state) },
	DescribeOperationMetadata: func(info any) string {
		if info == nil {
			return ""
		}
		return info.(string)
	},
}

// TestLinearizabilityChecker shows the checker can tell: a hand-made
// history with a stale read is rejected, the same history with the read
// concurrent with the write is accepted.
func TestLinearizabilityChecker(t *testing.T) {
	w := func(client int, key, v string, call, ret int64) porcupine.Operation {
		return porcupine.Operation{ClientId: client, Input: regInput{key: key, write: true, value: v}, Call: call, Return: ret, Output: regOutput{}}
	}
	r := func(client int, key, v string, call, ret int64) porcupine.Operation {
		return porcupine.Operation{ClientId: client, Input: regInput{key: key}, Call: call, Return: ret, Output: regOutput{v}}
	}
	cases := []struct {
		name    string
		history []porcupine.Operation
		want    porcupine.CheckResult
	}{
		{"stale read after a completed write", []porcupine.Operation{
			w(0, "a", "c0-0", 0, 10),
			w(1, "a", "c1-0", 20, 30),
			r(2, "a", "c0-0", 40, 50), // c1-0 completed before this read began
		}, porcupine.Illegal},
		{"read of the initial value after a write", []porcupine.Operation{
			w(0, "a", "c0-0", 0, 10),
			r(1, "a", "", 20, 30),
		}, porcupine.Illegal},
		{"reads disagree on the order of two writes", []porcupine.Operation{
			w(0, "a", "x", 0, 100),
			w(1, "a", "y", 0, 100),
			r(2, "a", "x", 10, 20),
			r(2, "a", "y", 30, 40),
			r(3, "a", "y", 10, 20),
			r(3, "a", "x", 30, 40),
		}, porcupine.Illegal},
		{"other key's writes do not help", []porcupine.Operation{
			w(0, "a", "c0-0", 0, 10),
			w(1, "b", "c1-0", 20, 30),
			r(2, "a", "c1-0", 40, 50),
		}, porcupine.Illegal},
		{"read concurrent with the write", []porcupine.Operation{
			w(0, "a", "c0-0", 0, 10),
			w(1, "a", "c1-0", 20, 50),
			r(2, "a", "c0-0", 40, 60), // may linearize before c1-0
			r(3, "a", "c1-0", 45, 70),
		}, porcupine.Ok},
		{"unacknowledged write seen late", []porcupine.Operation{
			w(0, "a", "c0-0", 0, 10),
			w(1, "a", "c1-0", 20, math.MaxInt64), // its client gave up waiting
			r(2, "a", "c0-0", 40, 50),
			r(2, "a", "c1-0", 60, 70),
		}, porcupine.Ok},
	}
	for _, tc := range cases {
		res, _ := porcupine.CheckOperationsVerbose(registerModel, tc.history, time.Second)
		if res != tc.want {
			t.Errorf("%s: porcupine says %s, want %s", tc.name, res, tc.want)
		}
	}
}

// linEnv is the store and etcd the settings' clusters share.
type linEnv struct {
	store *localstore.Server
	etcd  *etcdembed.Server
	log   *slog.Logger
	// storeURL, when set, is where the cachelets reach the store (a
	// shaped link in front of it); else the store's own endpoint.
	storeURL string
	// diskDir, when set ($HOARD_LINEARIZABILITY_DURABLE=1), turns durable
	// writes on under the settings that hold writes (ADR 0030), with
	// each application's logs under it.
	diskDir string
}

// durableDir is linEnv.diskDir for a test: a directory when
// $HOARD_LINEARIZABILITY_DURABLE is 1, else "".
func durableDir(t *testing.T) string {
	if os.Getenv("HOARD_LINEARIZABILITY_DURABLE") != "1" {
		return ""
	}
	t.Log("durable writes on")
	return t.TempDir()
}

// linCluster is one application's cachelets under one setting.
type linCluster struct {
	ins    []*instance.Instance
	cs     []*minio.Client
	ranged bool // reads are ranged GETs (readRange)
}

func startLinCluster(t *testing.T, env *linEnv, c cachelet.Consistency) *linCluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	app := "lin-" + c.Name
	lc := &linCluster{}
	for i := range linCachelets {
		in, leave, err := startLinMember(ctx, env, c, app, i)
		if err != nil {
			t.Fatalf("start cachelet %d: %v", i, err)
		}
		t.Cleanup(func() { _ = leave(context.Background()) })
		lc.ins = append(lc.ins, in)
		lc.cs = append(lc.cs, minioClient(t, in.Endpoint(), clientAK, clientSK))
	}
	deadline := time.Now().Add(20 * time.Second)
	for !lc.ringsAgree() {
		if time.Now().After(deadline) {
			for i, in := range lc.ins {
				t.Logf("cachelet %d sees %v", i, in.Cluster().Ring().Members())
			}
			t.Fatalf("cachelets did not all see %d members", linCachelets)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return lc
}

// startLinMember starts cachelet i of app under setting c, with its own
// membership registry client; leave closes both (cleanly: the instance
// leaves the ring, then the registry client goes).
func startLinMember(ctx context.Context, env *linEnv, c cachelet.Consistency, app string, i int) (*instance.Instance, func(context.Context) error, error) {
	reg, err := etcdmembership.New(etcdmembership.Config{Endpoints: env.etcd.Endpoints()})
	if err != nil {
		return nil, nil, err
	}
	cfg := instance.Config{
		AccessKey: clientAK, SecretKey: clientSK, MetricsListen: "off",
		Registry: reg, App: app, ID: fmt.Sprintf("%s-%d", app, i),
		Secret: []byte("0123456789abcdef-linearizability"),
	}
	cfg.Store.Endpoint, cfg.Store.AccessKey, cfg.Store.SecretKey = env.store.Endpoint(), storeAK, storeSK
	if env.storeURL != "" {
		cfg.Store.Endpoint = env.storeURL
	}
	cfg.Cachelet.Cache.Budget = 16 << 20
	c.Apply(&cfg.Cachelet)
	if env.diskDir != "" && cfg.Cachelet.WriteTarget != cachelet.WriteStore {
		cfg.Disk = disktier.Config{Dir: filepath.Join(env.diskDir, app), Budget: 64 << 20}
		cfg.DurableWrites = true
	}
	// Ranged reads meet pages more often where writes are not kept whole.
	cfg.Cachelet.DisableWriteCaching = strings.HasSuffix(c.Name, "-ranged")
	in, err := instance.Start(ctx, cfg, env.log.With("cachelet", i, "setting", c.Name))
	if err != nil {
		_ = reg.Close()
		return nil, nil, err
	}
	return in, func(ctx context.Context) error { return errors.Join(in.Close(ctx), reg.Close()) }, nil
}

// pageReads sums hoard_cachelet_page_reads_total{result} over the
// cachelets.
func (lc *linCluster) pageReads(result string) float64 {
	var n float64
	for _, in := range lc.ins {
		mfs, _ := in.Registry().Gather()
		for _, mf := range mfs {
			if mf.GetName() != "hoard_cachelet_page_reads_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				if m.GetLabel()[0].GetValue() == result {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// ringsAgree says whether every cachelet sees all of them in its ring.
func (lc *linCluster) ringsAgree() bool {
	for _, in := range lc.ins {
		if in.Cluster().Ring().Len() != len(lc.ins) {
			return false
		}
	}
	return true
}

// owner returns the index of the cachelet owning bucket/key, by the ring
// of every cachelet (they must agree), or -1.
func (lc *linCluster) owner(bucket, key string) int {
	own := -1
	for _, in := range lc.ins {
		id := in.Cluster().Ring().Owner(bucket, key)
		i := -1
		for j, o := range lc.ins {
			if o.ID() == id {
				i = j
			}
		}
		if own != -1 && i != own {
			return -1
		}
		own = i
	}
	return own
}

// linRecorder collects one run's operations.
type linRecorder struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
	errs  []string
}

// now is the time since the run began, on the monotonic clock.
func (r *linRecorder) now() int64 { return int64(time.Since(r.start)) }

func (r *linRecorder) add(op porcupine.Operation) {
	r.mu.Lock()
	r.ops = append(r.ops, op)
	r.mu.Unlock()
}

func (r *linRecorder) fail(format string, args ...any) {
	r.mu.Lock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
	r.mu.Unlock()
}

// runRegisterWorkload runs linClients clients against the cluster and
// returns the history.
func runRegisterWorkload(t *testing.T, lc *linCluster, bucket string, keys []string, owners []int, seed uint64) *linRecorder {
	t.Helper()
	rec := &linRecorder{start: time.Now()}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for client := range linClients {
		via := client % len(lc.ins)
		cl := lc.cs[via]
		rng := rand.New(rand.NewPCG(seed, uint64(client)))
		wg.Go(func() {
			for n := range linOps {
				ki := rng.IntN(len(keys))
				key := keys[ki]
				meta := fmt.Sprintf("client %d via cachelet %d (owner of %s: %d)", client, via, key, owners[ki])
				if rng.IntN(2) == 0 {
					v := fmt.Sprintf("c%d-%d", client, n)
					call := rec.now()
					_, err := cl.PutObject(ctx, bucket, key, strings.NewReader(v), int64(len(v)), minio.PutObjectOptions{})
					ret := rec.now()
					if err != nil {
						// The write may or may not have taken effect: it
						// stays pending forever.
						rec.fail("client %d put %s=%s: %v", client, key, v, err)
						ret = math.MaxInt64
					}
					rec.add(porcupine.Operation{ClientId: client, Input: regInput{key: key, write: true, value: v},
						Call: call, Output: regOutput{}, Return: ret, Metadata: meta})
					continue
				}
				call := rec.now()
				v, err := readRange(ctx, cl, bucket, key, lc.ranged)
				ret := rec.now()
				if err != nil {
					rec.fail("client %d get %s: %v", client, key, err) // a failed read says nothing
					continue
				}
				rec.add(porcupine.Operation{ClientId: client, Input: regInput{key: key},
					Call: call, Output: regOutput{v}, Return: ret, Metadata: meta})
			}
		})
	}
	wg.Wait()
	return rec
}

// readValue GETs the register's value; a missing object is "".
func readValue(ctx context.Context, c *minio.Client, bucket, key string) (string, error) {
	return readRange(ctx, c, bucket, key, false)
}

// readRange is readValue, with a ranged GET of the whole value when
// ranged is set.
func readRange(ctx context.Context, c *minio.Client, bucket, key string, ranged bool) (string, error) {
	var opts minio.GetObjectOptions
	if ranged {
		if err := opts.SetRange(0, 1<<30); err != nil {
			return "", err
		}
	}
	obj, err := c.GetObject(ctx, bucket, key, opts)
	if err != nil {
		return "", err
	}
	defer obj.Close()
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, obj); err != nil {
		if minio.ToErrorResponse(err).Code == minio.NoSuchKey {
			return "", nil
		}
		return "", err
	}
	return buf.String(), nil
}

// historyStats counts a history's writes and reads, and the reads that
// saw a value written through another cachelet, or none at all.
func historyStats(ops []porcupine.Operation) string {
	var writes, reads, initial, crossed int
	for _, op := range ops {
		in := op.Input.(regInput)
		if in.write {
			writes++
			continue
		}
		reads++
		v := op.Output.(regOutput).value
		var writer, n int
		switch _, err := fmt.Sscanf(v, "c%d-%d", &writer, &n); {
		case v == "":
			initial++
		case err == nil && writer%linCachelets != op.ClientId%linCachelets:
			crossed++
		}
	}
	return fmt.Sprintf("%d writes, %d reads: %d of another cachelet's write, %d of no write, %d plainly stale",
		writes, reads, crossed, initial, plainlyStale(ops))
}

// plainlyStale counts reads that returned a value (or no value) although
// another write of the key both began after that value's write had
// returned and returned before the read began: a violation on its own,
// whatever the order of the rest.
func plainlyStale(ops []porcupine.Operation) int {
	written := map[regInput]porcupine.Operation{} // by key and value
	for _, op := range ops {
		if in := op.Input.(regInput); in.write {
			written[regInput{key: in.key, value: in.value}] = op
		}
	}
	stale := 0
	for _, r := range ops {
		in := r.Input.(regInput)
		if in.write {
			continue
		}
		v := r.Output.(regOutput).value
		after := int64(-1) // a newer write must begin after this
		if v != "" {
			w, ok := written[regInput{key: in.key, value: v}]
			if !ok {
				stale++ // a value never written
				continue
			}
			after = w.Return
		}
		for _, w := range ops {
			if win := w.Input.(regInput); win.write && win.key == in.key && w.Call > after && w.Return < r.Call {
				stale++
				break
			}
		}
	}
	return stale
}

// linOutDir is where failing histories' visualizations go.
func linOutDir(t *testing.T) string {
	if d := os.Getenv("HOARD_LINEARIZABILITY_OUT"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// TestLinearizability checks that the strong settings are linearizable
// registers across an application's cachelets, and shows what the checker
// makes of the weak owner-local-read setting (logged, not asserted).
func TestLinearizability(t *testing.T) {
	dir := t.TempDir()
	srv := startStore(t, localstore.StartMinIO, filepath.Join(dir, "data"), "127.0.0.1:0")
	t.Cleanup(func() { srv.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	etcd, err := etcdembed.Start(ctx, etcdembed.Config{Dir: dir})
	if err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	t.Cleanup(etcd.Close)
	env := &linEnv{store: srv, etcd: etcd, diskDir: durableDir(t),
		log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}

	// strong-ranged is strong whose reads are ranged (bytes=0-, the
	// whole value): served from pages (ADR 0021) where no whole copy is
	// cached, and from the whole copy where one is. -noadmit: every other
	// cachelet keeps none of its clients' misses (admission by predicted
	// benefit, cachelet/admit.go), beside cachelets that do.
	for _, name := range []string{"strong", "strong-ranged", "owner", "owner-local-read", "strong-noadmit", "owner-noadmit"} {
		strong := name != "owner-local-read"
		t.Run(name, func(t *testing.T) {
			noAdmit := strings.HasSuffix(name, "-noadmit")
			c, err := cachelet.ParseConsistency(strings.TrimSuffix(strings.TrimSuffix(name, "-noadmit"), "-ranged"))
			if err != nil {
				t.Fatal(err)
			}
			c.Name = name
			lc := startLinCluster(t, env, c)
			lc.ranged = strings.HasSuffix(name, "-ranged")
			if noAdmit {
				for i := 1; i < len(lc.ins); i += 2 {
					lc.ins[i].Cachelet().SetAdmit(false)
				}
			}
			bucket := "lin-" + name
			if err := lc.cs[0].MakeBucket(context.Background(), bucket, minio.MakeBucketOptions{}); err != nil {
				t.Fatalf("make bucket: %v", err)
			}

			// Two keys with different owners: each client is the owner's
			// client for at most one of them.
			var keys []string
			var owners []int
			for i := 0; len(keys) < 2 && i < 1000; i++ {
				key := fmt.Sprintf("register-%d", i)
				own := lc.owner(bucket, key)
				if own >= 0 && (len(owners) == 0 || owners[0] != own) {
					keys, owners = append(keys, key), append(owners, own)
				}
			}
			if len(keys) < 2 {
				t.Fatal("found no two keys with different owners")
			}

			seed := uint64(time.Now().UnixNano())
			stopDrops := func() {}
			if noAdmit {
				// The cachelets not admitting lose their copies every few
				// milliseconds, so their reads miss (under owner a writer
				// keeps a copy of what it wrote) and take the path that
				// keeps nothing.
				done, stopped := make(chan struct{}), make(chan struct{})
				go func() {
					defer close(stopped)
					for {
						select {
						case <-done:
							return
						case <-time.After(3 * time.Millisecond):
						}
						for i := 1; i < len(lc.ins); i += 2 {
							lc.ins[i].Cachelet().DropPrefix(bucket, "")
						}
					}
				}()
				stopDrops = func() { close(done); <-stopped }
			}
			rec := runRegisterWorkload(t, lc, bucket, keys, owners, seed)
			stopDrops()
			for _, e := range rec.errs {
				t.Errorf("request failed: %s", e)
			}
			if noAdmit {
				var n int64
				for _, in := range lc.ins {
					n += in.Cachelet().Counters().NotAdmitted
				}
				t.Logf("%s: %d reads not admitted", name, n)
				if n == 0 {
					t.Errorf("%s: no read went through the path not admitting", name)
				}
			}
			if lc.ranged {
				hits, filled := lc.pageReads("hit"), lc.pageReads("filled")
				t.Logf("%s: page reads: %v hits, %v filled", name, hits, filled)
				if hits == 0 || filled == 0 {
					t.Errorf("%s: no read went through pages (%v hits, %v filled)", name, hits, filled)
				}
			}

			start := time.Now()
			res, info := porcupine.CheckOperationsVerbose(registerModel, rec.ops, linCheck)
			took := time.Since(start)
			t.Logf("%s: %d operations (%s) on %v (owners %v), seed %d, workload %v; porcupine: %s in %v",
				name, len(rec.ops), historyStats(rec.ops), keys, owners, seed,
				time.Duration(rec.now()).Round(time.Millisecond), res, took.Round(time.Microsecond))
			if res == porcupine.Ok {
				return
			}
			path := filepath.Join(linOutDir(t), name+".html")
			if err := porcupine.VisualizePath(registerModel, info, path); err != nil {
				t.Errorf("visualize: %v", err)
			}
			switch {
			case !strong:
				t.Logf("%s (weak, not asserted): porcupine found the history %s; visualization %s", name, res, path)
			case res == porcupine.Unknown:
				t.Errorf("%s: porcupine could not decide within %v; visualization %s", name, linCheck, path)
			default:
				t.Errorf("%s: history is not linearizable; visualization %s (set HOARD_LINEARIZABILITY_OUT to keep it)", name, path)
			}
		})
	}
}

// The churn check runs the register workload while a fourth cachelet of
// the application repeatedly joins and cleanly leaves, so ownership of
// both registers moves to it and back, again and again, under load.
const (
	churnCycles   = 5                      // joins (and leaves) of the fourth cachelet
	churnMinPause = 300 * time.Millisecond // each pause, before a join and before a leave,
	churnMaxPause = 600 * time.Millisecond // is drawn from [min, max)
	churnAttempts = 4                      // tries per operation; a retry follows only a 503
	churnMaxOps   = 1000                   // per client
	churnMaxThink = 12 * time.Millisecond  // a client's pause after each operation, drawn from [0, max)
	churnRoamer   = 0                      // the client that goes through the fourth cachelet while it lives
)

// churnMinio is a minio-go client that tries each request once, so the
// workload sees (and counts, and retries) every 503 itself.
func churnMinio(endpoint string) (*minio.Client, error) {
	return minio.New(strings.TrimPrefix(endpoint, "http://"), &minio.Options{
		Creds: mcreds.NewStaticV4(clientAK, clientSK, ""), Secure: false, Region: "us-east-1",
		BucketLookup: minio.BucketLookupPath, MaxRetries: 1,
	})
}

// churnKeys picks two keys with different owners among the base
// cachelets that both move to the member fourthID while it is in the ring.
func churnKeys(lc *linCluster, bucket, fourthID string) ([]string, []int, error) {
	r4, err := ring.New(ring.Config{}, append(slices.Clone(lc.ins[0].Cluster().Ring().Members()), fourthID))
	if err != nil {
		return nil, nil, err
	}
	var keys []string
	var owners []int
	for i := 0; len(keys) < 2 && i < 10000; i++ {
		key := fmt.Sprintf("register-%d", i)
		if r4.Owner(bucket, key) != fourthID {
			continue
		}
		own := lc.owner(bucket, key)
		if own >= 0 && (len(owners) == 0 || owners[0] != own) {
			keys, owners = append(keys, key), append(owners, own)
		}
	}
	if len(keys) < 2 {
		return nil, nil, fmt.Errorf("found no two keys with different owners that %s would own", fourthID)
	}
	return keys, owners, nil
}

// handoffs sums hoard_cachelet_handoffs_total over instances.
func handoffs(ins ...*instance.Instance) float64 {
	var n float64
	for _, in := range ins {
		mfs, err := in.Registry().Gather()
		if err != nil {
			continue
		}
		for _, mf := range mfs {
			if mf.GetName() == "hoard_cachelet_handoffs_total" {
				for _, m := range mf.GetMetric() {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// churnStats is what the churn goroutine and the clients saw.
type churnStats struct {
	mu          sync.Mutex
	cycles      int      // completed joins and leaves
	moves       int      // key ownership changes seen in the base cachelets' rings
	unsettled   int      // ring changes not seen by every base cachelet in time
	handoffs4th float64  // handoffs run by the fourth cachelets before they left
	retries     int      // attempts repeated after a 503 (or a closed fourth)
	failures    []string // operations that failed on every attempt
	churnErrs   []string // the churn itself went wrong
	events      []string // the churn's steps, timed as the history is
}

func (s *churnStats) add(f func(*churnStats)) {
	s.mu.Lock()
	f(s)
	s.mu.Unlock()
}

// awaitRing waits until every base cachelet sees n members, and reports
// whether they did before the deadline.
func (lc *linCluster) awaitRing(n int, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for {
		ok := true
		for _, in := range lc.ins {
			if in.Cluster().Ring().Len() != n {
				ok = false
			}
		}
		if ok {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// churn joins and removes a fourth cachelet churnCycles times, publishing
// a client of it in roam while it serves, and closes done when finished.
func churn(env *linEnv, c cachelet.Consistency, lc *linCluster, app, bucket string, keys []string,
	roam *atomic.Pointer[minio.Client], rng *rand.Rand, st *churnStats, rec *linRecorder, done chan<- struct{}) {
	defer close(done)
	event := func(format string, args ...any) {
		e := fmt.Sprintf("%d\t%s", rec.now(), fmt.Sprintf(format, args...))
		st.add(func(s *churnStats) { s.events = append(s.events, e) })
	}
	pause := func() {
		time.Sleep(churnMinPause + time.Duration(rng.Int64N(int64(churnMaxPause-churnMinPause))))
	}
	owners := func() []string {
		r := lc.ins[0].Cluster().Ring()
		out := make([]string, len(keys))
		for i, k := range keys {
			out[i] = r.Owner(bucket, k)
		}
		return out
	}
	moved := func(before []string) {
		after := owners()
		n := 0
		for i := range before {
			if before[i] != after[i] {
				n++
			}
		}
		st.add(func(s *churnStats) { s.moves += n })
	}
	fail := func(format string, args ...any) {
		st.add(func(s *churnStats) { s.churnErrs = append(s.churnErrs, fmt.Sprintf(format, args...)) })
	}
	for cycle := range churnCycles {
		pause()
		before := owners()
		event("cycle %d: starting the fourth cachelet", cycle)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		in, leave, err := startLinMember(ctx, env, c, app, linCachelets)
		cancel()
		if err != nil {
			fail("cycle %d: start the fourth cachelet: %v", cycle, err)
			return
		}
		event("cycle %d: fourth cachelet serving", cycle)
		if !lc.awaitRing(linCachelets+1, 5*time.Second) {
			st.add(func(s *churnStats) { s.unsettled++ })
		}
		event("cycle %d: every base cachelet sees 4 members", cycle)
		moved(before)
		if c4, err := churnMinio(in.Endpoint()); err != nil {
			fail("cycle %d: client of the fourth cachelet: %v", cycle, err)
		} else {
			roam.Store(c4)
		}
		pause()
		roam.Store(nil)
		before = owners()
		h := handoffs(in)
		event("cycle %d: closing the fourth cachelet", cycle)
		ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
		err = leave(ctx)
		cancel()
		event("cycle %d: fourth cachelet closed (err %v)", cycle, err)
		if err != nil {
			fail("cycle %d: close the fourth cachelet: %v", cycle, err)
		}
		if !lc.awaitRing(linCachelets, 5*time.Second) {
			st.add(func(s *churnStats) { s.unsettled++ })
		}
		event("cycle %d: every base cachelet sees 3 members", cycle)
		moved(before)
		st.add(func(s *churnStats) { s.cycles++; s.handoffs4th += h })
	}
}

// retryable says whether a failed attempt may be repeated as the same
// operation: the cachelet answered 503 (it refused before acting), or the
// fourth cachelet was gone (no connection).
func retryable(err error, viaFourth bool) bool {
	code := minio.ToErrorResponse(err).StatusCode
	return code == http.StatusServiceUnavailable || (viaFourth && code == 0)
}

// churnLoad is the shape of a churn run's workload.
type churnLoad struct {
	clients    int           // clients, spread over the base cachelets
	writeEvery int           // a client writes about once in writeEvery operations
	maxThink   time.Duration // a client's pause after each operation, drawn from [0, max)
}

// The register workload (two keys, half writes), and the hot-key one:
// more clients reading one key back to back, so that reads share version
// checks (ADR 0019) while ownership moves.
var (
	churnRegister = churnLoad{clients: linClients, writeEvery: 2, maxThink: churnMaxThink}
	churnHot      = churnLoad{clients: 9, writeEvery: 10, maxThink: 3 * time.Millisecond}
)

// runChurnWorkload runs load's clients until the churn is done (or
// churnMaxOps each) and returns the history.
func runChurnWorkload(cs []*minio.Client, roam *atomic.Pointer[minio.Client], bucket string, keys []string, owners []int,
	seed uint64, load churnLoad, st *churnStats, done <-chan struct{}, rec *linRecorder) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for client := range load.clients {
		base := client % len(cs)
		rng := rand.New(rand.NewPCG(seed, uint64(client)))
		wg.Go(func() {
			for n := 0; n < churnMaxOps; n++ {
				select {
				case <-done:
					return
				default:
				}
				ki := rng.IntN(len(keys))
				key := keys[ki]
				write := rng.IntN(load.writeEvery) == 0
				v := fmt.Sprintf("c%d-%d", client, n)
				var (
					got  string
					err  error
					path []string
				)
				call := rec.now()
				for attempt := range churnAttempts {
					cl, via, viaFourth := cs[base], fmt.Sprint(base), false
					if client == churnRoamer {
						if c4 := roam.Load(); c4 != nil {
							cl, via, viaFourth = c4, "4th", true
						}
					}
					if write {
						_, err = cl.PutObject(ctx, bucket, key, strings.NewReader(v), int64(len(v)), minio.PutObjectOptions{})
					} else {
						got, err = readValue(ctx, cl, bucket, key)
					}
					path = append(path, via)
					if err == nil || attempt == churnAttempts-1 || !retryable(err, viaFourth) {
						break
					}
					st.add(func(s *churnStats) { s.retries++ })
					time.Sleep(time.Duration(10*(attempt+1)) * time.Millisecond)
				}
				ret := rec.now()
				meta := fmt.Sprintf("client %d via %s (base owner of %s: %d)", client, strings.Join(path, ","), key, owners[ki])
				if err != nil {
					op := "get " + key
					if write {
						op = fmt.Sprintf("put %s=%s", key, v)
					}
					st.add(func(s *churnStats) {
						s.failures = append(s.failures, fmt.Sprintf("client %d %s via %v: %v", client, op, path, err))
					})
				}
				switch {
				case write:
					if err != nil {
						ret = math.MaxInt64 // may or may not have taken effect
					}
					rec.add(porcupine.Operation{ClientId: client, Input: regInput{key: key, write: true, value: v},
						Call: call, Output: regOutput{}, Return: ret, Metadata: meta})
				case err == nil:
					rec.add(porcupine.Operation{ClientId: client, Input: regInput{key: key},
						Call: call, Output: regOutput{got}, Return: ret, Metadata: meta})
				}
				if load.maxThink <= 0 {
					continue
				}
				if think := rng.Int64N(int64(load.maxThink)); think > 0 {
					time.Sleep(time.Duration(think))
				}
			}
		})
	}
	wg.Wait()
}

// writeHistory writes ops as text, one per line in call order (call and
// return in nanoseconds since the run began, "never" for a write whose
// outcome is unknown), then the churn's timed steps.
func writeHistory(path string, ops []porcupine.Operation, events []string) error {
	sorted := slices.Clone(ops)
	slices.SortFunc(sorted, func(a, b porcupine.Operation) int { return cmpInt64(a.Call, b.Call) })
	var b strings.Builder
	for _, op := range sorted {
		ret := fmt.Sprint(op.Return)
		if op.Return == math.MaxInt64 {
			ret = "never"
		}
		fmt.Fprintf(&b, "%d\t%s\t%s\t%s\n", op.Call, ret, registerModel.DescribeOperation(op.Input, op.Output), op.Metadata)
	}
	for _, e := range events {
		fmt.Fprintf(&b, "%s\n", e)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// TestLinearizabilityUnderChurn checks the strong settings stay
// linearizable registers while a fourth cachelet joins and leaves the
// application over and over, moving both registers' ownership each time;
// strong-hot runs strong with many clients reading one key back to back,
// so that reads share version checks while ownership moves.
// HOARD_LINEARIZABILITY_SEED fixes the workload's and the churn's choices.
func TestLinearizabilityUnderChurn(t *testing.T) {
	dir := t.TempDir()
	srv := startStore(t, localstore.StartMinIO, filepath.Join(dir, "data"), "127.0.0.1:0")
	t.Cleanup(func() { srv.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	etcd, err := etcdembed.Start(ctx, etcdembed.Config{Dir: dir})
	if err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	t.Cleanup(etcd.Close)
	level := slog.LevelWarn
	if os.Getenv("HOARD_LINEARIZABILITY_VERBOSE") != "" {
		level = slog.LevelInfo // membership changes and handoffs, timed
	}
	env := &linEnv{store: srv, etcd: etcd, diskDir: durableDir(t),
		log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))}

	for _, name := range []string{"strong", "owner", "strong-hot"} {
		t.Run(name, func(t *testing.T) {
			load, setting := churnRegister, name
			if name == "strong-hot" {
				load, setting = churnHot, "strong"
			}
			c, err := cachelet.ParseConsistency(setting)
			if err != nil {
				t.Fatal(err)
			}
			app := "churn-" + name
			lc := &linCluster{}
			{
				// Base cachelets as startLinCluster's, under this app.
				sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
				for i := range linCachelets {
					in, leave, err := startLinMember(sctx, env, c, app, i)
					if err != nil {
						scancel()
						t.Fatalf("start cachelet %d: %v", i, err)
					}
					t.Cleanup(func() { _ = leave(context.Background()) })
					lc.ins = append(lc.ins, in)
				}
				scancel()
			}
			if !lc.awaitRing(linCachelets, 20*time.Second) {
				t.Fatalf("cachelets did not all see %d members", linCachelets)
			}
			var cs []*minio.Client
			for _, in := range lc.ins {
				cl, err := churnMinio(in.Endpoint())
				if err != nil {
					t.Fatal(err)
				}
				cs = append(cs, cl)
			}
			bucket := "churn-" + name
			if err := cs[0].MakeBucket(context.Background(), bucket, minio.MakeBucketOptions{}); err != nil {
				t.Fatalf("make bucket: %v", err)
			}
			fourthID := fmt.Sprintf("%s-%d", app, linCachelets)
			keys, owners, err := churnKeys(lc, bucket, fourthID)
			if err != nil {
				t.Fatal(err)
			}

			seed := uint64(time.Now().UnixNano())
			if s := os.Getenv("HOARD_LINEARIZABILITY_SEED"); s != "" {
				if _, err := fmt.Sscan(s, &seed); err != nil {
					t.Fatalf("HOARD_LINEARIZABILITY_SEED: %v", err)
				}
			}
			baseHandoffs := handoffs(lc.ins...)
			st := &churnStats{}
			var roam atomic.Pointer[minio.Client]
			done := make(chan struct{})
			rec := &linRecorder{start: time.Now()}
			go churn(env, c, lc, app, bucket, keys, &roam, rand.New(rand.NewPCG(seed, math.MaxUint32)), st, rec, done)
			if load == churnHot {
				keys, owners = keys[:1], owners[:1] // one hot key
			}
			runChurnWorkload(cs, &roam, bucket, keys, owners, seed, load, st, done, rec)
			<-done
			workload := time.Duration(rec.now()).Round(time.Millisecond)
			t.Logf("%s under churn: history times are nanoseconds since %s", name, rec.start.Format(time.RFC3339Nano))

			if os.Getenv("HOARD_LINEARIZABILITY_VERBOSE") != "" {
				for _, e := range st.events {
					t.Logf("churn: %s", e)
				}
			}
			for _, e := range st.churnErrs {
				t.Errorf("churn: %s", e)
			}
			for i, f := range st.failures {
				if i == 10 {
					t.Logf("... and %d more failed operations", len(st.failures)-i)
					break
				}
				t.Logf("failed on every attempt: %s", f)
			}
			if len(st.failures)*10 > len(rec.ops) {
				t.Errorf("%d of %d operations failed on every attempt", len(st.failures), len(rec.ops))
			}
			if st.cycles < churnCycles-1 {
				t.Errorf("only %d churn cycles completed, want at least %d", st.cycles, churnCycles-1)
			}

			start := time.Now()
			res, info := porcupine.CheckOperationsVerbose(registerModel, rec.ops, linCheck)
			took := time.Since(start)
			t.Logf("%s under churn: %d join/leave cycles of %s, %d key ownership moves seen (%d ring changes not seen in time by every base cachelet), "+
				"handoffs %v by the base cachelets + %v by the fourth; %d retries, %d failed operations",
				name, st.cycles, fourthID, st.moves, st.unsettled, handoffs(lc.ins...)-baseHandoffs, st.handoffs4th, st.retries, len(st.failures))
			t.Logf("%s under churn: %d operations checked (%s) on %v (base owners %v), seed %d, workload %v; porcupine: %s in %v",
				name, len(rec.ops), historyStats(rec.ops), keys, owners, seed, workload, res, took.Round(time.Microsecond))
			if n := plainlyStale(rec.ops); n > 0 {
				// A violation whatever porcupine decides in its time.
				t.Errorf("%s under churn: %d reads returned a value overwritten before they began; seed %d", name, n, seed)
			}
			if load == churnHot {
				joins := validationJoins(lc.ins...)
				t.Logf("%s under churn: %v reads shared a version check", name, joins)
				if joins == 0 {
					t.Errorf("%s under churn: no read shared a version check", name)
				}
			}
			if res == porcupine.Ok {
				return
			}
			out := linOutDir(t)
			path := filepath.Join(out, fmt.Sprintf("churn-%s-%d.html", name, seed))
			if err := porcupine.VisualizePath(registerModel, info, path); err != nil {
				t.Errorf("visualize: %v", err)
			}
			hist := strings.TrimSuffix(path, ".html") + ".txt"
			if err := writeHistory(hist, rec.ops, st.events); err != nil {
				t.Errorf("write history: %v", err)
			}
			if res == porcupine.Unknown {
				t.Errorf("%s under churn: porcupine could not decide within %v; seed %d; visualization %s, history %s", name, linCheck, seed, path, hist)
			} else {
				t.Errorf("%s under churn: history is not linearizable; seed %d; visualization %s, history %s (set HOARD_LINEARIZABILITY_OUT to keep them)", name, seed, path, hist)
			}
		})
	}
}
