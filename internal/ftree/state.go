package ftree

import (
	"fmt"
	"strings"
)

// State is a Tree's serialisable form (for etcd): the nodes in
// breadth-first order, the root first, each with its children.
type State struct {
	Nodes []NodeState `json:"nodes"`
}

// NodeState is one node and its children ("" for none).
type NodeState struct {
	ID    string `json:"id"`
	Left  string `json:"left,omitempty"`
	Right string `json:"right,omitempty"`
}

// State returns the tree's serialisable form.
func (t *Tree) State() State {
	s := State{Nodes: make([]NodeState, 0, len(t.nodes))}
	t.bfs(func(n *node) bool {
		s.Nodes = append(s.Nodes, NodeState{ID: n.id, Left: idOf(n.left), Right: idOf(n.right)})
		return true
	})
	return s
}

// FromState rebuilds a tree from its State, which it checks as untrusted:
// valid unique ids, one root (the first node), every other node some
// node's child exactly once, heights balanced.
func FromState(s State) (*Tree, error) {
	t := New()
	for _, ns := range s.Nodes {
		if !validID(ns.ID) {
			return nil, fmt.Errorf("%w: id %q", ErrState, ns.ID)
		}
		if t.nodes[ns.ID] != nil {
			return nil, fmt.Errorf("%w: %s twice", ErrState, ns.ID)
		}
		t.nodes[ns.ID] = &node{id: ns.ID}
	}
	for _, ns := range s.Nodes {
		n := t.nodes[ns.ID]
		for _, c := range []struct {
			id   string
			slot **node
		}{{ns.Left, &n.left}, {ns.Right, &n.right}} {
			if c.id == "" {
				continue
			}
			child := t.nodes[c.id]
			switch {
			case child == nil:
				return nil, fmt.Errorf("%w: %s's child %s is not a node", ErrState, ns.ID, c.id)
			case child.parent != nil || child == n:
				return nil, fmt.Errorf("%w: %s has two parents", ErrState, c.id)
			}
			child.parent = n
			*c.slot = child
		}
	}
	if len(s.Nodes) > 0 {
		t.root = t.nodes[s.Nodes[0].ID]
		if t.root.parent != nil {
			return nil, fmt.Errorf("%w: the first node, %s, has a parent", ErrState, t.root.id)
		}
	}
	// Every node reached from the root exactly once: no cycles, no
	// second root.
	reached := 0
	var walk func(n *node, depth int) int
	walk = func(n *node, depth int) int {
		if n == nil || depth > len(t.nodes) {
			return 0
		}
		reached++
		n.height = 1 + max(walk(n.left, depth+1), walk(n.right, depth+1))
		return n.height
	}
	walk(t.root, 0)
	if reached != len(t.nodes) {
		return nil, fmt.Errorf("%w: %d of %d nodes reachable from the root", ErrState, reached, len(t.nodes))
	}
	if err := t.Check(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrState, err)
	}
	return t, nil
}

// Check verifies the tree's invariants: links consistent both ways, every
// node reached once from the root and indexed, heights right, and every
// node's children's heights within one of each other.
func (t *Tree) Check() error {
	seen := map[string]bool{}
	var walk func(n, parent *node) (int, error)
	walk = func(n, parent *node) (int, error) {
		if n == nil {
			return 0, nil
		}
		if seen[n.id] {
			return 0, fmt.Errorf("%s reached twice", n.id)
		}
		seen[n.id] = true
		if n.parent != parent {
			return 0, fmt.Errorf("%s's parent is %s, but it is a child of %s", n.id, idOf(n.parent), idOf(parent))
		}
		if t.nodes[n.id] != n {
			return 0, fmt.Errorf("%s is not indexed", n.id)
		}
		l, err := walk(n.left, n)
		if err != nil {
			return 0, err
		}
		r, err := walk(n.right, n)
		if err != nil {
			return 0, err
		}
		if l-r > 1 || r-l > 1 {
			return 0, fmt.Errorf("%s unbalanced: left %d, right %d", n.id, l, r)
		}
		if h := 1 + max(l, r); h != n.height {
			return 0, fmt.Errorf("%s has height %d, recorded %d", n.id, h, n.height)
		}
		return n.height, nil
	}
	if _, err := walk(t.root, nil); err != nil {
		return err
	}
	if len(seen) != len(t.nodes) {
		return fmt.Errorf("%d nodes indexed, %d in the tree", len(t.nodes), len(seen))
	}
	return nil
}

// String is the tree's shape: "a(b(d,e),c(f,-))", a leaf as its id, a
// missing child as "-", "()" for an empty tree.
func (t *Tree) String() string {
	if t.root == nil {
		return "()"
	}
	var b strings.Builder
	var write func(n *node)
	write = func(n *node) {
		if n == nil {
			b.WriteString("-")
			return
		}
		b.WriteString(n.id)
		if n.left == nil && n.right == nil {
			return
		}
		b.WriteString("(")
		write(n.left)
		b.WriteString(",")
		write(n.right)
		b.WriteString(")")
	}
	write(t.root)
	return b.String()
}

// Parse reads a shape written by String into a State (which FromState
// checks).
func Parse(shape string) (State, error) {
	var s State
	if shape == "()" {
		return s, nil
	}
	p := parser{in: shape}
	if _, err := p.node(&s, 0); err != nil {
		return State{}, err
	}
	if p.pos != len(p.in) {
		return State{}, fmt.Errorf("%w: trailing %q", ErrState, p.in[p.pos:])
	}
	// Parse appends in preorder; State wants the root first, which
	// preorder gives; FromState needs no other order.
	return s, nil
}

type parser struct {
	in  string
	pos int
}

func (p *parser) node(s *State, depth int) (string, error) {
	if depth > 64 {
		return "", fmt.Errorf("%w: shape nested over 64 deep", ErrState)
	}
	start := p.pos
	for p.pos < len(p.in) && !strings.ContainsRune("(),", rune(p.in[p.pos])) {
		p.pos++
	}
	id := p.in[start:p.pos]
	if id == "-" {
		return "", nil
	}
	if !validID(id) {
		return "", fmt.Errorf("%w: id %q at %d", ErrState, id, start)
	}
	i := len(s.Nodes)
	s.Nodes = append(s.Nodes, NodeState{ID: id})
	if p.pos == len(p.in) || p.in[p.pos] != '(' {
		return id, nil
	}
	p.pos++
	l, err := p.node(s, depth+1)
	if err != nil {
		return "", err
	}
	if p.pos == len(p.in) || p.in[p.pos] != ',' {
		return "", fmt.Errorf("%w: want ',' at %d", ErrState, p.pos)
	}
	p.pos++
	r, err := p.node(s, depth+1)
	if err != nil {
		return "", err
	}
	if p.pos == len(p.in) || p.in[p.pos] != ')' {
		return "", fmt.Errorf("%w: want ')' at %d", ErrState, p.pos)
	}
	p.pos++
	s.Nodes[i].Left, s.Nodes[i].Right = l, r
	return id, nil
}
