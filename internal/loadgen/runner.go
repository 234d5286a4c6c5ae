package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hoard-io/hoard/internal/clock"
)

// Outcome is what the platform answered for one invocation.
type Outcome struct {
	OK bool
	// ErrorType and Error describe the function's failure when not OK:
	// the exception's type (or Timeout, OutOfMemory) and its message.
	ErrorType, Error string
	// Cold is true when the invocation waited for an instance to start.
	Cold bool
}

// An Invoker sends one invocation and waits for its outcome. A function's
// failure is an Outcome with OK false; an error means the invocation could
// not be sent or was refused (it did not run). An error with an
// ErrorType() string method names its kind in the summary; any other is
// "send", and one caused by the run's context ending "canceled".
type Invoker interface {
	Invoke(ctx context.Context, t Target, event json.RawMessage) (Outcome, error)
}

// InvokerFunc adapts a function to an Invoker.
type InvokerFunc func(ctx context.Context, t Target, event json.RawMessage) (Outcome, error)

// Invoke calls f.
func (f InvokerFunc) Invoke(ctx context.Context, t Target, event json.RawMessage) (Outcome, error) {
	return f(ctx, t, event)
}

// Result is the record of one invocation.
type Result struct {
	Target
	// Scheduled is the arrival's offset from the start of the run and
	// Start when the invocation was sent: Start-Scheduled is its
	// lateness. Latency is from sending to the answer.
	Scheduled time.Duration `json:"scheduled_ns"`
	Start     time.Duration `json:"start_ns"`
	Latency   time.Duration `json:"latency_ns"`
	// Delayed is true when the arrival found Runner.Concurrency
	// invocations in flight and waited for one of them to end.
	Delayed bool `json:"delayed,omitempty"`
	// Sent is false when the invocation could not be sent or was refused
	// (the Invoker's error, in Error, and its kind in ErrorType).
	Sent bool `json:"sent"`
	OK   bool `json:"ok"`
	Cold bool `json:"cold,omitempty"`
	// ErrorType is the function's error type, or the kind of failure to
	// send; Error the message.
	ErrorType string `json:"error_type,omitempty"`
	Error     string `json:"error,omitempty"`
}

// Progress counts a run's invocations so far.
type Progress struct {
	// Sent counts the invocations started, Done those answered or failed,
	// Errors those failed (the function's errors and failures to send),
	// InFlight those started and not done, Delayed those that waited for
	// a slot under Runner.Concurrency.
	Sent, Done, Errors, InFlight, Delayed int64
}

// Report is the outcome of a run.
type Report struct {
	// Total summarises every invocation (its Target is zero), Targets each
	// application's function or pipeline, ordered by application and
	// name.
	Total   Summary   `json:"total"`
	Targets []Summary `json:"targets"`
	// Elapsed is from the start of the run to the end of its last
	// invocation.
	Elapsed time.Duration `json:"elapsed_ns"`
	// Results are the invocations in the order of the schedule.
	Results []Result `json:"results"`
}

// A Runner sends a schedule's invocations at their times, open loop: an
// invocation is sent when its time comes, whether or not earlier ones have
// been answered. A Runner runs one schedule at a time; Progress may be
// called from any goroutine meanwhile.
type Runner struct {
	Invoker Invoker
	// Event is sent for arrivals without one of their own (default {}).
	Event json.RawMessage
	// Concurrency caps the invocations in flight (0: no cap). An arrival
	// that finds the cap reached is sent as soon as one of them ends,
	// late, and counted Delayed; the arrivals after it wait behind it.
	Concurrency int
	// Clock is the real clock if nil.
	Clock clock.Clock

	sent, done, failed, delayed atomic.Int64
}

// Progress counts the current run's invocations so far.
func (r *Runner) Progress() Progress {
	p := Progress{Delayed: r.delayed.Load(), Errors: r.failed.Load()}
	p.Done = r.done.Load() // before Sent, so that InFlight is never negative
	p.Sent = r.sent.Load()
	p.InFlight = p.Sent - p.Done
	return p
}

// Run sends the invocations of s at their times and waits for the last
// answer. When ctx ends it stops sending, the invocations in flight fail
// with "canceled", and it returns the report of what was sent with
// ctx's error.
func (r *Runner) Run(ctx context.Context, s Schedule) (*Report, error) {
	clk := clock.Or(r.Clock)
	defEvent := r.Event
	if defEvent == nil {
		defEvent = json.RawMessage("{}")
	}
	r.sent.Store(0)
	r.done.Store(0)
	r.failed.Store(0)
	r.delayed.Store(0)
	var sem chan struct{}
	if r.Concurrency > 0 {
		sem = make(chan struct{}, r.Concurrency)
	}
	var (
		wg      sync.WaitGroup
		results []*Result // appended by this goroutine only; each filled in by its invocation's
	)
	start := clk.Now()
loop:
	for {
		a, ok := s.Next()
		if !ok {
			break
		}
		if wait := a.At - clk.Now().Sub(start); wait > 0 {
			select {
			case <-ctx.Done():
				break loop
			case <-clk.After(wait):
			}
		}
		if ctx.Err() != nil {
			break
		}
		res := &Result{Target: a.Target, Scheduled: a.At}
		if sem != nil {
			select {
			case sem <- struct{}{}:
			default:
				res.Delayed = true
				r.delayed.Add(1)
				select {
				case sem <- struct{}{}:
				case <-ctx.Done():
					break loop
				}
			}
		}
		sentAt := clk.Now()
		res.Start = sentAt.Sub(start)
		results = append(results, res)
		event := a.Event
		if event == nil {
			event = defEvent
		}
		r.sent.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := r.Invoker.Invoke(ctx, a.Target, event)
			res.Latency = clk.Now().Sub(sentAt)
			switch {
			case err != nil:
				res.ErrorType, res.Error = errorType(ctx, err), err.Error()
			default:
				res.Sent, res.OK, res.Cold = true, out.OK, out.Cold
				if !out.OK {
					res.ErrorType, res.Error = out.ErrorType, out.Error
					if res.ErrorType == "" {
						res.ErrorType = "error"
					}
				}
			}
			if !res.OK {
				r.failed.Add(1)
			}
			r.done.Add(1)
			if sem != nil {
				<-sem
			}
		}()
	}
	wg.Wait()
	rep := &Report{Elapsed: clk.Now().Sub(start), Results: make([]Result, len(results))}
	for i, res := range results {
		rep.Results[i] = *res
	}
	rep.Total, rep.Targets = Summarize(rep.Results)
	return rep, ctx.Err()
}

// errorType names the kind of an Invoker's error.
func errorType(ctx context.Context, err error) string {
	var typed interface{ ErrorType() string }
	switch {
	case ctx.Err() != nil && errors.Is(err, ctx.Err()), errors.Is(err, context.Canceled):
		return "canceled"
	case errors.As(err, &typed):
		return typed.ErrorType()
	default:
		return "send"
	}
}
