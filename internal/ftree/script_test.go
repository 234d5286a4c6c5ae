package ftree

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/hoard-io/hoard/internal/scripttest"
)

// TestScripts runs the scripts in testdata/*.txt (see internal/scripttest;
// go test -run Scripts -rewrite records outputs). After every step the
// tree's invariants are checked (Check), and every insert is checked
// against the breadth-first rule independently.
//
// Commands (a script starts with an empty tree):
//
//	insert ID...     Insert each; prints ID@PARENT for each (- for the root)
//	grow N           insert n1..nN; prints the shape
//	remove ID        Remove; prints the moves NODE:FROM>TO, or "none"
//	fail ID          the same as remove: a failed node leaves its tree
//	load SHAPE       the tree of this shape (Parse, FromState)
//	shape | height | len | nodes
//	parent ID | children ID
//	roundtrip        State to JSON and back; prints the shape read back
func TestScripts(t *testing.T) {
	scripttest.Run(t, "testdata/*.txt", func(t *testing.T) scripttest.Step {
		tr := New()
		return func(cmd string) (string, error) {
			out, err := step(&tr, strings.Fields(cmd))
			if cerr := tr.Check(); cerr != nil {
				t.Fatalf("%s: invariant broken: %v (shape %s)", cmd, cerr, tr)
			}
			return out, err
		}
	})
}

// firstOpen is the insert rule, computed apart from Insert.
func firstOpen(t *Tree) string {
	for _, id := range t.Nodes() {
		if c, _ := t.Children(id); len(c) < 2 {
			return id
		}
	}
	return ""
}

func step(tp **Tree, args []string) (string, error) {
	t := *tp
	if len(args) == 0 {
		return "", fmt.Errorf("empty step")
	}
	arg := func(i int) string {
		if i < len(args) {
			return args[i]
		}
		return ""
	}
	switch args[0] {
	case "insert":
		var out []string
		for _, id := range args[1:] {
			want := firstOpen(t)
			p, err := t.Insert(id)
			if err != nil {
				return strings.Join(out, " "), err
			}
			if p != want {
				return "", fmt.Errorf("%s inserted under %q, the breadth-first rule says %q", id, p, want)
			}
			out = append(out, id+"@"+orDash(p))
		}
		return strings.Join(out, " "), nil
	case "grow":
		n, err := strconv.Atoi(arg(1))
		if err != nil {
			return "", err
		}
		for i := 1; i <= n; i++ {
			if _, err := step(tp, []string{"insert", "n" + strconv.Itoa(i)}); err != nil {
				return "", err
			}
		}
		return t.String(), nil
	case "remove", "fail":
		moves, err := t.Remove(arg(1))
		if err != nil {
			return "", err
		}
		if t.Has(arg(1)) {
			return "", fmt.Errorf("%s still in the tree", arg(1))
		}
		if len(moves) == 0 {
			return "none", nil
		}
		var out []string
		for _, m := range moves {
			out = append(out, m.String())
		}
		return strings.Join(out, " "), nil
	case "load":
		s, err := Parse(arg(1))
		if err != nil {
			return "", err
		}
		nt, err := FromState(s)
		if err != nil {
			return "", err
		}
		*tp = nt
		return "", nil
	case "shape":
		return t.String(), nil
	case "height":
		return strconv.Itoa(t.Height()), nil
	case "len":
		return strconv.Itoa(t.Len()), nil
	case "nodes":
		return strings.Join(t.Nodes(), " "), nil
	case "parent":
		p, err := t.Parent(arg(1))
		return orDash(p), err
	case "children":
		c, err := t.Children(arg(1))
		if len(c) == 0 && err == nil {
			return "none", nil
		}
		return strings.Join(c, " "), err
	case "roundtrip":
		b, err := json.Marshal(t.State())
		if err != nil {
			return "", err
		}
		var s State
		if err := json.Unmarshal(b, &s); err != nil {
			return "", err
		}
		nt, err := FromState(s)
		if err != nil {
			return "", err
		}
		if nt.String() != t.String() {
			return "", fmt.Errorf("read back %s", nt)
		}
		*tp = nt
		return nt.String(), nil
	}
	return "", fmt.Errorf("unknown command %q", args[0])
}
