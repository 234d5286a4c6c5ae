package writeback

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

var (
	errDown = errors.New("store down")
	errPerm = errors.New("access denied")
)

// sinkFunc adapts a function to Sink.
type sinkFunc func(ctx context.Context, w Write) error

func (f sinkFunc) Persist(ctx context.Context, w Write) error { return f(ctx, w) }

// newQueue starts a queue that the test's cleanup closes.
func newQueue(t *testing.T, cfg Config) *Queue {
	t.Helper()
	q, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close(context.Background()) })
	return q
}

func put(key, data string) Write { return Write{Bucket: "b", Key: key, Data: []byte(data)} }

// outcome returns the value waiting on ch, if any.
func outcome(ch <-chan error) (err error, ok bool) {
	select {
	case err = <-ch:
		return err, true
	default:
		return nil, false
	}
}

// wantOutcome fails unless ch holds an error matching want (nil: holds nil).
func wantOutcome(t *testing.T, name string, ch <-chan error, want error) {
	t.Helper()
	err, ok := outcome(ch)
	switch {
	case !ok:
		t.Errorf("%s: no outcome yet, want %v", name, want)
	case want == nil && err != nil, want != nil && !errors.Is(err, want):
		t.Errorf("%s: outcome %v, want %v", name, err, want)
	}
}

// settled returns a channel holding err, as Enqueue's would.
func settled(err error) <-chan error {
	ch := make(chan error, 1)
	ch <- err
	return ch
}

func wantPending(t *testing.T, name string, ch <-chan error) {
	t.Helper()
	if err, ok := outcome(ch); ok {
		t.Errorf("%s: settled early with %v", name, err)
	}
}

// recorder is a sink that records what it persisted, in order, and lets a
// test hold chosen writes (by data) until released.
type recorder struct {
	mu    sync.Mutex
	got   []string // data of persisted writes
	holds map[string]chan struct{}
}

func newRecorder(hold ...string) *recorder {
	r := &recorder{holds: make(map[string]chan struct{})}
	for _, h := range hold {
		r.holds[h] = make(chan struct{})
	}
	return r
}

func (r *recorder) Persist(ctx context.Context, w Write) error {
	if h := r.holds[string(w.Data)]; h != nil {
		select {
		case <-h:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, string(w.Data))
	return nil
}

func (r *recorder) release(data string) { close(r.holds[data]) }

func (r *recorder) persisted() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

func TestConfigValidate(t *testing.T) {
	sink := newRecorder()
	for _, tc := range []struct {
		name    string
		cfg     Config
		wantErr bool
	}{
		{"defaults", Config{Sink: sink}, false},
		{"no sink", Config{}, true},
		{"negative workers", Config{Sink: sink, Workers: -1}, true},
		{"negative backoff", Config{Sink: sink, MinBackoff: -1}, true},
		{"max below min", Config{Sink: sink, MinBackoff: time.Second, MaxBackoff: time.Millisecond}, true},
		{"min above default max", Config{Sink: sink, MinBackoff: time.Minute}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if (err != nil) != tc.wantErr {
				t.Fatalf("Validate() = %v, want error %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			c := tc.cfg
			if c.Workers != DefaultWorkers || c.MinBackoff <= 0 || c.MaxBackoff < c.MinBackoff ||
				c.Permanent == nil || c.Logger == nil || c.Clock == nil {
				t.Errorf("defaults not filled in: %+v", c)
			}
		})
	}
}

// TestOrderPerKey enqueues many writes of a few keys from many goroutines
// while the sink fails now and then, and checks that each key's writes
// reached the sink in enqueue order, never two at once, and that the last
// write of each key was persisted.
func TestOrderPerKey(t *testing.T) {
	const keys, goroutines, perGoroutine = 8, 16, 300

	var (
		mu        sync.Mutex
		inFlight  = map[string]bool{}
		attempted = map[string][]int{}
		persisted = map[string][]int{}
		calls     int
	)
	sink := sinkFunc(func(_ context.Context, w Write) error {
		v, _ := strconv.Atoi(string(w.Data))
		mu.Lock()
		if inFlight[w.Key] {
			t.Errorf("key %s persisted concurrently", w.Key)
		}
		inFlight[w.Key] = true
		calls++
		fail := calls%5 == 0
		mu.Unlock()

		runtime.Gosched()

		mu.Lock()
		defer mu.Unlock()
		inFlight[w.Key] = false
		attempted[w.Key] = append(attempted[w.Key], v)
		if fail {
			return errDown
		}
		persisted[w.Key] = append(persisted[w.Key], v)
		return nil
	})
	q := newQueue(t, Config{Sink: sink, Workers: 4, MinBackoff: time.Microsecond, MaxBackoff: 20 * time.Microsecond})

	// The per-key lock makes "enqueue order" observable: value v of a key
	// is its v-th Enqueue.
	var keyMu [keys]sync.Mutex
	var chans [keys][]<-chan error
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range perGoroutine {
				k := (g*7 + i) % keys
				keyMu[k].Lock()
				v := len(chans[k]) + 1
				ch := q.Enqueue(put("k"+strconv.Itoa(k), strconv.Itoa(v)))
				chans[k] = append(chans[k], ch)
				keyMu[k].Unlock()
				if g%2 == 0 {
					// Wait for the outcome and put it back for the
					// checks below: fewer writes are superseded, more
					// are persisted while others of the key queue up.
					err := <-ch
					keyMu[k].Lock()
					chans[k][v-1] = settled(err)
					keyMu[k].Unlock()
				}
			}
		})
	}
	wg.Wait()
	if err := q.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}

	mu.Lock()
	defer mu.Unlock()
	var total, superseded int
	for k := range keys {
		key := "k" + strconv.Itoa(k)
		if a := attempted[key]; !slices.IsSorted(a) {
			t.Errorf("%s: attempts out of order: %v", key, a)
		}
		p := persisted[key]
		for i := 1; i < len(p); i++ {
			if p[i] <= p[i-1] {
				t.Errorf("%s: persisted out of order: %v", key, p)
				break
			}
		}
		if last := len(chans[k]); len(p) == 0 || p[len(p)-1] != last {
			t.Errorf("%s: last persisted write is not the last enqueued (%d): %v", key, last, p)
		}
		for i, ch := range chans[k] {
			v := i + 1
			err, ok := outcome(ch)
			switch {
			case !ok:
				t.Errorf("%s=%d: not settled after Drain", key, v)
			case err == nil:
				if _, found := slices.BinarySearch(p, v); !found {
					t.Errorf("%s=%d: reported persisted but the sink never accepted it", key, v)
				}
			case errors.Is(err, ErrSuperseded):
				superseded++
				if slices.Contains(attempted[key], v) {
					t.Errorf("%s=%d: superseded after it started", key, v)
				}
			default:
				t.Errorf("%s=%d: unexpected outcome %v", key, v, err)
			}
		}
		total += len(p)
	}
	if total+superseded != goroutines*perGoroutine {
		t.Errorf("persisted %d + superseded %d != enqueued %d", total, superseded, goroutines*perGoroutine)
	}
	s := q.Stats()
	if s.Persisted != uint64(total) || s.Superseded != uint64(superseded) || s.Depth != 0 || s.Failed != 0 {
		t.Errorf("Stats = %+v; want Persisted %d, Superseded %d, Depth 0, Failed 0", s, total, superseded)
	}
	if s.Retries == 0 {
		t.Errorf("Stats.Retries = 0; the sink failed every fifth call")
	}
	t.Logf("persisted %d, superseded %d, retries %d", total, superseded, s.Retries)
}

func TestSupersede(t *testing.T) {
	t.Run("queued writes replaced, running write kept", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			rec := newRecorder("1")
			q := newQueue(t, Config{Sink: rec, Workers: 1})
			c1 := q.Enqueue(put("k", "1"))
			synctest.Wait() // "1" is in progress
			c2 := q.Enqueue(put("k", "2"))
			c3 := q.Enqueue(put("k", "3"))
			c4 := q.Enqueue(put("k", "4"))
			synctest.Wait()
			wantPending(t, "1", c1)
			wantOutcome(t, "2", c2, ErrSuperseded)
			wantOutcome(t, "3", c3, ErrSuperseded)
			wantPending(t, "4", c4) // waits for "1", not overtaking it

			rec.release("1")
			synctest.Wait()
			wantOutcome(t, "1", c1, nil)
			wantOutcome(t, "4", c4, nil)
			if got, want := rec.persisted(), []string{"1", "4"}; !slices.Equal(got, want) {
				t.Errorf("persisted %v, want %v", got, want)
			}
			if s := q.Stats(); s.Superseded != 2 || s.Persisted != 2 {
				t.Errorf("Stats = %+v, want Superseded 2, Persisted 2", s)
			}
		})
	})
	t.Run("write waiting for a worker replaced", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			rec := newRecorder("x")
			q := newQueue(t, Config{Sink: rec, Workers: 1})
			cx := q.Enqueue(put("other", "x")) // occupies the only worker
			synctest.Wait()
			c1 := q.Enqueue(put("k", "1"))
			c2 := q.Enqueue(Write{Bucket: "b", Key: "k", Delete: true, Data: []byte("del")})
			synctest.Wait()
			wantOutcome(t, "1", c1, ErrSuperseded)
			wantPending(t, "delete", c2)
			rec.release("x")
			synctest.Wait()
			wantOutcome(t, "x", cx, nil)
			wantOutcome(t, "delete", c2, nil)
			if got, want := rec.persisted(), []string{"x", "del"}; !slices.Equal(got, want) {
				t.Errorf("persisted %v, want %v", got, want)
			}
		})
	})
	t.Run("same key in another bucket is another key", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			rec := newRecorder("x")
			q := newQueue(t, Config{Sink: rec, Workers: 1})
			q.Enqueue(put("other", "x"))
			synctest.Wait()
			c1 := q.Enqueue(Write{Bucket: "b1", Key: "k", Data: []byte("1")})
			c2 := q.Enqueue(Write{Bucket: "b2", Key: "k", Data: []byte("2")})
			rec.release("x")
			synctest.Wait()
			wantOutcome(t, "b1/k", c1, nil)
			wantOutcome(t, "b2/k", c2, nil)
		})
	})
}

func TestKeysProceedInParallel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder("a")
		q := newQueue(t, Config{Sink: rec, Workers: 2})
		ca := q.Enqueue(put("a", "a"))
		cb := q.Enqueue(put("b", "b"))
		synctest.Wait()
		wantPending(t, "a", ca)
		wantOutcome(t, "b", cb, nil) // not blocked behind a
		rec.release("a")
		synctest.Wait()
		wantOutcome(t, "a", ca, nil)
	})
}

// TestBackoffFreesWorker checks that a write waiting to be retried does not
// keep its worker from other keys.
func TestBackoffFreesWorker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		down := true
		attempts := 0
		sink := sinkFunc(func(_ context.Context, w Write) error {
			mu.Lock()
			defer mu.Unlock()
			if w.Key == "a" {
				attempts++
				if down {
					return errDown
				}
			}
			return nil
		})
		q := newQueue(t, Config{Sink: sink, Workers: 1, MinBackoff: time.Hour, MaxBackoff: time.Hour})
		ca := q.Enqueue(put("a", "a"))
		synctest.Wait() // a failed and waits for its retry
		cb := q.Enqueue(put("b", "b"))
		synctest.Wait()
		wantOutcome(t, "b", cb, nil)
		wantPending(t, "a", ca)

		mu.Lock()
		down = false
		mu.Unlock()
		time.Sleep(time.Hour) // the longest possible backoff
		synctest.Wait()
		wantOutcome(t, "a", ca, nil)
		mu.Lock()
		defer mu.Unlock()
		if attempts != 2 {
			t.Errorf("a attempted %d times, want 2", attempts)
		}
	})
}

func TestTransientFailuresRetried(t *testing.T) {
	for _, tc := range []struct {
		name     string
		failures int
		min, max time.Duration
	}{
		{"short outage", 8, 100 * time.Millisecond, time.Second},
		{"long outage with defaults", 500, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var times []time.Time
				sink := sinkFunc(func(context.Context, Write) error {
					times = append(times, time.Now()) // one call at a time: one key
					if len(times) <= tc.failures {
						return fmt.Errorf("put: %w", errDown)
					}
					return nil
				})
				q := newQueue(t, Config{Sink: sink, MinBackoff: tc.min, MaxBackoff: tc.max})
				if err := <-q.Enqueue(put("k", "v")); err != nil {
					t.Fatalf("outcome %v, want nil", err)
				}
				if len(times) != tc.failures+1 {
					t.Fatalf("%d attempts, want %d", len(times), tc.failures+1)
				}
				lo, hi := q.cfg.MinBackoff, q.cfg.MaxBackoff
				nominal, prevNominal := lo, time.Duration(0)
				var prev time.Duration
				for i := 1; i < len(times); i++ {
					wait := times[i].Sub(times[i-1])
					if wait < nominal/2 || wait > nominal {
						t.Errorf("wait before attempt %d: %v, want in [%v, %v]", i+1, wait, nominal/2, nominal)
					}
					// While the nominal wait doubles, the jittered ranges
					// [d/2, d] and [d, 2d] do not overlap: waits grow.
					if nominal == 2*prevNominal && wait < prev {
						t.Errorf("wait before attempt %d: %v shrank from %v", i+1, wait, prev)
					}
					prev, prevNominal = wait, nominal
					nominal = min(2*nominal, hi)
				}
				if nominal != hi {
					t.Errorf("backoff never reached its cap %v", hi)
				}
				if s := q.Stats(); s.Retries != uint64(tc.failures) || s.Persisted != 1 || s.Failed != 0 {
					t.Errorf("Stats = %+v, want Retries %d, Persisted 1, Failed 0", s, tc.failures)
				}
			})
		})
	}
}

func TestBackoffBounds(t *testing.T) {
	const lo, hi = 50 * time.Millisecond, 5 * time.Second
	for _, tc := range []struct {
		attempts int
		nominal  time.Duration
	}{
		{1, 50 * time.Millisecond},
		{2, 100 * time.Millisecond},
		{3, 200 * time.Millisecond},
		{7, 3200 * time.Millisecond},
		{8, hi},
		{1000, hi},
	} {
		for range 100 {
			if d := backoff(lo, hi, tc.attempts); d < tc.nominal/2 || d > tc.nominal {
				t.Fatalf("backoff after %d attempts = %v, want in [%v, %v]", tc.attempts, d, tc.nominal/2, tc.nominal)
			}
		}
	}
}

func TestPermanentFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		attempts := map[string]int{}
		var mu sync.Mutex
		sink := sinkFunc(func(_ context.Context, w Write) error {
			mu.Lock()
			defer mu.Unlock()
			attempts[string(w.Data)]++
			if string(w.Data) == "bad" {
				return fmt.Errorf("put %s: %w", w.Key, errPerm)
			}
			return nil
		})
		q := newQueue(t, Config{Sink: sink, Permanent: func(err error) bool { return errors.Is(err, errPerm) }})
		c1 := q.Enqueue(put("k", "bad"))
		synctest.Wait()
		wantOutcome(t, "bad", c1, errPerm)
		c2 := q.Enqueue(put("k", "good")) // the key is usable again
		synctest.Wait()
		wantOutcome(t, "good", c2, nil)
		if attempts["bad"] != 1 {
			t.Errorf("permanent failure attempted %d times, want 1", attempts["bad"])
		}
		if s := q.Stats(); s.Failed != 1 || s.Retries != 0 || s.Persisted != 1 {
			t.Errorf("Stats = %+v, want Failed 1, Retries 0, Persisted 1", s)
		}
	})
}

func TestDrain(t *testing.T) {
	t.Run("waits for earlier writes only", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			rec := newRecorder("a", "b")
			q := newQueue(t, Config{Sink: rec})
			ca := q.Enqueue(put("a", "a"))
			drained := make(chan error, 1)
			go func() { drained <- q.Drain(context.Background()) }()
			synctest.Wait() // Drain is waiting
			cb := q.Enqueue(put("b", "b"))
			synctest.Wait()
			wantPending(t, "drain before a", drained)

			rec.release("a")
			synctest.Wait()
			wantOutcome(t, "a", ca, nil)
			wantOutcome(t, "drain after a", drained, nil) // b is still in progress
			wantPending(t, "b", cb)
			rec.release("b")
		})
	})
	t.Run("empty queue", func(t *testing.T) {
		q := newQueue(t, Config{Sink: newRecorder()})
		if err := q.Drain(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("ctx ends first", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			rec := newRecorder("a")
			q := newQueue(t, Config{Sink: rec})
			ca := q.Enqueue(put("a", "a"))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := q.Drain(ctx); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Drain = %v, want deadline exceeded", err)
			}
			q.mu.Lock()
			if len(q.drains) != 0 {
				t.Errorf("%d drain waiters left behind", len(q.drains))
			}
			q.mu.Unlock()
			rec.release("a")
			synctest.Wait()
			wantOutcome(t, "a", ca, nil)
		})
	})
}

func TestCloseDrainsThenRefuses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder("a")
		q := newQueue(t, Config{Sink: rec, Workers: 1})
		ca := q.Enqueue(put("a", "a"))
		cb := q.Enqueue(put("b", "b"))
		synctest.Wait()
		closed := make(chan error, 1)
		go func() { closed <- q.Close(context.Background()) }()
		synctest.Wait()
		wantPending(t, "Close", closed)
		wantOutcome(t, "enqueue while closing", q.Enqueue(put("c", "c")), ErrClosed)

		rec.release("a")
		synctest.Wait()
		wantOutcome(t, "Close", closed, nil)
		wantOutcome(t, "a", ca, nil)
		wantOutcome(t, "b", cb, nil)
		if err := q.Close(context.Background()); err != nil {
			t.Errorf("second Close = %v", err)
		}
		wantOutcome(t, "enqueue after close", q.Enqueue(put("d", "d")), ErrClosed)
		if err := q.Drain(context.Background()); err != nil {
			t.Errorf("Drain after Close = %v", err)
		}
		if got, want := rec.persisted(), []string{"a", "b"}; !slices.Equal(got, want) {
			t.Errorf("persisted %v, want %v", got, want)
		}
	})
}

func TestCloseKeepsRetrying(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		attempts := 0
		sink := sinkFunc(func(context.Context, Write) error {
			attempts++
			if attempts <= 5 {
				return errDown
			}
			return nil
		})
		q := newQueue(t, Config{Sink: sink})
		ch := q.Enqueue(put("k", "v"))
		if err := q.Close(context.Background()); err != nil {
			t.Fatalf("Close = %v", err)
		}
		wantOutcome(t, "k", ch, nil)
		if attempts != 6 {
			t.Errorf("%d attempts, want 6", attempts)
		}
	})
}

// TestSettledBeforeDrain: a write's Settled hook has run, for every way
// a write settles, by the time a Drain that waited for it returns.
func TestSettledBeforeDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder("a1")
		q := newQueue(t, Config{Sink: rec})
		var mu sync.Mutex
		var settledKeys []string
		hook := func(name string) func(error) {
			return func(error) {
				mu.Lock()
				settledKeys = append(settledKeys, name)
				mu.Unlock()
			}
		}
		w1, w2, w3 := put("a", "a1"), put("a", "a2"), put("a", "a3")
		w1.Settled, w2.Settled, w3.Settled = hook("a1"), hook("a2"), hook("a3")
		q.Enqueue(w1) // in progress, held
		synctest.Wait()
		q.Enqueue(w2) // superseded by a3 before it starts
		q.Enqueue(w3)
		drained := make(chan error, 1)
		go func() { drained <- q.Drain(context.Background()) }()
		synctest.Wait()
		rec.release("a1")
		if err := <-drained; err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		got := slices.Clone(settledKeys)
		mu.Unlock()
		slices.Sort(got)
		if !slices.Equal(got, []string{"a1", "a2", "a3"}) {
			t.Errorf("settled before Drain returned: %v, want a1, a2 and a3", got)
		}
	})
}
