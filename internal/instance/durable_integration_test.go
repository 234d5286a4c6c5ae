//go:build integration && linux

package instance_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
)

// durableRun is the outcome of one kill loop (runDurableKills).
type durableRun struct {
	acked, failed, reads int64
	missing              []string // keys whose acknowledged write the store lacks
	wrong                []string // reads that returned bytes no write of the key wrote
	stale                []string // reads older than a write acknowledged before they began
	replayed             float64
}

// runDurableKills runs a write and read load against one `hoard serve`
// cachelet (consistency as given, in front of MinIO) and SIGKILLs it
// kills times, restarting it on the same disk directory each time; then
// it starts it once more, lets it deliver, and compares the store with
// what was acknowledged. extra are further serve flags.
func runDurableKills(t *testing.T, consistency string, kills int, up time.Duration, extra ...string) durableRun {
	t.Helper()
	bin := hoardBinary(t)
	dir := t.TempDir()
	diskDir := filepath.Join(dir, "disk", "app")
	const bucket = "durable"
	srv, direct := durableStore(t, dir, bucket)
	ctx := context.Background()
	const nKeys = 24
	keys := make([]string, nKeys)
	state := make([]*keyState, nKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("out/k%02d", i)
		state[i] = &keyState{next: 1}
	}

	var cur atomic.Pointer[minio.Client] // the live process's client; nil while down
	var run durableRun
	var mu sync.Mutex // guards run's slices
	stop := make(chan struct{})
	var wg sync.WaitGroup
	// live is the live process's client, nil while it is down (after a
	// short wait), and false once the load is stopped.
	live := func() (*minio.Client, bool) {
		select {
		case <-stop:
			return nil, false
		default:
		}
		c := cur.Load()
		if c == nil {
			time.Sleep(5 * time.Millisecond)
		}
		return c, true
	}
	// Writers: one per three keys, each key's writes one at a time.
	for w := range nKeys / 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(w), 7))
			for n := 0; ; n++ {
				c, ok := live()
				if !ok {
					return
				}
				if c == nil {
					continue
				}
				i := w*3 + n%3
				if err := state[i].write(ctx, c, bucket, keys[i], rnd, 5*time.Second); err == nil {
					atomic.AddInt64(&run.acked, 1)
				} else {
					atomic.AddInt64(&run.failed, 1)
				}
			}
		}()
	}
	// A reader: every answer must be an intact value of its key, no
	// older than what was acknowledged before the read began.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for n := 0; ; n++ {
			c, ok := live()
			if !ok {
				return
			}
			if c == nil {
				continue
			}
			i := n % nKeys
			floor := state[i].acked.Load()
			octx, cancel := context.WithTimeout(ctx, 5*time.Second)
			v, err := getValue(octx, c, bucket, keys[i])
			cancel()
			if err != nil {
				continue // down, or not written yet
			}
			atomic.AddInt64(&run.reads, 1)
			seq, err := checkValue(keys[i], v)
			mu.Lock()
			switch {
			case err != nil:
				run.wrong = append(run.wrong, fmt.Sprintf("%s: %v", keys[i], err))
			case seq < floor:
				run.stale = append(run.stale, fmt.Sprintf("%s: seq %d, acknowledged %d before the read", keys[i], seq, floor))
			}
			mu.Unlock()
		}
	}()

	flags := append([]string{"--consistency", consistency, "--disk-dir", diskDir, "--disk-budget", "64MiB"}, extra...)
	start := func(i int) *hoardProc { return serveAlone(t, bin, dir, "app", i, srv.Endpoint(), flags...) }
	for i := range kills {
		p := start(i)
		run.replayed += p.metric(t, "hoard_cachelet_durable_replayed_total")
		cur.Store(faultClient(t, p.endpoint(), clientAK, clientSK))
		time.Sleep(up)
		p.signal(t, syscall.SIGKILL)
		cur.Store(nil)
		<-p.exited
	}
	close(stop)
	wg.Wait()

	// Once more, without load: what it holds reaches the store, and a
	// stop (SIGTERM) waits for that.
	p := start(kills)
	run.replayed += p.metric(t, "hoard_cachelet_durable_replayed_total")
	p.signal(t, syscall.SIGTERM)
	waitStopped(t, 40*time.Second, p)
	wrong, missing := checkStore(ctx, direct, bucket, keys, func(i int) int64 { return state[i].acked.Load() })
	run.wrong, run.missing = append(run.wrong, wrong...), append(run.missing, missing...)
	return run
}

// checkStore reads every key from the store directly at the end of a
// durable run: a value that does not check is wrong bytes; one older than
// the newest write acknowledged for it (ackedOf(i), 0: none) is a
// missing acknowledged write.
func checkStore(ctx context.Context, direct *minio.Client, bucket string, keys []string, ackedOf func(i int) int64) (wrong, missing []string) {
	for i, key := range keys {
		acked := ackedOf(i)
		if acked == 0 {
			continue
		}
		v, err := getValue(ctx, direct, bucket, key)
		seq, cerr := int64(0), err
		if err == nil {
			seq, cerr = checkValue(key, v)
		}
		switch {
		case cerr != nil && err == nil:
			wrong = append(wrong, fmt.Sprintf("%s in the store: %v", key, cerr))
		case cerr != nil || seq < acked:
			missing = append(missing, fmt.Sprintf("%s: store has seq %d (%v), acknowledged %d", key, seq, err, acked))
		}
	}
	return wrong, missing
}

// TestDurableWritesSurviveKill: under the owner setting with durable
// writes, a cachelet killed (SIGKILL) again and again under a write load
// and restarted on the same directory loses no acknowledged write, and
// no read returns wrong bytes. The same run without durable writes shows
// what the memory-only queue loses (logged, not asserted: it depends on
// timing).
func TestDurableWritesSurviveKill(t *testing.T) {
	if os.Getenv("HOARD_MINIO_BIN") == "" {
		t.Log("HOARD_MINIO_BIN unset: MinIO is looked up on $PATH")
	}
	for _, c := range []struct {
		name, consistency string
		durable           bool
	}{
		{"owner/durable", "owner", true},
		{"local/durable", "local", true},
		{"owner/memory", "owner", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var extra []string
			if c.durable {
				extra = []string{"--durable-writes"}
			}
			run := runDurableKills(t, c.consistency, 4, 1200*time.Millisecond, extra...)
			t.Logf("%s: %d writes acknowledged, %d failed (cachelet down), %d reads checked; replayed on start: %.0f; acknowledged writes missing from the store: %d; reads older than an acknowledged write: %d; wrong bytes: %d",
				c.name, run.acked, run.failed, run.reads, run.replayed, len(run.missing), len(run.stale), len(run.wrong))
			for _, w := range run.wrong {
				t.Errorf("wrong bytes: %s", w)
			}
			if run.acked == 0 {
				t.Fatal("no write was acknowledged")
			}
			if c.durable {
				for _, m := range run.missing {
					t.Errorf("lost: %s", m)
				}
				for _, m := range run.stale {
					t.Errorf("stale read: %s", m)
				}
			}
		})
	}
}
