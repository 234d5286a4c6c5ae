package sim

import (
	"math"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/predict"
)

// sized is an invocation of "f" (1 GiB booked) with an input of size
// bytes and the peak it needs.
func sized(i int, size, peak int64) Event {
	e := invoke(time.Duration(i)*time.Second, 100*time.Millisecond)
	e.Peak = peak
	e.Features = predict.Features{predict.Num("input.size", float64(size))}
	return e
}

// peakOf is a function's memory: 40 MiB and 2 bytes per input byte, so
// its interval follows the input.
func peakOf(size int64) int64 { return 40<<20 + 2*size }

// The simulator sizes invocations as the controller does: the same
// invocations fed to a predict.Trainer in the controller's order (ask
// predict.Sized, observe the peak with the class asked, train when due)
// give the same predictions, and the memory sums follow from them.
func TestPredictionAgreesWithTheController(t *testing.T) {
	var events []Event
	for i := range 400 {
		size := int64(i*7919%64) << 20
		events = append(events, sized(i, size, peakOf(size)))
	}
	r := run(t, Config{CacheSizes: []int64{}, KeepAlives: []KeepAlive{}, Predict: true}, events...)
	p := r.Prediction
	if p == nil {
		t.Fatal("no prediction section")
	}

	tr, err := predict.NewTrainer(predict.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var model *predict.Model
	var want PredictionResult
	booked := int64(1024 << 20)
	for _, e := range events {
		limit, class := predict.Sized(model, e.Features)
		given := booked
		if class >= 0 {
			want.Predicted++
			if limit < booked {
				want.Sized++
				given = limit
				if e.Peak > limit {
					t.Fatalf("the peak %d outgrew its limit %d: pick peaks the model covers", e.Peak, limit)
				}
			}
		}
		want.GivenGBs += gbs(given, 0.1)
		due, err := tr.Observe(e.Features, e.Peak, class)
		if err != nil {
			t.Fatal(err)
		}
		if due {
			if model, err = tr.Train(); err != nil {
				t.Fatal(err)
			}
			want.Trainings++
		}
	}
	if want.Sized < 200 {
		t.Fatalf("only %d of 400 sized: the case does not exercise sizing", want.Sized)
	}
	if p.Invocations != 400 || p.Predicted != want.Predicted || p.Sized != want.Sized || p.Trainings != want.Trainings || p.Mature != 1 {
		t.Fatalf("simulated %+v, want %d predicted, %d sized, %d trainings, mature", p, want.Predicted, want.Sized, want.Trainings)
	}
	if math.Abs(p.GivenGBs-want.GivenGBs) > 1e-9 || p.OOMRetries != 0 || p.Lent != 0 {
		t.Fatalf("given %.6f GB-s, want %.6f; retries %d, loans %d", p.GivenGBs, want.GivenGBs, p.OOMRetries, p.Lent)
	}
	if d := p.BookedGBs - p.GivenGBs - p.CacheGainedGBs; math.Abs(d) > 1e-9 {
		t.Fatalf("booked %.4f - given %.4f != cache gained %.4f", p.BookedGBs, p.GivenGBs, p.CacheGainedGBs)
	}
	if p.ExactOrOverShare < 0.9 || p.NeededGBs >= p.GivenGBs {
		t.Fatalf("exact or over %.3f, needed %.3f of %.3f GB-s given", p.ExactOrOverShare, p.NeededGBs, p.GivenGBs)
	}
}

// A peak far above a mature model's limit borrows from the slack pool
// when it can, and is killed and run again at the booked size when the
// pool is short, as the agent does.
func TestPredictionSlackAndRetries(t *testing.T) {
	var events []Event
	for i := range 200 {
		events = append(events, sized(i, 0, 40<<20))
	}
	burst := sized(300, 0, 100<<20) // 36 MiB over its limit, 64 MiB
	for _, tc := range []struct {
		slack          int64
		lent, retries  int64
		gainedAtBurst  bool
		givenAtBurstMB int64
	}{
		{slack: 0, retries: 1},                           // the default pool: 100 MiB
		{slack: -1, retries: 1},                          // none
		{slack: 30 << 20, retries: 1},                    // short
		{slack: 200 << 20, lent: 1, gainedAtBurst: true}, // lent
	} {
		cfg := Config{CacheSizes: []int64{}, KeepAlives: []KeepAlive{}, Predict: true, SlackPool: tc.slack}
		before := run(t, cfg, events...).Prediction
		p := run(t, cfg, append(events[:len(events):len(events)], burst)...).Prediction
		if before.Sized == 0 || p.Sized != before.Sized+1 {
			t.Fatalf("slack %d: the burst was not sized (%d then %d sized)", tc.slack, before.Sized, p.Sized)
		}
		if tc.slack == 0 {
			// 36 MiB over the limit fits the default 100 MiB pool.
			tc.lent, tc.retries, tc.gainedAtBurst = 1, 0, true
		}
		if p.Lent != tc.lent || p.OOMRetries != tc.retries {
			t.Fatalf("slack %d: %d lent, %d retried; want %d, %d", tc.slack, p.Lent, p.OOMRetries, tc.lent, tc.retries)
		}
		gained := p.CacheGainedGBs > before.CacheGainedGBs
		if gained != tc.gainedAtBurst {
			t.Fatalf("slack %d: the cache gained at the burst: %v", tc.slack, gained)
		}
		// A retried invocation is given its limit, then the booked size.
		limit := int64(64 << 20)
		wantGiven := gbs(1024<<20, 0.1)
		if tc.retries == 0 {
			wantGiven = gbs(burst.Peak, 0.1) // the limit and a loan of what it needed
		} else {
			wantGiven += gbs(limit, 0.1)
		}
		if got := p.GivenGBs - before.GivenGBs; math.Abs(got-wantGiven) > 1e-9 {
			t.Fatalf("slack %d: the burst was given %.6f GB-s, want %.6f", tc.slack, got, wantGiven)
		}
	}
	bad := sized(0, 1, 1<<20)
	bad.Peak = -1
	if _, err := Run(&SliceSource{Events: []Event{bad}}, Config{Predict: true}); err == nil {
		t.Fatal("a negative peak was replayed")
	}
}

// One model per function, as the controller keeps one per
// /hoard/platform/models/APP/FN: two functions of one application whose
// peaks differ by far more than an interval are each predicted exactly,
// where one model for both would mix them up.
func TestPredictionPerFunction(t *testing.T) {
	var events []Event
	for i := range 600 {
		e := sized(i, 0, 40<<20)
		e.Function = "small"
		if i%2 == 1 {
			e.Function, e.Peak = "large", 400<<20
		}
		events = append(events, e)
	}
	cfg := Config{CacheSizes: []int64{}, KeepAlives: []KeepAlive{}, Predict: true}
	p := run(t, cfg, events...).Prediction
	if p.Functions != 2 || p.Mature != 2 {
		t.Fatalf("%d functions, %d mature; want 2, 2", p.Functions, p.Mature)
	}
	if p.Predicted < 400 || p.Under != 0 || p.Exact != p.Predicted {
		t.Fatalf("per function: %d predicted, %d exact, %d under", p.Predicted, p.Exact, p.Under)
	}
	// The same invocations named by no function share one model, whose
	// one feature cannot tell them apart.
	for i := range events {
		events[i].Function = ""
	}
	q := run(t, cfg, events...).Prediction
	if q.Functions != 1 || q.Exact == q.Predicted && q.Predicted > 0 {
		t.Fatalf("one model: %d functions, %d of %d exact; want 1 and some wrong", q.Functions, q.Exact, q.Predicted)
	}
}

// Generated applications have several functions, the first the most
// invoked, and each function's peaks its own base.
func TestGeneratorFunctions(t *testing.T) {
	fns := map[string]map[string]int{}
	for i := range 2000 {
		app := "app" + string(rune('a'+i%50))
		f := InvocationFunction(1, app, uint64(i))
		if fns[app] == nil {
			fns[app] = map[string]int{}
		}
		fns[app][f]++
		if f != InvocationFunction(1, app, uint64(i)) {
			t.Fatal("not deterministic")
		}
	}
	several := 0
	for app, m := range fns {
		if len(m) > MaxFunctions {
			t.Fatalf("%s has %d functions", app, len(m))
		}
		if len(m) > 1 {
			several++
			for f, n := range m {
				if f != "f0" && n > m["f0"] {
					t.Fatalf("%s: %s invoked %d times, more than f0's %d", app, f, n, m["f0"])
				}
			}
		}
	}
	if several < 25 {
		t.Fatalf("only %d of 50 applications have more than one function", several)
	}
	if InvocationPeak(1, "a", "f0", 1, 1024, 1<<20) == InvocationPeak(1, "a", "f1", 1, 1024, 1<<20) {
		t.Fatal("two functions share a peak")
	}
}
