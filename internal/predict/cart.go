package predict

import (
	"math"
	"sort"
)

// CART (Breiman et al.): a binary tree grown greedily, each split the one
// that lowers the weighted Gini impurity most; numbers split at a
// threshold (the midpoint of two neighbouring values), categories one
// against the rest. A sample missing the feature goes right while
// training; at prediction a missing value is a doubt. No pruning: the
// tree stops at purity, at maxDepth, or where no split leaves minLeaf
// samples on both sides, which is what a per-function memory model needs
// (it memorises what it saw, as OFC's "cache lookup" reading of J48).

type sample struct {
	x []float64 // one value per schema feature, NaN when missing
	y int
	w float64
}

type grower struct {
	features []schemaFeature
	samples  []sample
	classes  int
	maxDepth int
	minLeaf  int
	nodes    []node

	// scratch, reused across splits
	left, total []float64
	order       []int
}

// grow builds the tree over samples (all of them, by index).
func (g *grower) grow() []node {
	g.left = make([]float64, g.classes)
	g.total = make([]float64, g.classes)
	idx := make([]int, len(g.samples))
	for i := range idx {
		idx[i] = i
	}
	g.nodes = g.nodes[:0]
	g.build(idx, 0)
	return g.nodes
}

// build appends the subtree over idx and returns its root's index.
// Children are appended after their parent, as Predict relies on.
func (g *grower) build(idx []int, depth int) int {
	me := len(g.nodes)
	g.nodes = append(g.nodes, node{f: -1})
	counts := g.counts(idx)
	g.nodes[me].class = majority(counts)
	if depth >= g.maxDepth || len(idx) < 2*g.minLeaf || pure(counts) || len(g.nodes) >= MaxNodes-2 {
		return me
	}
	f, t, ok := g.bestSplit(idx, counts)
	if !ok {
		return me
	}
	cat := g.features[f].cat
	var l, r []int
	for _, i := range idx {
		v := g.samples[i].x[f]
		if !math.IsNaN(v) && ((cat && v == t) || (!cat && v <= t)) {
			l = append(l, i)
		} else {
			r = append(r, i)
		}
	}
	g.nodes[me].f, g.nodes[me].t = f, t
	li := g.build(l, depth+1)
	ri := g.build(r, depth+1)
	g.nodes[me].l, g.nodes[me].r = li, ri
	return me
}

func (g *grower) counts(idx []int) []float64 {
	c := make([]float64, g.classes)
	for _, i := range idx {
		c[g.samples[i].y] += g.samples[i].w
	}
	return c
}

// majority is the heaviest class; a tie goes to the larger class (an
// over-prediction costs cache, an under-prediction a retry).
func majority(c []float64) int {
	best := 0
	for k, w := range c {
		if w >= c[best] && w > 0 {
			best = k
		}
	}
	return best
}

func pure(c []float64) bool {
	n := 0
	for _, w := range c {
		if w > 0 {
			n++
		}
	}
	return n <= 1
}

// sumSq is Σ w_k², the part of Gini impurity (1 − Σw_k²/W²) that
// moves as samples cross a split.
func sumSq(c []float64) float64 {
	s := 0.0
	for _, w := range c {
		s += w * w
	}
	return s
}

// bestSplit finds the feature and threshold whose split has the lowest
// weighted impurity, if any improves on the node's own by a margin.
func (g *grower) bestSplit(idx []int, counts []float64) (f int, t float64, ok bool) {
	var W float64
	for _, w := range counts {
		W += w
	}
	parent := W - sumSq(counts)/W // W·Gini
	best := parent - 1e-9*W
	for j, sf := range g.features {
		var score, thr float64
		var found bool
		if sf.cat {
			score, thr, found = g.splitCat(idx, j, len(sf.vals), counts, W)
		} else {
			score, thr, found = g.splitNum(idx, j, counts, W)
		}
		if found && score < best {
			best, f, t, ok = score, j, thr, true
		}
	}
	return f, t, ok
}

// splitNum sweeps the samples in order of feature j: W_L·Gini_L +
// W_R·Gini_R at each boundary between distinct values.
func (g *grower) splitNum(idx []int, j int, counts []float64, W float64) (score, thr float64, ok bool) {
	g.order = g.order[:0]
	for _, i := range idx {
		if !math.IsNaN(g.samples[i].x[j]) {
			g.order = append(g.order, i)
		}
	}
	if len(g.order) < 2*g.minLeaf {
		return 0, 0, false
	}
	sort.Slice(g.order, func(a, b int) bool { return g.samples[g.order[a]].x[j] < g.samples[g.order[b]].x[j] })
	clear(g.left)
	copy(g.total, counts)
	var wl float64
	sl, sr := 0.0, sumSq(counts)
	score = math.Inf(1)
	for n, i := range g.order[:len(g.order)-1] {
		s := &g.samples[i]
		// Move s from right to left, updating the sums of squares.
		sr += s.w*s.w - 2*s.w*g.total[s.y]
		g.total[s.y] -= s.w
		sl += s.w*s.w + 2*s.w*g.left[s.y]
		g.left[s.y] += s.w
		wl += s.w
		next := g.samples[g.order[n+1]].x[j]
		if next == s.x[j] || n+1 < g.minLeaf || len(g.order)-n-1 < g.minLeaf {
			continue
		}
		wr := W - wl
		sc := (wl - sl/wl) + (wr - sr/wr)
		if sc < score {
			score, thr, ok = sc, s.x[j]+(next-s.x[j])/2, true
			if thr >= next { // neighbours too close to halve
				thr = s.x[j]
			}
		}
	}
	return score, thr, ok
}

// splitCat tries each category of feature j against the rest.
func (g *grower) splitCat(idx []int, j, ncat int, counts []float64, W float64) (score, thr float64, ok bool) {
	if ncat < 2 {
		return 0, 0, false
	}
	per := make([][]float64, ncat)
	n := make([]int, ncat)
	for _, i := range idx {
		v := g.samples[i].x[j]
		if math.IsNaN(v) {
			continue
		}
		c := int(v)
		if per[c] == nil {
			per[c] = make([]float64, g.classes)
		}
		per[c][g.samples[i].y] += g.samples[i].w
		n[c]++
	}
	score = math.Inf(1)
	for c, cc := range per {
		if cc == nil || n[c] < g.minLeaf || len(idx)-n[c] < g.minLeaf {
			continue
		}
		var wl, sl, sr float64
		for k, w := range cc {
			wl += w
			sl += w * w
			rest := counts[k] - w
			sr += rest * rest
		}
		wr := W - wl
		if wl <= 0 || wr <= 0 {
			continue
		}
		sc := (wl - sl/wl) + (wr - sr/wr)
		if sc < score {
			score, thr, ok = sc, float64(c), true
		}
	}
	return score, thr, ok
}
