package cachelet

import (
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hoard-io/hoard/internal/clock"
)

// metrics are the cachelet's Prometheus series. Names are part of the
// product's interface: dashboards and tests read them.
type metrics struct {
	reads       *prometheus.CounterVec   // hoard_cachelet_reads_total{outcome}
	readBytes   *prometheus.CounterVec   // hoard_cachelet_read_bytes_total{outcome}
	readSeconds *prometheus.HistogramVec // hoard_cachelet_read_seconds{outcome}
	readErrors  prometheus.Counter
	validations *prometheus.CounterVec
	// validationJoins counts reads answered by a validation another read
	// started (validate.go).
	validationJoins prometheus.Counter
	fills           *prometheus.CounterVec
	fillOK          prometheus.Counter // fills{result="ok"}, resolved once: every miss counts one
	fillSeconds     prometheus.Histogram
	writes          *prometheus.CounterVec
	evictedBytes    prometheus.Counter
	// writeAhead counts objects too large to spill on eviction, by what
	// became of their write to the disk tier ahead of it (disk.go).
	writeAhead *prometheus.CounterVec // hoard_cachelet_disk_write_ahead_total{result}

	// Budget changes (budget.go).
	budgetChanges *prometheus.CounterVec // hoard_cachelet_budget_changes_total{direction}
	budgetEvicted prometheus.Counter     // hoard_cachelet_budget_evicted_bytes_total
	sweptBytes    prometheus.Counter     // hoard_cache_swept_bytes_total
	// finalOutputs counts final outputs not kept in memory, by when
	// (final.go).
	finalOutputs *prometheus.CounterVec // hoard_cachelet_final_outputs_dropped_total{when}

	peerFallbacks prometheus.Counter
	replayed      prometheus.Counter
	// The durable log's replay guard (durable_base.go).
	replaySuperseded prometheus.Counter     // hoard_cachelet_durable_replay_superseded_total
	movedSuperseded  prometheus.Counter     // hoard_cachelet_durable_moved_superseded_total
	replayUnverified prometheus.Counter     // hoard_cachelet_durable_replay_unverified_total
	durableBase      *prometheus.CounterVec // hoard_cachelet_durable_base_total{from}
	baseWaits        prometheus.Counter     // hoard_cachelet_durable_base_waits_total
	peerRefused      prometheus.Counter     // hoard_cachelet_peer_answers_refused_total
	peerServed       *prometheus.CounterVec
	handoffs         prometheus.Counter
	// Migrations (migrate.go): offers sent, by why and result, and
	// offers received, by result.
	migrated      *prometheus.CounterVec // hoard_cachelet_migrated_objects_total{why,result}
	migratedBytes *prometheus.CounterVec // hoard_cachelet_migrated_bytes_total{why,result}
	installs      *prometheus.CounterVec // hoard_cachelet_migrations_received_total{result}
	prewarmed     prometheus.Counter
	prewarmHits   prometheus.Counter

	// versioningChecks counts buckets' versioning asked of the store
	// (versioning.go).
	versioningChecks *prometheus.CounterVec

	// counts mirror reads and writes for Cachelet.Counters.
	counts counters

	// readSeries holds, by readOutcomes' index, each outcome's read
	// series, looked up the first time a read of it ends.
	readSeries [len(readOutcomes)]atomic.Pointer[readSeries]

	clock clock.Clock // times reads
}

func newMetrics(reg prometheus.Registerer, c *Cachelet) *metrics {
	m := &metrics{
		reads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hoard_cachelet_reads_total",
			Help: "Object reads by outcome: local_hit, local_miss, remote_hit, remote_miss, pass_through, for_peer (served to a peer as owner).",
		}, []string{"outcome"}),
		readBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hoard_cachelet_read_bytes_total",
			Help: "Bytes sent to clients by read outcome.",
		}, []string{"outcome"}),
		readSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "hoard_cachelet_read_seconds",
			Help:    "Time from request to last byte sent, by read outcome.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 20), // 50us .. ~26s
		}, []string{"outcome"}),
		readErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hoard_cachelet_read_errors_total",
			Help: "Reads that failed for a reason other than a missing object.",
		}),
		validations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hoard_cachelet_validations_total",
			Help: "Version checks of cached copies against the store: fresh, changed, gone, error.",
		}, []string{"result"}),
		validationJoins: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hoard_cachelet_validation_joins_total",
			Help: "Reads of a cached copy that shared a version check another read started (sent after both began).",
		}),
		writeAhead: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hoard_cachelet_disk_write_ahead_total",
			Help: "Objects too large to wait in memory for their disk write once evicted, written to the disk tier when admitted instead: written, refused (by the tier: on disk already, no room, degraded), gone (evicted before their turn), busy (the queue full).",
		}, []string{"result"}),
		fills: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hoard_cachelet_fills_total",
			Help: "Downloads from the store into memory: ok, aborted, doomed (overtaken by a write), over_budget (the budget was lowered below the fills in flight).",
		}, []string{"result"}),
		fillSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "hoard_cachelet_fill_seconds",
			Help:    "Duration of successful fills.",
			Buckets: prometheus.ExponentialBuckets(100e-6, 2, 20),
		}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hoard_cachelet_writes_total",
			Help: "Writes through the cachelet by operation and result.",
		}, []string{"op", "result"}),
		evictedBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hoard_cache_evicted_bytes_total",
			Help: "Bytes evicted from the memory tier to make room.",
		}),
	}
	m.peerRefused = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "hoard_cachelet_peer_answers_refused_total",
		Help: "Owners' answers that failed verification (their signature, their body's MAC, or the store's checksum they carried): read from the store instead, or their fill aborted; a rogue or misconfigured member, or damage on the way.",
	})
	m.replayed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "hoard_cachelet_durable_replayed_total",
		Help: "Acknowledged writes found in the durable log on start, not yet in the store, held again and delivered.",
	})
	m.replaySuperseded = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "hoard_cachelet_durable_replay_superseded_total",
		Help: "Writes replayed from the durable log and not delivered, because the store held a version of the key newer than the one each was written over (another route wrote the key while this cachelet was down); dropped, never served.",
	})
	m.movedSuperseded = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "hoard_cachelet_durable_moved_superseded_total",
		Help: "Durable writes whose key moved to another owner before they were delivered and were not delivered, because the store held a version of the key newer than the one each was written over (the new owner wrote it meanwhile); dropped, never served.",
	})
	m.replayUnverified = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "hoard_cachelet_durable_replay_unverified_total",
		Help: "Checks of writes replayed from the durable log whose base was unknown (logged by an older version, or when the store could not say) that found the key in the store: put over it, as before bases were kept.",
	})
	m.durableBase = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hoard_cachelet_durable_base_total",
		Help: "Durable writes by where the store version each replaces came from: known (an earlier write of the key from here), cached (the cached copy), asked (a HEAD), unknown (the store did not answer it in time, or more writes of the key were held than a base names); and learned: unknown writes that learned it later, from a HEAD retried while the key was still owned here.",
	}, []string{"from"})
	m.baseWaits = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "hoard_cachelet_durable_base_waits_total",
		Help: "Deliveries of durable writes held back (retried later) because their key moved to another owner before the store version each was written over was known; never delivered unconditionally.",
	})
	m.peerFallbacks = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "hoard_cachelet_peer_fallbacks_total",
		Help: "Misses the key's owner could not answer, read from the store instead.",
	})
	m.versioningChecks = newVersioningChecks()
	m.peerServed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hoard_cachelet_peer_served_total",
		Help: "Objects served to peers as their owner: remote_hit (from memory) or remote_miss (from the store).",
	}, []string{"outcome"})
	m.handoffs = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "hoard_cachelet_handoffs_total",
		Help: "Ownership handoffs run after membership changes (owner settings only).",
	})
	m.migrated = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hoard_cachelet_migrated_objects_total",
		Help: "Hot objects offered to their owner instead of being dropped, by why (handoff: a ring change; shrink: a lowered budget) and result (installed, refused: the owner could not verify or keep it, failed: the owner could not be asked).",
	}, []string{"why", "result"})
	m.migratedBytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hoard_cachelet_migrated_bytes_total",
		Help: "Bytes of the hot objects offered to their owner, by why and result (as hoard_cachelet_migrated_objects_total).",
	}, []string{"why", "result"})
	for _, why := range []string{migrateHandoff, migrateShrink} {
		for _, r := range migrateResults {
			m.migrated.WithLabelValues(why, r)
			m.migratedBytes.WithLabelValues(why, r)
		}
	}
	m.installs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hoard_cachelet_migrations_received_total",
		Help: "Copies of hot objects offered by other members, by result: installed (verified and kept) or refused.",
	}, []string{"result"})
	m.installs.WithLabelValues("installed")
	m.installs.WithLabelValues("refused")
	m.prewarmed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "hoard_cachelet_prewarmed_total",
		Help: "Objects fetched into memory by pre-warming.",
	})
	m.prewarmHits = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "hoard_cachelet_prewarm_hits_total",
		Help: "Pre-warmed objects later read as local hits (each counted once).",
	})
	m.budgetChanges = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hoard_cachelet_budget_changes_total",
		Help: "Run-time changes of the memory tier's budget (the memory daemon's), by direction: shrink or raise.",
	}, []string{"direction"})
	m.sweptBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "hoard_cache_swept_bytes_total",
		Help: "Bytes dropped from the memory tier by the periodic sweep.",
	})
	m.finalOutputs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hoard_cachelet_final_outputs_dropped_total",
		Help: "Writes under the application's final_outputs locations not kept in memory: written (the store had them when the write was answered) or persisted (dropped once written back to the store).",
	}, []string{"when"})
	for _, w := range []string{"written", "persisted"} {
		m.finalOutputs.WithLabelValues(w)
	}
	m.budgetEvicted = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "hoard_cachelet_budget_evicted_bytes_total",
		Help: "Bytes evicted from the memory tier to fit a lowered budget (the memory daemon giving the function memory); also counted in hoard_cache_evicted_bytes_total.",
	})
	for _, d := range []string{"shrink", "raise"} {
		m.budgetChanges.WithLabelValues(d)
	}
	for _, o := range []Outcome{LocalHit, LocalMiss, RemoteHit, RemoteMiss, PassThrough, DiskHit} {
		m.reads.WithLabelValues(string(o))
		m.readBytes.WithLabelValues(string(o))
	}
	m.fillOK = m.fills.WithLabelValues("ok")
	if reg == nil {
		return m
	}
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	reg.MustRegister(m.reads, m.readBytes, m.readSeconds, m.readErrors, m.validations, m.validationJoins, m.writeAhead,
		m.fills, m.fillSeconds, m.writes, m.evictedBytes, m.budgetChanges, m.budgetEvicted, m.finalOutputs, m.peerFallbacks, m.replayed, m.replaySuperseded, m.movedSuperseded, m.replayUnverified, m.durableBase, m.baseWaits, m.versioningChecks, m.peerRefused, m.peerServed, m.handoffs, m.migrated, m.migratedBytes, m.installs, m.prewarmed, m.prewarmHits,
		gauge("hoard_cachelet_durable_base_waiting", "Durable writes held here whose base (the store version each was written over) is not known yet: each asks the store again, and if its key moves first it is not delivered until it knows it.", func() float64 { return float64(c.known.waiting.Load()) }),
		gauge("hoard_cache_bytes", "Bytes held by complete cached objects.", func() float64 { return float64(c.cache.Stats().Bytes) }),
		gauge("hoard_cache_reserved_bytes", "Bytes reserved by fills in progress.", func() float64 { return float64(c.cache.Stats().Reserved) }),
		gauge("hoard_cache_filling_bytes", "Of the reserved bytes, those of fills from the store or an owner still in progress (at most a quarter of the budget beyond one fill).", func() float64 { return float64(c.cache.Stats().Filling) }),
		gauge("hoard_cache_objects", "Objects held in memory.", func() float64 { return float64(c.cache.Stats().Objects) }),
		gauge("hoard_cache_budget_bytes", "The memory tier's byte budget.", func() float64 { return float64(c.cache.Stats().Budget) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "hoard_cache_evictions_total", Help: "Objects evicted to make room."},
			func() float64 { return float64(c.cache.Stats().Evictions) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "hoard_cache_evicted_not_owned_total", Help: "Evictions of objects another cachelet owns."},
			func() float64 { return float64(c.cache.Stats().EvictedNotOwned) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "hoard_cache_evicted_owned_total", Help: "Evictions of objects this cachelet owns."},
			func() float64 { return float64(c.cache.Stats().EvictedOwned) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "hoard_cache_expired_total", Help: "Objects dropped because their TTL ran out."},
			func() float64 { return float64(c.cache.Stats().Expired) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "hoard_cachelet_reads_not_admitted_total",
			Help: "Reads served from the store without keeping a copy because the running function's inputs are not worth caching (admission by predicted benefit); counted as pass_through reads too."},
			func() float64 { return float64(m.counts.notAdmitted.Load()) }),
		gauge("hoard_cachelet_admitting", "1 while reads are cached (the running function's inputs are worth caching), 0 while misses are served without keeping a copy.", func() float64 {
			if c.Admitting() {
				return 1
			}
			return 0
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "hoard_cache_swept_total", Help: "Objects dropped by the periodic sweep (too few reads, or idle too long)."},
			func() float64 { return float64(c.cache.Stats().Swept) }),
		m.sweptBytes,
		gauge("hoard_cache_pool_free_bytes", "Bytes of free chunks the buffer pool keeps for fills and uploads to reuse.", func() float64 { return float64(c.cache.BufferStats().FreeBytes) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "hoard_cache_pool_reused_total", Help: "Chunks that fills and uploads took from the buffer pool."},
			func() float64 { return float64(c.cache.BufferStats().Reused) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "hoard_cache_pool_allocated_total", Help: "Chunks that fills and uploads allocated, the buffer pool having none free."},
			func() float64 { return float64(c.cache.BufferStats().Allocated) }),
	)
	return m
}

// countWrite counts a client's object write, begun at start, in Counters
// once it succeeded.
func (m *metrics) countWrite(err error, start time.Time) {
	if err == nil {
		m.counts.writes.Add(1)
		m.counts.writeNanos.Add(int64(m.clock.Now().Sub(start)))
	}
}

// track wraps a read's body so that closing it records the read.
func (m *metrics) track(body io.ReadCloser, o Outcome, start time.Time) io.ReadCloser {
	return m.trackWhole(body, o, start, -1)
}

// trackWhole is track for a read of a whole object of size bytes: read to
// its end from the store, it joins the store's cost fit (Counters).
func (m *metrics) trackWhole(body io.ReadCloser, o Outcome, start time.Time, size int64) io.ReadCloser {
	m.counts.open.Add(1)
	return &trackedBody{ReadCloser: body, m: m, outcome: o, start: start, size: size}
}

type trackedBody struct {
	io.ReadCloser
	m       *metrics
	outcome Outcome
	start   time.Time
	n       int64
	size    int64 // the whole object's size; -1 for part of one
	once    sync.Once
}

func (b *trackedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	return n, err
}

// WriteTo keeps the zero-copy path of the wrapped reader.
func (b *trackedBody) WriteTo(w io.Writer) (int64, error) {
	n, err := io.Copy(w, b.ReadCloser)
	b.n += n
	return n, err
}

func (b *trackedBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(func() {
		s := b.m.readSeriesOf(b.outcome)
		s.reads.Inc()
		s.bytes.Add(float64(b.n))
		d := b.m.clock.Now().Sub(b.start)
		s.seconds.Observe(d.Seconds())
		b.m.counts.read(b.outcome, b.n, d, b.size >= 0 && b.n == b.size)
		b.m.counts.open.Add(-1)
	})
	return err
}

// readOutcomes are the outcomes a read ends in.
var readOutcomes = [...]Outcome{LocalHit, LocalMiss, RemoteHit, RemoteMiss, PassThrough, StaleHit, DiskHit, ErasureHit, servedForPeer}

// readSeries are one outcome's read series.
type readSeries struct {
	reads, bytes prometheus.Counter
	seconds      prometheus.Observer
}

// readSeriesOf returns o's read series, looked up once per outcome
// rather than by label on every read (an outcome not in readOutcomes
// is looked up each time).
func (m *metrics) readSeriesOf(o Outcome) *readSeries {
	i := slices.Index(readOutcomes[:], o)
	if i >= 0 {
		if s := m.readSeries[i].Load(); s != nil {
			return s
		}
	}
	l := string(o)
	s := &readSeries{reads: m.reads.WithLabelValues(l), bytes: m.readBytes.WithLabelValues(l), seconds: m.readSeconds.WithLabelValues(l)}
	if i >= 0 {
		m.readSeries[i].Store(s) // a racing read stores the same series
	}
	return s
}
