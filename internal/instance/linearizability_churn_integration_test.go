//go:build integration

package instance_test

import (
	"context"
	"fmt"
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
	"github.com/hoard-io/hoard/internal/instance"
	"github.com/hoard-io/hoard/internal/ring"
)

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
	return counters("hoard_cachelet_handoffs_total", nil, ins...)
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
	srv, etcd := startStoreAndEtcd(t, dir)
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
