//go:build integration

package rig

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/appspec"
	"github.com/hoard-io/hoard/internal/netshape"
)

// noopFns is a function that does nothing, for BenchmarkJail.
const noopFns = `
def noop(event, context):
    return "ok"
`

// deployCode deploys spec with fns as fns.py.
func (e *env) deployCode(t testing.TB, spec, fns string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, appspec.FileName), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "fns.py"), []byte(fns), 0o644); err != nil {
		t.Fatal(err)
	}
	pkg, err := appspec.Pack(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.p.Controller.Deploy(context.Background(), pkg.Data); err != nil {
		t.Fatal(err)
	}
}

func hostPort(t *testing.T, u string) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	return p.Host
}

func mustHostname(t *testing.T) string {
	h, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

const benchSpec = `
name: bench
memory: 128MiB
timeout: 20s
keep_alive: 1h
max_instances: 1
cache: {budget: 16MiB}
functions:
  noop: {handler: fns.noop}
`

// BenchmarkJail measures what jails cost, with functions unjailed and
// jailed on one host in one run: an instance's cold start (the agent's
// load time: code, sandbox, jail, cachelet, worker ready) and a warm
// invocation of a function that does nothing (through the controller and
// the agent, as a client sees it). Each iteration deploys a new version
// (one cold start) and invokes it warm 20 times; the metrics are medians.
// It logs the ratios (-v shows them).
//
//	go test -tags integration -run '^$' -bench Jail -benchtime 20x -v ./internal/rig
func BenchmarkJail(b *testing.B) {
	const warm = 20
	var got [2]struct{ cold, warm time.Duration }
	for i, mode := range []string{"unjailed", "jailed"} {
		b.Run(mode, func(b *testing.B) {
			e := startShaped(b, netshape.Link{}, func(c *Config) { c.Unjailed = mode == "unjailed" })
			c := e.p.Controller
			ctx := context.Background()
			var cold, hot []time.Duration
			b.ResetTimer()
			for n := range b.N {
				e.deployCode(b, benchSpec, fmt.Sprintf("# version %d\n%s", n, noopFns))
				rec, err := c.Invoke(ctx, "bench", "noop", []byte("{}"), "bench")
				if err != nil || !rec.OK {
					b.Fatalf("cold invocation: %v %+v", err, rec)
				}
				for _, in := range e.p.Agent.Instances() {
					if in.ID == rec.Instance {
						cold = append(cold, time.Duration(in.StartMillis*float64(time.Millisecond)))
					}
				}
				for range warm {
					start := time.Now()
					rec, err := c.Invoke(ctx, "bench", "noop", []byte("{}"), "bench")
					if err != nil || !rec.OK {
						b.Fatalf("warm invocation: %v %+v", err, rec)
					}
					hot = append(hot, time.Since(start))
				}
			}
			got[i].cold, got[i].warm = median(cold), median(hot)
			b.ReportMetric(float64(got[i].cold.Microseconds())/1e3, "cold-start-ms")
			b.ReportMetric(float64(got[i].warm.Microseconds())/1e3, "invoke-ms")
		})
	}
	if got[0].cold > 0 && got[1].cold > 0 {
		b.Logf("cold start: unjailed %v, jailed %v (x%.2f); warm invocation: unjailed %v, jailed %v (x%.2f)",
			got[0].cold.Round(time.Microsecond), got[1].cold.Round(time.Microsecond), float64(got[1].cold)/float64(got[0].cold),
			got[0].warm.Round(time.Microsecond), got[1].warm.Round(time.Microsecond), float64(got[1].warm)/float64(got[0].warm))
	}
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	d = slices.Clone(d)
	slices.Sort(d)
	return d[len(d)/2]
}
