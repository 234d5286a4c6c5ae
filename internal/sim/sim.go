package sim

import (
	"container/heap"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/keepalive"
	"github.com/hoard-io/hoard/internal/ring"
	"github.com/hoard-io/hoard/internal/store"
)

// Simulator replays events through every configuration of a Config. It is
// not safe for concurrent use: one goroutine steps it.
type Simulator struct {
	cfg    Config
	clock  *simClock
	caches []*cacheRun
	alive  []*aliveRun
	ends   endHeap            // invocations in flight, by end
	names  []string           // the members of an application's ring: i0, i1, ...
	rings  map[int]*ring.Ring // by member count (2 and up), over names
	turn   uint64             // the next instance for accesses of no invocation

	memos    map[int]*ownerMemo // the last owner asked, by member count
	nextVote time.Time          // the next round of scale votes
	// nextSweep and nextHeld: the next sweep (Config.Sweep) and sample of
	// the bytes held (Config.HeldEvery).
	nextSweep, nextHeld time.Time

	predict *predictRun // with Config.Predict
	erasure *erasureRun // with Config.Erasure

	events     int64
	start, now time.Time
}

// New returns a Simulator for cfg.
func New(cfg Config) (*Simulator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Simulator{cfg: cfg, clock: &simClock{}, rings: map[int]*ring.Ring{}, memos: map[int]*ownerMemo{}}
	for i := range max(cfg.Instances, cfg.MaxInstances) {
		s.names = append(s.names, "i"+strconv.Itoa(i))
	}
	if _, err := s.ring(cfg.Instances); err != nil {
		return nil, err
	}
	for _, r := range cfg.Runs {
		p, size := r.Policy, r.Size
		cc := cache.Config{Budget: size, Policy: p.Policy, TTL: p.TTL, Clock: s.clock, TrackReads: cfg.Sweep != nil}
		if cfg.NoSizeCap {
			cc.MaxObjectSize = size
		}
		if err := cc.Validate(); err != nil {
			return nil, fmt.Errorf("sim: %s at %d bytes: %w", p, size, err)
		}
		run := &cacheRun{sim: s, policy: p, size: size, cfg: cc, apps: map[string][]*cache.Cache{}, first: map[string]time.Time{}, lives: map[string]*lives{}, votes: map[string]*appVotes{}, compute: map[string]*appCompute{},
			times: map[string]*accessTimes{}, scale: map[string]*appScale{}}
		if cfg.Admission {
			run.admit = newAdmitRun()
		}
		s.caches = append(s.caches, run)
	}
	if cfg.Predict {
		s.predict = newPredictRun(cfg.Prediction, cfg.SlackPool)
	}
	if cfg.Erasure != nil {
		x, err := newErasureRun(*cfg.Erasure, s.names[:cfg.Instances])
		if err != nil {
			return nil, err
		}
		s.erasure = x
	}
	for _, k := range cfg.KeepAlives {
		if k.Histogram {
			if _, err := keepalive.New(keepalive.Config{Fixed: k.Fixed}); err != nil {
				return nil, fmt.Errorf("sim: keep-alive %s: %w", k, err)
			}
		}
		s.alive = append(s.alive, &aliveRun{policy: k, apps: map[string]*appState{}})
	}
	return s, nil
}

// Run replays every event of src through a Simulator for cfg and returns
// its report.
func Run(src Source, cfg Config) (Report, error) {
	s, err := New(cfg)
	if err != nil {
		return Report{}, err
	}
	for {
		e, err := src.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return Report{}, err
		}
		if err := s.Step(e); err != nil {
			return Report{}, err
		}
	}
	return s.Report(), nil
}

// Step replays one event. Events must come in time order: an earlier one
// than the last is refused with ErrOutOfOrder, as is an event of no kind
// or a negative size.
func (s *Simulator) Step(e Event) error {
	if s.events > 0 && e.Time.Before(s.now) {
		return fmt.Errorf("%w: event %d at %s follows one at %s", ErrOutOfOrder, s.events+1, e.Time.UTC().Format(time.RFC3339Nano), s.now.UTC().Format(time.RFC3339Nano))
	}
	if e.Size < 0 || e.Offset < 0 || e.Length < 0 || e.Duration < 0 || e.MemoryMB < 0 || e.Peak < 0 {
		return fmt.Errorf("sim: event %d: negative size, range, duration or memory", s.events+1)
	}
	if s.events == 0 {
		s.start = e.Time
		s.nextVote = e.Time.Add(s.cfg.VoteInterval)
		if s.cfg.Sweep != nil {
			s.nextSweep = e.Time.Add(s.cfg.Sweep.MinAge)
		}
		s.nextHeld = e.Time.Add(s.cfg.HeldEvery)
	}
	s.periodic(e.Time)
	if iv := s.cfg.VoteInterval; iv > 0 {
		for !s.nextVote.After(e.Time) {
			for _, c := range s.caches {
				c.advance(s.nextVote)
				c.vote(s.nextVote)
			}
			s.nextVote = s.nextVote.Add(iv)
		}
		for _, c := range s.caches {
			c.advance(e.Time)
		}
	}
	if s.cfg.Admission {
		for _, c := range s.caches {
			c.admit.advance(e.Time)
		}
	}
	s.events++
	s.finishUntil(e.Time)
	if s.predict != nil {
		s.predict.returnUntil(e.Time)
	}
	if s.erasure != nil {
		s.erasure.advance(e.Time)
	}
	s.now = e.Time
	s.clock.now = e.Time
	switch e.Kind {
	case Read:
		s.step(e.Invocation)
		for _, c := range s.caches {
			c.read(&e)
		}
		if s.erasure != nil {
			s.erasure.read(&e)
		}
	case Write:
		s.step(e.Invocation)
		for _, c := range s.caches {
			c.write(&e)
		}
	case Invoke:
		mem := e.MemoryMB
		if mem == 0 {
			mem = s.cfg.MemoryMB
		}
		if s.cfg.Lifecycle {
			if gone, at, gap := s.alive[0].unloadedBefore(e.App, e.Time); gone {
				for _, c := range s.caches {
					c.unload(e.App, at)
					if s.cfg.PreWarm {
						c.preWarm(e.App, e.Time, gap)
					}
				}
			}
		}
		for _, a := range s.alive {
			a.invoked(e.App, e.Time, mem)
		}
		if s.predict != nil {
			s.predict.invoked(&e, mem)
		}
		heap.Push(&s.ends, end{at: e.Time.Add(e.Duration), app: e.App})
		if s.cfg.VoteInterval > 0 {
			for _, c := range s.caches {
				c.invoke(&e)
			}
		}
		if s.cfg.Admission {
			for _, c := range s.caches {
				c.admit.invoked(&e)
			}
		}
	default:
		return fmt.Errorf("sim: event %d has no kind", s.events)
	}
	return nil
}

// periodic runs the sweeps and the samples of bytes held due by t, in
// time order, on the clock of each.
func (s *Simulator) periodic(t time.Time) {
	for {
		sweep := s.cfg.Sweep != nil && !s.nextSweep.After(t)
		held := s.cfg.HeldEvery > 0 && !s.nextHeld.After(t)
		switch {
		case sweep && (!held || !s.nextHeld.Before(s.nextSweep)):
			s.clock.now = s.nextSweep
			for _, c := range s.caches {
				c.sweep(*s.cfg.Sweep)
			}
			s.nextSweep = s.nextSweep.Add(s.cfg.Sweep.MinAge)
		case held:
			for _, c := range s.caches {
				c.sampleHeld()
			}
			s.nextHeld = s.nextHeld.Add(s.cfg.HeldEvery)
		default:
			return
		}
	}
}

// finishUntil ends the invocations due by t, in time order.
func (s *Simulator) finishUntil(t time.Time) {
	for len(s.ends) > 0 && !s.ends[0].at.After(t) {
		x := heap.Pop(&s.ends).(end)
		for _, a := range s.alive {
			a.finished(x.app, x.at)
		}
	}
}

// step takes the next instance in turn for an access of no invocation.
func (s *Simulator) step(invocation uint64) {
	if invocation == 0 {
		s.turn++
	}
}

// instance picks which of n instances serves an access.
func (s *Simulator) instance(invocation uint64, n int) int {
	if n == 1 {
		return 0
	}
	if invocation == 0 {
		return int(s.turn % uint64(n))
	}
	// A multiplicative hash spreads consecutive identifiers.
	return int((invocation * 0x9E3779B97F4A7C15 >> 32) % uint64(n))
}

// ring is the ring of an application with n instances (nil for one),
// made on first use.
func (s *Simulator) ring(n int) (*ring.Ring, error) {
	if n <= 1 {
		return nil, nil
	}
	if r := s.rings[n]; r != nil {
		return r, nil
	}
	r, err := ring.New(ring.Config{}, s.names[:n])
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	s.rings[n] = r
	return r, nil
}

// owner is the instance that owns an object on the ring of an
// application with n instances. Each configuration and each cache's Owns
// asks about the event's object in turn, so the last answer is kept.
func (s *Simulator) owner(n int, bucket, key string) int {
	if n <= 1 {
		return 0
	}
	m := s.memos[n]
	if m == nil {
		m = &ownerMemo{}
		s.memos[n] = m
	}
	if m.ok && m.bucket == bucket && m.key == key {
		return m.owner
	}
	r, err := s.ring(n)
	if err != nil {
		panic(err) // n is within the names, checked in Config.Validate
	}
	id := r.Owner(bucket, key)
	o, _ := strconv.Atoi(id[1:])
	*m = ownerMemo{ok: true, bucket: bucket, key: key, owner: o}
	return o
}

type ownerMemo struct {
	ok          bool
	bucket, key string
	owner       int
}

// Report ends the invocations still in flight and the keep-alive windows
// still open at the last event's time, and returns the results so far.
// The Simulator may be stepped further afterwards.
func (s *Simulator) Report() Report {
	s.finishUntil(s.now)
	r := Report{Events: s.events, Start: s.start, End: s.now, Instances: s.cfg.Instances}
	for _, c := range s.caches {
		r.Caches = append(r.Caches, c.result(s.cfg.Prices))
	}
	for _, a := range s.alive {
		r.KeepAlives = append(r.KeepAlives, a.result(s.now, s.cfg.Prices))
	}
	if s.predict != nil {
		r.Prediction = s.predict.result()
	}
	if s.erasure != nil {
		r.Erasure = s.erasure.result()
	}
	return r
}

type end struct {
	at  time.Time
	app string
}

type endHeap []end

func (h endHeap) Len() int           { return len(h) }
func (h endHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h endHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *endHeap) Push(x any)        { *h = append(*h, x.(end)) }
func (h *endHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// simClock is the simulated clock: it reads the time of the event being
// replayed. The cache only reads it (TTLs); nothing is scheduled on it.
type simClock struct{ now time.Time }

func (c *simClock) Now() time.Time { return c.now }

func (c *simClock) After(time.Duration) <-chan time.Time {
	panic("sim: the simulated clock schedules nothing")
}

func (c *simClock) AfterFunc(time.Duration, func()) func() bool {
	panic("sim: the simulated clock schedules nothing")
}

// ensure the cache sees an ObjectInfo as the cachelet gives it.
func objectInfo(e *Event) store.ObjectInfo {
	return store.ObjectInfo{Bucket: e.Bucket, Key: e.Key, Size: e.Size, ETag: e.Version}
}
