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
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/minio/minio-go/v7"

	"github.com/hoard-io/hoard/internal/cachelet"
	"github.com/hoard-io/hoard/internal/disktier"
	"github.com/hoard-io/hoard/internal/etcdembed"
	"github.com/hoard-io/hoard/internal/instance"
	"github.com/hoard-io/hoard/internal/localstore"
	etcdmembership "github.com/hoard-io/hoard/internal/membership/etcd"
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
	return counters("hoard_cachelet_page_reads_total", map[string]string{"result": result}, lc.ins...)
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
	srv, etcd := startStoreAndEtcd(t, dir)
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
