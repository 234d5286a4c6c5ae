package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hoard-io/hoard/internal/api"
)

// Following the function tree after a failure (ADR 0027's amendment): an
// agent whose parent fails turns at once to the next agent up the chain
// its start request named; from then on, at most four times a second while it
// still fetches, it reads its application's tree as the controller keeps
// it (etcd) and reattaches where the tree says once the controller has
// rebalanced it without the failed agent. Bytes from the new parent are
// checked against the package's block sums as any parent's.

// TreeSource gives an agent's place in an application's function tree.
type TreeSource interface {
	// Chain returns the parent of agent in app's tree for package rev,
	// then the parent's ancestors, nearest first, as registered agents
	// (an unregistered one is left out). ok is false when the tree is of
	// another version or does not hold agent; an empty chain with ok is
	// the root (it reads from the store).
	Chain(ctx context.Context, app, rev, agent string) (chain []api.Registration, ok bool, err error)
}

// EtcdTrees reads the trees and registrations from etcd (the agent's
// user may read both: etcdauth.AddAgent).
func EtcdTrees(cli *clientv3.Client) TreeSource { return etcdTrees{cli} }

type etcdTrees struct{ cli *clientv3.Client }

func (e etcdTrees) Chain(ctx context.Context, app, rev, agent string) ([]api.Registration, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := e.cli.Get(ctx, api.EtcdTrees+app)
	if err != nil {
		return nil, false, err
	}
	if len(resp.Kvs) == 0 {
		return nil, false, nil
	}
	rec, t, err := api.ParseTree(resp.Kvs[0].Value)
	if err != nil {
		return nil, false, fmt.Errorf("the function tree of %s: %w", app, err)
	}
	if rec.Rev != rev || !t.Has(agent) {
		return nil, false, nil
	}
	var chain []api.Registration
	for id, _ := t.Parent(agent); id != ""; id, _ = t.Parent(id) {
		r, err := e.cli.Get(ctx, api.EtcdPrefix+id)
		if err != nil {
			return nil, false, err
		}
		if len(r.Kvs) == 0 {
			continue // not registered: dead
		}
		var reg api.Registration
		if err := json.Unmarshal(r.Kvs[0].Value, &reg); err != nil || reg.ID != id || reg.URL == "" {
			continue
		}
		chain = append(chain, reg)
	}
	return chain, true, nil
}

// treeRecheck bounds how often a source off its first chain reads the
// tree (while it fetches).
const treeRecheck = 250 * time.Millisecond

// appOfKey is the application a package key names (apps/APP/SHA.blk).
func appOfKey(key string) string {
	parts := strings.Split(key, "/")
	if len(parts) != 3 || parts[0] != "apps" {
		return ""
	}
	return parts[1]
}

// followTree reads the tree and, where it names another parent than the
// one asked now (and none the source saw fail), reattaches there.
// force skips the treeRecheck bound (right after a failure).
func (s *relaySource) followTree(ctx context.Context, force bool) {
	tr := s.a.cfg.Trees
	s.mu.Lock()
	due := tr != nil && s.detached && !s.parentBad && s.sums != nil && s.app != "" && (force || time.Since(s.treeRead) >= treeRecheck)
	if due {
		s.treeRead = time.Now()
	}
	s.mu.Unlock()
	if !due {
		return
	}
	chain, ok, err := tr.Chain(ctx, s.app, s.sha, s.a.cfg.ID)
	if err != nil {
		s.a.log.Warn("reading the function tree", "app", s.app, "err", err)
		return
	}
	if !ok || len(chain) == 0 {
		return // not in the tree (yet), or its root: the chain held stays
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	chain = slices.DeleteFunc(chain, func(r api.Registration) bool { return r.ID == s.a.cfg.ID || s.failed[r.ID] })
	if len(chain) == 0 || s.parentBad {
		return
	}
	if s.cur < len(s.parents) && s.parents[s.cur].ID == chain[0].ID {
		return
	}
	from := "the store"
	if s.cur < len(s.parents) {
		from = s.parents[s.cur].ID
	}
	s.parents, s.cur = chain, 0
	s.a.lazy.reattached.Inc()
	s.a.log.Info("reattached where the function tree says", "package", s.sha, "app", s.app, "parent", chain[0].ID, "was", from)
}

// parentFailed records that parent failed and moves past it.
func (s *relaySource) parentFailed(parent string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed == nil {
		s.failed = map[string]bool{}
	}
	s.failed[parent] = true
	s.detached = true
	for s.cur < len(s.parents) && s.failed[s.parents[s.cur].ID] {
		s.cur++
	}
}

// currentParent is the agent asked now ("" for the store).
func (s *relaySource) currentParent() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.parentBad || s.cur >= len(s.parents) {
		return ""
	}
	return s.parents[s.cur].ID
}
