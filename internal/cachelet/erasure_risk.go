package cachelet

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hoard-io/hoard/internal/erasure"
	"github.com/hoard-io/hoard/internal/membership"
)

// The risk of losing a sharded object (docs/design/erasure-coding.md):
// from k, r, the loss rate of instances this cachelet observed in the
// last hour, and the repair window (the membership's lease, the rebuild's
// delay and the last rebuild's duration), exposed as a gauge.

// maxLosses bounds the departures remembered.
const maxLosses = 1024

// noteMembers records the members that left since the last change.
func (e *ecPath) noteMembers() {
	if e.c.cfg.Members == nil {
		return
	}
	now := e.c.clock.Now()
	cur := map[string]bool{}
	for _, a := range e.c.cfg.Members.PeerAddrs() {
		cur[a] = true
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for a := range e.lastMembers {
		if !cur[a] {
			if len(e.losses) == maxLosses {
				e.losses = e.losses[1:]
			}
			e.losses = append(e.losses, now)
			e.lostTotal++
			e.memberLosses.Inc()
		}
	}
	e.lastMembers = cur
}

// health sums up the shards held and the risk (Counters.Erasure).
func (e *ecPath) health() *erasure.Health {
	st := e.shards.Stats()
	h := &erasure.Health{Shards: st.Shards, HeldBytes: st.Bytes, BudgetBytes: st.Budget, LossProbability: e.risk()}
	e.mu.Lock()
	h.MembersLost = e.lostTotal
	e.mu.Unlock()
	return h
}

// risk is the probability of losing an object within the next hour.
func (e *ecPath) risk() float64 {
	now := e.c.clock.Now()
	e.mu.Lock()
	n := 0
	for _, t := range e.losses {
		if now.Sub(t) <= time.Hour {
			n++
		}
	}
	members := len(e.lastMembers) + 1
	window := membership.DefaultTTL + e.cfg.RebuildDelay + e.lastRebuild
	e.mu.Unlock()
	if n == 0 {
		return 0
	}
	// Losses per instance-hour over the last hour (a cachelet up for less
	// than an hour counts the hour all the same: a rate from a few
	// minutes would be noise).
	rate := float64(n) / float64(members+n) / time.Hour.Seconds()
	return erasure.LossProbability(e.cfg.DataShards, e.cfg.ParityShards, rate, window, time.Hour)
}

func (e *ecPath) riskMetrics(reg prometheus.Registerer) {
	e.memberLosses = prometheus.NewCounter(prometheus.CounterOpts{Name: "hoard_erasure_member_losses_total",
		Help: "Members of the application seen leaving (the loss rate behind hoard_erasure_loss_probability)."})
	p := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "hoard_erasure_loss_probability",
		Help: "Probability of losing a sharded object within the next hour, from k, r, the instance loss rate of the last hour and the repair window (docs/design/erasure-coding.md)."},
		e.risk)
	if reg != nil {
		reg.MustRegister(e.memberLosses, p)
	}
}
