package sim

import (
	"time"

	"github.com/hoard-io/hoard/internal/keepalive"
)

// aliveRun is one keep-alive policy: the state of every application under
// it.
type aliveRun struct {
	policy KeepAlive
	apps   map[string]*appState

	invocations, cold int64
	wastedMBs         float64 // idle loaded memory-time, MB·s
}

// appState is one application's instance under a keep-alive policy.
type appState struct {
	hist     *keepalive.Policy // nil under a fixed keep-alive
	running  int
	mem      int // MB, of the latest invocation
	seen     bool
	from, to time.Time // the loaded window after the last end (to: unloaded)
	idle     bool      // the window is open: nothing ran since it began
	cold     int64
	invoked  int64
	first    time.Time // the first invocation
	unloaded time.Time // when the instance is unloaded, the window unused
}

// unloadedBefore reports whether app's instance, idle, was unloaded
// before at (so an invocation at would find an empty cache), when, and
// the application's mean time between invocations so far.
func (a *aliveRun) unloadedBefore(app string, at time.Time) (bool, time.Time, time.Duration) {
	s := a.apps[app]
	if s == nil || !s.seen || s.running > 0 || !s.idle {
		return false, time.Time{}, 0
	}
	var gap time.Duration
	if s.invoked > 0 {
		gap = at.Sub(s.first) / time.Duration(s.invoked)
	}
	if at.Before(s.from) || at.After(s.to) || s.unloaded.Before(s.from) {
		return true, s.unloaded, gap
	}
	return false, time.Time{}, gap
}

func (a *aliveRun) invoked(app string, at time.Time, mem int) {
	s := a.apps[app]
	if s == nil {
		s = &appState{}
		if a.policy.Histogram {
			// Validated in New.
			s.hist, _ = keepalive.New(keepalive.Config{Fixed: a.policy.Fixed})
		}
		a.apps[app] = s
	}
	a.invocations++
	s.invoked++
	switch {
	case s.running > 0:
		// An instance is loaded and busy: warm (one instance per
		// application, as in Shahrad et al.'s simulation).
	case !s.seen || at.Before(s.from) || at.After(s.to):
		a.cold++
		s.cold++
	}
	if s.running == 0 && s.idle {
		a.wastedMBs += float64(s.mem) * loadedIdle(s.from, s.to, at).Seconds()
		s.idle = false
	}
	if !s.seen {
		s.first = at
	}
	s.seen = true
	s.mem = mem
	s.running++
	if s.hist != nil {
		s.hist.Invoked(at)
	}
}

// loadedIdle is how long the window [from, to] was loaded before now.
func loadedIdle(from, to, now time.Time) time.Duration {
	if now.Before(to) {
		to = now
	}
	if to.Before(from) {
		return 0
	}
	return to.Sub(from)
}

func (a *aliveRun) finished(app string, at time.Time) {
	s := a.apps[app]
	if s == nil || s.running == 0 {
		return
	}
	s.running--
	if s.running > 0 {
		return
	}
	pre, keep := time.Duration(0), a.policy.Fixed
	if s.hist != nil {
		s.hist.Finished(at)
		d := s.hist.Decide()
		pre, keep = d.PreWarm, d.KeepAlive
	}
	s.from = at.Add(pre)
	s.to = s.from.Add(keep)
	s.idle = true
	// Under a pre-warm window the instance is unloaded at once, else
	// when its keep-alive runs out.
	s.unloaded = s.to
	if pre > 0 {
		s.unloaded = at
	}
}

func (a *aliveRun) result(now time.Time, p Prices) KeepAliveResult {
	wasted := a.wastedMBs
	for _, s := range a.apps {
		if s.running == 0 && s.idle {
			wasted += float64(s.mem) * loadedIdle(s.from, s.to, now).Seconds()
		}
	}
	r := KeepAliveResult{
		Policy:      a.policy.String(),
		Apps:        len(a.apps),
		Invocations: a.invocations,
		ColdStarts:  a.cold,
		WastedGBs:   wasted / 1024,
	}
	r.ColdStartRatio = ratio(a.cold, a.invocations)
	r.CostUSD = r.WastedGBs * p.LambdaGBSecond
	var always int
	for _, s := range a.apps {
		if s.cold == s.invoked {
			always++
		}
	}
	r.AppsAlwaysCold = always
	return r
}
