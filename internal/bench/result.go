package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"time"
)

// ResultSchema is the version of the results.json layout; it changes
// when a field changes meaning or disappears (adding one does not).
const ResultSchema = 1

// Result statuses.
const (
	StatusOK     = "ok"
	StatusFailed = "failed"
)

// Plot kinds.
const (
	PlotCDF   = "cdf"   // Series[i].Samples: one empirical CDF per series
	PlotBar   = "bar"   // Categories on x; Series[i].Values (and Errors) per category
	PlotCurve = "curve" // Series[i].X and Series[i].Y
)

// Which way a comparison's figure improves (Comparison.Better).
const (
	HigherIsBetter = "higher"
	LowerIsBetter  = "lower"
)

// Result is what one experiment of `hoard bench all` hands to the report:
// what it reproduces, how it ran, the paper's figures next to hoard's,
// the data of its plots, and the workload the cost model prices.
// Every experiment returns one, and a failed experiment is a Result too
// (Status "failed", Error set), so the report can say what did not run.
type Result struct {
	Experiment string      `json:"experiment"`
	Title      string      `json:"title"`
	Reproduces []Reference `json:"reproduces"`
	Status     string      `json:"status"`
	Error      string      `json:"error,omitempty"`
	Quick      bool        `json:"quick"`
	StartedAt  time.Time   `json:"started_at"`
	Seconds    float64     `json:"duration_s"`
	Machine    Machine     `json:"machine"`
	// Method says in a few sentences what was measured and how.
	Method    string         `json:"method,omitempty"`
	Settings  RunSettings    `json:"settings"`
	Rows      []Comparison   `json:"rows"`
	Plots     []Plot         `json:"plots"`
	Workloads []CostWorkload `json:"workloads,omitempty"`
	Notes     []string       `json:"notes,omitempty"`
	// Tables hold an experiment's own figures where a paper gives none to
	// set beside them (per-stage timings, say); the report shows them as
	// they are.
	Tables []Table `json:"tables,omitempty"`
}

// Table is a table of figures as the experiment formatted them.
type Table struct {
	ID      string     `json:"id"` // unique within the experiment; [a-z0-9-]
	Title   string     `json:"title"`
	Columns []string   `json:"columns"`
	Rows    [][]string `json:"rows"` // each with one cell per column
	// Caption is a sentence under the table.
	Caption string `json:"caption,omitempty"`
}

// Reference names a paper's figure or table that an experiment reproduces.
type Reference struct {
	Paper  string `json:"paper"`  // short name: "Faa$T", "OFC"
	Figure string `json:"figure"` // "Fig. 9", "Table 6"
	// Section of the paper the figure is discussed in: "§6.3".
	Section string `json:"section,omitempty"`
	// Citation is the full reference.
	Citation string `json:"citation,omitempty"`
}

// The papers the experiments cite.
const (
	CiteFaasT     = "F. Romero, G. I. Chaudhry, Í. Goiri, P. Gopa, P. Batum, N. J. Yadwadkar, R. Fonseca, C. Kozyrakis, R. Bianchini: Faa$T: A Transparent Auto-Scaling Cache for Serverless Applications. ACM SoCC 2021"
	CiteOFC       = "D. Mvondo, M. Bacou, K. Nguetchouang, L. Ngale, S. Pouget, J. Kouam, R. Lachaize, J. Hwang, T. Wood, D. Hagimont, N. De Palma, B. Batchakui, A. Tchana: OFC: An Opportunistic Caching System for FaaS Platforms. EuroSys 2021"
	CiteShahrad   = "M. Shahrad, R. Fonseca, Í. Goiri, G. Chaudhry, P. Batum, J. Cooke, E. Laureano, C. Tresness, M. Russinovich, R. Bianchini: Serverless in the Wild: Characterizing and Optimizing the Serverless Workload at a Large Cloud Provider. USENIX ATC 2020"
	CiteCacheFlow = "Y.-S. Ke, Z.-W. Wu, C.-T. Tsai, S.-H. Lin, J. Chou: CacheFlow: Enhancing Data Flow Efficiency in Serverless Computing by Local Caching. CLOSER 2024, pp. 224-230"
)

// RunSettings records how an experiment was configured.
type RunSettings struct {
	// ObjectSizes in bytes, where the experiment reads objects.
	ObjectSizes []int64 `json:"object_sizes,omitempty"`
	// Link is the network between the store and the rest: a netshape
	// preset name, or "loopback (unshaped)".
	Link string `json:"link"`
	// Iterations are the timed repetitions, per size or per setting.
	Iterations []Count `json:"iterations,omitempty"`
	// Other settings, as name and value, in the order they are shown.
	Other []Setting `json:"other,omitempty"`
}

// Count is how many times something was repeated.
type Count struct {
	What string `json:"what"`
	N    int    `json:"n"`
}

// Setting is one named setting of a run.
type Setting struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// LinkLoopback is RunSettings.Link when the store is reached on loopback
// without shaping.
const LinkLoopback = "loopback (unshaped)"

// Comparison is one figure of a paper set next to hoard's.
type Comparison struct {
	// Metric says what is compared: "RH/LH p50 at 1 KiB".
	Metric string `json:"metric"`
	// Unit of Paper and Hoard: "x", "ms", "increments".
	Unit string `json:"unit"`
	// Paper is the paper's figure; nil where the paper gives none.
	Paper *float64 `json:"paper"`
	// Source says where the paper's figure is: "OFC §7.2.1, Fig. 7
	// (text)", or "read off Faa$T Fig. 9a, approx." for a figure only
	// plotted.
	Source string `json:"source"`
	// Hoard is hoard's figure; nil when it was not measured.
	Hoard *float64 `json:"hoard"`
	// Ratio is Hoard / Paper; nil when either is missing or Paper is 0.
	Ratio *float64 `json:"ratio"`
	// Better is HigherIsBetter or LowerIsBetter (or empty: neither).
	Better string `json:"better,omitempty"`
	// Short is true when hoard's figure is worse than the paper's.
	Short bool `json:"short"`
	// Note says, in a sentence, what differs from the paper's setting
	// and, where hoard falls short, why.
	Note string `json:"note,omitempty"`
}

// Compare builds a Comparison and computes its Ratio and Short. tol is the
// slack allowed before hoard counts as short (0.05: 5% worse is still
// level).
func Compare(metric, unit string, paper, hoard *float64, better string, tol float64, source, note string) Comparison {
	c := Comparison{Metric: metric, Unit: unit, Paper: paper, Hoard: hoard, Better: better, Source: source, Note: note}
	if paper != nil && hoard != nil {
		if *paper != 0 {
			c.Ratio = F(*hoard / *paper)
		}
		switch better {
		case HigherIsBetter:
			c.Short = *hoard < *paper*(1-tol)
		case LowerIsBetter:
			c.Short = *hoard > *paper*(1+tol)
		}
	}
	return c
}

// F returns a pointer to v, or nil when v is NaN or infinite (which JSON
// cannot carry).
func F(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

// Plot is the data of one chart; the report draws it.
type Plot struct {
	Kind  string `json:"kind"` // PlotCDF, PlotBar or PlotCurve
	ID    string `json:"id"`   // unique within the experiment; [a-z0-9-]
	Title string `json:"title"`
	// Unit of the samples (cdf) or values (bar), or of Y (curve).
	Unit   string `json:"unit,omitempty"`
	XLabel string `json:"xlabel,omitempty"`
	YLabel string `json:"ylabel,omitempty"`
	XLog   bool   `json:"xlog,omitempty"`
	YLog   bool   `json:"ylog,omitempty"`
	// Categories of a bar chart, on its x axis.
	Categories []string `json:"categories,omitempty"`
	Series     []Series `json:"series"`
	// Caption is a sentence under the chart.
	Caption string `json:"caption,omitempty"`
}

// Series is one line, set of bars or distribution of a Plot.
type Series struct {
	Label string `json:"label"`
	// Samples of a CDF, ascending; at most maxCDFPoints of the N
	// measured (evenly spaced quantiles when there were more).
	Samples []float64 `json:"samples,omitempty"`
	N       int       `json:"n,omitempty"`
	// X and Y of a curve.
	X []float64 `json:"x,omitempty"`
	Y []float64 `json:"y,omitempty"`
	// Values of a bar chart, one per category (null: not measured), and
	// optional error bars (a standard deviation, say).
	Values []*float64 `json:"values,omitempty"`
	Errors []*float64 `json:"errors,omitempty"`
}

// maxCDFPoints bounds the samples a CDF series carries into results.json.
const maxCDFPoints = 1000

// CDFSeries makes a CDF series of samples, converted to unit (a duration
// per unit: time.Millisecond for "ms"); more than maxCDFPoints samples
// are thinned to evenly spaced quantiles, which keeps the curve's shape.
func CDFSeries(label string, samplesNS []int64, unit time.Duration) Series {
	sorted := slices.Clone(samplesNS)
	slices.Sort(sorted)
	s := Series{Label: label, N: len(sorted)}
	pick := func(i int) float64 { return float64(sorted[i]) / float64(unit) }
	if len(sorted) <= maxCDFPoints {
		for i := range sorted {
			s.Samples = append(s.Samples, pick(i))
		}
		return s
	}
	for i := range maxCDFPoints {
		j := int(math.Round(float64(i) * float64(len(sorted)-1) / float64(maxCDFPoints-1)))
		s.Samples = append(s.Samples, pick(j))
	}
	return s
}

// CostWorkload is one invocation of an experiment's application, as the
// cost model (python/hoard_bench/cost.py) prices it: how long it runs with
// its data in the instance's cache and without, how much memory it takes,
// and how many store requests it makes.
type CostWorkload struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// WarmSeconds is one invocation's duration when the instance is loaded
	// and its cache holds the data (a local hit).
	WarmSeconds float64 `json:"warm_s"`
	// ColdSeconds is one invocation's duration when the data comes from
	// the store (a local miss: the instance was unloaded after its
	// keep-alive). Instance start-up is not in it.
	ColdSeconds float64 `json:"cold_s"`
	// MemoryBytes is the function's own memory, without the cache.
	MemoryBytes int64 `json:"memory_bytes"`
	// CacheBytes is what the instance's cache holds for it.
	CacheBytes int64 `json:"cache_bytes"`
	// Store requests per invocation, warm and cold.
	StoreGetsWarm float64 `json:"store_gets_warm"`
	StoreGetsCold float64 `json:"store_gets_cold"`
	StorePuts     float64 `json:"store_puts"`
	// KeepAliveSeconds is how long an idle instance (and its cache) stays
	// loaded after an invocation.
	KeepAliveSeconds float64 `json:"keep_alive_s"`
	// Source says which measurement each figure comes from.
	Source string `json:"source,omitempty"`
}

// DefaultFunctionMemory is the memory a workload's function is given
// without its cache: the smallest Lambda size.
const DefaultFunctionMemory = 128 << 20

// Results is the whole results.json of one `hoard bench all`.
type Results struct {
	Schema      int       `json:"schema"`
	Command     string    `json:"command"`
	Quick       bool      `json:"quick"`
	StartedAt   time.Time `json:"started_at"`
	Seconds     float64   `json:"duration_s"`
	Machine     Machine   `json:"machine"`
	Experiments []Result  `json:"experiments"`
}

// Failed lists the experiments that failed.
func (r *Results) Failed() []string {
	var out []string
	for _, e := range r.Experiments {
		if e.Status != StatusOK {
			out = append(out, e.Experiment)
		}
	}
	return out
}

// WriteJSON writes the results, indented.
func (r *Results) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	return enc.Encode(r)
}

// WriteJSONFile writes the results to path.
func (r *Results) WriteJSONFile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := r.WriteJSON(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// ReadResults reads a results.json and checks its schema.
func ReadResults(r io.Reader) (*Results, error) {
	var out Results
	if err := json.NewDecoder(r).Decode(&out); err != nil {
		return nil, fmt.Errorf("bench: results: %w", err)
	}
	if out.Schema != ResultSchema {
		return nil, fmt.Errorf("bench: results schema %d, want %d", out.Schema, ResultSchema)
	}
	return &out, nil
}

// Validate checks what the report relies on: names, statuses, plot kinds
// and ids, and series that match their plot.
func (r *Result) Validate() error {
	if r.Experiment == "" {
		return fmt.Errorf("bench: result without an experiment name")
	}
	switch r.Status {
	case StatusOK:
	case StatusFailed:
		if r.Error == "" {
			return fmt.Errorf("bench: %s: failed without an error", r.Experiment)
		}
	default:
		return fmt.Errorf("bench: %s: unknown status %q", r.Experiment, r.Status)
	}
	ids := map[string]bool{}
	for _, p := range r.Plots {
		if !validID(p.ID) {
			return fmt.Errorf("bench: %s: plot id %q: want [a-z0-9-]+", r.Experiment, p.ID)
		}
		if ids[p.ID] {
			return fmt.Errorf("bench: %s: plot id %q twice", r.Experiment, p.ID)
		}
		ids[p.ID] = true
		for _, s := range p.Series {
			var ok bool
			switch p.Kind {
			case PlotCDF:
				ok = len(s.Samples) > 0
			case PlotBar:
				ok = len(s.Values) == len(p.Categories) && (s.Errors == nil || len(s.Errors) == len(p.Categories))
			case PlotCurve:
				ok = len(s.X) == len(s.Y) && len(s.X) > 0
			default:
				return fmt.Errorf("bench: %s: plot %s: unknown kind %q", r.Experiment, p.ID, p.Kind)
			}
			if !ok {
				return fmt.Errorf("bench: %s: plot %s: series %q does not fit a %s plot", r.Experiment, p.ID, s.Label, p.Kind)
			}
		}
	}
	tables := map[string]bool{}
	for _, t := range r.Tables {
		if !validID(t.ID) {
			return fmt.Errorf("bench: %s: table id %q: want [a-z0-9-]+", r.Experiment, t.ID)
		}
		if tables[t.ID] {
			return fmt.Errorf("bench: %s: table id %q twice", r.Experiment, t.ID)
		}
		tables[t.ID] = true
		if len(t.Columns) == 0 {
			return fmt.Errorf("bench: %s: table %s has no columns", r.Experiment, t.ID)
		}
		for i, row := range t.Rows {
			if len(row) != len(t.Columns) {
				return fmt.Errorf("bench: %s: table %s: row %d has %d cells for %d columns", r.Experiment, t.ID, i, len(row), len(t.Columns))
			}
		}
	}
	return nil
}

func validID(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}
