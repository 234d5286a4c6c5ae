package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

// fakeClock is a clock whose time passes only when the code under test
// waits (After moves it to the end of the wait at once) or the test
// advances it: a run takes no real time and its timing is exact.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: t0} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(max(d, 0))
	ch := make(chan time.Time, 1)
	ch <- c.now
	return ch
}

// AfterFunc moves the clock to the end of the wait, like After, and
// calls f on its own goroutine.
func (c *fakeClock) AfterFunc(d time.Duration, f func()) func() bool {
	<-c.After(d)
	go f()
	return func() bool { return false }
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// waitFor waits for cond, which another goroutine will make true without
// the clock's help (no timing is asserted by waiting).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		runtime.Gosched()
	}
}

type call struct {
	target Target
	event  string
}

// recorder is an Invoker answering at once; every third invocation of a
// target fails, the first is cold.
type recorder struct {
	mu    sync.Mutex
	calls []call
	n     map[Target]int
}

func (r *recorder) Invoke(_ context.Context, t Target, ev json.RawMessage) (Outcome, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, call{t, string(ev)})
	if r.n == nil {
		r.n = map[Target]int{}
	}
	r.n[t]++
	out := Outcome{OK: true, Cold: r.n[t] == 1}
	if r.n[t]%3 == 0 {
		out = Outcome{ErrorType: "ValueError", Error: "bad input"}
	}
	return out, nil
}

func TestRunnerSendsOnSchedule(t *testing.T) {
	other := Target{App: "app", Function: "p", Pipeline: true}
	sched := Replay([]Arrival{
		{At: 0, Target: fn},
		{At: 100 * time.Millisecond, Target: other, Event: json.RawMessage(`{"own": 1}`)},
		{At: time.Second, Target: fn},
		{At: 1500 * time.Millisecond, Target: fn},
		{At: 2 * time.Second, Target: other},
	})
	inv := &recorder{}
	r := &Runner{Invoker: inv, Event: json.RawMessage(`{"k": "v"}`), Clock: newFakeClock()}
	rep, err := r.Run(context.Background(), sched)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 5 || len(inv.calls) != 5 {
		t.Fatalf("%d results, %d calls, want 5", len(rep.Results), len(inv.calls))
	}
	for i, res := range rep.Results {
		if res.Start != res.Scheduled || res.Delayed {
			t.Errorf("result %d: scheduled %v, sent %v, delayed %v", i, res.Scheduled, res.Start, res.Delayed)
		}
	}
	if rep.Results[1].Target != other || rep.Results[1].Scheduled != 100*time.Millisecond {
		t.Errorf("results out of schedule order: %+v", rep.Results)
	}
	events := map[string]int{}
	for _, c := range inv.calls {
		events[c.event]++
	}
	if events[`{"k": "v"}`] != 4 || events[`{"own": 1}`] != 1 {
		t.Errorf("events sent: %v", events)
	}
	if rep.Elapsed != 2*time.Second {
		t.Errorf("elapsed %v, want 2s", rep.Elapsed)
	}
	tot := rep.Total
	if tot.Invocations != 5 || tot.Sent != 5 || tot.FunctionErrors != 1 || tot.SendErrors != 0 || tot.Cold != 2 ||
		tot.ErrorTypes["ValueError"] != 1 || tot.LatenessMax != 0 {
		t.Errorf("total %+v", tot)
	}
	if tot.IntendedRate != 2 || tot.AchievedRate != 2 { // 4 gaps in 2 s
		t.Errorf("rates: intended %v, achieved %v; want 2/s", tot.IntendedRate, tot.AchievedRate)
	}
	if len(rep.Targets) != 2 || rep.Targets[0].Target != fn || rep.Targets[0].Invocations != 3 ||
		rep.Targets[0].Errors() != 1 || rep.Targets[1].Invocations != 2 || rep.Targets[1].Cold != 1 {
		t.Errorf("targets %+v", rep.Targets)
	}
	if p := r.Progress(); p != (Progress{Sent: 5, Done: 5, Errors: 1}) {
		t.Errorf("progress %+v", p)
	}
}

// gate is an Invoker whose invocations each wait to be released.
type gate struct {
	entered chan int
	release []chan struct{}
	n       int
	mu      sync.Mutex
}

func newGate(n int) *gate {
	g := &gate{entered: make(chan int, n), release: make([]chan struct{}, n)}
	for i := range g.release {
		g.release[i] = make(chan struct{})
	}
	return g
}

func (g *gate) Invoke(ctx context.Context, _ Target, _ json.RawMessage) (Outcome, error) {
	g.mu.Lock()
	i := g.n
	g.n++
	g.mu.Unlock()
	g.entered <- i
	select {
	case <-g.release[i]:
		return Outcome{OK: true}, nil
	case <-ctx.Done():
		return Outcome{}, fmt.Errorf("posting: %w", ctx.Err())
	}
}

func TestRunnerConcurrencyCap(t *testing.T) {
	clock := newFakeClock()
	g := newGate(4)
	r := &Runner{Invoker: g, Concurrency: 1, Clock: clock}
	done := make(chan *Report)
	go func() {
		rep, err := r.Run(context.Background(), Limit(Periodic(fn, time.Second), 4, 0))
		if err != nil {
			t.Error(err)
		}
		done <- rep
	}()
	// 0 s: the first is sent; at 1 s the second finds it in flight and
	// waits until it ends at 1.5 s.
	<-g.entered
	waitFor(t, "the second arrival to wait", func() bool { return r.Progress().Delayed == 1 })
	if p := r.Progress(); p.Sent != 1 || p.InFlight != 1 {
		t.Errorf("progress %+v", p)
	}
	clock.Advance(500 * time.Millisecond)
	close(g.release[0])
	// The second, sent at 1.5 s, holds the third (due at 2 s) until 2.25 s.
	<-g.entered
	waitFor(t, "the third arrival to wait", func() bool { return r.Progress().Delayed == 2 })
	clock.Advance(250 * time.Millisecond)
	close(g.release[1])
	// The third, sent at 2.25 s, holds the fourth (due at 3 s) until it
	// ends at 3 s: the fourth waited, but is not late.
	<-g.entered
	waitFor(t, "the fourth arrival to wait", func() bool { return r.Progress().Delayed == 3 })
	close(g.release[2])
	<-g.entered
	close(g.release[3])
	rep := <-done

	type row struct {
		start, latency time.Duration
		delayed        bool
	}
	want := []row{
		{0, 1500 * time.Millisecond, false},
		{1500 * time.Millisecond, 750 * time.Millisecond, true},
		{2250 * time.Millisecond, 750 * time.Millisecond, true},
		{3 * time.Second, 0, true},
	}
	for i, w := range want {
		res := rep.Results[i]
		if got := (row{res.Start, res.Latency, res.Delayed}); got != w {
			t.Errorf("invocation %d: %+v, want %+v", i, got, w)
		}
	}
	s := rep.Total
	if s.Delayed != 3 || s.Invocations != 4 || s.Errors() != 0 {
		t.Errorf("summary %+v", s)
	}
	if s.LatenessMax != 500*time.Millisecond || s.LatenessP50 != 0 {
		t.Errorf("lateness p50 %v max %v, want 0 and 500ms", s.LatenessP50, s.LatenessMax)
	}
	if s.IntendedRate != 1 || s.AchievedRate != 1 { // 3 gaps over 3 s either way
		t.Errorf("rates %v, %v", s.IntendedRate, s.AchievedRate)
	}
	if s.P50 != 750*time.Millisecond || s.Max != 1500*time.Millisecond {
		t.Errorf("latency p50 %v max %v", s.P50, s.Max)
	}
}

type refused struct{ status int }

func (e refused) Error() string     { return fmt.Sprintf("status %d", e.status) }
func (e refused) ErrorType() string { return fmt.Sprintf("http %d", e.status) }

func TestRunnerSendFailures(t *testing.T) {
	n := 0
	inv := InvokerFunc(func(context.Context, Target, json.RawMessage) (Outcome, error) {
		n++ // one at a time: the fake clock sends each after the last returned
		switch n {
		case 1:
			return Outcome{}, errors.New("connection refused")
		case 2:
			return Outcome{}, fmt.Errorf("the controller: %w", refused{503})
		case 3:
			return Outcome{OK: false}, nil
		}
		return Outcome{OK: true}, nil
	})
	r := &Runner{Invoker: inv, Clock: newFakeClock(), Concurrency: 1}
	rep, err := r.Run(context.Background(), Limit(Periodic(fn, time.Second), 4, 0))
	if err != nil {
		t.Fatal(err)
	}
	s := rep.Total
	if s.SendErrors != 2 || s.FunctionErrors != 1 || s.Sent != 2 || s.ErrorTypes["send"] != 1 ||
		s.ErrorTypes["http 503"] != 1 || s.ErrorTypes["error"] != 1 {
		t.Errorf("summary %+v", s)
	}
	if res := rep.Results[0]; res.Sent || res.OK || res.Error != "connection refused" {
		t.Errorf("first result %+v", res)
	}
}

func TestRunnerStopsWhenCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	g := newGate(2)
	r := &Runner{Invoker: g, Clock: newFakeClock()}
	type ran struct {
		rep *Report
		err error
	}
	done := make(chan ran)
	go func() {
		// Without end: only the cancellation stops it.
		sched := Periodic(fn, time.Second)
		first := true
		rep, err := r.Run(ctx, ScheduleFunc(func() (Arrival, bool) {
			a, ok := sched.Next()
			if !first {
				// Each arrival after the first waits for the test.
				<-g.entered
				if a.At == 2*time.Second {
					cancel()
				}
			}
			first = false
			return a, ok
		}))
		done <- ran{rep, err}
	}()
	got := <-done
	if !errors.Is(got.err, context.Canceled) {
		t.Fatalf("error %v, want canceled", got.err)
	}
	if s := got.rep.Total; s.Invocations != 2 || s.SendErrors != 2 || s.ErrorTypes["canceled"] != 2 {
		t.Errorf("summary %+v", s)
	}
}
