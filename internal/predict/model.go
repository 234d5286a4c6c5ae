package predict

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
)

// MaxNodes bounds a model's tree (a model read back from etcd with more is
// refused).
const MaxNodes = 1 << 13

// Model is one function's trained decision tree, its feature schema and
// how it fared on held-out invocations when it was trained. It is
// immutable once built or decoded; its methods are safe for concurrent
// use.
type Model struct {
	iv       Interval
	features []schemaFeature // sorted by name
	nodes    []node          // nodes[0] is the root
	maturity Maturity
}

type schemaFeature struct {
	name  string
	cat   bool
	codes map[string]int // category → code, for cat
	vals  []string       // code → category, for cat
}

// node is a leaf when f < 0. An inner node sends a value left when it is
// <= t (a number) or equals t (a category's code).
type node struct {
	f     int
	t     float64
	l, r  int
	class int
}

// Maturity is how a model fared on the held-out most recent invocations
// when it was trained, and whether that makes it mature (OFC §5.3.1).
type Maturity struct {
	// Observed is how many invocations the function had when the model
	// was trained; Evaluated how many of the most recent were held out.
	Observed  int `json:"observed"`
	Evaluated int `json:"evaluated"`
	// Exact, Over and Under count held-out predictions against the
	// interval the invocation actually used; UnderByOne the under-
	// predictions one interval short; Doubts the invocations the model
	// could not place (a feature it tests missing or unknown), which
	// count against it.
	Exact      int `json:"exact"`
	Over       int `json:"over"`
	Under      int `json:"under"`
	UnderByOne int `json:"under_by_one"`
	Doubts     int `json:"doubts"`
	// Mature: Observed reached the minimum, (Exact+Over)/Evaluated and
	// UnderByOne/Under reached theirs.
	Mature bool `json:"mature"`
}

// ExactShare is Exact/Evaluated (0 when nothing was evaluated).
func (m Maturity) ExactShare() float64 { return ratio(m.Exact, m.Evaluated) }

// ExactOrOverShare is (Exact+Over)/Evaluated.
func (m Maturity) ExactOrOverShare() float64 { return ratio(m.Exact+m.Over, m.Evaluated) }

// UnderWithinOneShare is UnderByOne/Under (1 with no under-prediction).
func (m Maturity) UnderWithinOneShare() float64 {
	if m.Under == 0 {
		return 1
	}
	return ratio(m.UnderByOne, m.Under)
}

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// Interval is the model's classes.
func (m *Model) Interval() Interval { return m.iv }

// Maturity is how the model fared when it was trained.
func (m *Model) Maturity() Maturity { return m.maturity }

// Nodes is the tree's size.
func (m *Model) Nodes() int { return len(m.nodes) }

// Predict classifies an invocation: the interval its peak memory is
// predicted in. ok is false when the model cannot tell (a feature the
// tree tests is missing, of the other kind, or a category it never saw):
// a doubt, for which the caller gives the booked memory. It does not
// allocate; fs need not be normalised, but a name is looked up as given.
func (m *Model) Predict(fs Features) (class int, ok bool) {
	var vals [MaxFeatures]float64
	for i := range m.features {
		vals[i] = math.NaN()
	}
	for _, f := range fs {
		i := m.slot(f.Name)
		if i < 0 || i >= MaxFeatures || m.features[i].cat != f.Cat {
			continue
		}
		if !f.Cat {
			vals[i] = f.Num
			continue
		}
		s := f.Str
		if len(s) > MaxCategoryLen {
			s = s[:MaxCategoryLen]
		}
		if c, known := m.features[i].codes[s]; known {
			vals[i] = float64(c)
		}
	}
	n := 0
	// Children have larger indices than their parent (checked when a model
	// is built or decoded), so this ends within len(m.nodes) steps.
	for {
		nd := &m.nodes[n]
		if nd.f < 0 {
			return nd.class, true
		}
		v := vals[nd.f]
		switch {
		case math.IsNaN(v):
			return 0, false
		case m.features[nd.f].cat && v == nd.t, !m.features[nd.f].cat && v <= nd.t:
			n = nd.l
		default:
			n = nd.r
		}
	}
}

// Limit is the memory to give an invocation: the upper bound of the
// interval above the predicted one (OFC §5.3.1), when the model is mature
// and can place the invocation; ok is false otherwise (give the booked
// memory).
func (m *Model) Limit(fs Features) (bytes int64, ok bool) {
	if !m.maturity.Mature {
		return 0, false
	}
	k, ok := m.Predict(fs)
	if !ok {
		return 0, false
	}
	return m.iv.Upper(k + 1), true
}

// Sized is what an invocation with features fs is given under model m
// (nil: none yet): the limit of Limit and the class predicted, or 0 and
// -1 when m is not mature or cannot place the invocation (give the booked
// memory). The controller sizes invocations with it and `hoard sim`
// replays them with it.
func Sized(m *Model, fs Features) (limit int64, class int) {
	if m == nil || !m.maturity.Mature {
		return 0, -1
	}
	k, ok := m.Predict(fs)
	if !ok {
		return 0, -1
	}
	return m.iv.Upper(k + 1), k
}

func (m *Model) slot(name string) int {
	lo, hi := 0, len(m.features)
	for lo < hi {
		h := int(uint(lo+hi) >> 1)
		if m.features[h].name < name {
			lo = h + 1
		} else {
			hi = h
		}
	}
	if lo < len(m.features) && m.features[lo].name == name {
		return lo
	}
	return -1
}

// The JSON form of a model, as kept in etcd.
type modelJSON struct {
	Version  int           `json:"v"`
	Width    int64         `json:"interval_bytes"`
	Max      int64         `json:"max_bytes"`
	Features []featureJSON `json:"features"`
	Nodes    []nodeJSON    `json:"nodes"`
	Maturity Maturity      `json:"maturity"`
}

type featureJSON struct {
	Name       string   `json:"name"`
	Cat        bool     `json:"cat,omitempty"`
	Categories []string `json:"categories,omitempty"`
}

type nodeJSON struct {
	F     int     `json:"f"`
	T     float64 `json:"t,omitempty"`
	L     int     `json:"l,omitempty"`
	R     int     `json:"r,omitempty"`
	Class int     `json:"c,omitempty"`
}

// MarshalJSON encodes the model.
func (m *Model) MarshalJSON() ([]byte, error) {
	j := modelJSON{Version: 1, Width: m.iv.Width, Max: m.iv.Max, Maturity: m.maturity}
	for _, f := range m.features {
		j.Features = append(j.Features, featureJSON{Name: f.name, Cat: f.cat, Categories: f.vals})
	}
	for _, n := range m.nodes {
		j.Nodes = append(j.Nodes, nodeJSON{F: n.f, T: n.t, L: n.l, R: n.r, Class: n.class})
	}
	return json.Marshal(j)
}

// ErrBadModel is returned by DecodeModel for a model that is not well
// formed.
var ErrBadModel = errors.New("predict: bad model")

// MaxModelBytes bounds an encoded model.
const MaxModelBytes = 1 << 20

// DecodeModel decodes and checks a model (untrusted input: a record read
// back from etcd). Anything out of bounds is ErrBadModel.
func DecodeModel(data []byte) (*Model, error) {
	if len(data) > MaxModelBytes {
		return nil, fmt.Errorf("%w: %d bytes, at most %d", ErrBadModel, len(data), MaxModelBytes)
	}
	var j modelJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadModel, err)
	}
	if j.Version != 1 {
		return nil, fmt.Errorf("%w: version %d", ErrBadModel, j.Version)
	}
	iv := Interval{Width: j.Width, Max: j.Max}
	if err := iv.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadModel, err)
	}
	m := &Model{iv: iv, maturity: j.Maturity}
	if len(j.Features) > MaxFeatures {
		return nil, fmt.Errorf("%w: %d features, at most %d", ErrBadModel, len(j.Features), MaxFeatures)
	}
	for i, f := range j.Features {
		if _, err := Normalize(Features{{Name: f.Name}}); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadModel, err)
		}
		if i > 0 && j.Features[i-1].Name >= f.Name {
			return nil, fmt.Errorf("%w: features not sorted by name, or repeated (%q)", ErrBadModel, f.Name)
		}
		if len(f.Categories) > MaxCategories || (!f.Cat && len(f.Categories) > 0) {
			return nil, fmt.Errorf("%w: feature %q has %d categories", ErrBadModel, f.Name, len(f.Categories))
		}
		sf := schemaFeature{name: f.Name, cat: f.Cat}
		if f.Cat {
			sf.codes = make(map[string]int, len(f.Categories))
			for c, v := range f.Categories {
				if len(v) > MaxCategoryLen {
					return nil, fmt.Errorf("%w: feature %q: a category of %d bytes", ErrBadModel, f.Name, len(v))
				}
				if _, dup := sf.codes[v]; dup {
					return nil, fmt.Errorf("%w: feature %q: category %q twice", ErrBadModel, f.Name, v)
				}
				sf.codes[v] = c
			}
			sf.vals = f.Categories
		}
		m.features = append(m.features, sf)
	}
	if len(j.Nodes) == 0 || len(j.Nodes) > MaxNodes {
		return nil, fmt.Errorf("%w: %d nodes, want 1 to %d", ErrBadModel, len(j.Nodes), MaxNodes)
	}
	for i, n := range j.Nodes {
		nd := node{f: n.F, t: n.T, l: n.L, r: n.R, class: n.Class}
		if err := m.checkNode(i, nd, len(j.Nodes)); err != nil {
			return nil, fmt.Errorf("%w: node %d: %v", ErrBadModel, i, err)
		}
		m.nodes = append(m.nodes, nd)
	}
	mt := m.maturity
	if mt.Observed < 0 || mt.Evaluated < 0 || mt.Exact < 0 || mt.Over < 0 || mt.Under < 0 || mt.UnderByOne < 0 || mt.Doubts < 0 ||
		mt.Exact+mt.Over+mt.Under+mt.Doubts != mt.Evaluated || mt.UnderByOne > mt.Under {
		return nil, fmt.Errorf("%w: inconsistent maturity %+v", ErrBadModel, mt)
	}
	return m, nil
}

// checkNode checks one node of a tree of n nodes: children after their
// parent (so every walk ends), features and classes in range.
func (m *Model) checkNode(i int, nd node, n int) error {
	if nd.f < 0 {
		if nd.f != -1 || nd.class < 0 || nd.class >= m.iv.Classes() {
			return fmt.Errorf("leaf of class %d (feature %d)", nd.class, nd.f)
		}
		return nil
	}
	if nd.f >= len(m.features) {
		return fmt.Errorf("feature %d of %d", nd.f, len(m.features))
	}
	if nd.l <= i || nd.r <= i || nd.l >= n || nd.r >= n {
		return fmt.Errorf("children %d and %d", nd.l, nd.r)
	}
	if math.IsNaN(nd.t) || math.IsInf(nd.t, 0) {
		return fmt.Errorf("threshold %v", nd.t)
	}
	if f := m.features[nd.f]; f.cat && (nd.t != math.Trunc(nd.t) || nd.t < 0 || int(nd.t) >= len(f.vals)) {
		return fmt.Errorf("category %v of %d", nd.t, len(f.vals))
	}
	return nil
}

// UnmarshalJSON decodes with DecodeModel's checks.
func (m *Model) UnmarshalJSON(data []byte) error {
	d, err := DecodeModel(data)
	if err != nil {
		return err
	}
	*m = *d
	return nil
}

// Uses says whether the tree splits on the named feature anywhere.
func (m *Model) Uses(name string) bool {
	i := m.slot(name)
	if i < 0 {
		return false
	}
	for _, n := range m.nodes {
		if n.f == i {
			return true
		}
	}
	return false
}

// FeatureNames lists the model's features, sorted.
func (m *Model) FeatureNames() []string {
	out := make([]string, len(m.features))
	for i, f := range m.features {
		out[i] = f.name
	}
	sort.Strings(out)
	return out
}
