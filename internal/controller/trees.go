package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/ftree"
)

// EtcdTrees holds each application's function tree (api.EtcdTrees), kept
// in etcd so that a restarted controller goes on with the same tree.
const EtcdTrees = api.EtcdTrees

const maxTreeNodes = api.MaxTreeNodes

// treeRecord is a tree's value in etcd.
type treeRecord = api.TreeRecord

// trees is the controller's function trees, by application.
type trees struct {
	mu    sync.Mutex
	byApp map[string]*appTree
}

type appTree struct {
	rev   string
	t     *ftree.Tree
	saved []byte // the value last written to etcd
}

// parseTree checks a tree read from etcd.
func parseTree(val []byte) (treeRecord, *ftree.Tree, error) { return api.ParseTree(val) }

// loadTrees reads the trees from etcd; one that does not parse is
// dropped (and rebuilt from the instances by the next sync).
func (c *Controller) loadTrees(ctx context.Context) error {
	c.trees = &trees{byApp: map[string]*appTree{}}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := c.cfg.Etcd.Get(ctx, EtcdTrees, clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("reading the function trees from etcd: %w", err)
	}
	for _, kv := range resp.Kvs {
		name := strings.TrimPrefix(string(kv.Key), EtcdTrees)
		rec, t, err := parseTree(kv.Value)
		if err != nil {
			c.log.Warn("dropping a function tree that does not parse", "app", name, "err", err)
			if _, err := c.cfg.Etcd.Delete(ctx, string(kv.Key)); err != nil {
				c.log.Warn("cannot delete a function tree", "app", name, "err", err)
			}
			continue
		}
		c.trees.byApp[name] = &appTree{rev: rec.Rev, t: t, saved: kv.Value}
	}
	return nil
}

// treeLoop keeps the trees in step with the instances.
func (c *Controller) treeLoop() {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.ScanInterval)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
		if err := c.syncTrees(c.ctx); err != nil && c.ctx.Err() == nil {
			c.log.Warn("function trees", "err", err)
		}
	}
}

// syncTrees brings every application's tree in step with where its
// deployed version runs: an agent joins when it hosts an instance of it
// (inserted at the first node in breadth-first order with a free child
// slot), and leaves, the tree rebalancing, when its last instance is
// unloaded or its registration is gone (the agent died). Changed trees
// are written to etcd; empty ones deleted.
func (c *Controller) syncTrees(ctx context.Context) error {
	regs, err := c.agents.list(ctx)
	if err != nil {
		return err
	}
	live := map[string]bool{}
	for _, r := range regs {
		live[r.ID] = true
	}
	type want struct {
		rev   string
		hosts []string
	}
	wants := map[string]want{}
	c.mu.Lock()
	for name, a := range c.apps {
		w := want{rev: a.rec.Package.SHA256}
		for _, in := range a.instances {
			if in.rev == w.rev && live[in.agentID] && !slices.Contains(w.hosts, in.agentID) {
				w.hosts = append(w.hosts, in.agentID)
			}
		}
		for id := range a.placing { // joined at start (treeJoin)
			if live[id] && !slices.Contains(w.hosts, id) {
				w.hosts = append(w.hosts, id)
			}
		}
		slices.Sort(w.hosts)
		wants[name] = w
	}
	c.mu.Unlock()

	c.trees.mu.Lock()
	defer c.trees.mu.Unlock()
	var errs []error
	for name := range c.trees.byApp {
		if _, ok := wants[name]; !ok {
			wants[name] = want{}
		}
	}
	for name, w := range wants {
		at := c.trees.byApp[name]
		if at == nil || at.rev != w.rev {
			if at != nil && at.rev != "" && w.rev != "" {
				c.log.Info("a new version: a new function tree", "app", name, "rev", w.rev)
			}
			at = &appTree{rev: w.rev, t: ftree.New(), saved: at.savedOrNil()}
			c.trees.byApp[name] = at
		}
		for _, id := range at.t.Nodes() {
			if !slices.Contains(w.hosts, id) {
				moves, err := at.t.Remove(id)
				if err != nil {
					errs = append(errs, err)
					continue
				}
				c.log.Info("function tree: node left", "app", name, "agent", id, "moves", fmt.Sprint(moves))
			}
		}
		for _, id := range w.hosts {
			if at.t.Has(id) || at.t.Len() >= maxTreeNodes {
				continue
			}
			parent, err := at.t.Insert(id)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			c.log.Info("function tree: node joined", "app", name, "agent", id, "parent", parent)
		}
		if err := c.saveTree(ctx, name, at); err != nil {
			errs = append(errs, err)
		}
		if at.t.Len() == 0 && at.saved == nil {
			delete(c.trees.byApp, name)
		}
	}
	return errors.Join(errs...)
}

func (at *appTree) savedOrNil() []byte {
	if at == nil {
		return nil
	}
	return at.saved
}

// saveTree writes a changed tree to etcd (deletes an empty one).
func (c *Controller) saveTree(ctx context.Context, name string, at *appTree) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if at.t.Len() == 0 {
		if at.saved == nil {
			return nil
		}
		if _, err := c.cfg.Etcd.Delete(ctx, EtcdTrees+name); err != nil {
			return fmt.Errorf("deleting %s's function tree: %w", name, err)
		}
		at.saved = nil
		return nil
	}
	val, err := json.Marshal(treeRecord{Rev: at.rev, Tree: at.t.State()})
	if err != nil {
		return err
	}
	if bytes.Equal(val, at.saved) {
		return nil
	}
	if _, err := c.cfg.Etcd.Put(ctx, EtcdTrees+name, string(val)); err != nil {
		return fmt.Errorf("recording %s's function tree: %w", name, err)
	}
	at.saved = val
	return nil
}

// treeJoin puts the agent about to start an instance of an application's
// version rev in its tree (if it is not there) and returns its parent
// there, the agent it fetches the package's blocks from (nil for the
// root, which fetches from the store), and the parent's ancestors,
// nearest first (where it turns if its parent fails). The tree is written
// to etcd by the next sync; the caller counts the start in the
// application's placing, so that sync keeps the node while the instance
// starts.
func (c *Controller) treeJoin(app, rev, agentID string, agents []api.Registration) (*api.Registration, []api.Registration) {
	c.trees.mu.Lock()
	defer c.trees.mu.Unlock()
	at := c.trees.byApp[app]
	if at == nil || at.rev != rev {
		at = &appTree{rev: rev, t: ftree.New(), saved: at.savedOrNil()}
		c.trees.byApp[app] = at
	}
	if !at.t.Has(agentID) {
		if at.t.Len() >= maxTreeNodes {
			return nil, nil
		}
		if _, err := at.t.Insert(agentID); err != nil {
			c.log.Warn("function tree: cannot insert", "app", app, "agent", agentID, "err", err)
			return nil, nil
		}
		c.log.Info("function tree: node joined", "app", app, "agent", agentID)
	}
	reg := func(id string) *api.Registration {
		for _, r := range agents {
			if r.ID == id {
				return &r
			}
		}
		return nil
	}
	var chain []api.Registration
	for id, _ := at.t.Parent(agentID); id != ""; id, _ = at.t.Parent(id) {
		if r := reg(id); r != nil {
			chain = append(chain, *r)
		}
	}
	if len(chain) == 0 {
		return nil, nil
	}
	return &chain[0], chain[1:]
}

// treeInfo describes an application's tree; nil without one.
func (c *Controller) treeInfo(name string) *api.FuncTree {
	c.trees.mu.Lock()
	defer c.trees.mu.Unlock()
	at := c.trees.byApp[name]
	if at == nil || at.t.Len() == 0 {
		return nil
	}
	ft := &api.FuncTree{Rev: at.rev, Root: at.t.Root(), Height: at.t.Height(), Shape: at.t.String()}
	for _, ns := range at.t.State().Nodes {
		n := api.TreeNode{ID: ns.ID}
		n.Parent, _ = at.t.Parent(ns.ID)
		n.Children, _ = at.t.Children(ns.ID)
		ft.Nodes = append(ft.Nodes, n)
	}
	return ft
}
