//go:build integration

package rig

import (
	"context"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/lazyfs"
)

// TestFunctionTreeNodeKilled: six node agents (processes in network
// namespaces, the store behind a shared capped link) start an instance
// each of one package at once, forming node-0(node-1(node-3,node-4),
// node-2(node-5,-)); node-1, in the middle of the function tree, is
// killed (SIGKILL of its agent) while its child node-3 is taking the
// package's blocks from it (Nodes.DistributeTree; each instance reads its
// model at most a MiB per 200 ms, so that the distribution outlasts the
// controller's rebalancing: blocks are pushed down as the parent gets
// them, so a child joining late gets at once what its parent has, and the
// parent must still be reading). node-3's stream of pushed blocks and its
// reads turn at once to node-0, the next up its chain, then reattach where
// the controller's rebalanced tree puts it, under node-4 (node-1's last
// leaf, moved into its place); every
// surviving node reads the whole model with the right digest (0
// corrupted), and node-3 takes nothing from the store.
func TestFunctionTreeNodeKilled(t *testing.T) {
	if err := lazyfs.Available(); err != nil {
		t.Skipf("lazy code needs FUSE mounts (CI runs as root): %v", err)
	}
	n := startNodes(t, 6)
	pkg, want := treeBenchPackage(t, 1, 13, 6)
	d, err := n.DistributeTree(context.Background(), pkg.Data, want, TreeRun{Kill: true, Pace: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("tree %s, killed %s (child %s had %d bytes from it): all survivors read in %v; the child resumed %v after the kill and finished %v after it; tree %s %v after it; the child reads from %s",
		d.Shape, d.Victim, d.Child, d.ChildAtKill, d.AllRead, d.KillToResume, d.KillToChild, d.After, d.KillToTree, d.ChildReadsFrom)
	t.Logf("child: %d bytes from agents, %d from the store; all nodes: %d bytes pushed, %d from the store; invocations: %d ok, %d corrupted, %d failed",
		d.ChildFromAgents, d.ChildFromStore, d.Pushed, d.FromStore, d.OK, d.Corrupted, d.Failed)
	if d.Pushed == 0 {
		t.Error("no node kept a block pushed by its parent")
	}
	if d.Corrupted != 0 {
		t.Errorf("%d invocations read a model with the wrong digest", d.Corrupted)
	}
	for _, a := range n.Agents {
		if a.ID != d.Victim && !d.SurvivorsOK[a.ID] {
			t.Errorf("surviving node %s did not read the whole model", a.ID)
		}
	}
	if d.ChildAtKill <= 0 || d.ChildAtKill >= d.Size {
		t.Errorf("the child had %d of %d bytes at the kill: not in the middle of the distribution", d.ChildAtKill, d.Size)
	}
	if d.KillToResume == 0 {
		t.Error("the child took no bytes from an agent after the kill")
	}
	if d.ChildFromStore != 0 || d.ChildFromAgents < d.Size/2 {
		t.Errorf("the child took %d bytes from the store and %d from agents: want every byte from the tree", d.ChildFromStore, d.ChildFromAgents)
	}
	if d.NewParent == "" || d.NewParent == d.Parent {
		t.Errorf("after the kill the tree is %q, the child's parent %q: want the killed node's last leaf moved into its place", d.After, d.NewParent)
	}
	if d.ChildReadsFrom != d.NewParent {
		t.Errorf("the child reads from %s; the rebalanced tree %s puts it under %s", d.ChildReadsFrom, d.After, d.NewParent)
	}
}
