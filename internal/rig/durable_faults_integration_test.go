//go:build integration

package rig

import (
	"bytes"
	"context"
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

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/controller"
	"github.com/hoard-io/hoard/internal/ring"
	"github.com/hoard-io/hoard/internal/store"
	s3store "github.com/hoard-io/hoard/internal/store/s3"
)

// durableStoreCheck compares bucket in st with acked (key -> the last
// round acknowledged, written by fns.write or fns.mix): keys absent
// from the store, keys whose round there is older than acknowledged, and
// keys whose bytes are not a value of the key (durableValue, of any
// size). A later round that was not acknowledged may have landed.
func durableStoreCheck(ctx context.Context, st store.Store, bucket string, acked map[string]int) (absent, older, wrong []string) {
	for _, k := range slices.Sorted(maps.Keys(acked)) {
		seq := acked[k]
		body, _, _, err := st.Get(ctx, bucket, k, store.GetOptions{})
		if err != nil {
			absent = append(absent, fmt.Sprintf("%s (round %d): %v", k, seq, err))
			continue
		}
		got, err := io.ReadAll(body)
		body.Close()
		if err != nil {
			absent = append(absent, fmt.Sprintf("%s: %v", k, err))
			continue
		}
		f := strings.Fields(string(got[:min(len(got), 64)]))
		r := 0
		if len(f) >= 2 {
			r, _ = strconv.Atoi(f[1])
		}
		switch {
		case len(f) < 2 || f[0] != k || r < 1 || !bytes.Equal(got, durableValue(k, r, len(got))):
			wrong = append(wrong, fmt.Sprintf("%s: %d bytes, not a value of it", k, len(got)))
		case r < seq:
			older = append(older, fmt.Sprintf("%s: round %d in the store, %d acknowledged", k, r, seq))
		}
	}
	return absent, older, wrong
}

// loseNode loses a node of the rig: its agent and every process below
// it SIGKILLed, its disk directory removed.
func loseNode(t *testing.T, victim *NodeAgent) {
	t.Helper()
	pids := descendants(victim.cmd.Process.Pid)
	victim.Kill()
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	// The agent's --dir is nodes/<i>/agent, beside its log.
	if err := os.RemoveAll(filepath.Join(filepath.Dir(victim.LogPath), "agent", "disk")); err != nil {
		t.Fatal(err)
	}
}

// cacheletPIDs are the pids of the `hoard serve` processes (instances'
// cachelets) below agent a.
func cacheletPIDs(a *NodeAgent) []int {
	var out []int
	for _, pid := range descendants(a.cmd.Process.Pid) {
		cmd, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if err == nil && bytes.Contains(cmd, []byte("\x00serve\x00--document\x00")) {
			out = append(out, pid)
		}
	}
	return out
}

// durableReads runs k invocations of app's read of keys at once, each
// tried again (3 times at most) where it ran on an instance that is
// gone: right after a node is lost the controller may still route to
// the lost node's instances, and drops each once an invocation fails
// there.
func durableReads(t *testing.T, c *controller.Controller, app string, k int, keys []string) []durableResult {
	t.Helper()
	out := make([]durableResult, k)
	var wg sync.WaitGroup
	for j := range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ev, _ := json.Marshal(map[string]any{"bucket": app, "keys": keys})
			var err error
			for try := 0; try < 3; try++ {
				ictx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				var rec *api.Invocation
				rec, err = c.Invoke(ictx, app, "read", ev, "test")
				cancel()
				if err == nil && rec.OK {
					err = json.Unmarshal(rec.Result, &out[j])
					break
				}
				if err == nil {
					err = fmt.Errorf("%+v", rec.Error)
				}
			}
			if err != nil {
				t.Errorf("%s read: %v", app, err)
			}
		}()
	}
	wg.Wait()
	return out
}

// durableRigStore is a client of the rig's store, as its root.
func durableRigStore(t *testing.T, n *Nodes) store.Store {
	t.Helper()
	st, err := s3store.New(s3store.Config{Endpoint: n.Store.Endpoint(), AccessKey: "storekey", SecretKey: "storesecret123"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// durableSpread deploys app (durableNodesSpec with fns, durable_writes
// mode, k instances) and loads k instances of it, as many on each node
// of n (k invocations at once, each holding its instance): instance ->
// its agent.
func durableSpread(t *testing.T, n *Nodes, st store.Store, app, mode string, k int, fns string, extra ...string) map[string]string {
	t.Helper()
	c := n.Controller
	if err := st.CreateBucket(context.Background(), app, ""); err != nil {
		t.Fatal(err)
	}
	r := append([]string{"APP", app, "DURABLE", mode, "max_instances: 3", fmt.Sprintf("max_instances: %d", k),
		"min_instances: 3", fmt.Sprintf("min_instances: %d", k)}, extra...)
	deploySpec(t, c, strings.NewReplacer(r...).Replace(durableNodesSpec), fns)
	for try := 0; ; try++ {
		durableInvoke(t, c, app, k, func(int) map[string]any {
			return map[string]any{"bucket": app, "keys": []string{}, "hold": 2}
		})
		agentOf := map[string]string{}
		perNode := map[string]int{}
		for _, in := range appInstances(t, c, app) {
			agentOf[in.ID] = in.Agent
			perNode[in.Agent]++
		}
		even := len(perNode) == len(n.Agents)
		for _, m := range perNode {
			even = even && m == k/len(n.Agents)
		}
		if len(agentOf) == k && even {
			return agentOf
		}
		if try == 2 {
			t.Fatalf("%s: instances on %v; want %d on each of %d nodes", app, agentOf, k/len(n.Agents), len(n.Agents))
		}
	}
}

// TestDurableBackupOnAnotherNode: an application under durable_writes
// replicated with two instances on each of three nodes, so that a key's
// next member in ring order is often on its owner's node. Its writes are
// queued for a slow store when a whole node is lost (both its instances
// and its disk): none of the acknowledged writes is missing from the
// store afterwards, since each write's copy was kept on another node,
// and reads through the survivors return no older and no wrong bytes.
// The test counts the lost writes whose owner's ring successor was on
// the lost node too (a backup picked by ring order alone would have lost
// them) and fails if there are none, so it sees the case it is for.
func TestDurableBackupOnAnotherNode(t *testing.T) {
	n := startNodes(t, 3, func(c *NodesConfig) { c.DiskBudget = 256 << 20 })
	c := n.Controller
	ctx := context.Background()
	st := durableRigStore(t, n)
	const app = "durpair"
	agentOf := durableSpread(t, n, st, app, "replicated", 6, durableNodesFns)
	victim := n.Agents[1]

	down, up := n.StoreProxy.Links()
	slow := up
	slow.Bandwidth = durableSlowStore
	if err := n.StoreProxy.Update(down, slow); err != nil {
		t.Fatal(err)
	}
	// 36 keys: 6 owned by an instance of the lost node whose ring
	// successor is the other instance there (the case this test is
	// for), 6 owned there with the successor elsewhere, 24 others.
	r, err := ring.New(ring.Config{}, slices.Collect(maps.Keys(agentOf)))
	if err != nil {
		t.Fatal(err)
	}
	var both, lostOnly, others []string
	for i := 0; len(both) < 6 || len(lostOnly) < 6 || len(others) < 24; i++ {
		k := fmt.Sprintf("out/k%04d", i)
		owners := r.Owners(app, k, 2)
		switch {
		case agentOf[owners[0]] != victim.ID:
			if len(others) < 24 {
				others = append(others, k)
			}
		case agentOf[owners[1]] == victim.ID:
			if len(both) < 6 {
				both = append(both, k)
			}
		case len(lostOnly) < 6:
			lostOnly = append(lostOnly, k)
		}
	}
	// Each invocation writes the case's key last, behind the others its
	// owner queues, so that its write is still queued at the loss.
	var all []string
	for j := range 6 {
		all = append(all, others[j*4:j*4+4]...)
		all = append(all, lostOnly[j], both[j])
	}
	acked := map[string]int{}
	for _, res := range durableInvoke(t, c, app, 6, func(j int) map[string]any {
		return map[string]any{"bucket": app, "keys": all[j*6 : j*6+6], "rounds": 2, "size": durableValueSize}
	}) {
		for k, seq := range res.Acked {
			acked[k] = seq
		}
		for w, e := range res.Failed {
			t.Logf("%s not acknowledged: %s", w, e)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	absent, older, _ := durableStoreCheck(ctx, st, app, acked)
	queued := map[string]bool{}
	for _, s := range append(absent, older...) {
		queued[strings.Fields(s)[0]] = true
	}
	killed := time.Now()
	loseNode(t, victim)
	if err := n.StoreProxy.Update(down, up); err != nil {
		t.Fatal(err)
	}

	// The lost node's instances' keys still queued, and those of them
	// whose next member in ring order was on the lost node as well.
	lostQueued, nextSameNode := 0, 0
	for k := range queued {
		owners := r.Owners(app, k, 2)
		if agentOf[owners[0]] != victim.ID {
			continue
		}
		lostQueued++
		if agentOf[owners[1]] == victim.ID {
			nextSameNode++
		}
	}
	var wrong []string
	deadline := time.Now().Add(45 * time.Second)
	for {
		absent, older, wrong = durableStoreCheck(ctx, st, app, acked)
		if len(absent)+len(older)+len(wrong) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	settled := time.Since(killed)
	reads, readsOlder, readsFailed := 0, 0, 0
	keys := slices.Sorted(maps.Keys(acked))
	for _, res := range durableReads(t, c, app, 4, keys) {
		if agentOf[res.Instance] == victim.ID {
			t.Errorf("a read ran on %s, of the lost node", res.Instance)
		}
		for k, seq := range res.Reads {
			reads++
			switch {
			case seq == -1:
				t.Errorf("read %s through %s: wrong bytes", k, res.Instance)
			case seq == -2:
				readsFailed++
			case seq < acked[k]:
				readsOlder++
			}
		}
	}
	writes := 0
	for _, seq := range acked {
		writes += seq
	}
	t.Logf("%d writes to %d keys acknowledged by 6 instances on 3 nodes; when a node was lost %d keys' last writes were still queued, %d of them its instances', %d of those with the next member in ring order on the lost node too; at the end %d absent from the store, %d older, %d wrong (checked %.1fs after the loss); then %d reads through the survivors: %d older, %d failed",
		writes, len(acked), len(queued), lostQueued, nextSameNode, len(absent), len(older), len(wrong), settled.Seconds(), reads, readsOlder, readsFailed)
	if nextSameNode == 0 {
		t.Errorf("no lost write had its owner's ring successor on the lost node: the test did not see the case it is for")
	}
	for _, s := range slices.Concat(absent, older) {
		t.Errorf("lost: %s", s)
	}
	for _, s := range wrong {
		t.Errorf("wrong: %s", s)
	}
	if readsOlder+readsFailed > 0 {
		t.Errorf("%d reads older than acknowledged and %d failed after every write was delivered", readsOlder, readsFailed)
	}
}
