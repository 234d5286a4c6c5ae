package keepalive

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/scripttest"
)

// TestScripts runs the scripts in testdata/*.txt. Each line is one step,
// "command args", optionally followed by "-> expected output"; blank lines
// and lines starting with '#' are kept as they are. A step with an
// expectation must print exactly that; one without must succeed. A failed
// step prints "error: ...". To record outputs, write "cmd args ->" and run
// go test -run Scripts -rewrite, then check what it wrote.
//
// Commands (a script starts with the policy of Config{Fixed: 10m}):
//
//	config [binwidth=D] [range=D] [keepalive-pct=F] [prewarm-pct=F] [margin=F]
//	       [min-samples=N] [cv=F] [max-oob=F] [fixed=D]
//	                     a new policy of Config{Fixed: 10m} with these fields
//	idle D [+STEP] [xN]  Observe N (default 1) idle times: D, D+STEP, ...
//	invoke T | end T     Invoked / Finished at clock time T: [dN/]15:04[:05[.000]]
//	                     (day N, default 0)
//	decide               Decide: mode=M prewarm=D keepalive=D
//	reason               Decide's Reason
//	counts               Decide's counts: observed=N oob=M
//	snapshot             Snapshot, in hex
//	restore HEX          Restore
//	roundtrip            Snapshot, Restore into a new policy of the same
//	                     config, check that it decides and snapshots the same,
//	                     and go on with it
func TestScripts(t *testing.T) {
	scripttest.Run(t, "testdata/*.txt", func(t *testing.T) scripttest.Step {
		s := &script{p: mustNew(t, Config{Fixed: 10 * time.Minute})}
		return func(cmd string) (string, error) { return s.run(strings.Fields(cmd)) }
	})
}

func mustNew(t testing.TB, cfg Config) *Policy {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

type script struct {
	p *Policy
}

// scriptDay is day 0 of invoke and end.
var scriptDay = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// run executes one step and returns what it prints.
func (s *script) run(args []string) (string, error) {
	cmd, args := args[0], args[1:]
	switch cmd {
	case "config":
		cfg := Config{Fixed: 10 * time.Minute}
		for _, a := range args {
			if err := setConfig(&cfg, a); err != nil {
				return "", err
			}
		}
		p, err := New(cfg)
		if err != nil {
			return "", err
		}
		s.p = p
		return "ok", nil
	case "idle":
		return s.idle(args)
	case "invoke", "end":
		if len(args) != 1 {
			return "", fmt.Errorf("%s takes a time", cmd)
		}
		at, err := parseClock(args[0])
		if err != nil {
			return "", err
		}
		if cmd == "invoke" {
			s.p.Invoked(at)
		} else {
			s.p.Finished(at)
		}
		return "ok", nil
	case "decide":
		return formatDecision(s.p.Decide()), nil
	case "reason":
		return s.p.Decide().Reason, nil
	case "counts":
		d := s.p.Decide()
		return fmt.Sprintf("observed=%d oob=%d", d.Observed, d.OutOfBounds), nil
	case "snapshot":
		return hex.EncodeToString(s.p.Snapshot()), nil
	case "restore":
		if len(args) != 1 {
			return "", fmt.Errorf("restore takes a hex snapshot")
		}
		b, err := hex.DecodeString(args[0])
		if err != nil {
			return "", err
		}
		if err := s.p.Restore(b); err != nil {
			return "", err
		}
		return "ok", nil
	case "roundtrip":
		snap := s.p.Snapshot()
		q, err := New(s.p.Config())
		if err != nil {
			return "", err
		}
		if err := q.Restore(snap); err != nil {
			return "", err
		}
		if got, want := q.Decide(), s.p.Decide(); got != want {
			return "", fmt.Errorf("restored policy decides %+v, the original %+v", got, want)
		}
		if got := q.Snapshot(); string(got) != string(snap) {
			return "", fmt.Errorf("restored policy snapshots %x, the original %x", got, snap)
		}
		s.p = q
		return "ok", nil
	}
	return "", fmt.Errorf("unknown command %q", cmd)
}

// idle runs "idle D [+STEP] [xN]".
func (s *script) idle(args []string) (string, error) {
	if len(args) == 0 {
		return "", fmt.Errorf("idle takes a duration")
	}
	d, err := time.ParseDuration(args[0])
	if err != nil {
		return "", err
	}
	var step time.Duration
	n := 1
	for _, a := range args[1:] {
		switch {
		case strings.HasPrefix(a, "+"):
			if step, err = time.ParseDuration(a[1:]); err != nil {
				return "", err
			}
		case strings.HasPrefix(a, "x"):
			if n, err = strconv.Atoi(a[1:]); err != nil {
				return "", err
			}
		default:
			return "", fmt.Errorf("unknown idle argument %q", a)
		}
	}
	for i := range n {
		s.p.Observe(d + time.Duration(i)*step)
	}
	return "ok", nil
}

func setConfig(cfg *Config, a string) error {
	k, v, ok := strings.Cut(a, "=")
	if !ok {
		return fmt.Errorf("config %q is not key=value", a)
	}
	var err error
	switch k {
	case "binwidth":
		cfg.BinWidth, err = time.ParseDuration(v)
	case "range":
		cfg.Range, err = time.ParseDuration(v)
	case "fixed":
		cfg.Fixed, err = time.ParseDuration(v)
	case "keepalive-pct":
		cfg.KeepAlivePercentile, err = strconv.ParseFloat(v, 64)
	case "prewarm-pct":
		cfg.PreWarmPercentile, err = strconv.ParseFloat(v, 64)
	case "margin":
		cfg.Margin, err = strconv.ParseFloat(v, 64)
	case "cv":
		cfg.CVThreshold, err = strconv.ParseFloat(v, 64)
	case "max-oob":
		cfg.MaxOutOfBounds, err = strconv.ParseFloat(v, 64)
	case "min-samples":
		cfg.MinSamples, err = strconv.Atoi(v)
	default:
		return fmt.Errorf("unknown config %q", a)
	}
	return err
}

// parseClock parses [dN/]15:04[:05[.000]] as a time on day N after
// scriptDay.
func parseClock(s string) (time.Time, error) {
	day := 0
	if d, rest, ok := strings.Cut(s, "/"); ok {
		n, err := strconv.Atoi(strings.TrimPrefix(d, "d"))
		if err != nil || !strings.HasPrefix(d, "d") {
			return time.Time{}, fmt.Errorf("bad day %q", d)
		}
		day, s = n, rest
	}
	for _, layout := range []string{"15:04", "15:04:05", "15:04:05.999999999"} {
		if t, err := time.Parse(layout, s); err == nil {
			clock := t.Sub(time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC))
			return scriptDay.AddDate(0, 0, day).Add(clock), nil
		}
	}
	return time.Time{}, fmt.Errorf("bad time %q", s)
}

func formatDecision(d Decision) string {
	return fmt.Sprintf("mode=%s prewarm=%s keepalive=%s", d.Mode, FormatDuration(d.PreWarm), FormatDuration(d.KeepAlive))
}
