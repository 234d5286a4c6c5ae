package ftree

import (
	"errors"
	"math/rand/v2"
	"strconv"
	"testing"
)

// parents maps every node to its parent ("" for the root).
func parents(t *Tree) map[string]string {
	m := map[string]string{}
	for _, id := range t.Nodes() {
		p, _ := t.Parent(id)
		m[id] = p
	}
	return m
}

// TestRandomChurn inserts and removes at random and checks after every
// step the invariants, the breadth-first insert rule, the height bound,
// and that the moves reported take the old parents to the new ones.
func TestRandomChurn(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	tr := New()
	next := 0
	for i := range 2000 {
		before := parents(tr)
		if tr.Len() == 0 || rng.IntN(100) < 55 {
			id := "n" + strconv.Itoa(next)
			next++
			want := firstOpen(tr)
			p, err := tr.Insert(id)
			if err != nil || p != want {
				t.Fatalf("step %d: insert %s under %q (%v), want %q", i, id, p, err, want)
			}
			before[id] = p
		} else {
			ids := tr.Nodes()
			victim := ids[rng.IntN(len(ids))]
			moves, err := tr.Remove(victim)
			if err != nil {
				t.Fatal(err)
			}
			delete(before, victim)
			for _, m := range moves {
				if before[m.Node] != m.From {
					t.Fatalf("step %d: move %v, but %s's parent was %q", i, m, m.Node, before[m.Node])
				}
				before[m.Node] = m.To
			}
		}
		if err := tr.Check(); err != nil {
			t.Fatalf("step %d: %v\n%s", i, err, tr)
		}
		after := parents(tr)
		for id, p := range after {
			if before[id] != p {
				t.Fatalf("step %d: %s's parent is %q, the moves say %q", i, id, p, before[id])
			}
		}
		if len(after) != len(before) {
			t.Fatalf("step %d: %d nodes, want %d", i, len(after), len(before))
		}
		// An AVL-balanced tree of n nodes is at most 1.44 log2(n+2) high.
		if n := tr.Len(); n > 0 && float64(tr.Height()) > 1.45*log2(float64(n+2)) {
			t.Fatalf("step %d: height %d for %d nodes", i, tr.Height(), n)
		}
	}
}

func log2(x float64) float64 {
	n := 0.0
	for x >= 2 {
		x /= 2
		n++
	}
	return n + (x - 1)
}

func TestFromStateRefuses(t *testing.T) {
	for name, s := range map[string]State{
		"bad id":        {Nodes: []NodeState{{ID: "a b"}}},
		"unknown child": {Nodes: []NodeState{{ID: "a", Left: "b"}}},
		"own child":     {Nodes: []NodeState{{ID: "a", Left: "a"}}},
		"two roots":     {Nodes: []NodeState{{ID: "a"}, {ID: "b"}}},
		"root child":    {Nodes: []NodeState{{ID: "a"}, {ID: "b", Left: "a"}}},
		"cycle":         {Nodes: []NodeState{{ID: "r"}, {ID: "a", Left: "b"}, {ID: "b", Left: "a"}}},
	} {
		if _, err := FromState(s); !errors.Is(err, ErrState) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add("a(b(d,e),c(f,-))")
	f.Add("()")
	f.Fuzz(func(t *testing.T, shape string) {
		s, err := Parse(shape)
		if err != nil {
			return
		}
		tr, err := FromState(s)
		if err != nil {
			return
		}
		if err := tr.Check(); err != nil {
			t.Fatalf("%q: accepted a tree that fails Check: %v", shape, err)
		}
		if s2, err := Parse(tr.String()); err != nil || len(s2.Nodes) != tr.Len() {
			t.Fatalf("%q: shape %s does not parse back: %v", shape, tr, err)
		}
	})
}
