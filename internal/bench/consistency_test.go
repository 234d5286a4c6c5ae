package bench

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/cachelet"
)

func TestMeanStddev(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		in       []time.Duration
		mean, sd time.Duration
	}{
		{nil, 0, 0},
		{[]time.Duration{5 * ms}, 5 * ms, 0},
		{[]time.Duration{2 * ms, 4 * ms}, 3 * ms, time.Duration(math.Round(math.Sqrt2 * float64(ms)))},
		// 2,4,4,4,5,5,7,9: mean 5, sample variance 32/7
		{[]time.Duration{2 * ms, 4 * ms, 4 * ms, 4 * ms, 5 * ms, 5 * ms, 7 * ms, 9 * ms}, 5 * ms, time.Duration(math.Round(math.Sqrt(32.0/7) * float64(ms)))},
	} {
		mean, sd := MeanStddev(c.in)
		if mean != c.mean || sd != c.sd {
			t.Errorf("MeanStddev(%v) = %v ± %v, want %v ± %v", c.in, mean, sd, c.mean, c.sd)
		}
	}
}

func TestDescribe(t *testing.T) {
	in := []time.Duration{9, 1, 5, 3, 7}
	m := Describe(in)
	if m.N != 5 || m.Mean != 5 || m.Min != 1 || m.Max != 9 || m.P50 != 5 || m.P99 != 9 {
		t.Errorf("Describe = %+v", m)
	}
	if in[0] != 9 {
		t.Error("Describe modified its input")
	}
	if (Describe(nil) != Moments{}) {
		t.Error("Describe(nil) is not zero")
	}
}

func TestPaperTable6CoversEverySetting(t *testing.T) {
	if len(paperTable6) != len(cachelet.Consistencies()) {
		t.Fatalf("%d paper rows for %d settings", len(paperTable6), len(cachelet.Consistencies()))
	}
	for _, c := range cachelet.Consistencies() {
		if _, ok := paperTable6[c.Name]; !ok {
			t.Errorf("no paper row for %s", c.Name)
		}
	}
	for _, s := range strongSettings {
		if paperTable6[s].Lost != 0 {
			t.Errorf("strong setting %s loses increments in the paper", s)
		}
	}
}

func consistencyReport() *ConsistencyReport {
	row := func(name string, mean time.Duration, lost int) ConsistencyRow {
		s, _ := cachelet.ParseConsistency(name)
		return ConsistencyRow{
			Setting: name, Target: string(s.Target), Mode: string(s.Mode), Read: string(s.Read),
			Strong:     name == "strong" || name == "owner",
			EndToEnd:   time.Duration(200) * mean,
			PerRequest: Moments{N: 200, Mean: mean, Stddev: mean / 4, P50: mean},
			Get:        Moments{N: 200, P50: mean / 4},
			Put:        Moments{N: 200, P50: mean / 2},
			Increments: 200, Final: 200 - lost, Lost: lost,
			Reads: map[string]int{"local_hit": 40, "remote_hit": 160},
		}
	}
	r := &ConsistencyReport{
		Benchmark: "consistency", Machine: Machine{NumCPU: 2, MemoryBytes: 4 << 30, GoVersion: "go1.26", Kernel: "6.1"},
		Method: ConsistencyMethod, Increments: 200, Cachelets: 5,
		Rows: []ConsistencyRow{
			row("strong", 20*time.Millisecond, 0),
			row("owner", time.Millisecond, 0),
			row("local", 500*time.Microsecond, 160),
		},
	}
	r.ComputeRatios()
	return r
}

func TestConsistencyRatios(t *testing.T) {
	r := consistencyReport()
	approx(t, "strong x strong", r.Row("strong").RatioToStrong, 1)
	approx(t, "owner x strong", r.Row("owner").RatioToStrong, 0.05)
	approx(t, "local x strong", r.Row("local").RatioToStrong, 0.025)
	approx(t, "paper owner x strong", r.Row("owner").PaperRatioToStrong, 41.6/80.0)
	approx(t, "paper local x strong", r.Row("local").PaperRatioToStrong, 30.3/80.0)
	if p := r.Row("owner").Paper; p == nil || p.EndToEndS != 42.6 {
		t.Errorf("owner's paper row %+v", p)
	}
	if r.Row("owner-async") != nil {
		t.Error("Row found a setting that was not run")
	}

	// Without a strong row there is nothing to divide by.
	r.Rows = r.Rows[1:]
	r.ComputeRatios()
	if r.Row("owner").RatioToStrong != nil {
		t.Error("ratio to strong without a strong row")
	}
	if r.Row("owner").PaperRatioToStrong == nil {
		t.Error("the paper's ratio needs no strong row of ours")
	}
}

func TestStrongLosses(t *testing.T) {
	r := consistencyReport()
	if l := r.StrongLosses(); len(l) != 0 {
		t.Fatalf("StrongLosses = %v with no strong losses (weak ones don't count)", l)
	}
	r.Rows[1].Lost, r.Rows[1].Final = 2, 198
	l := r.StrongLosses()
	if len(l) != 1 || l[0] != "owner lost 2 of 200 increments" {
		t.Fatalf("StrongLosses = %v", l)
	}
	var b strings.Builder
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "FAIL: a strongly consistent setting lost increments: owner lost 2 of 200 increments") {
		t.Errorf("table does not say it failed:\n%s", b.String())
	}
}

func TestConsistencyWriteTable(t *testing.T) {
	var b strings.Builder
	if err := consistencyReport().WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"5 cachelets, 200 increments per setting, back to back",
		"the paper counted to 1000; this run to 200, so its lost counts scale by 0.20",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	fields := func(prefix string) []string {
		for l := range strings.SplitSeq(out, "\n") {
			if strings.HasPrefix(l, prefix+" ") {
				return strings.Fields(l)
			}
		}
		t.Fatalf("no line for %s:\n%s", prefix, out)
		return nil
	}
	// setting write read e2e mean ± sd p50 lost x | paper...
	want := "strong store/sync version-check 4.00 20.0 ± 5.0 20.0 0 1.00x | 74.4 ± 0.2 80.0 ± 29.5 0 ± 0 1.00x"
	if got := strings.Join(fields("strong")[:21], " "); got != want {
		t.Errorf("strong row\n got %s\nwant %s", got, want)
	}
	want = "local local/sync local 0.10 0.5 ± 0.1 0.5 160 0.03x | 31.1 ± 0.3 30.3 ± 13.1 800 ± 0 0.38x"
	if got := strings.Join(fields("local")[:21], " "); got != want {
		t.Errorf("local row\n got %s\nwant %s", got, want)
	}
	if strings.Contains(out, "FAIL") {
		t.Errorf("a clean run says FAIL:\n%s", out)
	}

	var quick strings.Builder
	r := consistencyReport()
	r.Increments, r.GapNS = DefaultIncrements, 30*time.Millisecond
	if err := r.WriteTable(&quick); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(quick.String(), "scale by") || !strings.Contains(quick.String(), "30.00ms pause after each") {
		t.Errorf("a 1000-increment run with a gap:\n%s", quick.String())
	}
}

func TestFmtReads(t *testing.T) {
	got := fmtReads(map[string]int{"remote_hit": 3, "local_hit": 7, "": 1, "weird": 2, "pass_through": 0})
	if want := "local_hit 7, remote_hit 3, (none) 1, weird 2"; got != want {
		t.Errorf("fmtReads = %q, want %q", got, want)
	}
	if fmtReads(nil) != "-" {
		t.Error("fmtReads(nil)")
	}
}

func TestConsistencyJSON(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.json")
	if err := consistencyReport().WriteJSONFile(path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var back ConsistencyReport
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Rows) != 3 || back.Row("strong").PerRequest.Mean != 20*time.Millisecond || back.Row("local").Lost != 160 ||
		back.Row("owner").Paper == nil || back.Row("owner").RatioToStrong == nil {
		t.Errorf("round trip: %+v", back)
	}
}
