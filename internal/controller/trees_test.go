package controller

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/ftree"
)

const treeSpec = "name: app\nmax_instances: 4\nkeep_alive: 1h\nfunctions: {f: {handler: m.h}}\n"

// TestFunctionTrees: the agents hosting an application's instances form
// a balanced tree, kept in etcd; an agent that dies leaves it, a restarted
// controller reads it back (refusing a corrupt one), and the tree goes
// when the last instance is unloaded.
func TestFunctionTrees(t *testing.T) {
	c, _, cli := setup(t)
	ctx := context.Background()
	// Three more agents: place spreads an application's instances.
	for _, id := range []string{"a1", "a2", "a3"} {
		fa := newFakeAgent(t)
		reg, _ := json.Marshal(api.Registration{ID: id, URL: fa.srv.URL})
		if _, err := cli.Put(ctx, api.EtcdPrefix+id, string(reg)); err != nil {
			t.Fatal(err)
		}
	}
	info, err := c.Deploy(ctx, pkg(t, treeSpec))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{}, 4)
	for range 4 {
		go func() {
			c.Invoke(ctx, "app", "f", json.RawMessage(`{"ms": 400}`), "test")
			done <- struct{}{}
		}()
	}
	tree := func() *api.FuncTree { return c.Apps()[0].Tree }
	waitFor(t, "a tree of the four agents", 5*time.Second, func() bool { tr := tree(); return tr != nil && len(tr.Nodes) == 4 })
	tr := tree()
	if tr.Rev != info.Rev || tr.Height != 3 {
		t.Fatalf("tree %+v", tr)
	}
	ids := []string{}
	for _, n := range tr.Nodes {
		ids = append(ids, n.ID)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"a1", "a2", "a3", "fake"}) {
		t.Fatalf("tree nodes %v", ids)
	}
	// What etcd holds is the same tree, and a valid one.
	stored := func() (treeRecord, bool) {
		resp, err := cli.Get(ctx, EtcdTrees+"app")
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 0 {
			return treeRecord{}, false
		}
		rec, st, err := parseTree(resp.Kvs[0].Value)
		if err != nil {
			t.Fatalf("the stored tree: %v", err)
		}
		if err := st.Check(); err != nil {
			t.Fatal(err)
		}
		return rec, true
	}
	waitFor(t, "the tree in etcd", 5*time.Second, func() bool { rec, ok := stored(); return ok && len(rec.Tree.Nodes) == 4 })
	rec, _ := stored()
	if rec.Rev != info.Rev {
		t.Fatalf("stored %+v", rec)
	}
	if got, _ := ftree.FromState(rec.Tree); got.String() != tr.Shape {
		t.Fatalf("etcd holds %s, the controller shows %s", got, tr.Shape)
	}
	for range 4 {
		<-done
	}

	// An agent dies (its registration expires): it leaves the tree,
	// which stays balanced.
	dead := tr.Root
	if _, err := cli.Delete(ctx, api.EtcdPrefix+dead); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the dead agent out of the tree", 5*time.Second, func() bool {
		tr := tree()
		return tr != nil && len(tr.Nodes) == 3 && tr.Root != dead
	})
	waitFor(t, "the tree of three in etcd", 5*time.Second, func() bool { rec, _ := stored(); return len(rec.Tree.Nodes) == 3 })

	// A restarted controller reads the tree back; a corrupt one is
	// dropped and rebuilt from the instances, not trusted.
	c.Close()
	c2, err := New(ctx, c.cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if got := c2.treeInfo("app"); got == nil || got.Shape != tree().Shape {
		t.Fatalf("after a restart: %+v, before %s", got, tree().Shape)
	}
	c2.Close()
	for _, bad := range []string{`{"rev":"x","tree":{"nodes":[]}}`, `{"rev":"` + info.Rev + `","tree":{"nodes":[{"id":"a","left":"a"}]}}`, `not json`} {
		if _, err := cli.Put(ctx, EtcdTrees+"app", bad); err != nil {
			t.Fatal(err)
		}
		c3, err := New(ctx, c.cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		if got := c3.treeInfo("app"); got != nil {
			t.Errorf("a corrupt stored tree %q was taken: %+v", bad, got)
		}
		c3.Close()
	}
}

// TestFunctionTreeGoesWithLastInstance: keep-alive unloads the last
// instance; the tree and its etcd key go.
func TestFunctionTreeGoesWithLastInstance(t *testing.T) {
	c, _, cli := setup(t)
	ctx := context.Background()
	if _, err := c.Deploy(ctx, pkg(t, spec)); err != nil { // keep-alive 1 s
		t.Fatal(err)
	}
	if rec, err := c.Invoke(ctx, "app", "f", nil, "test"); err != nil || !rec.OK {
		t.Fatalf("%+v %v", rec, err)
	}
	waitFor(t, "a tree of one", 5*time.Second, func() bool { tr := c.Apps()[0].Tree; return tr != nil && tr.Shape == "fake" })
	waitFor(t, "the tree gone with the instance", 10*time.Second, func() bool {
		resp, err := cli.Get(ctx, EtcdTrees+"app")
		return err == nil && len(resp.Kvs) == 0 && c.Apps()[0].Tree == nil && len(c.Apps()[0].Instances) == 0
	})
}
