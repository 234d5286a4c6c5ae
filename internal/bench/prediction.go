package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/hoard-io/hoard/internal/predict"
)

var refOFCTable1 = Reference{Paper: "OFC", Figure: "Table 1, §7.1.2", Section: "§7.1", Citation: CiteOFC}

func predictionExperiment() Experiment {
	return Experiment{
		Name:       "prediction",
		Title:      "Memory prediction: accuracy after 100, 500 and 1,000 invocations, and prediction time",
		Reproduces: []Reference{refOFCTable1},
		Quick:      Options{Iterations: 1000},
		Full:       Options{Iterations: 5000},
		Run:        runPredictionExperiment,
	}
}

// PredictionMethod says what the prediction experiment measures.
const PredictionMethod = "Four functions' invocations are generated with varied inputs, each with its peak memory as a function of " +
	"the inputs OFC's models see (image pixels and format, audio duration and bitrate, input size, model and batch) plus noise " +
	"(σ 3 MiB). A model (internal/predict: CART, 16 MiB intervals in [0, 2 GiB]) is trained on the first 100, 500 and 1,000 " +
	"invocations of each and predicts fresh ones (Iterations of them): exact, exact-or-over and within one interval are its raw " +
	"predictions, as OFC's Table 1; covered is the share whose peak fits the limit actually given (one interval above); saved " +
	"is the booked memory (512 MiB, 1 GiB for inference) not given. The same-run baseline predicts the interval seen most often so far. Prediction " +
	"time is the median of single calls on the 1,000-invocation model. A fifth function, thumbnails, whose event names only its input object, " +
	"is trained twice on the same invocations: on the input's size alone, and with the media features a cachelet reads as the object is " +
	"written (input.format, input.width, input.height, input.pixels)."

// predictionFunction generates one function's invocations.
type predictionFunction struct {
	name   string
	booked int64 // what its tenant booked: above its largest peak
	gen    func(r *rand.Rand) (predict.Features, int64)
}

const pmib = 1 << 20

func noise(r *rand.Rand) int64 { return int64(r.NormFloat64() * 3 * pmib) }

// predictionFunctions are modelled on OFC's: memory follows the inputs,
// roughly, as decoding an image, transcoding audio, counting words or
// running a model does.
func predictionFunctions() []predictionFunction {
	return []predictionFunction{
		{"image (pixels, format)", 512 * pmib, func(r *rand.Rand) (predict.Features, int64) {
			w, h := 100+r.IntN(4000), 100+r.IntN(3000)
			format := []string{"jpeg", "png", "webp"}[r.IntN(3)]
			peak := 40*pmib + int64(w*h)*4
			if format == "png" {
				peak += int64(w*h) * 2
			}
			return predict.Features{predict.Num("width", float64(w)), predict.Num("height", float64(h)),
				predict.Num("input.size", float64(w*h/4)), predict.Cat("format", format)}, peak + noise(r)
		}},
		{"audio (duration, bitrate)", 512 * pmib, func(r *rand.Rand) (predict.Features, int64) {
			d := 1 + r.IntN(900)
			kbps := []int{96, 128, 192, 320}[r.IntN(4)]
			peak := 30*pmib + int64(d)*int64(kbps)*1000/8*2
			return predict.Features{predict.Num("duration", float64(d)), predict.Cat("bitrate", fmt.Sprint(kbps)),
				predict.Num("input.size", float64(d*kbps*1000/8))}, peak + noise(r)
		}},
		{"wordcount (input size)", 512 * pmib, func(r *rand.Rand) (predict.Features, int64) {
			size := int64(1<<10 + r.IntN(300<<20))
			peak := 25*pmib + size*6/5
			return predict.Features{predict.Num("input.size", float64(size))}, peak + noise(r)
		}},
		{"inference (model, batch)", 1024 * pmib, func(r *rand.Rand) (predict.Features, int64) {
			models := []struct {
				name string
				mib  int64
			}{{"bbox", 35}, {"people", 97}, {"car", 5}, {"large", 239}}
			m := models[r.IntN(len(models))]
			batch := 1 + r.IntN(32)
			peak := 60*pmib + 2*m.mib*pmib + int64(batch)*4*pmib
			return predict.Features{predict.Cat("model", m.name), predict.Num("batch", float64(batch))}, peak + noise(r)
		}},
	}
}

// predictionScore is how one model (or the baseline) did on the test set.
type predictionScore struct {
	exact, eo, within1, covered, saved float64
	mature                             bool
}

func scorePredictions(iv predict.Interval, booked int64, test []predictionCase, predictK func(predict.Features) (int, bool)) predictionScore {
	var s predictionScore
	for _, c := range test {
		k, ok := predictK(c.fs)
		truth := iv.Class(c.peak)
		limit := booked
		if ok {
			limit = min(iv.Upper(k+1), booked)
			switch {
			case k == truth:
				s.exact++
				s.eo++
				s.within1++
			case k > truth:
				s.eo++
				if k == truth+1 {
					s.within1++
				}
			case k == truth-1:
				s.within1++
			}
		}
		if limit >= c.peak {
			s.covered++
		}
		s.saved += float64(booked-limit) / float64(booked)
	}
	n := float64(len(test))
	s.exact, s.eo, s.within1, s.covered, s.saved = s.exact/n, s.eo/n, s.within1/n, s.covered/n, s.saved/n
	return s
}

type predictionCase struct {
	fs   predict.Features
	peak int64
}

func runPredictionExperiment(ctx context.Context, o Options) (*Result, error) {
	started := time.Now()
	nTest := max(o.Iterations, 100)
	iv := predict.DefaultInterval
	say := func(format string, args ...any) { fmt.Fprintf(o.Env.progress(), "prediction: "+format+"\n", args...) }
	table := Table{ID: "accuracy", Title: "Accuracy per function and training size (hoard's CART / the same-run baseline)",
		Columns: []string{"function", "trained on", "mature", "exact", "exact or over", "within one", "covered", "booked memory saved"}}
	avg := map[int]*predictionScore{}
	baseAvg := map[int]*predictionScore{}
	var model1000 *predict.Model
	var lastTest []predictionCase
	fns := predictionFunctions()
	for fi, f := range fns {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		r := rand.New(rand.NewPCG(uint64(fi)+1, 42))
		train := make([]predictionCase, 1000)
		for i := range train {
			train[i].fs, train[i].peak = f.gen(r)
		}
		test := make([]predictionCase, nTest)
		for i := range test {
			test[i].fs, test[i].peak = f.gen(r)
		}
		for _, n := range []int{100, 500, 1000} {
			tr, err := predict.NewTrainer(predict.Config{MaxSamples: 1000})
			if err != nil {
				return nil, err
			}
			counts := map[int]int{}
			for _, c := range train[:n] {
				if _, err := tr.Observe(c.fs, c.peak, -1); err != nil {
					return nil, err
				}
				counts[iv.Class(c.peak)]++
			}
			m, err := tr.Train()
			if err != nil {
				return nil, err
			}
			s := scorePredictions(iv, f.booked, test, m.Predict)
			s.mature = m.Maturity().Mature
			mode := 0
			for k, c := range counts {
				if c > counts[mode] || (c == counts[mode] && k > mode) {
					mode = k
				}
			}
			b := scorePredictions(iv, f.booked, test, func(predict.Features) (int, bool) { return mode, true })
			if avg[n] == nil {
				avg[n], baseAvg[n] = &predictionScore{}, &predictionScore{}
			}
			for _, p := range [][2]*predictionScore{{avg[n], &s}, {baseAvg[n], &b}} {
				p[0].exact += p[1].exact / float64(len(fns))
				p[0].eo += p[1].eo / float64(len(fns))
				p[0].within1 += p[1].within1 / float64(len(fns))
				p[0].covered += p[1].covered / float64(len(fns))
				p[0].saved += p[1].saved / float64(len(fns))
			}
			pct := func(a, b float64) string { return fmt.Sprintf("%.1f%% / %.1f%%", 100*a, 100*b) }
			table.Rows = append(table.Rows, []string{f.name, fmt.Sprint(n), fmt.Sprint(s.mature),
				pct(s.exact, b.exact), pct(s.eo, b.eo), pct(s.within1, b.within1), pct(s.covered, b.covered), pct(s.saved, b.saved)})
			say("%s after %d: exact %.1f%%, exact-or-over %.1f%% (baseline %.1f%%, %.1f%%), mature %v",
				f.name, n, 100*s.exact, 100*s.eo, 100*b.exact, 100*b.eo, s.mature)
			if n == 1000 {
				model1000, lastTest = m, test
			}
		}
	}
	// Prediction time: single calls, their median.
	lat := make([]float64, 20001)
	for i := range lat {
		fs := lastTest[i%len(lastTest)].fs
		t0 := time.Now()
		model1000.Predict(fs)
		lat[i] = float64(time.Since(t0).Nanoseconds()) / 1e3
	}
	slices.Sort(lat)
	median, p99 := lat[len(lat)/2], lat[len(lat)*99/100]

	mediaTable, mediaScores, err := mediaComparison(nTest)
	if err != nil {
		return nil, err
	}
	for _, n := range []int{100, 1000} {
		s := mediaScores[n]
		say("thumbnails after %d: exact %.1f%% with the input's media features, %.1f%% with its size alone; exact or over %.1f%%, %.1f%%",
			n, 100*s[1].exact, 100*s[0].exact, 100*s[1].eo, 100*s[0].eo)
	}

	res := &Result{Experiment: "prediction", Title: predictionExperiment().Title, Reproduces: []Reference{refOFCTable1},
		Status: StatusOK, Quick: o.Quick, StartedAt: started, Machine: DescribeMachine(), Method: PredictionMethod,
		Settings: RunSettings{Link: "none (no I/O)", Iterations: []Count{{What: "test invocations per function", N: nTest}},
			Other: []Setting{{Name: "intervals", Value: "16 MiB in [0, 2 GiB]"}, {Name: "functions", Value: fmt.Sprint(len(fns))}}},
		Tables: []Table{table, mediaTable}}
	for _, n := range []int{100, 500, 1000} {
		s, b := avg[n], baseAvg[n]
		res.Rows = append(res.Rows,
			Compare(fmt.Sprintf("exact after %d invocations", n), "%", F(83.35), F(100*s.exact), HigherIsBetter, 0.05, "OFC Table 1, J48 at 16 MB",
				fmt.Sprintf("same-run baseline (most frequent interval): %.1f%%; ratio to it %.2fx", 100*b.exact, s.exact/b.exact)),
			Compare(fmt.Sprintf("exact or over after %d invocations", n), "%", F(92.73), F(100*s.eo), HigherIsBetter, 0.05, "OFC Table 1, J48 at 16 MB",
				fmt.Sprintf("baseline %.1f%%; covered by the limit given (one interval up): %.1f%%; booked memory saved %.1f%%", 100*b.eo, 100*s.covered, 100*s.saved)))
	}
	if s := mediaScores[1000]; s[0].exact > 0 {
		res.Rows = append(res.Rows,
			Compare("thumbnails: exact after 1000 invocations, with the input's media features", "%", F(83.35), F(100*s[1].exact), HigherIsBetter, 0.05,
				"OFC Table 1, J48 at 16 MB", fmt.Sprintf("same-run baseline, the input's size alone: %.1f%%; ratio to it %.2fx; exact or over %.1f%% against %.1f%%",
					100*s[0].exact, s[1].exact/s[0].exact, 100*s[1].eo, 100*s[0].eo)))
	}
	res.Rows = append(res.Rows,
		Compare("prediction time, median", "µs", F(3.19), F(median), LowerIsBetter, 0.05, "OFC §7.1.2 (J48, 16 MB)", fmt.Sprintf("p99 %.2f µs (OFC 12.54 µs)", p99)))
	res.Notes = append(res.Notes, "The invocations are generated, not measured: they test the learner on memory that follows the inputs as OFC's functions' did, not the functions' real memory (TestSizing measures real peaks through cgroups).")
	res.Seconds = time.Since(started).Seconds()
	return res, nil
}
