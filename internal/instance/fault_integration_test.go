//go:build integration && linux

package instance_test

// Fault tests with real processes: three `hoard serve` cachelets of one
// application (consistency "strong"), MinIO as the store and an embedded
// etcd holding membership. TestKillDuringLoad SIGKILLs one cachelet in the
// middle of a mixed read/write load; TestCutOffCachelet freezes one
// (SIGSTOP) so that its peers cannot reach it, writes behind its back, and
// thaws it.
//
// The cachelets are the real binary: $HOARD_BIN, or <module root>/bin/hoard
// (`go build -o bin/hoard ./cmd/hoard`).

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
)

func TestKillDuringLoad(t *testing.T) {
	const (
		app       = "faultkill"
		bucket    = "fault"
		nKeys     = 50
		nCold     = 400 // keys written behind the cache, each read once per cachelet
		workers   = 9
		loadFor   = 12 * time.Second
		killAfter = 4 * time.Second
		victim    = 2
	)
	fc := newFaultCluster(t, app, 3)
	ctx := context.Background()
	if err := fc.direct.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatalf("make bucket: %v", err)
	}

	// Seed: sequence 0 of every key through the cachelets, and the cold
	// keys straight into the store.
	keys := make([]string, nKeys)
	state := make([]*keyState, nKeys)
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := range keys {
		keys[i] = fmt.Sprintf("k%02d", i)
		state[i] = &keyState{next: 1}
		if err := putValue(ctx, fc.procs[i%3].client, bucket, keys[i], makeValue(keys[i], 0, rnd)); err != nil {
			t.Fatalf("seed %s: %v", keys[i], err)
		}
	}
	var seedWG sync.WaitGroup
	seedErr := make(chan error, nCold)
	for w := range 16 {
		seedWG.Add(1)
		go func() {
			defer seedWG.Done()
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for i := w; i < nCold; i += 16 {
				key := fmt.Sprintf("cold-%03d", i)
				if err := putValue(ctx, fc.direct, bucket, key, makeValue(key, 0, r)); err != nil {
					seedErr <- err
					return
				}
			}
		}()
	}
	seedWG.Wait()
	close(seedErr)
	if err := <-seedErr; err != nil {
		t.Fatalf("seed cold keys: %v", err)
	}
	fallbacksBefore := make([]float64, 3)
	for i, p := range fc.procs {
		fallbacksBefore[i] = p.metric(t, "hoard_cachelet_peer_fallbacks_total")
	}

	var (
		killedAt   atomic.Pointer[time.Time]
		coldNext   [3]atomic.Int64
		violations = make(chan string, 100)
		// Before the kill; after it, through the killed endpoint (until
		// the client moves on); after it, through survivors.
		preReads, preWrites, deadReads, deadWrites, postReads, postWrites, coldReads opStats
		staleChecks                                                                  atomic.Int64
	)
	violate := func(format string, args ...any) {
		select {
		case violations <- fmt.Sprintf(format, args...):
		default:
		}
	}
	// stats classifies an operation when it ends: one in flight at the
	// kill counts as after it.
	stats := func(ep int, write bool) *opStats {
		switch {
		case killedAt.Load() == nil && write:
			return &preWrites
		case killedAt.Load() == nil:
			return &preReads
		case ep == victim && write:
			return &deadWrites
		case ep == victim:
			return &deadReads
		case write:
			return &postWrites
		}
		return &postReads
	}

	start := time.Now()
	stop := start.Add(loadFor)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w)+100, 3))
			ep := w % 3
			lastCold := time.Time{}
			for time.Now().Before(stop) {
				c := fc.procs[ep].client
				opCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
				var err error
				switch x := r.IntN(100); {
				case time.Since(lastCold) > 100*time.Millisecond:
					lastCold = time.Now()
					i := coldNext[ep].Add(1) - 1
					if i >= nCold {
						break
					}
					key := fmt.Sprintf("cold-%03d", i)
					var v []byte
					if v, err = getValue(opCtx, c, bucket, key); err == nil {
						if seq, cerr := checkValue(key, v); cerr != nil || seq != 0 {
							violate("cold read of %s through %s: seq %d, %v", key, fc.procs[ep].id, seq, cerr)
						}
					}
					if ep != victim || killedAt.Load() == nil {
						coldReads.add(err)
					}
				case x < 30:
					i := r.IntN(nKeys)
					ks := state[i]
					if !ks.mu.TryLock() {
						cancel()
						continue // another worker is writing this key
					}
					seq := ks.next
					ks.next++
					err = putValue(opCtx, c, bucket, keys[i], makeValue(keys[i], seq, r))
					if err == nil {
						ks.acked.Store(seq)
					} else {
						ks.unknown = append(ks.unknown, seq)
					}
					ks.mu.Unlock()
					stats(ep, true).add(err)
				default:
					i := r.IntN(nKeys)
					floor := state[i].acked.Load() // acknowledged before this read began
					var v []byte
					if v, err = getValue(opCtx, c, bucket, keys[i]); err == nil {
						seq, cerr := checkValue(keys[i], v)
						switch {
						case cerr != nil:
							violate("read of %s through %s: %v", keys[i], fc.procs[ep].id, cerr)
						case seq < floor:
							violate("stale read of %s through %s: seq %d, but seq %d was acknowledged before the read began", keys[i], fc.procs[ep].id, seq, floor)
						}
						staleChecks.Add(1)
					}
					stats(ep, false).add(err)
				}
				cancel()
				// A client of the killed cachelet moves to a survivor.
				if err != nil && ep == victim && killedAt.Load() != nil {
					ep = (victim + 1 + w%2) % 3
				}
			}
		}()
	}

	time.Sleep(killAfter)
	now := time.Now()
	// Marked before the signal: an operation the kill cuts may end the
	// moment the signal lands, and must count as after it.
	killedAt.Store(&now)
	fc.procs[victim].signal(t, syscall.SIGKILL)
	wg.Wait()
	elapsed := time.Since(start)

	close(violations)
	for v := range violations {
		t.Error(v)
	}

	// The killed member leaves the ring within its lease TTL.
	leftAt, ok := fc.members.waitFor(now, 2*fc.members.ttl, func(ids []string) bool {
		return !slices.Contains(ids, fc.procs[victim].id) && len(ids) == 2
	})
	if !ok {
		t.Errorf("%s still in the ring %v after the kill", fc.procs[victim].id, 2*fc.members.ttl)
	}
	leave := leftAt.Sub(now)
	// etcd expires leases on its own clock, checked every 500 ms, and the
	// revocation goes through raft: allow that on top of the TTL.
	if ok && leave > fc.members.ttl+time.Second {
		t.Errorf("%s left the ring %v after the kill; lease TTL %v", fc.procs[victim].id, leave, fc.members.ttl)
	}

	total := preReads.ok.Load() + preReads.failed.Load() + preWrites.ok.Load() + preWrites.failed.Load() +
		deadReads.ok.Load() + deadReads.failed.Load() + deadWrites.ok.Load() + deadWrites.failed.Load() +
		postReads.ok.Load() + postReads.failed.Load() + postWrites.ok.Load() + postWrites.failed.Load() +
		coldReads.ok.Load() + coldReads.failed.Load()
	postN := postReads.ok.Load() + postReads.failed.Load()
	rate := float64(postReads.ok.Load()) / float64(max(postN, 1))
	var fallbacks float64
	for i, p := range fc.procs {
		if i != victim {
			fallbacks += p.metric(t, "hoard_cachelet_peer_fallbacks_total") - fallbacksBefore[i]
		}
	}
	t.Logf("load: %d ops in %v (%d reads checked for freshness), kill at %v", total, elapsed.Round(time.Millisecond), staleChecks.Load(), killAfter)
	t.Logf("before kill: reads %v; writes %v", &preReads, &preWrites)
	t.Logf("after kill, killed endpoint: reads %v; writes %v", &deadReads, &deadWrites)
	t.Logf("after kill, survivors: reads %v (success %.2f%%); writes %v", &postReads, 100*rate, &postWrites)
	t.Logf("cold reads (routed to owners): %v; survivors' peer fallbacks after the kill: %.0f", &coldReads, fallbacks)
	t.Logf("%s left the ring %v after SIGKILL (lease TTL %v)", fc.procs[victim].id, leave.Round(time.Millisecond), fc.members.ttl)
	if preReads.failed.Load() > 0 || preWrites.failed.Load() > 0 {
		t.Errorf("operations failed before any fault: reads %v, writes %v", &preReads, &preWrites)
	}
	if postN < 100 {
		t.Errorf("only %d reads through survivors after the kill", postN)
	}
	if rate < 0.95 {
		t.Errorf("read success on survivors after the kill %.2f%%, want >= 95%%", 100*rate)
	}

	// No acknowledged write is lost: every key reads back, through every
	// survivor and straight from the store, as its last acknowledged
	// write (or a later write whose answer was lost with the victim).
	readers := []struct {
		name string
		c    *minio.Client
	}{{"store", fc.direct}}
	for i, p := range fc.procs {
		if i != victim {
			readers = append(readers, struct {
				name string
				c    *minio.Client
			}{p.id, p.client})
		}
	}
	unknownTotal := 0
	for i, key := range keys {
		ks := state[i]
		acked := ks.acked.Load()
		unknownTotal += len(ks.unknown)
		for _, rd := range readers {
			v, err := getValue(ctx, rd.c, bucket, key)
			if err != nil {
				t.Errorf("final read of %s through %s: %v", key, rd.name, err)
				continue
			}
			seq, err := checkValue(key, v)
			switch {
			case err != nil:
				t.Errorf("final read of %s through %s: %v", key, rd.name, err)
			case seq == acked:
			case seq > acked && slices.Contains(ks.unknown, seq):
				t.Logf("%s through %s: seq %d, a write whose answer was lost (last acknowledged %d)", key, rd.name, seq, acked)
			default:
				t.Errorf("final read of %s through %s: seq %d, last acknowledged write %d (unanswered: %v)", key, rd.name, seq, acked, ks.unknown)
			}
		}
	}
	t.Logf("final check: %d keys x %d readers; %d writes went unanswered", nKeys, len(readers), unknownTotal)
}

func TestCutOffCachelet(t *testing.T) {
	const (
		app    = "faultcut"
		bucket = "cut"
		nKeys  = 24
		nCold  = 16 // per survivor: keys the frozen cachelet owns, never read before
		cut    = 2
		// Shorter than the lease TTL (5 s) less a keep-alive interval
		// (TTL/3), so the frozen cachelet's lease survives: its peers keep
		// routing to it.
		pause = 2500 * time.Millisecond
	)
	fc := newFaultCluster(t, app, 3)
	ctx := context.Background()
	if err := fc.direct.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatalf("make bucket: %v", err)
	}
	rnd := rand.New(rand.NewPCG(3, 4))
	survivors := []int{(cut + 1) % 3, (cut + 2) % 3}
	frozen := fc.procs[cut]

	// Version 1 of every key through cachelet 0, read through all three:
	// every cachelet holds a copy.
	keys := make([]string, nKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%02d", i)
		if err := putValue(ctx, fc.procs[0].client, bucket, keys[i], makeValue(keys[i], 1, rnd)); err != nil {
			t.Fatalf("put %s: %v", keys[i], err)
		}
	}
	owned := 0
	for _, key := range keys {
		if fc.ownerIndex(bucket, key) == cut {
			owned++
		}
		for _, p := range fc.procs {
			v, err := getValue(ctx, p.client, bucket, key)
			if err != nil {
				t.Fatalf("get %s through %s: %v", key, p.id, err)
			}
			if seq, err := checkValue(key, v); err != nil || seq != 1 {
				t.Fatalf("get %s through %s: seq %d, %v", key, p.id, seq, err)
			}
		}
	}
	// Cold keys the frozen cachelet owns, written behind the cache.
	var cold [][]string
	for range survivors {
		cold = append(cold, nil)
	}
	for i, n := 0, 0; n < nCold*len(survivors); i++ {
		key := fmt.Sprintf("cold-%04d", i)
		if fc.ownerIndex(bucket, key) != cut {
			continue
		}
		if err := putValue(ctx, fc.direct, bucket, key, makeValue(key, 1, rnd)); err != nil {
			t.Fatal(err)
		}
		cold[n%len(survivors)] = append(cold[n%len(survivors)], key)
		n++
	}
	fallbacksBefore := map[int]float64{}
	for _, s := range survivors {
		fallbacksBefore[s] = fc.procs[s].metric(t, "hoard_cachelet_peer_fallbacks_total")
	}

	frozen.signal(t, syscall.SIGSTOP)
	frozenAt := time.Now()
	thawed := false
	defer func() {
		if !thawed {
			_ = frozen.cmd.Process.Signal(syscall.SIGCONT)
		}
	}()

	// Cold reads through the survivors of keys the frozen cachelet owns:
	// their misses go to it.
	type coldResult struct {
		key, via string
		took     time.Duration
		err      error
	}
	coldCh := make(chan coldResult, nCold*len(survivors))
	var coldWG sync.WaitGroup
	for si, s := range survivors {
		for _, key := range cold[si] {
			coldWG.Add(1)
			go func() {
				defer coldWG.Done()
				rctx, cancel := context.WithTimeout(ctx, 45*time.Second)
				defer cancel()
				t0 := time.Now()
				v, err := getValue(rctx, fc.procs[s].client, bucket, key)
				res := coldResult{key: key, via: fc.procs[s].id, took: time.Since(t0), err: err}
				if err == nil {
					if seq, cerr := checkValue(key, v); cerr != nil || seq != 1 {
						res.err = fmt.Errorf("seq %d: %v", seq, cerr)
						t.Errorf("cold read of %s through %s while %s is frozen: wrong value: %v", key, res.via, frozen.id, res.err)
					}
				}
				coldCh <- res
			}()
		}
	}

	// Meanwhile the survivors serve the keys they hold: version 2 of every
	// key is written through them, and read back through both.
	var maxOp time.Duration
	timed := func(f func() error) error {
		t0 := time.Now()
		err := f()
		maxOp = max(maxOp, time.Since(t0))
		return err
	}
	for i, key := range keys {
		c := fc.procs[survivors[i%2]].client
		v := makeValue(key, 2, rnd)
		if err := timed(func() error {
			octx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			return putValue(octx, c, bucket, key, v)
		}); err != nil {
			t.Fatalf("put %s v2 while %s is frozen: %v", key, frozen.id, err)
		}
	}
	hotReads := 0
	for _, key := range keys {
		for _, s := range survivors {
			var v []byte
			err := timed(func() error {
				octx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				var err error
				v, err = getValue(octx, fc.procs[s].client, bucket, key)
				return err
			})
			if err != nil {
				t.Fatalf("get %s through %s while %s is frozen: %v", key, fc.procs[s].id, frozen.id, err)
			}
			if seq, err := checkValue(key, v); err != nil || seq != 2 {
				t.Fatalf("get %s through %s while %s is frozen: seq %d (want 2), %v", key, fc.procs[s].id, frozen.id, seq, err)
			}
			hotReads++
		}
	}
	frozenWork := time.Since(frozenAt)
	if frozenWork > pause {
		t.Logf("note: writes and reads on the survivors took %v, longer than the pause", frozenWork)
	}
	time.Sleep(time.Until(frozenAt.Add(pause)))
	frozen.signal(t, syscall.SIGCONT)
	thawed = true
	thawedAt := time.Now()

	coldWG.Wait()
	close(coldCh)
	var coldOK, coldFailed int
	var coldMax time.Duration
	for r := range coldCh {
		coldMax = max(coldMax, r.took)
		if r.err != nil {
			coldFailed++
			t.Logf("cold read of %s through %s: %v after %v", r.key, r.via, r.err, r.took)
		} else {
			coldOK++
		}
	}
	var fallbacks float64
	for _, s := range survivors {
		fallbacks += fc.procs[s].metric(t, "hoard_cachelet_peer_fallbacks_total") - fallbacksBefore[s]
	}

	// Thawed, the cachelet serves the current version of every key, never
	// the version 1 it held when it was frozen.
	for _, key := range keys {
		octx, cancel := context.WithTimeout(ctx, 10*time.Second)
		v, err := getValue(octx, frozen.client, bucket, key)
		cancel()
		if err != nil {
			t.Fatalf("get %s through thawed %s: %v", key, frozen.id, err)
		}
		if seq, err := checkValue(key, v); err != nil || seq != 2 {
			t.Errorf("get %s through thawed %s: seq %d (want 2: written while it was frozen), %v", key, frozen.id, seq, err)
		}
	}
	// And its writes reach the others.
	for i, key := range keys {
		if i%2 == 1 {
			continue
		}
		if err := putValue(ctx, frozen.client, bucket, key, makeValue(key, 3, rnd)); err != nil {
			t.Fatalf("put %s v3 through thawed %s: %v", key, frozen.id, err)
		}
	}
	for i, key := range keys {
		want := int64(2)
		if i%2 == 0 {
			want = 3
		}
		for _, p := range fc.procs {
			v, err := getValue(ctx, p.client, bucket, key)
			if err != nil {
				t.Fatalf("get %s through %s after the thaw: %v", key, p.id, err)
			}
			if seq, err := checkValue(key, v); err != nil || seq != want {
				t.Errorf("get %s through %s after the thaw: seq %d (want %d), %v", key, p.id, seq, want, err)
			}
		}
	}

	leftRing := fc.members.anyWithout(frozenAt, time.Now(), frozen.id)
	t.Logf("%s frozen %v (it owns %d of %d keys); survivors: %d writes and %d reads of held keys, all current, slowest %v",
		frozen.id, thawedAt.Sub(frozenAt).Round(time.Millisecond), owned, nKeys, nKeys, hotReads, maxOp.Round(time.Millisecond))
	t.Logf("cold reads of keys %s owns through survivors: %d ok, %d failed, slowest %v; survivors' peer fallbacks: %.0f; left the ring meanwhile: %v",
		frozen.id, coldOK, coldFailed, coldMax.Round(time.Millisecond), fallbacks, leftRing)
	// A stuck owner costs a read the peer fetch timeout (2 s), then the
	// store answers: reads do not wait for the owner to thaw.
	if coldMax >= pause {
		t.Errorf("a cold read took %v, as long as %s was frozen (%v): it waited instead of falling back", coldMax, frozen.id, pause)
	}
	if fallbacks == 0 {
		t.Errorf("no read of a key the frozen %s owns fell back to the store", frozen.id)
	}
}
