package predict

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
)

// Config is how a Trainer learns and when it trusts its model. The zero
// value of each field takes the default beside it (OFC's where it has one).
type Config struct {
	// Interval: 16 MiB classes in [0, 2 GiB].
	Interval Interval
	// MinInvocations observed before a model may be mature: 100.
	MinInvocations int
	// MinExactOrOver: the share of held-out invocations predicted in
	// their interval or above: 0.9.
	MinExactOrOver float64
	// MinUnderWithinOne: the share of held-out under-predictions one
	// interval short: 0.5.
	MinUnderWithinOne float64
	// HoldOut: the share of the most recent samples the maturity check
	// predicts with a tree grown on the older ones: 0.2 (at least 10).
	HoldOut float64
	// MaxSamples: the training set keeps the most recent this many: 1000.
	MaxSamples int
	// UnderWeight: the weight of an invocation the live model
	// under-predicted, against 1 for the others: 4.
	UnderWeight float64
	// RetrainEvery: retrain after this many new invocations (and at once
	// after an under-prediction): 20.
	RetrainEvery int
	// MaxDepth of the tree: 24. MinLeaf: the fewest samples on each side
	// of a split: 3 (fewer overfits noisy peaks; more needs more invocations to split on, `hoard bench all --only prediction`).
	MaxDepth, MinLeaf int
}

// Validate fills the defaults and checks the values.
func (c *Config) Validate() error {
	if c.Interval == (Interval{}) {
		c.Interval = DefaultInterval
	}
	if err := c.Interval.Validate(); err != nil {
		return err
	}
	def := func(p *int, d int) {
		if *p == 0 {
			*p = d
		}
	}
	deff := func(p *float64, d float64) {
		if *p == 0 {
			*p = d
		}
	}
	def(&c.MinInvocations, 100)
	deff(&c.MinExactOrOver, 0.9)
	deff(&c.MinUnderWithinOne, 0.5)
	deff(&c.HoldOut, 0.2)
	def(&c.MaxSamples, 1000)
	deff(&c.UnderWeight, 4)
	def(&c.RetrainEvery, 20)
	def(&c.MaxDepth, 24)
	def(&c.MinLeaf, 3)
	switch {
	case c.MinInvocations < 1:
		return fmt.Errorf("predict: min invocations %d, want at least 1", c.MinInvocations)
	case c.MinExactOrOver < 0 || c.MinExactOrOver > 1, c.MinUnderWithinOne < 0 || c.MinUnderWithinOne > 1:
		return fmt.Errorf("predict: maturity shares %v and %v, want them in [0, 1]", c.MinExactOrOver, c.MinUnderWithinOne)
	case c.HoldOut <= 0 || c.HoldOut >= 1:
		return fmt.Errorf("predict: hold-out share %v, want it in (0, 1)", c.HoldOut)
	case c.MaxSamples < 10 || c.MaxSamples > MaxSamples:
		return fmt.Errorf("predict: max samples %d, want 10 to %d", c.MaxSamples, MaxSamples)
	case c.UnderWeight < 1 || c.UnderWeight > 100:
		return fmt.Errorf("predict: under-prediction weight %v, want 1 to 100", c.UnderWeight)
	case c.RetrainEvery < 1, c.MaxDepth < 1 || c.MaxDepth > 64, c.MinLeaf < 1:
		return fmt.Errorf("predict: retrain every %d, depth %d, leaf %d: want positive (depth at most 64)", c.RetrainEvery, c.MaxDepth, c.MinLeaf)
	}
	return nil
}

// MaxSamples is the hard bound on a training set, whatever Config says.
const MaxSamples = 10000

// Sample is one observed invocation: its features and the peak memory it
// used, as the interval class, and its weight in training.
type Sample struct {
	Features Features `json:"-"`
	Class    int      `json:"c"`
	Weight   float64  `json:"w"`
}

// Trainer is one function's training set and its retraining schedule.
// It is not safe for concurrent use: its owner holds a lock around it.
type Trainer struct {
	cfg      Config
	samples  []Sample // oldest first, at most cfg.MaxSamples
	observed int      // invocations ever observed
	since    int      // observed since the last training
	urgent   bool     // an under-prediction since the last training
}

// NewTrainer makes an empty trainer; cfg is validated.
func NewTrainer(cfg Config) (*Trainer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Trainer{cfg: cfg}, nil
}

// Config is the trainer's configuration, defaults filled.
func (t *Trainer) Config() Config { return t.cfg }

// Observed is how many invocations the trainer has seen.
func (t *Trainer) Observed() int { return t.observed }

// Samples is the size of the training set.
func (t *Trainer) Samples() int { return len(t.samples) }

// Observe records one invocation: its features, the peak memory it used
// and, when a mature model placed it, the class that model predicted
// (predicted < 0 when none did). An under-predicted invocation weighs
// UnderWeight in training (OFC §5.3.3). It returns whether a retraining
// is due: RetrainEvery invocations since the last, or an
// under-prediction. Features are normalised; a bad one is an error and
// nothing is recorded.
func (t *Trainer) Observe(fs Features, peak int64, predicted int) (due bool, err error) {
	fs, err = Normalize(fs)
	if err != nil {
		return false, err
	}
	if peak < 0 {
		return false, fmt.Errorf("predict: negative peak %d", peak)
	}
	k := t.cfg.Interval.Class(peak)
	w := 1.0
	if predicted >= 0 && predicted < k {
		w = t.cfg.UnderWeight
		t.urgent = true
	}
	if len(t.samples) == t.cfg.MaxSamples {
		copy(t.samples, t.samples[1:])
		t.samples = t.samples[:len(t.samples)-1]
	}
	t.samples = append(t.samples, Sample{Features: fs, Class: k, Weight: w})
	t.observed++
	t.since++
	return t.Due(), nil
}

// Due says whether a retraining is due.
func (t *Trainer) Due() bool {
	return len(t.samples) > 0 && (t.urgent || t.since >= t.cfg.RetrainEvery)
}

// ErrNoSamples is returned by Train before any invocation was observed.
var ErrNoSamples = errors.New("predict: nothing observed yet")

// Train grows a model on the training set and judges its maturity: a tree
// grown on all but the most recent HoldOut share predicts those; the
// model returned is grown on all of them. It resets the schedule.
func (t *Trainer) Train() (*Model, error) {
	if len(t.samples) == 0 {
		return nil, ErrNoSamples
	}
	t.since, t.urgent = 0, false
	n := len(t.samples)
	h := max(int(math.Ceil(float64(n)*t.cfg.HoldOut)), 10)
	mt := Maturity{Observed: t.observed}
	if h < n {
		held := t.grow(t.samples[:n-h])
		for _, s := range t.samples[n-h:] {
			mt.Evaluated++
			k, ok := held.Predict(s.Features)
			switch {
			case !ok:
				mt.Doubts++
			case k == s.Class:
				mt.Exact++
			case k > s.Class:
				mt.Over++
			default:
				mt.Under++
				if k == s.Class-1 {
					mt.UnderByOne++
				}
			}
		}
	}
	mt.Mature = t.observed >= t.cfg.MinInvocations && mt.Evaluated > 0 &&
		mt.ExactOrOverShare() >= t.cfg.MinExactOrOver && mt.UnderWithinOneShare() >= t.cfg.MinUnderWithinOne
	m := t.grow(t.samples)
	m.maturity = mt
	return m, nil
}

// grow builds a model (schema and tree) from samples.
func (t *Trainer) grow(samples []Sample) *Model {
	schema := buildSchema(samples)
	g := &grower{features: schema, classes: t.cfg.Interval.Classes(), maxDepth: t.cfg.MaxDepth, minLeaf: t.cfg.MinLeaf}
	g.samples = make([]sample, len(samples))
	m := &Model{iv: t.cfg.Interval, features: schema}
	for i, s := range samples {
		x := make([]float64, len(schema))
		for j := range x {
			x[j] = math.NaN()
		}
		for _, f := range s.Features {
			j := m.slot(f.Name)
			if j < 0 || schema[j].cat != f.Cat {
				continue
			}
			if f.Cat {
				if c, ok := schema[j].codes[f.Str]; ok {
					x[j] = float64(c)
				}
			} else {
				x[j] = f.Num
			}
		}
		g.samples[i] = sample{x: x, y: s.Class, w: s.Weight}
	}
	m.nodes = g.grow()
	return m
}

// buildSchema picks the features of a model: the MaxFeatures names seen
// most often (ties by name), each of the kind it first came as, with the
// MaxCategories most frequent categories of the categorical ones.
func buildSchema(samples []Sample) []schemaFeature {
	type stat struct {
		n    int
		cat  bool
		vals map[string]int
	}
	stats := map[string]*stat{}
	for _, s := range samples {
		for _, f := range s.Features {
			st := stats[f.Name]
			if st == nil {
				st = &stat{cat: f.Cat, vals: map[string]int{}}
				stats[f.Name] = st
			}
			if st.cat != f.Cat {
				continue
			}
			st.n++
			if f.Cat {
				st.vals[f.Str]++
			}
		}
	}
	names := make([]string, 0, len(stats))
	for n := range stats {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		a, b := stats[names[i]], stats[names[j]]
		if a.n != b.n {
			return a.n > b.n
		}
		return names[i] < names[j]
	})
	if len(names) > MaxFeatures {
		names = names[:MaxFeatures]
	}
	sort.Strings(names)
	out := make([]schemaFeature, len(names))
	for i, n := range names {
		st := stats[n]
		out[i] = schemaFeature{name: n, cat: st.cat}
		if st.cat {
			vals := make([]string, 0, len(st.vals))
			for v := range st.vals {
				vals = append(vals, v)
			}
			sort.Slice(vals, func(a, b int) bool {
				if st.vals[vals[a]] != st.vals[vals[b]] {
					return st.vals[vals[a]] > st.vals[vals[b]]
				}
				return vals[a] < vals[b]
			})
			if len(vals) > MaxCategories {
				vals = vals[:MaxCategories]
			}
			out[i].vals = vals
			out[i].codes = make(map[string]int, len(vals))
			for c, v := range vals {
				out[i].codes[v] = c
			}
		}
	}
	return out
}

// The JSON form of a trainer's state, kept in etcd beside the model so
// that a restarted controller goes on learning.
type trainerJSON struct {
	Version  int          `json:"v"`
	Observed int          `json:"observed"`
	Since    int          `json:"since"`
	Samples  []sampleJSON `json:"samples"`
}

type sampleJSON struct {
	F []featureValueJSON `json:"f"`
	C int                `json:"c"`
	W float64            `json:"w"`
}

type featureValueJSON struct {
	N string   `json:"n"`
	V *float64 `json:"v,omitempty"`
	S *string  `json:"s,omitempty"`
}

// MarshalJSON encodes the trainer's state (not its Config, which the
// owner supplies again on decoding).
func (t *Trainer) MarshalJSON() ([]byte, error) {
	j := trainerJSON{Version: 1, Observed: t.observed, Since: t.since, Samples: make([]sampleJSON, len(t.samples))}
	for i, s := range t.samples {
		sj := sampleJSON{C: s.Class, W: s.Weight, F: make([]featureValueJSON, len(s.Features))}
		for k, f := range s.Features {
			if f.Cat {
				sj.F[k] = featureValueJSON{N: f.Name, S: &f.Str}
			} else {
				sj.F[k] = featureValueJSON{N: f.Name, V: &f.Num}
			}
		}
		j.Samples[i] = sj
	}
	return json.Marshal(j)
}

// MaxTrainerBytes bounds an encoded trainer.
const MaxTrainerBytes = 8 << 20

// DecodeTrainer restores a trainer's state under cfg (untrusted input:
// every sample is checked; a bad one is an error and nothing is
// restored). A state with more samples than cfg.MaxSamples keeps the most
// recent.
func DecodeTrainer(cfg Config, data []byte) (*Trainer, error) {
	t, err := NewTrainer(cfg)
	if err != nil {
		return nil, err
	}
	if len(data) > MaxTrainerBytes {
		return nil, fmt.Errorf("predict: a training set of %d bytes, at most %d", len(data), MaxTrainerBytes)
	}
	var j trainerJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return nil, fmt.Errorf("predict: training set: %w", err)
	}
	if j.Version != 1 || j.Observed < len(j.Samples) || j.Since < 0 || len(j.Samples) > MaxSamples {
		return nil, fmt.Errorf("predict: training set: version %d, %d observed, %d samples", j.Version, j.Observed, len(j.Samples))
	}
	classes := t.cfg.Interval.Classes()
	for i, sj := range j.Samples {
		if sj.C < 0 || sj.C >= classes || !(sj.W >= 1 && sj.W <= 100) || len(sj.F) > MaxFeatures {
			return nil, fmt.Errorf("predict: training sample %d: class %d, weight %v, %d features", i, sj.C, sj.W, len(sj.F))
		}
		fs := make(Features, len(sj.F))
		for k, f := range sj.F {
			switch {
			case f.S != nil && f.V == nil:
				fs[k] = Cat(f.N, *f.S)
			case f.V != nil && f.S == nil:
				fs[k] = Num(f.N, *f.V)
			default:
				return nil, fmt.Errorf("predict: training sample %d: feature %q is neither a number nor a category", i, f.N)
			}
		}
		fs, err := Normalize(fs)
		if err != nil {
			return nil, fmt.Errorf("predict: training sample %d: %w", i, err)
		}
		t.samples = append(t.samples, Sample{Features: fs, Class: sj.C, Weight: sj.W})
	}
	if len(t.samples) > t.cfg.MaxSamples {
		t.samples = t.samples[len(t.samples)-t.cfg.MaxSamples:]
	}
	t.observed, t.since = j.Observed, j.Since
	return t, nil
}
