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
// delay and the last rebuild's duration), and the shards its warm-ups
// found damaged with the warm-up interval, exposed as a gauge.

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
			if len(e.departed) < maxLosses {
				e.departed = append(e.departed, a)
			}
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
// Two causes make a shard missing: its holder's loss (rate λ, observed as
// departures; missing for the repair window W_r: lease, delay, rebuild),
// and damage a warm-up finds (rate μ, observed as the warm-up's drops per
// shard held; missing until the warm-up that finds it and the repair:
// W_s = WarmUp + delay + rebuild). LossProbability is given both as one
// cause: rate λ+μ and the mean window (λW_r + μW_s)/(λ+μ), which keep how
// often a shard goes missing and how much of the time it is missing
// (what the number missing at once depends on; damage is counted as a
// departure that also restarts the rebuilds in hand, erring high). With
// backups, W_r is q·lease + (1-q)·W_r for the share q of shards backed up
// unchanged.
func (e *ecPath) risk() float64 { return e.riskWith(e.cfg.WarmUp) }

// riskWith is risk with warm-ups every warmUp.
func (e *ecPath) riskWith(warmUp time.Duration) float64 {
	now := e.c.clock.Now()
	e.mu.Lock()
	n := recent(e.losses, now)
	faults := recent(e.faults, now)
	members := len(e.lastMembers) + 1
	repair := e.cfg.RebuildDelay + e.lastRebuild
	e.mu.Unlock()
	held := e.shards.Stats().Shards
	wr := membership.DefaultTTL + repair
	// Backups: a lost holder's shards that its backup holder has are
	// copied back as soon as the departure is seen (W_b = the lease);
	// the share q of shards backed up is this cachelet's own.
	if q := e.backedUpShare(held); q > 0 {
		wr = time.Duration(q*float64(membership.DefaultTTL) + (1-q)*float64(wr))
	}
	ws := warmUp + repair
	// Losses per instance-hour over the last hour (a cachelet up for less
	// than an hour counts the hour all the same: a rate from a few
	// minutes would be noise); faults per shard-hour likewise.
	lambda := float64(n) / float64(members+n) / time.Hour.Seconds()
	mu := 0.0 // a cachelet holding no shards has seen none damaged (and must not divide by zero)
	if faults > 0 {
		mu = float64(faults) / float64(held+faults) / time.Hour.Seconds()
	}
	if n == 0 && faults == 0 {
		return 0
	}
	rate := lambda + mu
	window := time.Duration((lambda*float64(wr) + mu*float64(ws)) / rate)
	// The model costs milliseconds (a grid over the repair window), and
	// every scrape asks; its inputs change only when members leave,
	// warm-ups find damage or a rebuild ends.
	in := riskInputs{e.cfg.DataShards, e.cfg.ParityShards, rate, window}
	e.mu.Lock()
	if m := e.riskMemo; m.valid && m.in == in {
		e.mu.Unlock()
		return m.p
	}
	e.mu.Unlock()
	p := erasure.LossProbability(in.k, in.r, in.rate, in.window, time.Hour)
	e.mu.Lock()
	e.riskMemo = riskMemo{in: in, p: p, valid: true}
	e.mu.Unlock()
	return p
}

// riskInputs are what the loss model is computed from.
type riskInputs struct {
	k, r   int
	rate   float64
	window time.Duration
}

// riskMemo is the last loss probability and its inputs.
type riskMemo struct {
	in    riskInputs
	p     float64
	valid bool
}

// backedUpShare is the share of the shards held (held of them) that the
// last backup sent and that have not changed since: about 1 - B/(2L) for
// shards living L on average under a backup interval B.
func (e *ecPath) backedUpShare(held int) float64 {
	if e.cfg.BackupMemory == 0 || held == 0 {
		return 0
	}
	b := &e.bk
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for k, sh := range b.sent {
		if e.shards.Peek(k) == sh {
			n++
		}
	}
	return min(float64(n)/float64(held), 1)
}

// recent counts the times within the last hour.
func recent(ts []time.Time, now time.Time) int {
	n := 0
	for _, t := range ts {
		if now.Sub(t) <= time.Hour {
			n++
		}
	}
	return n
}

// noteFault records a shard a warm-up dropped.
func (e *ecPath) noteFault() {
	now := e.c.clock.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.faults) == maxLosses {
		e.faults = e.faults[1:]
	}
	e.faults = append(e.faults, now)
}

func (e *ecPath) riskMetrics(reg prometheus.Registerer) {
	e.memberLosses = prometheus.NewCounter(prometheus.CounterOpts{Name: "hoard_erasure_member_losses_total",
		Help: "Members of the application seen leaving (the loss rate behind hoard_erasure_loss_probability)."})
	p := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "hoard_erasure_loss_probability",
		Help: "Probability of losing a sharded object within the next hour, from k, r, the instance loss rate of the last hour and the repair window (shortened for the share of shards backed up), and the rate of damaged shards found by warm-ups with the warm-up interval (docs/design/erasure-coding.md)."},
		e.risk)
	if reg != nil {
		reg.MustRegister(e.memberLosses, p)
	}
}
