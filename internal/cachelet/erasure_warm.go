package cachelet

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hoard-io/hoard/internal/erasure"
)

// Warm-up [InfiniCache: warm-up]: every WarmUp, a cachelet holding
// shards visits each of them: it reads every byte and checks it against
// the object's manifest. The visit keeps the shard store's pages resident
// (an idle instance's memory is what the platform reclaims first), finds
// a shard that went bad before a read does (it is dropped: a doubt is a
// miss; then coded again from k of the other holders' shards), and tells the platform
// that this idle instance still holds part of its application's data
// (ErasureCounters.HeldBytes and LastWarmUp, which the agent reports).
// Its cost is reported: visits, bytes read and seconds spent.

// warmLoop runs a warm-up every WarmUp until the cachelet closes.
func (e *ecPath) warmLoop() {
	defer e.c.wg.Done()
	for {
		select {
		case <-e.c.stopped.Done():
			return
		case <-e.c.clock.After(e.cfg.WarmUp):
		}
		e.warmUp()
	}
}

// warmUp visits every shard held once, and says how many bytes it read
// and how many shards it dropped.
func (e *ecPath) warmUp() (read int64, dropped int) {
	start := e.c.clock.Now()
	var bad []*erasure.Shard
	for _, k := range e.shards.Keys() {
		if e.c.stopped.Err() != nil {
			break
		}
		sh := e.shards.Peek(k)
		n, err := e.shards.Touch(k)
		read += n
		if errors.Is(err, erasure.ErrCorrupt) && sh != nil {
			dropped++
			bad = append(bad, sh)
			e.noteFault()
			e.c.log.Warn("warm-up dropped a shard that no longer verifies", "bucket", k.Bucket, "key", k.Key, "index", k.Index)
		}
	}
	took := e.c.clock.Now().Sub(start)
	e.warmUps.Inc()
	e.warmBytes.Add(float64(read))
	e.warmSeconds.Add(took.Seconds())
	e.warmDropped.Add(float64(dropped))
	e.counts.warmUps.Add(1)
	e.counts.warmBytes.Add(read)
	e.lastWarm.Store(e.c.clock.Now().UnixNano())
	for _, sh := range bad {
		e.restore(e.c.stopped, sh)
	}
	return read, dropped
}

// restore codes the shard bad stood for again from k verified shards of
// the other holders in the object's placement, a window of stripes at a
// time (erasure_stream.go), and keeps it if it verifies (the store checks
// it again).
func (e *ecPath) restore(ctx context.Context, bad *erasure.Shard) {
	m := bad.Manifest
	addrs := e.cfg.Placer.Place(bad.Key.Bucket, bad.Key.Key, m.Shards())
	self := e.cfg.Placer.PeerAddr()
	var holders []string
	for _, addr := range addrs {
		if addr != self {
			holders = append(holders, addr)
		}
	}
	written, _ := e.recode(ctx, ecObject(bad), m, bad.Encoded, holders, []int{bad.Key.Index}, []string{self})
	if len(written) == 0 {
		e.rebuilds.WithLabelValues("failed").Inc()
		return
	}
	e.rebuilds.WithLabelValues("rebuilt").Inc()
	e.counts.rebuilt.Add(1)
	e.rebuiltBytes.Add(float64(m.ShardSize()))
}

func (e *ecPath) warmMetrics(reg prometheus.Registerer) {
	e.warmUps = prometheus.NewCounter(prometheus.CounterOpts{Name: "hoard_erasure_warmups_total",
		Help: "Warm-ups run: visits of every shard held (erasure.warm_up)."})
	e.warmBytes = prometheus.NewCounter(prometheus.CounterOpts{Name: "hoard_erasure_warmup_bytes_total",
		Help: "Bytes of shards read and checked by warm-ups (their cost)."})
	e.warmSeconds = prometheus.NewCounter(prometheus.CounterOpts{Name: "hoard_erasure_warmup_seconds_total",
		Help: "Time spent in warm-ups (their cost)."})
	e.warmDropped = prometheus.NewCounter(prometheus.CounterOpts{Name: "hoard_erasure_warmup_dropped_total",
		Help: "Shards a warm-up found no longer matching their checksums and dropped."})
	if reg != nil {
		reg.MustRegister(e.warmUps, e.warmBytes, e.warmSeconds, e.warmDropped)
	}
}

// lastWarmUp is when the last warm-up ended (zero before the first).
func (e *ecPath) lastWarmUp() time.Time {
	if n := e.lastWarm.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}
