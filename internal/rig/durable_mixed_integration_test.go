//go:build integration

package rig

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// durableMixFn, beside durableNodesFns: mix reads the keys of check,
// writes each key of writes (key -> size) as round seq, then reads back
// the keys it wrote; it returns the rounds read before and after
// (durableNodesFns.read's codes) and those acknowledged.
const durableMixFn = `

def mix(event, context):
    b = event["bucket"]
    before = read({"bucket": b, "keys": event["check"]}, None)["reads"]
    acked, failed = {}, {}
    for k, size in event["writes"].items():
        try:
            s3.put_object(Bucket=b, Key=k, Body=value(k, event["seq"], size))
            acked[k] = event["seq"]
        except Exception as e:
            failed[k] = str(e)[:300]
    after = read({"bucket": b, "keys": list(acked)}, None)["reads"]
    return {"acked": acked, "failed": failed, "before": before, "reads": after, "instance": os.environ["HOARD_INSTANCE"]}
`

// durableMixResult is fns.mix's answer.
type durableMixResult struct {
	durableResult
	Before map[string]int `json:"before"`
}

// durableMixKeys is how many keys each writer of the mixed load writes
// in turn, 4 per invocation: a key is written again only every 16th
// invocation, so that a write lost in a fault is seldom replaced by a
// later one before the run ends (the end's check would not see it).
const durableMixKeys = 64

// durableMixSizes are the sizes the mixed load writes, in turn.
var durableMixSizes = []int{1 << 10, 4 << 10, 64 << 10, 256 << 10}

// durableFaultSeconds is the fault run's time under load:
// $HOARD_DURABLE_FAULT_SECONDS, or def.
func durableFaultSeconds(t *testing.T, def time.Duration) time.Duration {
	t.Helper()
	s := os.Getenv("HOARD_DURABLE_FAULT_SECONDS")
	if s == "" {
		return def
	}
	v, err := strconv.Atoi(s)
	if err != nil || v <= 0 {
		t.Fatalf("HOARD_DURABLE_FAULT_SECONDS=%q: want a positive number of seconds", s)
	}
	return time.Duration(v) * time.Second
}

// durableTally counts what the mixed load saw.
type durableTally struct {
	mu                          sync.Mutex
	acked                       map[string]int // key -> last round acknowledged
	invocations, invFailed      int
	writes, writeFailed         int
	reads, older, failed, wrong int
	olderSeen                   []string
}

// read counts one read of key that returned round got where round want
// (or a later one) was acknowledged before the read began.
func (d *durableTally) read(t *testing.T, key string, got, want int, instance string, at time.Duration) {
	d.reads++
	switch {
	case got == -1:
		d.wrong++
		t.Errorf("read %s through %s at %v: wrong bytes", key, instance, at.Round(time.Second))
	case got == -2:
		d.failed++
	case got < want:
		d.older++
		if len(d.olderSeen) < 10 {
			d.olderSeen = append(d.olderSeen, fmt.Sprintf("%s: round %d read through %s at %v, %d acknowledged before", key, got, instance, at.Round(100*time.Millisecond), want))
		}
	}
}

// TestDurableWritesUnderFaults is issue 16's combined fault run on the
// several-nodes rig: an application under consistency owner and
// durable_writes replicated, two instances on each of three nodes, a
// mixed load (6 writers invoking a function that reads 8 keys, writes 4
// of its writer's 64 keys, 1 KiB to 256 KiB, and reads them back, with the store link
// slowed to 100 KB/s so that writes stay queued), a cachelet SIGKILLed every 10 s
// and, once, a whole node lost (its agent and everything below it
// SIGKILLed, its disk directory removed). At the end every acknowledged
// write is in the store and no read returned bytes that are not a value
// of its key. Reads older than a write acknowledged before they began
// are counted and logged. $HOARD_DURABLE_FAULT_SECONDS sets the time
// under load (default 30 s; the run is 300).
func TestDurableWritesUnderFaults(t *testing.T) {
	run := durableFaultSeconds(t, 30*time.Second)
	n := startNodes(t, 3, func(c *NodesConfig) { c.DiskBudget = 256 << 20 })
	c := n.Controller
	ctx := context.Background()
	st := durableRigStore(t, n)
	const app, slots = "durmix", 6
	agentOf := durableSpread(t, n, st, app, "replicated", slots, durableNodesFns+durableMixFn,
		"  read: {handler: fns.read}", "  read: {handler: fns.read}\n  mix: {handler: fns.mix}")
	t.Logf("instances: %v", agentOf)
	victim := n.Agents[1]

	down, up := n.StoreProxy.Links()
	slow := up
	slow.Bandwidth = 100_000 // a 256 KiB PUT to the store takes 2.6 s
	if err := n.StoreProxy.Update(down, slow); err != nil {
		t.Fatal(err)
	}
	d := &durableTally{acked: map[string]int{}}
	start := time.Now()
	end := start.Add(run)
	var wg sync.WaitGroup
	for j := range slots {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(start.UnixNano()), uint64(j)))
			for seq := 1; time.Now().Before(end); seq++ {
				writes := map[string]int{}
				check := []string{}
				for i := range 4 {
					k := fmt.Sprintf("mix/%d/k%02d", j, (seq*4+i)%durableMixKeys)
					writes[k] = durableMixSizes[(seq+i)%len(durableMixSizes)]
					check = append(check, k, fmt.Sprintf("mix/%d/k%02d", (j+1+rnd.IntN(slots-1))%slots, rnd.IntN(durableMixKeys)))
				}
				slices.Sort(check)
				check = slices.Compact(check)
				d.mu.Lock()
				want := map[string]int{}
				for _, k := range check {
					want[k] = d.acked[k]
				}
				d.mu.Unlock()
				ev, _ := json.Marshal(map[string]any{"bucket": app, "check": check, "writes": writes, "seq": seq})
				ictx, cancel := context.WithTimeout(ctx, 60*time.Second)
				rec, err := c.Invoke(ictx, app, "mix", ev, "test")
				cancel()
				var res durableMixResult
				if err == nil && rec.OK {
					err = json.Unmarshal(rec.Result, &res)
				}
				at := time.Since(start)
				d.mu.Lock()
				d.invocations++
				if err != nil || !rec.OK {
					d.invFailed++ // what it wrote is not known: not counted
					d.mu.Unlock()
					continue
				}
				for k, r := range res.Acked {
					d.writes++
					d.acked[k] = max(d.acked[k], r)
				}
				d.writeFailed += len(res.Failed)
				for k, r := range res.Before {
					d.read(t, k, r, want[k], res.Instance, at)
				}
				for k, r := range res.Reads {
					d.read(t, k, r, res.Acked[k], res.Instance, at)
				}
				d.mu.Unlock()
			}
		}()
	}

	// The faults: a cachelet SIGKILLed every 10 s; the node lost once,
	// 5 s after the kill nearest the middle of the run.
	kills, killedOn, queued := 0, map[string]int{}, 0
	var lostAt time.Duration
	nodeAt := run/2/(10*time.Second)*(10*time.Second) + 5*time.Second
	next := 10 * time.Second
	for {
		at := min(next, nodeAt)
		if lostAt != 0 {
			at = next
		}
		if at >= run {
			break
		}
		time.Sleep(time.Until(start.Add(at)))
		d.mu.Lock()
		acked := maps.Clone(d.acked)
		d.mu.Unlock()
		if at == nodeAt && lostAt == 0 {
			loseNode(t, victim)
			lostAt = time.Since(start)
			t.Logf("%v: node %s lost", lostAt.Round(100*time.Millisecond), victim.ID)
		} else {
			next += 10 * time.Second
			var alive []*NodeAgent
			for _, a := range n.Agents {
				if a != victim || lostAt == 0 {
					alive = append(alive, a)
				}
			}
			a := alive[rand.IntN(len(alive))]
			if pids := cacheletPIDs(a); len(pids) == 0 {
				t.Logf("%v: no cachelet running on %s to kill", at, a.ID)
			} else if err := syscall.Kill(pids[rand.IntN(len(pids))], syscall.SIGKILL); err == nil {
				kills++
				killedOn[a.ID]++
			}
		}
		// The writes acknowledged before the fault and not in the store
		// right after it: those the fault could lose.
		ab, ol, _ := durableStoreCheck(ctx, st, app, acked)
		queued += len(ab) + len(ol)
	}
	wg.Wait()
	loadTook := time.Since(start)
	if err := n.StoreProxy.Update(down, up); err != nil {
		t.Fatal(err)
	}

	// Every acknowledged write reaches the store, right.
	var absent, older, wrong []string
	stopped := time.Now()
	for deadline := stopped.Add(90 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		absent, older, wrong = durableStoreCheck(ctx, st, app, d.acked)
		if len(absent)+len(older)+len(wrong) == 0 || time.Now().After(deadline) {
			break
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	t.Logf("%v under load (%v set): %d invocations (%d failed), %d writes acknowledged to %d keys (%d not acknowledged), %d cachelets SIGKILLed %v, node %s lost at %v, %d keys' last acknowledged writes not yet in the store at the faults (summed); at the end %d acknowledged writes absent from the store, %d older there, %d wrong (checked %.1fs after the load); %d reads: %d older than acknowledged before they began, %d failed, %d wrong bytes",
		loadTook.Round(time.Second), run, d.invocations, d.invFailed, d.writes, len(d.acked), d.writeFailed, kills, killedOn, victim.ID, lostAt.Round(100*time.Millisecond), queued,
		len(absent), len(older), len(wrong), time.Since(stopped).Seconds(), d.reads, d.older, d.failed, d.wrong)
	for _, s := range d.olderSeen {
		t.Logf("older read: %s", s)
	}
	if lostAt == 0 || kills == 0 {
		t.Errorf("faults: %d kills, node lost at %v: the run saw too few", kills, lostAt)
	}
	if queued == 0 {
		t.Errorf("no acknowledged write was still queued for the store at a fault: the run loses nothing to see")
	}
	if d.writes == 0 || d.reads == 0 {
		t.Errorf("%d writes acknowledged, %d reads: no load", d.writes, d.reads)
	}
	for _, s := range slices.Concat(absent, older) {
		t.Errorf("lost: %s", s)
	}
	for _, s := range wrong {
		t.Errorf("wrong in the store: %s", strings.TrimSpace(s))
	}
}
