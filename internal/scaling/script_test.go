package scaling

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/bytesize"
	"github.com/hoard-io/hoard/internal/scripttest"
)

// TestScripts runs the scaling scripts in testdata/*.txt. Each line is one
// step, "command args", optionally followed by "-> expected output"; blank
// lines and lines starting with '#' are kept as they are. A step with an
// expectation must print exactly that; one without must succeed. A failed
// step prints "error: ...". To record outputs, write "cmd args ->" and run
// go test -run Scripts -rewrite, then check them by hand.
//
// Sizes are bytesize's ("800MB" is 800e6 bytes, "16MiB" 16<<20),
// bandwidths sizes per second ("90MB/s"), durations Go's ("2s").
// Commands:
//
//	config [k=v...]   the Config of later steps, from defaults: queued=,
//	                  util=, rare=, minsize=, gain=, window=, minsample=;
//	                  also makes new estimators
//	votes current=N [min=N] [max=N] [busy=true] : VOTE...
//	                  Combine; a VOTE is policy, signed delta and "!" if
//	                  urgent: compute+2, cache0, cache-1, bandwidth+3!;
//	                  max is 10 unless given
//	compute instances= busy= queued= p50= target= rate=
//	                  ComputeVote (absent fields are 0)
//	cache evicted= accesses= window=
//	                  CacheVote
//	bandwidth S= current= max= [load=] [store=] [peer=]
//	                  PlanBandwidth; an absent measurement is not measured
//	times S= current= max= load= store= peer=
//	                  T(n) for n = 1..max
//	ranges size= n=   Ranges, as off+len...
//	sample store|peer BYTES DURATION, sample load DURATION
//	                  add a sample to an estimator: whether it was kept
//	estimate store|peer|load
//	                  the estimate and its sample count, or unknown
//	plan S= current= max=
//	                  PlanBandwidth with Measure of the estimators
func TestScripts(t *testing.T) {
	scripttest.Run(t, "testdata/*.txt", func(t *testing.T) scripttest.Step {
		s := newScript()
		return func(cmd string) (string, error) { return s.run(cmd) }
	})
}

type script struct {
	cfg         Config
	store, peer *Estimator
	load        *LoadEstimator
}

func newScript() *script {
	s := &script{}
	s.reset()
	return s
}

func (s *script) reset() {
	s.store, s.peer, s.load = NewEstimator(s.cfg), NewEstimator(s.cfg), NewLoadEstimator(s.cfg)
}

// run executes one step and returns what it prints.
func (s *script) run(line string) (string, error) {
	cmd, rest, _ := strings.Cut(line, " ")
	switch cmd {
	case "config":
		var cfg Config
		a, err := parseArgs(rest)
		if err != nil {
			return "", err
		}
		for _, k := range slices.Sorted(maps.Keys(a.m)) {
			switch k {
			case "queued":
				cfg.QueuedPerInstance = a.int(k)
			case "util":
				cfg.ScaleInUtilisation = a.float(k)
			case "rare":
				cfg.RareAccessRate = a.float(k)
			case "minsize":
				cfg.MinObjectSize = a.size(k)
			case "gain":
				cfg.MinGain = a.float(k)
			case "window":
				cfg.EstimatorWindow = a.int(k)
			case "minsample":
				cfg.MinSampleBytes = a.size(k)
			default:
				return "", fmt.Errorf("unknown config %q", k)
			}
		}
		if a.err != nil {
			return "", a.err
		}
		if err := cfg.Validate(); err != nil {
			return "", err
		}
		s.cfg = cfg
		s.reset()
		return "ok", nil
	case "votes":
		limits, votes, ok := strings.Cut(rest, ":")
		if !ok {
			return "", errors.New("votes: want limits : votes")
		}
		a, err := parseArgs(limits)
		if err != nil {
			return "", err
		}
		l := Limits{Min: a.int("min"), Max: 10, Busy: a.bool("busy")}
		if a.has("max") {
			l.Max = a.int("max")
		}
		current := a.int("current")
		if err := a.done("current", "min", "max", "busy"); err != nil {
			return "", err
		}
		var vs []Vote
		for _, f := range strings.Fields(votes) {
			v, err := parseVote(f)
			if err != nil {
				return "", err
			}
			vs = append(vs, v)
		}
		return Combine(current, vs, l).String(), nil
	case "compute":
		a, err := parseArgs(rest)
		if err != nil {
			return "", err
		}
		st := ComputeStats{
			Instances: a.int("instances"), Busy: a.int("busy"), Queued: a.int("queued"),
			P50: a.dur("p50"), Target: a.dur("target"), RequestRate: a.float("rate"),
		}
		if err := a.done("instances", "busy", "queued", "p50", "target", "rate"); err != nil {
			return "", err
		}
		return ComputeVote(st, s.cfg).String(), nil
	case "cache":
		a, err := parseArgs(rest)
		if err != nil {
			return "", err
		}
		st := CacheStats{EvictedMoreThanOnce: a.int("evicted"), Accesses: a.int("accesses"), Window: a.dur("window")}
		if err := a.done("evicted", "accesses", "window"); err != nil {
			return "", err
		}
		return CacheVote(st, s.cfg).String(), nil
	case "bandwidth", "times", "plan":
		a, err := parseArgs(rest)
		if err != nil {
			return "", err
		}
		size, current, maxN := a.size("S"), a.int("current"), a.int("max")
		m := Measurements{LoadTime: -1}
		if cmd == "plan" {
			m = Measure(s.load, s.store, s.peer)
		} else {
			if a.has("load") {
				m.LoadTime = a.dur("load")
			}
			m.StoreBW, m.PeerBW = a.bw("store"), a.bw("peer")
		}
		if err := a.done("S", "current", "max", "load", "store", "peer"); err != nil {
			return "", err
		}
		if cmd == "times" {
			var out []string
			for n := 1; n <= maxN; n++ {
				out = append(out, fmt.Sprintf("%d:%v", n, round(TransferTime(size, n, current, m))))
			}
			return strings.Join(out, " "), nil
		}
		p, err := PlanBandwidth(size, current, maxN, m, s.cfg)
		if err != nil {
			return "", err
		}
		return p.String(), nil
	case "ranges":
		a, err := parseArgs(rest)
		if err != nil {
			return "", err
		}
		size, n := a.size("size"), a.int("n")
		if err := a.done("size", "n"); err != nil {
			return "", err
		}
		var out []string
		for _, r := range Ranges(size, n) {
			out = append(out, fmt.Sprintf("%d+%d", r.Off, r.Len))
		}
		if out == nil {
			return "none", nil
		}
		return strings.Join(out, " "), nil
	case "sample":
		f := strings.Fields(rest)
		switch {
		case len(f) == 2 && f[0] == "load":
			d, err := time.ParseDuration(f[1])
			if err != nil {
				return "", err
			}
			return strconv.FormatBool(s.load.Add(d)), nil
		case len(f) == 3 && (f[0] == "store" || f[0] == "peer"):
			n, err := bytesize.Parse(f[1])
			if err != nil {
				return "", err
			}
			d, err := time.ParseDuration(f[2])
			if err != nil {
				return "", err
			}
			return strconv.FormatBool(s.estimator(f[0]).Add(n, d)), nil
		}
		return "", errors.New("sample: want store|peer BYTES DURATION or load DURATION")
	case "estimate":
		switch rest {
		case "load":
			d, ok := s.load.LoadTime()
			if !ok {
				return "unknown", nil
			}
			return fmt.Sprintf("%v (%d samples)", round(d), s.load.Len()), nil
		case "store", "peer":
			e := s.estimator(rest)
			bw, ok := e.Bandwidth()
			if !ok {
				return "unknown", nil
			}
			return fmt.Sprintf("%.4gMB/s (%d samples)", bw/1e6, e.Len()), nil
		}
		return "", errors.New("estimate: want store, peer or load")
	}
	return "", fmt.Errorf("unknown command %q", cmd)
}

func (s *script) estimator(name string) *Estimator {
	if name == "store" {
		return s.store
	}
	return s.peer
}

// parseVote reads "policy", a signed delta and an optional "!".
func parseVote(f string) (Vote, error) {
	v := Vote{}
	f, v.Urgent = strings.CutSuffix(f, "!")
	i := strings.IndexAny(f, "+-0123456789")
	if i <= 0 {
		return v, fmt.Errorf("vote %q: want policy and delta, e.g. compute+1", f)
	}
	d, err := strconv.Atoi(f[i:])
	if err != nil {
		return v, fmt.Errorf("vote %q: %v", f, err)
	}
	v.Policy, v.Delta = f[:i], d
	return v, nil
}

// args are key=value arguments; the accessors note the first bad value.
type args struct {
	m   map[string]string
	err error
}

func parseArgs(s string) (*args, error) {
	a := &args{m: map[string]string{}}
	for _, f := range strings.Fields(s) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return nil, fmt.Errorf("argument %q is not key=value", f)
		}
		a.m[k] = v
	}
	return a, nil
}

func (a *args) has(k string) bool { _, ok := a.m[k]; return ok }

func (a *args) fail(k string, err error) {
	if a.err == nil {
		a.err = fmt.Errorf("%s=%s: %v", k, a.m[k], err)
	}
}

func (a *args) int(k string) int {
	if !a.has(k) {
		return 0
	}
	n, err := strconv.Atoi(a.m[k])
	if err != nil {
		a.fail(k, err)
	}
	return n
}

func (a *args) float(k string) float64 {
	if !a.has(k) {
		return 0
	}
	f, err := strconv.ParseFloat(a.m[k], 64)
	if err != nil {
		a.fail(k, err)
	}
	return f
}

func (a *args) bool(k string) bool {
	if !a.has(k) {
		return false
	}
	b, err := strconv.ParseBool(a.m[k])
	if err != nil {
		a.fail(k, err)
	}
	return b
}

func (a *args) dur(k string) time.Duration {
	if !a.has(k) {
		return 0
	}
	d, err := time.ParseDuration(a.m[k])
	if err != nil {
		a.fail(k, err)
	}
	return d
}

func (a *args) size(k string) int64 {
	if !a.has(k) {
		return 0
	}
	n, err := bytesize.Parse(a.m[k])
	if err != nil {
		a.fail(k, err)
	}
	return n
}

// bw reads a bandwidth such as "90MB/s" as bytes per second.
func (a *args) bw(k string) float64 {
	if !a.has(k) {
		return 0
	}
	v, ok := strings.CutSuffix(a.m[k], "/s")
	if !ok {
		a.fail(k, errors.New("want a size per second, e.g. 90MB/s"))
		return 0
	}
	n, err := bytesize.Parse(v)
	if err != nil {
		a.fail(k, err)
	}
	return float64(n)
}

// done returns the first bad value, or an error naming a key not in known.
func (a *args) done(known ...string) error {
	if a.err != nil {
		return a.err
	}
	for _, k := range slices.Sorted(maps.Keys(a.m)) {
		if !slices.Contains(known, k) {
			return fmt.Errorf("unknown argument %q", k)
		}
	}
	return nil
}
