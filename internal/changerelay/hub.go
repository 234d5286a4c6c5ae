// Package changerelay relays the store's change notifications from the
// platform's controller to the applications' cachelets (ADR 0033).
//
// The store posts its event notifications (MinIO's webhook target, or AWS
// S3's through SNS/EventBridge) to the controller's POST /v1/events. The
// Hub fans each change out to the cachelets subscribed to its bucket,
// each holding a long-lived stream (GET /v1/changes?bucket=B, NDJSON);
// the controller decides who may subscribe to what. Client is the
// cachelet's end: a store.Listener, so the cachelet's rule "trust only
// while listening" (internal/cachelet/external.go) applies unchanged.
//
// A webhook that stops delivering is silent, so the Hub probes: while a
// bucket has subscribers it writes a probe object (ProbeKey) every
// ProbeInterval, whose notification must come back within ProbeBound. A
// subscription is declared ready only once a probe written after it
// registered has come back, and every subscription of a bucket is cut
// when a probe does not come back in time; the cachelets then validate
// their reads until they are ready again.
//
// The stream's lines:
//
//	{"ready":true}                   the relay is confirmed for the bucket
//	{}                               a ping, every heartbeat/3
//	{"changes":[{"key":..,"etag":..,"removed":..,"time":..}]}
//	{"error":"..."}                  the last line of a cut stream
package changerelay

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hoard-io/hoard/internal/store"
)

// ProbeKey is the Hub's probe object in a bucket. Keys under
// ".hoard/changes/" are never relayed nor acted on by cachelets.
const ProbeKey = ".hoard/changes/relay"

// probePrefix is where probe objects live (cachelet.ProbePrefix).
const probePrefix = ".hoard/changes/"

// Errors of Subscribe.
var (
	// ErrTooMany: the bounds on subscriptions are reached.
	ErrTooMany = errors.New("changerelay: too many subscriptions")
	// ErrClosed: the hub is closed.
	ErrClosed = errors.New("changerelay: closed")
)

// Prober writes probe objects (a store.Store is one).
type Prober interface {
	Put(ctx context.Context, bucket, key string, r io.Reader, size int64, opts store.PutOptions) (store.PutResult, error)
}

// Config configures a Hub.
type Config struct {
	// Prober writes the probe objects. Required.
	Prober Prober
	// ProbeInterval is how often a bucket with subscribers is probed;
	// default 2 s.
	ProbeInterval time.Duration
	// ProbeBound is how long a probe's notification may take; past it,
	// the bucket's subscriptions are cut. Default 5 s. A webhook that
	// stops delivering is so noticed within ProbeInterval + ProbeBound.
	ProbeBound time.Duration
	// Buffer bounds the lines queued for one subscriber; a subscriber
	// that falls this far behind is cut (it then validates its reads,
	// never misses a change silently). Default 256.
	Buffer int
	// MaxSubscribers bounds the subscriptions held, MaxPerApp those of
	// one application. Defaults 4096 and 256.
	MaxSubscribers, MaxPerApp int
	// WriteTimeout bounds writing one line to a subscriber; default 5 s.
	WriteTimeout time.Duration
	Logger       *slog.Logger
	Registerer   prometheus.Registerer
}

// Validate checks the config and fills in the defaults.
func (c *Config) Validate() error {
	if c.Prober == nil {
		return errors.New("changerelay: a Prober is required")
	}
	if c.ProbeInterval < 0 || c.ProbeBound < 0 || c.Buffer < 0 || c.MaxSubscribers < 0 || c.MaxPerApp < 0 || c.WriteTimeout < 0 {
		return errors.New("changerelay: settings must not be negative")
	}
	c.ProbeInterval = orDur(c.ProbeInterval, 2*time.Second)
	c.ProbeBound = orDur(c.ProbeBound, 5*time.Second)
	c.WriteTimeout = orDur(c.WriteTimeout, 5*time.Second)
	c.Buffer = orInt(c.Buffer, 256)
	c.MaxSubscribers = orInt(c.MaxSubscribers, 4096)
	c.MaxPerApp = orInt(c.MaxPerApp, 256)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

func orDur(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

func orInt(n, def int) int {
	if n == 0 {
		return def
	}
	return n
}

// Hub fans store changes out to subscribers. Safe for concurrent use.
type Hub struct {
	cfg    Config
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	buckets map[string]*bucket
	n       int
	perApp  map[string]int

	subsG   prometheus.Gauge
	relayed prometheus.Counter
	cuts    *prometheus.CounterVec
	delay   prometheus.Histogram
}

// bucket is one bucket's subscribers and probes.
type bucket struct {
	subs    map[*Sub]struct{}
	probing bool
	seq     uint64
	// pending: the probes written whose notification has not come,
	// by ETag, with when their write began.
	pending map[string]time.Time
	// early: probe notifications that came before their write returned
	// (with an ETag that is not the body's MD5), a few at most.
	early map[string]bool
}

// Sub is one subscriber's stream.
type Sub struct {
	app, bucket string
	since       time.Time // registered
	ready       bool      // under Hub.mu
	lines       chan []byte
	cut         chan struct{}
	why         string // set before cut is closed
}

// New starts a hub.
func New(cfg Config) (*Hub, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	h := &Hub{cfg: cfg, buckets: map[string]*bucket{}, perApp: map[string]int{},
		subsG: prometheus.NewGauge(prometheus.GaugeOpts{Name: "hoard_controller_change_subscribers",
			Help: "Cachelets' streams of relayed store changes held now."}),
		relayed: prometheus.NewCounter(prometheus.CounterOpts{Name: "hoard_controller_changes_relayed_total",
			Help: "Store changes relayed, counted once per subscriber."}),
		cuts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hoard_controller_change_streams_cut_total",
			Help: "Change streams cut by the controller, by reason: slow (a subscriber fell behind), probe (a probe's notification did not come back in time), revoked (the bucket no longer granted), closed."}, []string{"reason"}),
		delay: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "hoard_controller_store_event_delay_seconds",
			Help:    "Time from a change in the store (its event time) to its notification reaching the controller.",
			Buckets: prometheus.ExponentialBuckets(0.5e-3, 2, 16)}),
	}
	if r := cfg.Registerer; r != nil {
		for _, c := range []prometheus.Collector{h.subsG, h.relayed, h.cuts, h.delay} {
			r.MustRegister(c)
		}
	}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	return h, nil
}

// Close cuts every stream and stops probing.
func (h *Hub) Close() {
	h.cancel()
	h.mu.Lock()
	for _, b := range h.buckets {
		for s := range b.subs {
			h.cutLocked(b, s, "closed", "the controller is stopping")
		}
	}
	h.mu.Unlock()
	h.wg.Wait()
}

// Subscribe registers app's subscriber to bucket's changes; the caller
// has checked that app may. The caller serves it (Serve) and then
// Unsubscribes it.
func (h *Hub) Subscribe(app, bucketName string) (*Sub, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ctx.Err() != nil {
		return nil, ErrClosed
	}
	if h.n >= h.cfg.MaxSubscribers || h.perApp[app] >= h.cfg.MaxPerApp {
		return nil, fmt.Errorf("%w (at most %d, %d per application)", ErrTooMany, h.cfg.MaxSubscribers, h.cfg.MaxPerApp)
	}
	b := h.buckets[bucketName]
	if b == nil {
		b = &bucket{subs: map[*Sub]struct{}{}, pending: map[string]time.Time{}, early: map[string]bool{}}
		h.buckets[bucketName] = b
	}
	s := &Sub{app: app, bucket: bucketName, since: time.Now(), lines: make(chan []byte, h.cfg.Buffer), cut: make(chan struct{})}
	b.subs[s] = struct{}{}
	h.n++
	h.perApp[app]++
	h.subsG.Inc()
	if !b.probing {
		b.probing = true
		h.wg.Add(1)
		go h.probe(bucketName, b)
	}
	return s, nil
}

// Unsubscribe forgets s.
func (h *Hub) Unsubscribe(s *Sub) {
	h.mu.Lock()
	defer h.mu.Unlock()
	b := h.buckets[s.bucket]
	if b == nil {
		return
	}
	if _, ok := b.subs[s]; !ok {
		return
	}
	delete(b.subs, s)
	h.n--
	if h.perApp[s.app]--; h.perApp[s.app] <= 0 {
		delete(h.perApp, s.app)
	}
	h.subsG.Dec()
}

// Revoke cuts app's streams of the buckets keep does not keep (an
// application redeployed without a bucket, or removed).
func (h *Hub) Revoke(app string, keep func(bucket string) bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for name, b := range h.buckets {
		if keep(name) {
			continue
		}
		for s := range b.subs {
			if s.app == app {
				h.cutLocked(b, s, "revoked", "the bucket is no longer granted to the application")
			}
		}
	}
}

// cutLocked ends s's stream, with why as its last line. h.mu is held.
func (h *Hub) cutLocked(b *bucket, s *Sub, reason, why string) {
	select {
	case <-s.cut:
		return
	default:
	}
	s.why = why
	close(s.cut)
	h.cuts.WithLabelValues(reason).Inc()
	h.cfg.Logger.Warn("change stream cut; the cachelet validates its reads of the bucket until it is back", "app", s.app, "bucket", s.bucket, "reason", why)
}

// sendLocked queues line for s, cutting s when its queue is full.
func (h *Hub) sendLocked(b *bucket, s *Sub, line []byte) bool {
	select {
	case s.lines <- line:
		return true
	default:
		h.cutLocked(b, s, "slow", fmt.Sprintf("subscriber more than %d lines behind", h.cfg.Buffer))
		return false
	}
}

// line is one line of the stream.
type line struct {
	Ready   bool     `json:"ready,omitempty"`
	Changes []change `json:"changes,omitempty"`
	Error   string   `json:"error,omitempty"`
}

type change struct {
	Key     string    `json:"key"`
	ETag    string    `json:"etag,omitempty"`
	Removed bool      `json:"removed,omitempty"`
	Time    time.Time `json:"time,omitzero"`
}

var (
	readyLine = []byte("{\"ready\":true}\n")
	pingLine  = []byte("{}\n")
)

func encode(l line) []byte {
	b, _ := json.Marshal(l)
	return append(b, '\n')
}

// Publish relays changes the store notified to their buckets'
// subscribers, and takes the probes' notifications.
func (h *Hub) Publish(changes []store.Change) {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range changes {
		if !c.Time.IsZero() {
			h.delay.Observe(max(0, now.Sub(c.Time).Seconds()))
		}
		b := h.buckets[c.Bucket]
		if b == nil {
			continue
		}
		if c.Key == ProbeKey {
			h.probeBackLocked(b, c.ETag)
			continue
		}
		if strings.HasPrefix(c.Key, probePrefix) {
			continue
		}
		l := encode(line{Changes: []change{{Key: c.Key, ETag: c.ETag, Removed: c.Removed, Time: c.Time}}})
		for s := range b.subs {
			if h.sendLocked(b, s, l) {
				h.relayed.Inc()
			}
		}
	}
}

// probeBackLocked takes a probe's notification: the subscribers that
// registered before that probe was written are ready.
func (h *Hub) probeBackLocked(b *bucket, etag string) {
	at, ok := b.pending[etag]
	if !ok {
		if len(b.early) < 16 {
			b.early[etag] = true // another controller's, one declared lost, or early
		}
		return
	}
	for e, t := range b.pending {
		if !t.After(at) {
			delete(b.pending, e) // in order: the earlier ones are past
		}
	}
	for s := range b.subs {
		if !s.ready && s.since.Before(at) {
			if h.sendLocked(b, s, readyLine) {
				s.ready = true
			}
		}
	}
}

// probe writes bucket's probe object every ProbeInterval while it has
// subscribers, and cuts them all when a probe is not back within
// ProbeBound.
func (h *Hub) probe(name string, b *bucket) {
	defer h.wg.Done()
	t := time.NewTicker(h.cfg.ProbeInterval)
	defer t.Stop()
	for {
		h.mu.Lock()
		if len(b.subs) == 0 || h.ctx.Err() != nil {
			b.probing = false
			if len(b.subs) == 0 {
				delete(h.buckets, name)
			}
			h.mu.Unlock()
			return
		}
		b.seq++
		body := strconv.FormatUint(b.seq, 10) + "-" + strconv.FormatInt(time.Now().UnixNano(), 10)
		// A single PUT's ETag is its body's MD5 (S3, MinIO): the probe
		// is pending before its notification can come.
		want := md5hex([]byte(body))
		start := time.Now()
		b.pending[want] = start
		h.mu.Unlock()
		ctx, cancel := context.WithTimeout(h.ctx, min(h.cfg.ProbeInterval, h.cfg.ProbeBound))
		res, err := h.cfg.Prober.Put(ctx, name, ProbeKey, strings.NewReader(body), int64(len(body)), store.PutOptions{ContentType: "text/plain"})
		cancel()
		h.mu.Lock()
		switch etag := strings.Trim(res.ETag, `"`); {
		case err != nil || etag == "":
			// Left pending, never confirmed: the bucket goes down at
			// the bound, as with a notification lost.
			h.cfg.Logger.Debug("change relay probe failed", "bucket", name, "err", err)
		case etag != want:
			if _, still := b.pending[want]; still {
				delete(b.pending, want)
				b.pending[etag] = start
				if b.early[etag] {
					delete(b.early, etag)
					h.probeBackLocked(b, etag)
				}
			}
		}
		h.checkLocked(name, b, time.Now())
		h.mu.Unlock()
		select {
		case <-t.C:
		case <-h.ctx.Done():
		}
	}
}

// checkLocked cuts bucket's subscribers when a probe is overdue.
func (h *Hub) checkLocked(name string, b *bucket, now time.Time) {
	late := false
	for e, t := range b.pending {
		if now.Sub(t) > h.cfg.ProbeBound {
			late = true
			delete(b.pending, e)
		}
	}
	if !late {
		return
	}
	for s := range b.subs {
		h.cutLocked(b, s, "probe", fmt.Sprintf("the store's notifications of bucket %s are late (a probe not back within %s)", name, h.cfg.ProbeBound))
	}
}

// Serve writes s's stream to w until it is cut, the request ends or a
// write fails (each line within WriteTimeout), pinging every ping. It
// answers 200 at once, with a ping.
func (h *Hub) Serve(w http.ResponseWriter, r *http.Request, s *Sub, ping time.Duration) {
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	write := func(b []byte) error {
		_ = rc.SetWriteDeadline(time.Now().Add(h.cfg.WriteTimeout))
		if _, err := w.Write(b); err != nil {
			return err
		}
		return rc.Flush()
	}
	if write(pingLine) != nil {
		return
	}
	t := time.NewTicker(ping)
	defer t.Stop()
	for {
		var err error
		select {
		case l := <-s.lines:
			err = write(l)
		case <-t.C:
			err = write(pingLine)
		case <-s.cut:
			_ = write(encode(line{Error: s.why}))
			return
		case <-r.Context().Done():
			return
		}
		if err != nil {
			return
		}
	}
}

func md5hex(b []byte) string {
	s := md5.Sum(b)
	return hex.EncodeToString(s[:])
}
