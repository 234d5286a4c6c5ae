package cachelet

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/store"
)

// Writers outside hoard (ADR 0028). With ExternalConfig set, the cachelet
// follows the store's change notifications for every bucket it reads and
// drops its copy of an object another writer changed. Under the settings
// that read locally (ReadLocal, and ReadOwner on the key's owner) a cached
// copy is served without asking the store only while its bucket's
// subscription is up; before the store has confirmed the subscription,
// and from the moment it breaks until it is back, those reads are
// validated against the store as under ReadVersionCheck (a write not yet
// in the store is the exception: it is newer than anything the store
// holds). Each time a subscription comes up the bucket's cached copies are
// dropped, since changes made while nobody listened were not told.

// ExternalConfig turns on the following of the store's changes.
type ExternalConfig struct {
	// Listener is the store's change feed: s3store.Store (MinIO's
	// listen API) or changerelay.Client (the controller's relay of the
	// store's event notifications, ADR 0033).
	Listener store.Listener
	// Heartbeat: a subscription silent this long is taken as broken (the
	// store pings three times as often). Default 6 s.
	Heartbeat time.Duration
	// MaxBuckets bounds the subscriptions held; reads of further
	// buckets are always validated. Default 64.
	MaxBuckets int
	// MaxBackoff bounds the wait between attempts to subscribe again
	// (from 100 ms, doubling, with jitter). Default 10 s.
	MaxBackoff time.Duration
	// Probe has the cachelet write a probe object (ProbeKey) in each
	// bucket it follows, every Heartbeat/6: its notifications are
	// traffic on a stream the store would otherwise leave silent but
	// for its pings, and their bytes push out a stream the store holds
	// back in a buffer. It needs write access to the buckets and shows
	// in their listings (under ProbePrefix); the object is removed on
	// Close. Default off: the store's pings are the heartbeat.
	Probe bool
	// ProbeKey names the probe object. Default: ProbePrefix and a
	// random name.
	ProbeKey string
}

// ProbePrefix is where probe objects live in a bucket (ExternalConfig).
const ProbePrefix = ".hoard/changes/"

// probePad is the probe's user metadata: each notification of it carries
// these bytes, enough that two probes push out whatever the store holds
// back.
var probePad = map[string]string{"hoard-pad": strings.Repeat("p", 1800)}

func (e *ExternalConfig) defaults() {
	if e.Heartbeat <= 0 {
		e.Heartbeat = 6 * time.Second
	}
	if e.MaxBuckets <= 0 {
		e.MaxBuckets = 64
	}
	if e.MaxBackoff <= 0 {
		e.MaxBackoff = 10 * time.Second
	}
	if e.ProbeKey == "" {
		var b [8]byte
		_, _ = crand.Read(b[:])
		e.ProbeKey = ProbePrefix + hex.EncodeToString(b[:])
	}
}

// external is the cachelet's subscriptions, one per bucket read.
type external struct {
	c   *Cachelet
	cfg ExternalConfig

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	subs sync.Map   // bucket → *subscription
	mu   sync.Mutex // creates subscriptions
	n    int        // subscriptions; at most cfg.MaxBuckets
	// probed: the buckets holding this cachelet's probe object.
	probed sync.Map

	listening   prometheus.Gauge
	losses      prometheus.Counter
	changes     *prometheus.CounterVec
	validations prometheus.Counter
	delay       prometheus.Histogram
}

type subscription struct {
	up atomic.Bool
}

func newExternal(c *Cachelet, cfg ExternalConfig, reg prometheus.Registerer) *external {
	cfg.defaults()
	x := &external{c: c, cfg: cfg,
		listening: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hoard_cachelet_store_subscriptions_up",
			Help: "Buckets whose store change notifications this cachelet is following now (their local reads need no check).",
		}),
		losses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hoard_cachelet_store_subscription_losses_total",
			Help: "Store change subscriptions that broke or could not be set up; their buckets' reads are validated until they are back.",
		}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hoard_cachelet_store_changes_total",
			Help: "Store change notifications by what they did: invalidated (a cached copy dropped), current (the cached copy is that version), kept (a write not yet in the store is newer), none (nothing cached).",
		}, []string{"action"}),
		validations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hoard_cachelet_unsubscribed_validations_total",
			Help: "Reads that would have trusted a cached copy, validated against the store because the bucket's change subscription was not up.",
		}),
		delay: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "hoard_cachelet_store_change_delay_seconds",
			Help:    "Time from a change in the store (its event time) to the cachelet acting on its notification.",
			Buckets: prometheus.ExponentialBuckets(0.5e-3, 2, 16),
		}),
	}
	if reg != nil {
		for _, col := range []prometheus.Collector{x.listening, x.losses, x.changes, x.validations, x.delay} {
			reg.MustRegister(col)
		}
	}
	x.ctx, x.cancel = context.WithCancel(context.Background())
	return x
}

// trusted reports whether bucket's subscription is up, subscribing to it
// when it is the first read of the bucket. Nil: not following (trusted,
// as before ADR 0028).
func (x *external) trusted(bucket string) bool {
	if x == nil {
		return true
	}
	if s, ok := x.subs.Load(bucket); ok {
		return s.(*subscription).up.Load()
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if _, ok := x.subs.Load(bucket); ok || x.n >= x.cfg.MaxBuckets || x.ctx.Err() != nil {
		return false
	}
	s := &subscription{}
	x.subs.Store(bucket, s)
	x.n++
	x.wg.Add(1)
	go x.follow(bucket, s)
	return false
}

// follow keeps bucket's subscription up until close.
func (x *external) follow(bucket string, s *subscription) {
	defer x.wg.Done()
	log := x.c.log.With("bucket", bucket)
	backoff := 100 * time.Millisecond
	for {
		lctx, stopProbes := context.WithCancel(x.ctx)
		probes := x.probe(lctx, bucket)
		err := x.cfg.Listener.Listen(lctx, bucket, x.cfg.Heartbeat, func() {
			// Changes made while nobody listened were not told: what
			// is cached of the bucket goes before it is trusted.
			x.c.DropPrefix(bucket, "")
			s.up.Store(true)
			x.listening.Inc()
			backoff = 100 * time.Millisecond
			log.Info("following the store's changes; local reads of the bucket trusted")
		}, func(ch store.Change) {
			if !strings.HasPrefix(ch.Key, ProbePrefix) {
				x.changed(ch)
			}
		})
		stopProbes()
		<-probes
		if s.up.Swap(false) {
			x.listening.Dec()
		}
		if x.ctx.Err() != nil {
			return
		}
		x.losses.Inc()
		var api *store.APIError
		if errors.Is(err, store.ErrListenUnsupported) || errors.As(err, &api) || errors.Is(err, store.ErrNoSuchBucket) {
			backoff = x.cfg.MaxBackoff // will not pass soon
		}
		log.Warn("store change subscription down; reads of the bucket are validated against the store until it is back", "err", err, "retry_in", backoff)
		t := time.NewTimer(backoff/2 + rand.N(backoff/2+1))
		select {
		case <-t.C:
		case <-x.ctx.Done():
			t.Stop()
			return
		}
		backoff = min(2*backoff, x.cfg.MaxBackoff)
	}
}

// probe writes bucket's probe object every Heartbeat/6 (when Probe is on)
// until ctx ends,
// then closes the channel it returned. A probe that fails is only logged:
// its notification then does not come, and the subscription is taken as
// broken when the heartbeat passes.
func (x *external) probe(ctx context.Context, bucket string) <-chan struct{} {
	done := make(chan struct{})
	if !x.cfg.Probe {
		close(done)
		return done
	}
	x.probed.Store(bucket, true)
	go func() {
		defer close(done)
		t := time.NewTicker(x.cfg.Heartbeat / 6)
		defer t.Stop()
		for {
			pctx, cancel := context.WithTimeout(ctx, x.cfg.Heartbeat/2)
			_, err := x.c.store.Put(pctx, bucket, x.cfg.ProbeKey, strings.NewReader(""), 0, store.PutOptions{UserMetadata: probePad})
			cancel()
			if err != nil && ctx.Err() == nil {
				x.c.log.Debug("store change probe failed", "bucket", bucket, "err", err)
			}
			select {
			case <-t.C:
			case <-ctx.Done():
				return
			}
		}
	}()
	return done
}

// changed acts on one change notification.
func (x *external) changed(ch store.Change) {
	c := x.c
	if !ch.Time.IsZero() {
		x.delay.Observe(max(0, c.clock.Now().Sub(ch.Time).Seconds()))
	}
	k := cache.Key{Bucket: ch.Bucket, Object: ch.Key}
	c.known.changed(k, ch.ETag, ch.Removed) // for durable writes' bases
	if c.keys.isUnpersisted(k) {
		// A write through hoard the store has not got yet: it lands
		// after this change and wins.
		x.changes.WithLabelValues("kept").Inc()
		return
	}
	if e := c.cache.Peek(k); e != nil && !ch.Removed && ch.ETag != "" && e.Info().ETag == ch.ETag {
		x.changes.WithLabelValues("current").Inc() // typically our own write
		return
	} else if e == nil {
		x.changes.WithLabelValues("none").Inc()
	} else {
		x.changes.WithLabelValues("invalidated").Inc()
	}
	// Fills in flight are doomed too: they may carry the old version.
	c.Invalidate(ch.Bucket, ch.Key)
}

// close ends every subscription.
func (x *external) close() {
	if x == nil {
		return
	}
	x.mu.Lock()
	x.cancel()
	x.mu.Unlock()
	x.wg.Wait()
	// The probe objects go (best effort, bounded).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	x.probed.Range(func(b, _ any) bool {
		_ = x.c.store.Delete(ctx, b.(string), x.cfg.ProbeKey)
		return ctx.Err() == nil
	})
}

// untrusted reports whether a read of k that would trust a cached copy
// must validate it with the store instead, and counts it.
func (c *Cachelet) untrusted(k cache.Key) bool {
	if c.ext.trusted(k.Bucket) || c.keys.isUnpersisted(k) {
		return false
	}
	c.ext.validations.Inc()
	return true
}

func (s *keyState) isUnpersisted(k cache.Key) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.t.IsUnpersisted(k)
}
