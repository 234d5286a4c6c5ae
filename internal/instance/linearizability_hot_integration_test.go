//go:build integration

package instance_test

import (
	"context"
	"fmt"
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
	"github.com/hoard-io/hoard/internal/instance"
	"github.com/hoard-io/hoard/internal/netshape"
)

// The hot-key check: many clients read one key at once through every
// cachelet under strong, so that reads share version checks (ADR 0019),
// while some of them write through hoard and one writes straight to the
// store behind hoard's back. The cachelets reach the store through a link
// with latency (hotLatency each way) while the direct writer does not, so
// a version check is on the wire long enough for a whole write to
// complete beside it: a read that took the answer of a check sent before
// it began would be caught returning an overwritten value.
const (
	hotClients    = 12 // through the cachelets, hotClients / linCachelets each
	hotOps        = 80 // per client
	hotWriteEvery = 16 // a client writes about once in hotWriteEvery operations
	hotDirectOps  = 80 // writes straight to the store
	hotLatency    = 10 * time.Millisecond
)

// validationJoins sums hoard_cachelet_validation_joins_total over
// instances.
func validationJoins(ins ...*instance.Instance) float64 {
	return counters("hoard_cachelet_validation_joins_total", nil, ins...)
}

// runHotKeyWorkload runs the hot-key clients and the direct writer and
// returns the history.
func runHotKeyWorkload(lc *linCluster, direct *minio.Client, bucket, key string, seed uint64) *linRecorder {
	rec := &linRecorder{start: time.Now()}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	put := func(client int, cl *minio.Client, v, meta string) {
		call := rec.now()
		_, err := cl.PutObject(ctx, bucket, key, strings.NewReader(v), int64(len(v)), minio.PutObjectOptions{})
		ret := rec.now()
		if err != nil {
			rec.fail("client %d put %s=%s: %v", client, key, v, err)
			ret = math.MaxInt64 // may or may not have taken effect
		}
		rec.add(porcupine.Operation{ClientId: client, Input: regInput{key: key, write: true, value: v},
			Call: call, Output: regOutput{}, Return: ret, Metadata: meta})
	}
	var wg sync.WaitGroup
	for client := range hotClients {
		via := client % len(lc.ins)
		cl := lc.cs[via]
		rng := rand.New(rand.NewPCG(seed, uint64(client)))
		wg.Go(func() {
			meta := fmt.Sprintf("client %d via cachelet %d", client, via)
			for n := range hotOps {
				if rng.IntN(hotWriteEvery) == 0 {
					put(client, cl, fmt.Sprintf("c%d-%d", client, n), meta)
					continue
				}
				call := rec.now()
				v, err := readValue(ctx, cl, bucket, key)
				ret := rec.now()
				if err != nil {
					rec.fail("client %d get %s: %v", client, key, err)
					continue
				}
				rec.add(porcupine.Operation{ClientId: client, Input: regInput{key: key},
					Call: call, Output: regOutput{v}, Return: ret, Metadata: meta})
				// Readers would otherwise arrive in step with the
				// checks' answers; a pause of up to a round trip spreads
				// their arrivals over the checks' flights.
				time.Sleep(time.Duration(rng.Int64N(int64(2 * hotLatency))))
			}
		})
	}
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(seed, math.MaxUint16))
		for n := range hotDirectOps {
			put(hotClients, direct, fmt.Sprintf("d-%d", n), "straight to the store")
			time.Sleep(time.Duration(rng.Int64N(int64(40 * time.Millisecond)))) // spreads the writes over the run
		}
	})
	wg.Wait()
	return rec
}

// TestLinearizabilityHotKey checks that strong stays a linearizable
// register when concurrent reads of one key share version checks, with
// writes through hoard and behind its back.
func TestLinearizabilityHotKey(t *testing.T) {
	dir := t.TempDir()
	srv, etcd := startStoreAndEtcd(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	shaper, err := netshape.Start(ctx, netshape.Config{LogFile: filepath.Join(dir, "toxiproxy.log")})
	if err != nil {
		t.Fatalf("start toxiproxy: %v", err)
	}
	t.Cleanup(func() { shaper.Close() })
	link := netshape.Link{Latency: hotLatency}
	proxy, err := shaper.Shape(ctx, "store", srv.Endpoint(), link, link)
	if err != nil {
		t.Fatalf("shape the store's link: %v", err)
	}
	env := &linEnv{store: srv, etcd: etcd, storeURL: proxy.Endpoint,
		log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	c, err := cachelet.ParseConsistency("strong")
	if err != nil {
		t.Fatal(err)
	}
	lc := startLinCluster(t, env, c)
	bucket, key := "lin-hot", "hot"
	if err := lc.cs[0].MakeBucket(context.Background(), bucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatalf("make bucket: %v", err)
	}
	direct := minioClient(t, srv.Endpoint(), storeAK, storeSK)

	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("HOARD_LINEARIZABILITY_SEED"); s != "" {
		if _, err := fmt.Sscan(s, &seed); err != nil {
			t.Fatalf("HOARD_LINEARIZABILITY_SEED: %v", err)
		}
	}
	rec := runHotKeyWorkload(lc, direct, bucket, key, seed)
	for _, e := range rec.errs {
		t.Errorf("request failed: %s", e)
	}
	joins := validationJoins(lc.ins...)
	start := time.Now()
	res, info := porcupine.CheckOperationsVerbose(registerModel, rec.ops, linCheck)
	t.Logf("hot key: %d operations (%s), %v reads shared a version check, seed %d, workload %v; porcupine: %s in %v",
		len(rec.ops), historyStats(rec.ops), joins, seed, time.Duration(rec.now()).Round(time.Millisecond), res, time.Since(start).Round(time.Millisecond))
	if joins == 0 {
		t.Errorf("no read shared a version check: the workload did not exercise shared validations")
	}
	if n := plainlyStale(rec.ops); n > 0 {
		// A violation whatever porcupine finds in its time.
		t.Errorf("hot key: %d reads returned a value overwritten before they began; seed %d", n, seed)
	}
	if res == porcupine.Ok {
		return
	}
	path := filepath.Join(linOutDir(t), fmt.Sprintf("hot-%d.html", seed))
	if err := porcupine.VisualizePath(registerModel, info, path); err != nil {
		t.Errorf("visualize: %v", err)
	}
	if res == porcupine.Unknown {
		t.Errorf("hot key: porcupine could not decide within %v; seed %d; visualization %s", linCheck, seed, path)
	} else {
		t.Errorf("hot key: history is not linearizable; seed %d; visualization %s (set HOARD_LINEARIZABILITY_OUT to keep it)", seed, path)
	}
}
