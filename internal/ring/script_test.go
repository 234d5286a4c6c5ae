package ring

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hoard-io/hoard/internal/scripttest"
)

// TestScripts runs the membership scripts in testdata/*.txt. Each line is
// one step, "command args", optionally followed by "-> expected output";
// blank lines and lines starting with '#' are kept as they are. A step with
// an expectation must print exactly that; one without must succeed. A failed
// step prints "error: ...". To record outputs, write "cmd args ->" and run
// go test -run Scripts -rewrite.
//
// Commands (rings start empty with the default Config):
//
//	config [vnodes=N] [hash=sha256|const|mod16]  empty ring with this config
//	new ID...            ring of exactly these members
//	add ID...            With, one member after another
//	remove ID...         Without, one member after another
//	owner BUCKET/KEY     the owner
//	owners BUCKET/KEY N  Owners(N)
//	members | len | contains ID
//	moved BUCKET/KEY     whether the owner differs from the ring before the
//	                     last new/add/remove step
//	spread N             keys per member over data/key-0 .. data/key-N-1
//	moves N              over the same keys, from>to:count for every move
//	                     since the ring before the last change
func TestScripts(t *testing.T) {
	scripttest.Run(t, "testdata/*.txt", func(t *testing.T) scripttest.Step {
		s := newScript(t)
		return func(cmd string) (string, error) { return s.run(strings.Fields(cmd)) }
	})
}

type script struct {
	cfg        Config
	prev, ring *Ring
}

func newScript(t *testing.T) *script {
	r := mustNew(t, Config{})
	return &script{prev: r, ring: r}
}

// run executes one step and returns what it prints.
func (s *script) run(args []string) (string, error) {
	cmd, args := args[0], args[1:]
	switch cmd {
	case "config":
		var cfg Config
		for _, a := range args {
			k, v, _ := strings.Cut(a, "=")
			switch k {
			case "vnodes":
				n, err := strconv.Atoi(v)
				if err != nil {
					return "", err
				}
				cfg.VirtualNodes = n
			case "hash":
				h, err := scriptHash(v)
				if err != nil {
					return "", err
				}
				cfg.Hash = h
			default:
				return "", fmt.Errorf("unknown config %q", a)
			}
		}
		r, err := New(cfg, nil)
		if err != nil {
			return "", err
		}
		s.cfg, s.prev, s.ring = cfg, r, r
		return "ok", nil
	case "new":
		r, err := New(s.cfg, args)
		if err != nil {
			return "", err
		}
		s.prev, s.ring = s.ring, r
		return "ok", nil
	case "add", "remove":
		r := s.ring
		for _, id := range args {
			var err error
			if cmd == "add" {
				r, err = r.With(id)
			} else {
				r, err = r.Without(id)
			}
			if err != nil {
				return "", err
			}
		}
		s.prev, s.ring = s.ring, r
		return "ok", nil
	case "owner":
		b, k, err := objectArg(args, 1)
		if err != nil {
			return "", err
		}
		return orNone(s.ring.Owner(b, k)), nil
	case "owners":
		b, k, err := objectArg(args, 2)
		if err != nil {
			return "", err
		}
		n, err := strconv.Atoi(args[1])
		if err != nil {
			return "", err
		}
		return orNone(strings.Join(s.ring.Owners(b, k, n), " ")), nil
	case "moved":
		b, k, err := objectArg(args, 1)
		if err != nil {
			return "", err
		}
		return strconv.FormatBool(Moved(s.prev, s.ring, b, k)), nil
	case "members":
		return orNone(strings.Join(s.ring.Members(), " ")), nil
	case "len":
		return strconv.Itoa(s.ring.Len()), nil
	case "contains":
		if len(args) != 1 {
			return "", fmt.Errorf("contains takes one ID")
		}
		return strconv.FormatBool(s.ring.Contains(args[0])), nil
	case "spread", "moves":
		if len(args) != 1 {
			return "", fmt.Errorf("%s takes a key count", cmd)
		}
		n, err := strconv.Atoi(args[0])
		if err != nil {
			return "", err
		}
		counts := map[string]int{}
		for i := range n {
			key := "key-" + strconv.Itoa(i)
			if cmd == "spread" {
				counts[s.ring.Owner("data", key)]++
			} else if from, to := s.prev.Owner("data", key), s.ring.Owner("data", key); from != to {
				counts[orNone(from)+">"+orNone(to)]++
			}
		}
		return formatCounts(counts), nil
	}
	return "", fmt.Errorf("unknown command %q", cmd)
}

// scriptHash returns a hash a script may choose: the default (sha256), one
// that collides everywhere (const), and one with 16 positions, where
// collisions are common (mod16).
func scriptHash(name string) (func([]byte) uint64, error) {
	switch name {
	case "sha256":
		return nil, nil
	case "const":
		return constHash, nil
	case "mod16":
		return func(b []byte) uint64 { return SHA256(b) % 16 }, nil
	}
	return nil, fmt.Errorf("unknown hash %q", name)
}

// objectArg parses "bucket/key" from the first of want arguments.
func objectArg(args []string, want int) (bucket, key string, err error) {
	if len(args) != want {
		return "", "", fmt.Errorf("want %d arguments, got %d", want, len(args))
	}
	bucket, key, ok := strings.Cut(args[0], "/")
	if !ok {
		return "", "", fmt.Errorf("object %q is not bucket/key", args[0])
	}
	return bucket, key, nil
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func formatCounts(counts map[string]int) string {
	if len(counts) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = fmt.Sprintf("%s:%d", k, counts[k])
	}
	return strings.Join(out, " ")
}
