package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/scaling"
)

func TestPlace(t *testing.T) {
	agents := []api.Registration{{ID: "n0"}, {ID: "n1"}, {ID: "n2"}}
	for _, tc := range []struct {
		name         string
		ofApp, total map[string]int
		want         string
	}{
		{"empty: the first", nil, nil, "n0"},
		{"fewest of the app", map[string]int{"n0": 1, "n1": 1}, map[string]int{"n0": 1, "n1": 1}, "n2"},
		{"the app before the load", map[string]int{"n0": 1, "n2": 1}, map[string]int{"n0": 1, "n1": 5, "n2": 1}, "n1"},
		{"then the least loaded", map[string]int{"n0": 1, "n1": 1, "n2": 1}, map[string]int{"n0": 3, "n1": 2, "n2": 4}, "n1"},
		{"ties by ID", map[string]int{"n0": 1}, map[string]int{"n0": 1, "n1": 2, "n2": 2}, "n1"},
	} {
		if got := place(agents, tc.ofApp, tc.total, ""); got.ID != tc.want {
			t.Errorf("%s: placed on %s, want %s", tc.name, got.ID, tc.want)
		}
	}
	// The node of the input's owner first, when it is registered.
	if got := place(agents, map[string]int{"n2": 3}, map[string]int{"n2": 9}, "n2"); got.ID != "n2" {
		t.Errorf("near the data: placed on %s, want n2", got.ID)
	}
	if got := place(agents, nil, nil, "gone"); got.ID != "n0" {
		t.Errorf("near an unregistered node: placed on %s, want n0", got.ID)
	}
}

// TestPlaceConcurrent: instances of an application requested at once,
// by a scale-out of many and by concurrent cold invocations, spread over
// the free nodes as place's rule says: no node gets a second instance
// while another has none, whatever order the starts finish in. (A start
// counted where it goes only until the agent answered, not until its
// instance was recorded, let a placement in between see neither.)
func TestPlaceConcurrent(t *testing.T) {
	c, _, cli := setup(t)
	ctx := context.Background()
	ids := []string{"fake"}
	for _, id := range []string{"n1", "n2", "n3", "n4"} {
		fa := newFakeAgent(t)
		reg, _ := json.Marshal(api.Registration{ID: id, URL: fa.srv.URL})
		if _, err := cli.Put(ctx, api.EtcdPrefix+id, string(reg)); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	// Readers of the controller's state all along (a dashboard, the
	// CLI): under contention the lock is handed from one waiter to the
	// next, as on a loaded node.
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for range 4 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				c.Apps()
			}
		}()
	}
	defer func() { close(stop); readers.Wait() }()
	const perNode = 8
	n := perNode * len(ids)
	spread := func(app string) map[string]int {
		c.mu.Lock()
		defer c.mu.Unlock()
		on := map[string]int{}
		for _, in := range c.apps[app].instances {
			on[in.agentID]++
		}
		return on
	}
	deploy := func(app string) {
		s := fmt.Sprintf("name: %s\nmax_instances: %d\nkeep_alive: 1h\nfunctions: {f: {handler: m.h}}\n", app, n)
		if _, err := c.Deploy(ctx, pkg(t, s)); err != nil {
			t.Fatal(err)
		}
	}

	// A scale-out of n at once: perNode on every node.
	for round := range 3 {
		app := fmt.Sprintf("out%d", round)
		deploy(app)
		if err := c.Vote(app, scaling.Vote{Policy: "test", Delta: n, Urgent: true, Reason: "test"}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, fmt.Sprintf("%s: %d instances", app, n), 30*time.Second, func() bool {
			on := spread(app)
			total := 0
			for _, k := range on {
				total += k
			}
			return total == n
		})
		on := spread(app)
		for _, id := range ids {
			if on[id] != perNode {
				t.Errorf("%s: instances per node %v; want %d on each of %v", app, on, perNode, ids)
				break
			}
		}
	}

	// Concurrent cold invocations, each holding its instance a while:
	// however many instances they start, no node has two more than
	// another.
	app := "cold"
	deploy(app)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if rec, err := c.Invoke(ctx, app, "f", json.RawMessage(`{"ms": 300}`), "test"); err != nil || !rec.OK {
				t.Errorf("invoke: %+v %v", rec, err)
			}
		}()
	}
	wg.Wait()
	on := spread(app)
	lo, hi := n, 0
	for _, id := range ids {
		lo, hi = min(lo, on[id]), max(hi, on[id])
	}
	if hi-lo > 1 {
		t.Errorf("%s: instances per node %v; want them spread over %v", app, on, ids)
	}
}
