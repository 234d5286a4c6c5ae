package bench

import (
	"fmt"
	"math/rand/v2"

	"github.com/hoard-io/hoard/internal/controller"
	"github.com/hoard-io/hoard/internal/media"
	"github.com/hoard-io/hoard/internal/predict"
)

// The media comparison: a thumbnail function whose event names only its
// input object ({"bucket", "key"}), so the controller sees the event's
// size and the object's size, and, when the object was written through
// hoard, its media features (input.format, input.width, input.height,
// input.pixels; controller.AppendMedia). Its peak follows the decoded
// pixels; the compressed size does not say them (bytes per pixel vary
// with the content, tenfold within a format).

// mediaInvocation is one generated invocation of the thumbnail function:
// the features without and with the input's media features, and its
// peak.
func mediaInvocation(r *rand.Rand) (plain, withMedia predict.Features, peak int64) {
	w, h := 100+r.IntN(4000), 100+r.IntN(3000)
	px := int64(w * h)
	format := []string{"jpeg", "png", "webp"}[r.IntN(3)]
	var bpp float64 // compressed bytes per pixel: the content decides
	switch format {
	case "jpeg":
		bpp = 0.1 + 0.9*r.Float64()
	case "png":
		bpp = 0.3 + 2.7*r.Float64()
	default:
		bpp = 0.05 + 0.45*r.Float64()
	}
	peak = 40*pmib + px*4
	if format == "png" {
		peak += px * 2
	}
	plain = predict.Features{predict.Num("event.bytes", 34), predict.Num("input.size", float64(px)*bpp)}
	withMedia = controller.AppendMedia(append(predict.Features(nil), plain...), media.Features{Format: format, Width: int64(w), Height: int64(h)})
	return plain, withMedia, peak + noise(r)
}

// mediaComparison trains the thumbnail function's model on its first
// 100, 500 and 1,000 invocations with and without the media features and
// scores both on nTest fresh ones.
func mediaComparison(nTest int) (Table, map[int][2]predictionScore, error) {
	const booked = 512 * pmib
	iv := predict.DefaultInterval
	r := rand.New(rand.NewPCG(99, 42))
	type inv struct {
		plain, media predict.Features
		peak         int64
	}
	gen := func(n int) []inv {
		out := make([]inv, n)
		for i := range out {
			out[i].plain, out[i].media, out[i].peak = mediaInvocation(r)
		}
		return out
	}
	train, test := gen(1000), gen(nTest)
	table := Table{ID: "media", Title: "Thumbnails (memory follows the pixels): the input's size alone / with its media features",
		Columns: []string{"trained on", "mature", "exact", "exact or over", "within one", "covered", "booked memory saved"},
		Caption: "The event names only the input object; its media features are what a cachelet read from its first bytes as it was written (package media)."}
	scores := map[int][2]predictionScore{}
	for _, n := range []int{100, 500, 1000} {
		var s [2]predictionScore
		for j := range 2 {
			tr, err := predict.NewTrainer(predict.Config{MaxSamples: 1000})
			if err != nil {
				return Table{}, nil, err
			}
			pick := func(c inv) predict.Features {
				if j == 0 {
					return c.plain
				}
				return c.media
			}
			for _, c := range train[:n] {
				if _, err := tr.Observe(pick(c), c.peak, -1); err != nil {
					return Table{}, nil, err
				}
			}
			m, err := tr.Train()
			if err != nil {
				return Table{}, nil, err
			}
			cases := make([]predictionCase, len(test))
			for i, c := range test {
				cases[i] = predictionCase{fs: pick(c), peak: c.peak}
			}
			s[j] = scorePredictions(iv, booked, cases, m.Predict)
			s[j].mature = m.Maturity().Mature
		}
		scores[n] = s
		pct := func(a, b float64) string { return fmt.Sprintf("%.1f%% / %.1f%%", 100*a, 100*b) }
		table.Rows = append(table.Rows, []string{fmt.Sprint(n), fmt.Sprintf("%v / %v", s[0].mature, s[1].mature),
			pct(s[0].exact, s[1].exact), pct(s[0].eo, s[1].eo), pct(s[0].within1, s[1].within1),
			pct(s[0].covered, s[1].covered), pct(s[0].saved, s[1].saved)})
	}
	return table, scores, nil
}
