package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/hoard-io/hoard/internal/ftree"
)

// EtcdTrees holds each application's function tree (key: prefix +
// application, value: TreeRecord as JSON): the balanced binary tree of
// the agents hosting an instance of its deployed version (FaaSNet §3,
// internal/ftree). The controller writes it; agents read it to reattach
// where it says when a parent fails.
const EtcdTrees = "/hoard/platform/trees/"

// Bounds on a tree read back from etcd (it is checked as untrusted).
const (
	MaxTreeBytes = 1 << 20
	MaxTreeNodes = 4096
)

// TreeRecord is a tree's value in etcd.
type TreeRecord struct {
	// Rev is the package digest the tree distributes; a new version
	// starts a new tree.
	Rev  string      `json:"rev"`
	Tree ftree.State `json:"tree"`
}

// ParseTree checks a tree read from etcd, as untrusted input.
func ParseTree(val []byte) (TreeRecord, *ftree.Tree, error) {
	var rec TreeRecord
	if len(val) > MaxTreeBytes {
		return rec, nil, fmt.Errorf("%d bytes, more than %d", len(val), MaxTreeBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(val))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rec); err != nil {
		return rec, nil, err
	}
	if len(rec.Rev) != 64 || strings.Trim(rec.Rev, "0123456789abcdef") != "" {
		return rec, nil, fmt.Errorf("bad package digest %q", rec.Rev)
	}
	if len(rec.Tree.Nodes) > MaxTreeNodes {
		return rec, nil, fmt.Errorf("%d nodes, more than %d", len(rec.Tree.Nodes), MaxTreeNodes)
	}
	t, err := ftree.FromState(rec.Tree)
	return rec, t, err
}
