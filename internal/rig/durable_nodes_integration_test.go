//go:build integration

package rig

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/controller"
	"github.com/hoard-io/hoard/internal/netshape"
	"github.com/hoard-io/hoard/internal/ring"
	"github.com/hoard-io/hoard/internal/store"
	s3store "github.com/hoard-io/hoard/internal/store/s3"
)

// durableNodesSpec is an application of one instance per node whose
// writes are acknowledged once its instances' cachelets hold them
// (owner), durably as DURABLE says.
const durableNodesSpec = `
name: APP
memory: 96MiB
timeout: 60s
keep_alive: 1h
max_instances: 3
scaling: {min_instances: 3}
buckets: {APP: read-write}
cache: {budget: 32MiB, consistency: owner, durable_writes: DURABLE}
functions:
  write: {handler: fns.write}
  read: {handler: fns.read}
`

// durableNodesFns: write holds its instance for hold seconds, then
// writes each key rounds times, every value naming its key and round
// (durableValue), and returns the last round of each key acknowledged
// (answered 200).
const durableNodesFns = `
import hashlib, os, time
import boto3
from botocore.config import Config

s3 = boto3.client("s3", config=Config(connect_timeout=5, read_timeout=20, retries={"max_attempts": 2}))

def value(key, seq, size):
    head = ("%s %d " % (key, seq)).encode()
    block = hashlib.sha256(head).digest()
    return head + (block * (size // 32 + 1))[: size - len(head)]

def write(event, context):
    time.sleep(event.get("hold", 0))
    acked, failed = {}, {}
    for seq in range(1, event.get("rounds", 0) + 1):
        for k in event["keys"]:
            try:
                s3.put_object(Bucket=event["bucket"], Key=k, Body=value(k, seq, event["size"]))
                acked[k] = seq
            except Exception as e:
                failed["%s@%d" % (k, seq)] = str(e)[:300]
    return {"acked": acked, "failed": failed, "instance": os.environ["HOARD_INSTANCE"]}

def read(event, context):
    # Each key's round as read: 0 absent, -1 not a value of the key,
    # -2 the read failed.
    out = {}
    for k in event["keys"]:
        try:
            b = s3.get_object(Bucket=event["bucket"], Key=k)["Body"].read()
        except Exception as e:
            code = getattr(e, "response", {}).get("Error", {}).get("Code", "")
            out[k] = 0 if code == "NoSuchKey" else -2
            continue
        f = b[:64].split(b" ")
        try:
            seq = int(f[1])
        except (IndexError, ValueError):
            seq = -1
        out[k] = seq if f[0] == k.encode() and seq > 0 and b == value(k, seq, len(b)) else -1
    return {"reads": out, "instance": os.environ["HOARD_INSTANCE"]}
`

// durableValue is the value fns.write writes to key in round seq.
func durableValue(key string, seq, size int) []byte {
	head := []byte(key + " " + strconv.Itoa(seq) + " ")
	block := sha256.Sum256(head)
	body := bytes.Repeat(block[:], size/32+1)
	return append(head, body[:size-len(head)]...)
}

const (
	durableValueSize = 64 << 10
	// The store link while writing: 20 KB/s per connection, so a 64 KiB
	// PUT to the store takes 3.3 s and the owners' queues hold most of
	// the writes when the node is lost.
	durableSlowStore = 20_000
)

// durableApp is one application of the test and what it was told.
type durableApp struct {
	name    string
	acked   map[string]int    // key -> last round acknowledged
	agentOf map[string]string // instance -> its node's agent
	ring    *ring.Ring        // its instances' ring
	lost    string            // its instance on the node lost
	keys    [][]string        // the keys each write invocation writes
}

// durableNodeLossKeys picks the 24 keys a's three write invocations
// write, eight of them owned by a.lost, so that the node's loss finds
// some of their writes still queued however the ring fell.
func durableNodeLossKeys(a *durableApp) {
	var lost, others []string
	for i := 0; len(lost) < 8 || len(others) < 16; i++ {
		k := fmt.Sprintf("out/k%04d", i)
		switch {
		case a.ring.Owner(a.name, k) == a.lost:
			if len(lost) < 8 {
				lost = append(lost, k)
			}
		case len(others) < 16:
			others = append(others, k)
		}
	}
	a.keys = nil
	for j := range 3 { // each invocation writes some of each
		a.keys = append(a.keys, slices.Concat(lost[j*8/3:(j+1)*8/3], others[j*16/3:(j+1)*16/3]))
	}
}

// TestDurableWritesNodeLoss loses a whole node of the several-nodes
// rig (its agent, instances and cachelets SIGKILLed, its disk directory
// removed) while the writes of two applications, each with an instance
// on every node and consistency owner, are still queued for a slow
// store: one with durable_writes replicated, which loses none of its
// acknowledged writes, and one with durable_writes on, the log on the
// node alone, which the same loss must show losing some (else the test
// no longer sees the fault). Then every key is read through the
// surviving instances: never bytes that are not a value of the key, and
// under replicated never an older value than acknowledged.
func TestDurableWritesNodeLoss(t *testing.T) {
	n := startNodes(t, 3, func(c *NodesConfig) { c.DiskBudget = 256 << 20 })
	c := n.Controller
	ctx := context.Background()
	st, err := s3store.New(s3store.Config{Endpoint: n.Store.Endpoint(), AccessKey: "storekey", SecretKey: "storesecret123"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	apps := []*durableApp{{name: "durrep"}, {name: "durlog"}}
	mode := map[string]string{"durrep": "replicated", "durlog": "on"}
	for _, a := range apps {
		if err := st.CreateBucket(ctx, a.name, ""); err != nil {
			t.Fatal(err)
		}
		spec := strings.NewReplacer("APP", a.name, "DURABLE", mode[a.name]).Replace(durableNodesSpec)
		deploySpec(t, c, spec, durableNodesFns)
	}
	// One instance of each application on each node: three invocations
	// at once, each holding its instance.
	for _, a := range apps {
		for try := 0; ; try++ {
			durableInvoke(t, c, a.name, 3, func(int) map[string]any {
				return map[string]any{"bucket": a.name, "keys": []string{}, "hold": 2}
			})
			a.agentOf = map[string]string{}
			for _, in := range appInstances(t, c, a.name) {
				a.agentOf[in.ID] = in.Agent
			}
			if len(a.agentOf) == 3 && distinct(a.agentOf) == 3 {
				break
			}
			if try == 2 {
				t.Fatalf("%s: instances on %v; want one on each of 3 nodes", a.name, a.agentOf)
			}
		}
	}
	victim := n.Agents[1]
	for _, a := range apps {
		var ids []string
		for id, ag := range a.agentOf {
			ids = append(ids, id)
			if ag == victim.ID {
				a.lost = id
			}
		}
		if a.ring, err = ring.New(ring.Config{}, ids); err != nil {
			t.Fatal(err)
		}
		durableNodeLossKeys(a)
	}
	nodeDir := filepath.Dir(victim.LogPath)
	diskDir := filepath.Join(nodeDir, "agent", "disk") // the agent's --dir is nodeDir/agent
	for _, a := range apps {
		// Each instance's log is its own, on its node's disk.
		for id, ag := range a.agentOf {
			if ag != victim.ID {
				continue
			}
			fi, err := os.Stat(filepath.Join(diskDir, a.name, "writelog", id))
			if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
				t.Logf("agent log: %s", logTail(victim.LogPath))
				_ = filepath.Walk(nodeDir, func(p string, fi os.FileInfo, err error) error {
					if err == nil {
						t.Logf("%s %v", p, fi.Mode())
					}
					return nil
				})
				t.Fatalf("%s's log on %s: %v, %v; want a directory of mode 0700", id, victim.ID, fi, err)
			}
		}
	}

	// The store link slows down; each application writes 24 keys (a
	// third of them owned by its instance on the node to be lost), in 3
	// invocations at once, 2 rounds each.
	down, up := n.StoreProxy.Links()
	slow := up
	slow.Bandwidth = durableSlowStore
	if err := n.StoreProxy.Update(down, slow); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for _, a := range apps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.acked = map[string]int{}
			for _, res := range durableInvoke(t, c, a.name, 3, func(j int) map[string]any {
				return map[string]any{"bucket": a.name, "keys": a.keys[j], "rounds": 2, "size": durableValueSize}
			}) {
				for k, seq := range res.Acked {
					a.acked[k] = seq
				}
				for w, e := range res.Failed {
					t.Logf("%s: %s not acknowledged: %s", a.name, w, e)
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	// check compares the store with what app acknowledged.
	check := func(a *durableApp) (missing, wrong []string) {
		absent, older, wrong := durableStoreCheck(ctx, st, a.name, a.acked)
		missing = append(absent, older...)
		slices.Sort(missing)
		return missing, wrong
	}
	// What is still queued (not in the store) when the node is lost.
	queued := map[string][]string{}
	for _, a := range apps {
		queued[a.name], _ = check(a)
	}
	// The node is lost: its agent and every process below it killed,
	// its disk gone.
	killed := time.Now()
	loseNode(t, victim)
	if err := n.StoreProxy.Update(down, up); err != nil {
		t.Fatal(err)
	}
	// Every acknowledged write lands in the store, right, once the
	// survivors have taken over (or, for the lost log, never).
	victimKeys, victimQueued := map[string]int{}, map[string]int{}
	for _, a := range apps {
		for k := range a.acked {
			if a.ring.Owner(a.name, k) == a.lost {
				victimKeys[a.name]++
			}
		}
		for _, q := range queued[a.name] {
			if k, _, _ := strings.Cut(q, ":"); a.ring.Owner(a.name, strings.Fields(k)[0]) == a.lost {
				victimQueued[a.name]++
			}
		}
	}

	results := map[string][2][]string{}
	deadline := time.Now().Add(45 * time.Second)
	for {
		done := true
		for _, a := range apps {
			m, w := check(a)
			results[a.name] = [2][]string{m, w}
			done = done && (a.name == "durlog" || len(m)+len(w) == 0)
		}
		if done || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	settled := time.Since(killed)
	// Reads through the surviving instances, every key, once the store
	// has what survived: never bytes that are not a value of the key,
	// and under replicated never older than acknowledged.
	reads := map[string][3]int{} // app -> reads, older (or absent), failed
	for _, a := range apps {
		keys := slices.Sorted(maps.Keys(a.acked))
		for _, res := range durableCall(t, c, a.name, "read", 2, func(int) map[string]any {
			return map[string]any{"bucket": a.name, "keys": keys}
		}) {
			if a.agentOf[res.Instance] == victim.ID {
				t.Errorf("%s: a read ran on %s, of the lost node", a.name, res.Instance)
			}
			r := reads[a.name]
			for k, seq := range res.Reads {
				r[0]++
				switch {
				case seq == -1:
					t.Errorf("%s: read %s through %s: wrong bytes", a.name, k, res.Instance)
				case seq == -2:
					r[2]++
				case seq < a.acked[k]:
					r[1]++
				}
			}
			reads[a.name] = r
		}
	}
	for _, a := range apps {
		m, w := results[a.name][0], results[a.name][1]
		r := reads[a.name]
		t.Logf("%s: then %d reads through the survivors: %d older than acknowledged (or absent), %d failed, 0 wrong bytes unless said", a.name, r[0], r[1], r[2])
		if a.name == "durrep" && r[1]+r[2] > 0 {
			t.Errorf("%s: %d reads older than acknowledged and %d failed after every write was delivered", a.name, r[1], r[2])
		}
		writes := 0
		for _, seq := range a.acked {
			writes += seq
		}
		t.Logf("%s (durable_writes %s): %d writes to %d keys acknowledged, %d of the keys owned by the lost node's instance; when it was lost %d keys' last writes were still queued for the store (%d of them its); at the end %d missing from the store, %d wrong (checked %.1fs after the loss)",
			a.name, mode[a.name], writes, len(a.acked), victimKeys[a.name], len(queued[a.name]), victimQueued[a.name], len(m), len(w), settled.Seconds())
		if victimQueued[a.name] == 0 {
			t.Errorf("%s: the lost node's instance held no write still queued for the store: the test did not lose any", a.name)
		}
		for _, s := range w {
			t.Errorf("%s: wrong: %s", a.name, s)
		}
		if a.name == "durlog" {
			if len(m) == 0 {
				t.Errorf("%s: the log on the lost node lost no acknowledged write: the test no longer sees the fault", a.name)
			}
			continue
		}
		for _, s := range m {
			t.Errorf("%s: lost: %s", a.name, s)
		}
	}
}

// durableResult is fns.write's or fns.read's answer.
type durableResult struct {
	Acked    map[string]int    `json:"acked"`
	Failed   map[string]string `json:"failed"`
	Reads    map[string]int    `json:"reads"`
	Instance string            `json:"instance"`
}

// durableInvoke runs k invocations of app's write at once, the j-th
// with event(j), and returns their answers.
func durableInvoke(t *testing.T, c *controller.Controller, app string, k int, event func(j int) map[string]any) []durableResult {
	t.Helper()
	return durableCall(t, c, app, "write", k, event)
}

// durableCall runs k invocations of app's fn at once, the j-th with
// event(j), and returns their answers.
func durableCall(t *testing.T, c *controller.Controller, app, fn string, k int, event func(j int) map[string]any) []durableResult {
	t.Helper()
	out := make([]durableResult, k)
	var wg sync.WaitGroup
	for j := range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ev, _ := json.Marshal(event(j))
			ictx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			rec, err := c.Invoke(ictx, app, fn, ev, "test")
			if err != nil || !rec.OK {
				t.Errorf("%s %s: %v %+v", app, fn, err, rec)
				return
			}
			if err := json.Unmarshal(rec.Result, &out[j]); err != nil {
				t.Errorf("%s %s: %s: %v", app, fn, rec.Result, err)
			}
		}()
	}
	wg.Wait()
	return out
}

// TestDurableLogDrained: on one node, the only instance's cachelet is
// SIGKILLed while its acknowledged writes (durable_writes on) are still
// queued for a slow store, and the application is not invoked again:
// the agent drains the dead instance's log at once (a `hoard serve`
// drain run in its sandbox, as its cachelet's uid), and every write
// reaches the store; the emptied log is removed. (A log the drain cannot
// empty is adopted by the next instance: agent TestAdoptLog.)
func TestDurableLogDrained(t *testing.T) {
	e := startShaped(t, netshape.Link{Bandwidth: durableSlowStore}, func(c *Config) { c.DiskBudget = 64 << 20 })
	c := e.p.Controller
	const app = "durone"
	if err := e.st.CreateBucket(context.Background(), app, ""); err != nil {
		t.Fatal(err)
	}
	spec := strings.NewReplacer("APP", app, "DURABLE", "on", "max_instances: 3", "max_instances: 1", "min_instances: 3", "min_instances: 0").Replace(durableNodesSpec)
	deploySpec(t, c, spec, durableNodesFns)
	keys := make([]string, 6)
	for i := range keys {
		keys[i] = fmt.Sprintf("out/k%02d", i)
	}
	const size = 16 << 10
	res := durableInvoke(t, c, app, 1, func(int) map[string]any {
		return map[string]any{"bucket": app, "keys": keys, "rounds": 1, "size": size}
	})[0]
	if t.Failed() {
		t.FailNow()
	}
	if len(res.Acked) != len(keys) {
		t.Fatalf("acknowledged %v (failed %v); want every key", res.Acked, res.Failed)
	}
	inst := e.p.Agent.Instance(res.Instance)
	if inst == nil {
		t.Fatalf("no instance %s", res.Instance)
	}
	queued := 0
	for _, k := range keys {
		if _, _, _, err := e.st.Get(context.Background(), app, k, store.GetOptions{}); err != nil {
			queued++
		}
	}
	if queued == 0 {
		t.Fatal("every write was in the store before the cachelet was killed: the test loses nothing")
	}
	logDir := filepath.Join(e.cfg.Dir, "agent", "disk", app, "writelog")
	killed := time.Now()
	if err := syscall.Kill(inst.CacheletPID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// No invocation: the agent alone has the log delivered.
	deadline := time.Now().Add(60 * time.Second)
	var missing []string
	for {
		missing = missing[:0]
		for _, k := range keys {
			body, _, _, err := e.st.Get(context.Background(), app, k, store.GetOptions{})
			if err != nil {
				missing = append(missing, k)
				continue
			}
			got, err := io.ReadAll(body)
			body.Close()
			if err != nil || !bytes.Equal(got, durableValue(k, 1, size)) {
				t.Errorf("%s: %d bytes (%v), not the value written", k, len(got), err)
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("%d writes acknowledged, %d still queued when the cachelet was killed; %d missing from the store %v after the kill, no instance loaded since",
		len(keys), queued, len(missing), time.Since(killed).Round(100*time.Millisecond))
	if len(missing) > 0 {
		t.Errorf("lost: %v", missing)
	}
	for _, info := range e.p.Agent.Instances() {
		if info.ID != res.Instance {
			t.Errorf("instance %s loaded meanwhile (%s)", info.ID, info.State)
		}
	}
	// The log goes once the drain has emptied it (teardown, just after).
	for _, err := os.Stat(filepath.Join(logDir, res.Instance)); err == nil; _, err = os.Stat(filepath.Join(logDir, res.Instance)) {
		if time.Now().After(deadline) {
			t.Fatalf("the dead instance's log is still there after its writes were delivered")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
