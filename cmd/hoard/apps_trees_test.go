package main

import (
	"bytes"
	"testing"

	"github.com/hoard-io/hoard/internal/api"
)

func TestPrintTrees(t *testing.T) {
	var buf bytes.Buffer
	printTrees(&buf, []api.AppInfo{
		{Name: "idle", Version: 2},
		{Name: "busy", Version: 1, Tree: &api.FuncTree{
			Rev: "0123456789abcdef0123", Root: "n1", Height: 3, Shape: "n1(n2(n4,-),n3)",
			Nodes: []api.TreeNode{
				{ID: "n1", Children: []string{"n2", "n3"}},
				{ID: "n2", Parent: "n1", Children: []string{"n4"}},
				{ID: "n3", Parent: "n1"},
				{ID: "n4", Parent: "n2"},
			},
		}},
	})
	want := "idle: no tree (no instance of version 2)\n" +
		"busy (version 1, package 0123456789ab): 4 agents, height 3, n1(n2(n4,-),n3)\n" +
		"  n1\n    n2\n      n4\n    n3\n"
	if buf.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", buf.String(), want)
	}
}
