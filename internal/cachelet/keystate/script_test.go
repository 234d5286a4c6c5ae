package keystate

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hoard-io/hoard/internal/scripttest"
)

// TestScripts runs the scripts in testdata/*.txt against a Table of
// string keys, entries and flights. Each line is one step, "command args",
// optionally followed by "-> expected output"; blank lines and lines
// starting with '#' are comments. A step with an expectation must print
// exactly that; one without must succeed. A failed step prints
// "error: ...". To record outputs, write "cmd args ->" and run
// go test -run Scripts -rewrite.
//
// Entries are named by the script (e1, w1, ...); flights are named by the
// table's shell, f1, f2, ... in the order reads lead them or asks are
// registered. Lists of doomed entries print sorted, "ok" when empty.
//
//	read K [cached=E]      BeginRead: "serve E (cached|filling|unpersisted)",
//	                       "lead F" or "join F"
//	endflight K F          EndFlight: "entry E" or "entry -"
//	ask K                  Ask with a new flight: "ask F"
//	endask K F             EndAsk: "entry E" or "entry -"
//	install K F E          Install: "stream" or the entries to doom
//	filldone K E           FillDone
//	invalidate K           Invalidate: the entries to doom
//	write K W              BeginWrite: the entries to doom
//	acked K W E            WriteAcked (placeholder W, final E): the entries to doom
//	writedone K W          WriteDone
//	unpersisted K W        Unpersisted
//	persisted K W          Persisted: the entries to doom
//	doominflight PREFIX    DoomInFlight over keys with that prefix: the entries to doom
//	drop K                 Drop: "keep" or the entries to doom
//	prewarmed K            Prewarmed
//	hit K                  LocalHit: "first" or "-"
//	close                  Close
//	ringchange             BeginHandoff: "handoff ID"
//	handoffdone ID         EndHandoff: "newest" or "superseded"
//	handoff                HandingOff: "running ID" or "idle"
//	holds K                Holds: "holds" or "-"
//	state K                the key's state, or "-" when it has none
//	len                    keys with state
func TestScripts(t *testing.T) {
	scripttest.Run(t, "testdata/*.txt", func(t *testing.T) scripttest.Step {
		s := &script{t: New[string, string, string]()}
		return func(cmd string) (string, error) { return s.run(strings.Fields(cmd)) }
	})
}

type script struct {
	t       *Table[string, string, string]
	flights int
}

func (s *script) newFlight() string {
	s.flights++
	return "f" + strconv.Itoa(s.flights)
}

func nargs(args []string, n int) error {
	if len(args) != n {
		return fmt.Errorf("want %d arguments, got %d", n, len(args))
	}
	return nil
}

func dooms(d []string) string {
	if len(d) == 0 {
		return "ok"
	}
	d = slices.Clone(d)
	slices.Sort(d)
	return "doom " + strings.Join(d, " ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// run executes one step and returns what it prints.
func (s *script) run(args []string) (string, error) {
	cmd, args := args[0], args[1:]
	t := s.t
	// Commands with a fixed number of arguments.
	fixed := map[string]int{
		"endflight": 2, "ask": 1, "endask": 2, "install": 3, "filldone": 2, "invalidate": 1,
		"write": 2, "acked": 3, "writedone": 2, "unpersisted": 2, "persisted": 2,
		"doominflight": 1, "drop": 1, "prewarmed": 1, "hit": 1, "close": 0, "ringchange": 0,
		"handoffdone": 1, "handoff": 0, "state": 1, "len": 0,
	}
	if n, ok := fixed[cmd]; ok {
		if err := nargs(args, n); err != nil {
			return "", err
		}
	}
	switch cmd {
	case "read":
		if len(args) < 1 || len(args) > 2 {
			return "", fmt.Errorf("want read K [cached=E]")
		}
		cached := ""
		if len(args) == 2 {
			v, ok := strings.CutPrefix(args[1], "cached=")
			if !ok {
				return "", fmt.Errorf("unknown argument %q", args[1])
			}
			cached = v
		}
		r := t.BeginRead(args[0], cached, s.newFlight)
		switch {
		case r.From != None:
			return fmt.Sprintf("serve %s (%s)", r.Entry, r.From), nil
		case r.Lead:
			return "lead " + r.Flight, nil
		}
		return "join " + r.Flight, nil
	case "endflight":
		return "entry " + orDash(t.EndFlight(args[0], args[1])), nil
	case "ask":
		f := s.newFlight()
		t.Ask(args[0], f)
		return "ask " + f, nil
	case "endask":
		return "entry " + orDash(t.EndAsk(args[0], args[1])), nil
	case "install":
		d := t.Install(args[0], args[1], args[2])
		if d.Stream {
			return "stream", nil
		}
		return dooms(d.Doom), nil
	case "filldone":
		t.FillDone(args[0], args[1])
		return "ok", nil
	case "invalidate":
		return dooms(t.Invalidate(args[0])), nil
	case "write":
		return dooms(t.BeginWrite(args[0], args[1])), nil
	case "acked":
		return dooms(t.WriteAcked(args[0], args[1], args[2])), nil
	case "writedone":
		t.WriteDone(args[0], args[1])
		return "ok", nil
	case "unpersisted":
		t.Unpersisted(args[0], args[1])
		return "ok", nil
	case "persisted":
		return dooms(t.Persisted(args[0], args[1])), nil
	case "doominflight":
		p := args[0]
		return dooms(t.DoomInFlight(func(k string) bool { return strings.HasPrefix(k, p) })), nil
	case "drop":
		d, ok := t.Drop(args[0])
		if !ok {
			return "keep", nil
		}
		return dooms(d), nil
	case "prewarmed":
		t.Prewarmed(args[0])
		return "ok", nil
	case "hit":
		if t.LocalHit(args[0]) {
			return "first", nil
		}
		return "-", nil
	case "close":
		t.Close()
		return "ok", nil
	case "ringchange":
		return fmt.Sprintf("handoff %d", t.BeginHandoff()), nil
	case "handoffdone":
		id, err := strconv.ParseUint(args[0], 10, 64)
		if err != nil {
			return "", err
		}
		if t.EndHandoff(id) {
			return "newest", nil
		}
		return "superseded", nil
	case "handoff":
		if id, ok := t.HandingOff(); ok {
			return fmt.Sprintf("running %d", id), nil
		}
		return "idle", nil
	case "holds":
		if t.Holds(args[0]) {
			return "holds", nil
		}
		return "-", nil
	case "state":
		return s.state(args[0]), nil
	case "len":
		return strconv.Itoa(t.Len()), nil
	}
	return "", fmt.Errorf("unknown command %q", cmd)
}

// state prints what the table holds for k.
func (s *script) state(k string) string {
	ks := s.t.keys[k]
	if ks == nil {
		return "-"
	}
	var out []string
	add := func(name, v string) {
		if v != "" {
			out = append(out, name+"="+v)
		}
	}
	add("flight", ks.flight)
	add("filling", ks.filling)
	add("pending", ks.pending)
	add("unpersisted", ks.unpersisted)
	var asks []string
	for f, a := range ks.asks {
		v := f
		if a.entry != "" {
			v += ":" + a.entry
		}
		if a.doomed {
			v += "(doomed)"
		}
		asks = append(asks, v)
	}
	slices.Sort(asks)
	add("asks", strings.Join(asks, ","))
	if ks.prewarmed {
		out = append(out, "prewarmed")
	}
	return strings.Join(out, " ")
}
