// Package loadgen is hoard's load injector: it generates invocation arrival
// times and fires the invocations at those times, open loop, the way
// FaaSLoad drives OFC's macro benchmark (tenants whose invocations arrive
// with exponential inter-arrival times). `hoard load` drives it.
//
// A Schedule yields Arrivals in order: periodic (one every D), Poisson
// (exponential inter-arrival times with mean D, from a seeded generator, so
// that a run can be repeated exactly) or a trace file replayed (see
// ParseTrace). Scale compresses a schedule in time (a one-hour trace in a
// minute at speed 60) and Limit bounds it by count or duration. Schedules
// are pure: Collect lists one, which is how they are tested.
//
// A Runner sends each arrival at its time through an Invoker without
// waiting for earlier ones to finish, records every invocation's latency,
// outcome and cold start, and summarises them per application and function
// (Summarize).
package loadgen

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Target names what an arrival invokes: a function of an application, or
// one of its pipelines.
type Target struct {
	App string `json:"app"`
	// Function is the function's name, or the pipeline's with Pipeline.
	Function string `json:"function"`
	Pipeline bool   `json:"pipeline,omitempty"`
}

// String is "app/function", or "app/pipeline (pipeline)".
func (t Target) String() string {
	if t.Pipeline {
		return t.App + "/" + t.Function + " (pipeline)"
	}
	return t.App + "/" + t.Function
}

// Arrival is one invocation of a schedule: what to invoke, with what, and
// when, as an offset from the start of the run.
type Arrival struct {
	At     time.Duration
	Target Target
	// Event is the event (a pipeline's input); nil sends the run's
	// default event (Runner.Event).
	Event json.RawMessage
}

// A Schedule yields arrivals in order of their offsets; ok is false when
// it has no more. A Schedule is used by one goroutine.
type Schedule interface {
	Next() (a Arrival, ok bool)
}

// ScheduleFunc adapts a function to a Schedule.
type ScheduleFunc func() (Arrival, bool)

// Next calls f.
func (f ScheduleFunc) Next() (Arrival, bool) { return f() }

// Periodic is one arrival of t every interval, the first at offset 0,
// without end. Offsets are exact multiples of interval (no drift).
func Periodic(t Target, every time.Duration) Schedule {
	if every <= 0 {
		panic("loadgen: periodic interval must be positive")
	}
	var i time.Duration
	return ScheduleFunc(func() (Arrival, bool) {
		a := Arrival{At: i * every, Target: t}
		i++
		return a, true
	})
}

// Poisson is a Poisson process of arrivals of t, without end: the gaps
// between arrivals (and before the first) are exponentially distributed
// with the given mean. The same seed gives the same offsets.
func Poisson(t Target, mean time.Duration, seed uint64) Schedule {
	if mean <= 0 {
		panic("loadgen: poisson mean must be positive")
	}
	rng := rand.New(rand.NewPCG(seed, 0x686f617264)) // "hoard"
	var at float64                                   // nanoseconds, summed in float64 so rounding does not accumulate
	return ScheduleFunc(func() (Arrival, bool) {
		at += rng.ExpFloat64() * float64(mean)
		return Arrival{At: time.Duration(at), Target: t}, true
	})
}

// Replay yields arrivals in the order given; they must be sorted by offset
// (ParseTrace's are).
func Replay(arrivals []Arrival) Schedule {
	i := 0
	return ScheduleFunc(func() (Arrival, bool) {
		if i >= len(arrivals) {
			return Arrival{}, false
		}
		i++
		return arrivals[i-1], true
	})
}

// Scale divides every offset of s by speed: at speed 60 an hour of s is
// sent in a minute, at 0.5 it takes two. Speed must be positive and finite.
func Scale(s Schedule, speed float64) Schedule {
	if !(speed > 0) || math.IsInf(speed, 0) {
		panic(fmt.Sprintf("loadgen: bad speed %v", speed))
	}
	if speed == 1 {
		return s
	}
	return ScheduleFunc(func() (Arrival, bool) {
		a, ok := s.Next()
		a.At = time.Duration(math.Round(float64(a.At) / speed))
		return a, ok
	})
}

// Limit ends s after count arrivals (0: no bound) or at the first arrival
// at or after offset d (0: no bound), whichever comes first. Applied after
// Scale, d is the run's length on the clock.
func Limit(s Schedule, count int, d time.Duration) Schedule {
	n, done := 0, false
	return ScheduleFunc(func() (Arrival, bool) {
		if done || (count > 0 && n >= count) {
			return Arrival{}, false
		}
		a, ok := s.Next()
		if !ok || (d > 0 && a.At >= d) {
			done = true
			return Arrival{}, false
		}
		n++
		return a, true
	})
}

// Collect lists the arrivals of s, at most limit of them (for a schedule
// without end).
func Collect(s Schedule, limit int) []Arrival {
	var out []Arrival
	for len(out) < limit {
		a, ok := s.Next()
		if !ok {
			break
		}
		out = append(out, a)
	}
	return out
}
