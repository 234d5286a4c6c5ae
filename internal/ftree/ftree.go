// Package ftree is the shape of a function tree (FaaSNet's FT): per
// function, a balanced binary tree of the nodes that host it, along which
// an artifact's blocks flow from the root (which fetches from the store)
// to every node (which fetches from its parent and forwards to its
// children). A node joins under the first node, in breadth-first order,
// with fewer than two children; a node that leaves or fails is replaced
// by the deepest leaf of its subtree, and the tree is rebalanced with
// AVL rotations wherever two sibling subtrees' heights differ by more
// than one. Nodes have no keys: the order of children carries nothing.
//
// The package is pure: no I/O, no goroutines, no clock. The controller
// keeps one Tree per function and stores its State; whoever changes a
// Tree tells the nodes whose parent changed (the Moves returned).
package ftree

import (
	"errors"
	"fmt"
	"strings"
)

// Errors.
var (
	ErrExists   = errors.New("ftree: node already in the tree")
	ErrNotFound = errors.New("ftree: node not in the tree")
	ErrBadID    = errors.New("ftree: invalid node id")
	ErrState    = errors.New("ftree: invalid state")
)

// MaxID bounds a node id's length.
const MaxID = 256

type node struct {
	id                  string
	parent, left, right *node
	height              int // nodes on the longest path down, this one included
}

// Tree is one function's tree. It is not safe for concurrent use.
type Tree struct {
	root  *node
	nodes map[string]*node
}

// New returns an empty tree.
func New() *Tree { return &Tree{nodes: map[string]*node{}} }

// Move is a node whose parent changed ("" for the root): it must fetch
// from its new parent from now on.
type Move struct {
	Node, From, To string
}

func (m Move) String() string { return fmt.Sprintf("%s:%s>%s", m.Node, orDash(m.From), orDash(m.To)) }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// validID reports whether id can name a node: printable, no spaces and
// none of the shape notation's characters.
func validID(id string) bool {
	return id != "" && id != "-" && len(id) <= MaxID && !strings.ContainsAny(id, " \t\r\n(),:>")
}

// Len is the number of nodes.
func (t *Tree) Len() int { return len(t.nodes) }

// Has reports whether id is in the tree.
func (t *Tree) Has(id string) bool { return t.nodes[id] != nil }

// Root is the root's id, "" for an empty tree.
func (t *Tree) Root() string {
	if t.root == nil {
		return ""
	}
	return t.root.id
}

// Height is the number of nodes on the longest root-to-leaf path.
func (t *Tree) Height() int { return height(t.root) }

// Parent returns id's parent ("" for the root).
func (t *Tree) Parent(id string) (string, error) {
	n := t.nodes[id]
	if n == nil {
		return "", fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if n.parent == nil {
		return "", nil
	}
	return n.parent.id, nil
}

// Children returns id's children, left first.
func (t *Tree) Children(id string) ([]string, error) {
	n := t.nodes[id]
	if n == nil {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	var out []string
	for _, c := range []*node{n.left, n.right} {
		if c != nil {
			out = append(out, c.id)
		}
	}
	return out, nil
}

// Nodes returns the ids in breadth-first order, left before right.
func (t *Tree) Nodes() []string {
	var out []string
	t.bfs(func(n *node) bool { out = append(out, n.id); return true })
	return out
}

// bfs visits the nodes breadth-first until visit returns false.
func (t *Tree) bfs(visit func(*node) bool) {
	if t.root == nil {
		return
	}
	queue := []*node{t.root}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		if !visit(n) {
			return
		}
		for _, c := range []*node{n.left, n.right} {
			if c != nil {
				queue = append(queue, c)
			}
		}
	}
}

// Insert adds id under the first node in breadth-first order with fewer
// than two children (as its left child if it has none) and returns that
// parent ("" when id becomes the root).
func (t *Tree) Insert(id string) (string, error) {
	if !validID(id) {
		return "", fmt.Errorf("%w: %q", ErrBadID, id)
	}
	if t.nodes[id] != nil {
		return "", fmt.Errorf("%w: %s", ErrExists, id)
	}
	n := &node{id: id, height: 1}
	t.nodes[id] = n
	if t.root == nil {
		t.root = n
		return "", nil
	}
	var p *node
	t.bfs(func(c *node) bool {
		if c.left == nil || c.right == nil {
			p = c
			return false
		}
		return true
	})
	n.parent = p
	if p.left == nil {
		p.left = n
	} else {
		p.right = n
	}
	// Joining under the shallowest open node never unbalances the tree
	// (every level above it is full); rebalance keeps that true anyway.
	var moves []Move
	t.rebalance(p, &moves)
	return n.parent.id, nil
}

// Remove takes id out of the tree (it left or failed). A leaf is simply
// detached; an inner node is replaced by the deepest leaf of its subtree
// (the last in breadth-first order), so only that subtree changes. The
// tree is then rebalanced from the detached leaf's old parent up. It
// returns every node whose parent changed, in the order they changed
// (a node moved twice appears twice).
func (t *Tree) Remove(id string) ([]Move, error) {
	n := t.nodes[id]
	if n == nil {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	delete(t.nodes, id)
	var moves []Move
	if n.left == nil && n.right == nil {
		p := n.parent
		t.replace(n, nil)
		t.rebalance(p, &moves)
		return compact(moves), nil
	}
	// The last node of n's subtree in breadth-first order is a leaf.
	last := n
	queue := []*node{n}
	for len(queue) > 0 {
		last = queue[0]
		queue = queue[1:]
		for _, c := range []*node{last.left, last.right} {
			if c != nil {
				queue = append(queue, c)
			}
		}
	}
	from := last.parent
	lastParent := from.id
	t.replace(last, nil)
	if from == n {
		from = last
	}
	// last takes n's place and children.
	last.left, last.right = n.left, n.right
	for _, c := range []*node{last.left, last.right} {
		if c != nil {
			c.parent = last
			moves = append(moves, Move{c.id, n.id, last.id})
		}
	}
	t.replace(n, last)
	moves = append(moves, Move{last.id, lastParent, idOf(last.parent)})
	fix(last)
	t.rebalance(from, &moves)
	return compact(moves), nil
}

// compact drops moves that changed nothing.
func compact(moves []Move) []Move {
	out := moves[:0]
	for _, m := range moves {
		if m.From != m.To {
			out = append(out, m)
		}
	}
	return out
}

func idOf(n *node) string {
	if n == nil {
		return ""
	}
	return n.id
}

// replace puts r (maybe nil) where n is under n's parent (or at the root).
func (t *Tree) replace(n, r *node) {
	p := n.parent
	switch {
	case p == nil:
		t.root = r
	case p.left == n:
		p.left = r
	default:
		p.right = r
	}
	if r != nil {
		r.parent = p
	}
	n.parent = nil
}

func height(n *node) int {
	if n == nil {
		return 0
	}
	return n.height
}

func fix(n *node) { n.height = 1 + max(height(n.left), height(n.right)) }

// rebalance walks from n to the root, fixing heights and rotating where
// the children's heights differ by more than one.
func (t *Tree) rebalance(n *node, moves *[]Move) {
	for ; n != nil; n = n.parent {
		fix(n)
		switch bf := height(n.left) - height(n.right); {
		case bf > 1:
			if height(n.left.left) < height(n.left.right) {
				t.rotateLeft(n.left, moves)
			}
			n = t.rotateRight(n, moves)
		case bf < -1:
			if height(n.right.right) < height(n.right.left) {
				t.rotateRight(n.right, moves)
			}
			n = t.rotateLeft(n, moves)
		}
	}
}

// rotateLeft lifts x's right child y into x's place: x becomes y's left
// child and y's left subtree x's right. It returns y.
func (t *Tree) rotateLeft(x *node, moves *[]Move) *node {
	y := x.right
	b := y.left
	xp := x.parent
	t.replace(x, y)
	*moves = append(*moves, Move{y.id, x.id, idOf(xp)})
	x.right = b
	if b != nil {
		b.parent = x
		*moves = append(*moves, Move{b.id, y.id, x.id})
	}
	y.left = x
	x.parent = y
	*moves = append(*moves, Move{x.id, idOf(xp), y.id})
	fix(x)
	fix(y)
	return y
}

// rotateRight lifts x's left child y into x's place: x becomes y's right
// child and y's right subtree x's left. It returns y.
func (t *Tree) rotateRight(x *node, moves *[]Move) *node {
	y := x.left
	b := y.right
	xp := x.parent
	t.replace(x, y)
	*moves = append(*moves, Move{y.id, x.id, idOf(xp)})
	x.left = b
	if b != nil {
		b.parent = x
		*moves = append(*moves, Move{b.id, y.id, x.id})
	}
	y.right = x
	x.parent = y
	*moves = append(*moves, Move{x.id, idOf(xp), y.id})
	fix(x)
	fix(y)
	return y
}
