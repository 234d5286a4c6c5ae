//go:build integration

package rig

import (
	"context"
	"testing"
)

// TestFunctionTreeNodeKilled: four node agents (processes in network
// namespaces, the store behind a shared capped link) start an instance
// each of one package at once; the node in the middle of the function
// tree is killed (SIGKILL of its agent) while its child is taking the
// package's blocks from it (Nodes.DistributeTree). The child turns to
// the next node up the tree, which is where the controller's rebalanced
// tree puts it; every surviving node reads the whole model with the right
// digest (0 corrupted), and the child takes nothing from the store.
func TestFunctionTreeNodeKilled(t *testing.T) {
	n := startNodes(t, 4)
	pkg, want := treeBenchPackage(t, 1, 13, 4)
	d, err := n.DistributeTree(context.Background(), pkg.Data, want, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("tree %s, killed %s (child %s had %d bytes from it): all survivors read in %v; the child resumed %v after the kill and finished %v after it; tree %s %v after it",
		d.Shape, d.Victim, d.Child, d.ChildAtKill, d.AllRead, d.KillToResume, d.KillToChild, d.After, d.KillToTree)
	t.Logf("child: %d bytes from agents, %d from the store; invocations: %d ok, %d corrupted, %d failed", d.ChildFromAgents, d.ChildFromStore, d.OK, d.Corrupted, d.Failed)
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
	if d.NewParent != d.Parent {
		t.Errorf("after the kill the tree is %q, the child's parent %q; want the killed node's parent %q, where the child turned", d.After, d.NewParent, d.Parent)
	}
}
