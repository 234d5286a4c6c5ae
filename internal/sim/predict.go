package sim

import (
	"container/heap"
	"time"

	"github.com/hoard-io/hoard/internal/predict"
)

// DefaultSlackPool is the memory each application's node lends to
// invocations that outgrow their predicted size, the agent's default
// (OFC: 100 MB).
const DefaultSlackPool = 100 << 20

// slackStep is the least one loan adds, as the agent's watcher lends: one
// default interval.
const slackStep = 16 << 20

// predictRun replays memory prediction (Config.Predict): one model per
// function (the controller's /hoard/platform/models/APP/FN; a trace that
// names no function has one per application), trained as the controller
// trains it and asked with the controller's rule (predict.Sized) before
// each invocation that carries a measured peak; one slack pool per
// application.
type predictRun struct {
	cfg   predict.Config
	slack int64
	fns   map[fnKey]*fnPredict
	pools map[string]*slackPool
	loans loanHeap // slack lent to invocations in flight, by end

	res PredictionResult
}

type fnKey struct{ app, fn string }

type fnPredict struct {
	trainer *predict.Trainer
	model   *predict.Model
	pool    *slackPool // its application's
	mature  bool
}

// slackPool is an application's pool: the memory not lent.
type slackPool struct{ free int64 }

func newPredictRun(cfg predict.Config, slack int64) *predictRun {
	return &predictRun{cfg: cfg, slack: max(slack, 0), fns: map[fnKey]*fnPredict{}, pools: map[string]*slackPool{}}
}

// returnUntil gives back the loans of invocations ended by t.
func (p *predictRun) returnUntil(t time.Time) {
	for len(p.loans) > 0 && !p.loans[0].at.After(t) {
		l := heap.Pop(&p.loans).(loan)
		l.pool.free += l.n
	}
}

// invoked sizes one invocation of e.App that booked bookedMB: the limit a
// mature model gives it, a loan from the slack pool when its peak
// outgrows that limit, else a run killed for memory and run again at the
// booked size, as the agent does; then the peak trains the model.
func (p *predictRun) invoked(e *Event, bookedMB int) {
	if e.Peak <= 0 {
		return
	}
	fs, err := predict.Normalize(e.Features)
	if err != nil {
		p.res.BadFeatures++
		return
	}
	key := fnKey{e.App, e.Function}
	f := p.fns[key]
	if f == nil {
		tr, err := predict.NewTrainer(p.cfg)
		if err != nil {
			panic("sim: " + err.Error()) // validated in Config.Validate
		}
		pool := p.pools[e.App]
		if pool == nil {
			pool = &slackPool{free: p.slack}
			p.pools[e.App] = pool
		}
		f = &fnPredict{trainer: tr, pool: pool}
		p.fns[key] = f
	}
	r := &p.res
	booked := int64(bookedMB) << 20
	secs := e.Duration.Seconds()
	r.Invocations++
	r.BookedGBs += gbs(booked, secs)
	r.NeededGBs += gbs(e.Peak, secs)
	limit, class := predict.Sized(f.model, fs)
	if class >= 0 {
		r.Predicted++
		switch truth := p.cfg.Interval.Class(e.Peak); {
		case truth == class:
			r.Exact++
		case truth < class:
			r.Over++
		default:
			r.Under++
		}
	}
	given := booked
	// A doubt, an immature model or a limit not under the booking: the
	// booked memory, as the agent gives it.
	if class >= 0 && limit < booked {
		r.Sized++
		given = limit
		// The cache gets what the function booked above its limit, and
		// keeps it during a loan (the loan raises the sandbox's limit).
		extra := booked - limit
		if need := e.Peak - limit; need > 0 {
			lend := min(max(need, slackStep), f.pool.free)
			if lend >= need {
				f.pool.free -= lend
				heap.Push(&p.loans, loan{at: e.Time.Add(e.Duration), pool: f.pool, n: lend})
				r.Lent++
				r.LentBytes += lend
				given += lend
			} else {
				// Killed for memory: the run so far is lost, and the
				// invocation runs again with the booked size.
				r.OOMRetries++
				r.GivenGBs += gbs(limit, secs)
				given, extra = booked, 0
			}
		}
		r.CacheGainedGBs += gbs(extra, secs)
	}
	r.GivenGBs += gbs(given, secs)
	due, err := f.trainer.Observe(fs, e.Peak, class)
	if err != nil {
		r.BadFeatures++
		return
	}
	if due {
		m, err := f.trainer.Train()
		if err == nil {
			f.model = m
			r.Trainings++
			f.mature = m.Maturity().Mature
		}
	}
}

func gbs(bytes int64, secs float64) float64 { return float64(bytes) / (1 << 30) * secs }

func (p *predictRun) result() *PredictionResult {
	r := p.res
	r.Functions = len(p.fns)
	for _, f := range p.fns {
		if f.mature {
			r.Mature++
		}
	}
	r.ExactShare = ratio(r.Exact, r.Predicted)
	r.ExactOrOverShare = ratio(r.Exact+r.Over, r.Predicted)
	r.SizedShare = ratio(r.Sized, r.Invocations)
	return &r
}

// PredictionResult is what memory prediction did over the trace's
// invocations that carry a measured peak (Event.Peak).
type PredictionResult struct {
	// Functions is how many were seen (each a model; an application
	// whose trace names no function counts as one), Mature how many had
	// a mature model at the end.
	Functions int `json:"functions"`
	Mature    int `json:"mature"`
	// Invocations with a peak; Predicted: placed by a mature model;
	// Sized: given its limit, under the booked memory.
	Invocations int64   `json:"invocations"`
	Predicted   int64   `json:"predicted"`
	Sized       int64   `json:"sized"`
	SizedShare  float64 `json:"sized_share"`
	// Of the predicted: in the peak's interval, above it, below (OFC
	// Table 1's exact and exact-or-over).
	Exact            int64   `json:"exact"`
	Over             int64   `json:"over"`
	Under            int64   `json:"under"`
	ExactShare       float64 `json:"exact_share"`
	ExactOrOverShare float64 `json:"exact_or_over_share"`
	// Lent: invocations saved by a loan from the slack pool (LentBytes in
	// all); OOMRetries: killed for memory and run again at the booked size.
	Lent       int64 `json:"lent"`
	LentBytes  int64 `json:"lent_bytes"`
	OOMRetries int64 `json:"oom_retries"`
	// Memory-time in GB·s: booked by the functions, given to them (a
	// retried invocation's first run and loans included), and needed
	// (the peaks); CacheGainedGBs is what the caches had on top of their
	// budgets: booked minus the predicted limit, over the sized
	// invocations not killed.
	BookedGBs      float64 `json:"booked_gb_s"`
	GivenGBs       float64 `json:"given_gb_s"`
	NeededGBs      float64 `json:"needed_gb_s"`
	CacheGainedGBs float64 `json:"cache_gained_gb_s"`
	Trainings      int64   `json:"trainings"`
	// BadFeatures counts invocations whose features were refused.
	BadFeatures int64 `json:"bad_features,omitempty"`
}

type loan struct {
	at   time.Time
	pool *slackPool
	n    int64
}

type loanHeap []loan

func (h loanHeap) Len() int           { return len(h) }
func (h loanHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h loanHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *loanHeap) Push(x any)        { *h = append(*h, x.(loan)) }
func (h *loanHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
