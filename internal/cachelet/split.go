package cachelet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hoard-io/hoard/internal/bytesize"
	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/checksum"
	"github.com/hoard-io/hoard/internal/clock"
	"github.com/hoard-io/hoard/internal/scaling"
	"github.com/hoard-io/hoard/internal/store"
)

// The bandwidth policy [Faa$T §4]: a large object missing from memory is
// downloaded by several of the application's cachelets at once, each a
// byte range of S/N from the store, into the cachelet that missed (the
// owner, or whoever fell back to the store), which assembles it. N comes
// from the modelled transfer time
//
//	T(N) = T_load + (S/N)/BW_BS + (S - S/N)/BW_inst
//
// (scaling.PlanBandwidth) over bandwidths profiled here: BW_BS from the
// start of every large download (the prefix, read before the plan), and
// BW_inst from probes of a peer (or of this cachelet's own peer listener
// when it is alone), repeated when the last is older than ProbeMaxAge.
// T_load and the application's instance limit come from the platform
// (BandwidthConfig.Platform); when N exceeds the members running, the
// cachelet asks the platform for the difference with an urgent vote and
// waits for the new members, up to a bound, before splitting among
// whoever is there.

// BandwidthConfig turns the bandwidth policy on.
type BandwidthConfig struct {
	// Scaling holds the policy's thresholds (MinObjectSize: smaller
	// objects are never split; MinGain; the estimators' window and
	// smallest sample). Zero fields take scaling's defaults.
	Scaling scaling.Config
	// Platform, when set, tells the instances' load time and limit and
	// takes scale-out votes. Nil: objects are split among the members
	// running, and the application is never scaled for bandwidth.
	Platform Platform
	// PrefixBytes is how much of a large object the cachelet reads alone,
	// measuring the store's bandwidth, before it plans the rest. Default
	// 8 MiB.
	PrefixBytes int64
	// ProbeBytes is the size of a peer bandwidth probe (default 8 MiB)
	// and ProbeMaxAge how old the last peer measurement may be before a
	// split probes again (default 1 minute).
	ProbeBytes  int64
	ProbeMaxAge time.Duration
	// MaxWait bounds the wait for new members after a scale-out vote;
	// default 10 s. The wait also ends after three measured load times
	// (plus a second), whichever comes first.
	MaxWait time.Duration
}

func (b BandwidthConfig) withDefaults() BandwidthConfig {
	if b.PrefixBytes <= 0 {
		b.PrefixBytes = 8 << 20
	}
	if b.ProbeBytes <= 0 {
		b.ProbeBytes = 8 << 20
	}
	if b.ProbeMaxAge <= 0 {
		b.ProbeMaxAge = time.Minute
	}
	if b.MaxWait <= 0 {
		b.MaxWait = 10 * time.Second
	}
	return b
}

// Platform is the platform's side of the bandwidth policy.
type Platform interface {
	// Hints returns what the platform measured and allows: the median
	// instance load time (negative when none was measured yet) and the
	// application's instance limit.
	Hints(ctx context.Context) (Hints, error)
	// Vote sends an unrequested vote (an urgent scale-out).
	Vote(ctx context.Context, v scaling.Vote) error
}

// Hints is the platform's answer to Platform.Hints.
type Hints struct {
	LoadTime     time.Duration // negative: not measured
	MaxInstances int
}

// RangePeers is the part of the peer protocol the bandwidth policy uses
// (peer.Client implements it; see Config.Ranges). Safe for concurrent use.
type RangePeers interface {
	Range(ctx context.Context, addr, bucket, key, etag string, off, n int64) (io.ReadCloser, error)
	Probe(ctx context.Context, addr string, n int64) (time.Duration, error)
}

// splitter is a cachelet's bandwidth policy state.
type splitter struct {
	cfg   BandwidthConfig
	scfg  scaling.Config
	peers RangePeers
	list  PeerLister
	self  PeerAddresser // nil: no probes when alone
	clock clock.Clock
	store store.Store // ranges a peer could not send
	log   *slog.Logger

	mu        sync.Mutex
	storeBW   *scaling.Estimator
	peerBW    *scaling.Estimator
	lastProbe time.Time

	fetches    *prometheus.CounterVec // hoard_cachelet_split_fetches_total{result}
	parts      *prometheus.CounterVec // hoard_cachelet_split_parts_total{source}
	bandwidth  *prometheus.GaugeVec   // hoard_cachelet_bandwidth_bytes_per_second{link}
	scaleVotes prometheus.Counter     // hoard_cachelet_bandwidth_votes_total
	served     prometheus.Counter     // hoard_cachelet_ranges_served_total
}

// newSplitter returns the policy's state, or nil when the cachelet cannot
// split (no bandwidth config, or no peers that serve ranges).
func newSplitter(cfg Config, st store.Store, log *slog.Logger, reg prometheus.Registerer) (*splitter, error) {
	if cfg.Bandwidth == nil {
		return nil, nil
	}
	rp, pl := cfg.Ranges, cfg.Members
	if rp == nil || pl == nil {
		return nil, errors.New("cachelet: the bandwidth policy needs peers that serve ranges (Ranges) and members that list them (Members)")
	}
	scfg := cfg.Bandwidth.Scaling
	if err := scfg.Validate(); err != nil {
		return nil, err
	}
	s := &splitter{
		cfg: cfg.Bandwidth.withDefaults(), scfg: scfg, peers: rp, list: pl, self: cfg.Self, clock: cfg.Clock, store: st, log: log,
		storeBW: scaling.NewEstimator(scfg), peerBW: scaling.NewEstimator(scfg),
		fetches: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hoard_cachelet_split_fetches_total",
			Help: "Large objects downloaded under the bandwidth policy by result: split (several cachelets' ranges), alone (the plan kept one), failed."}, []string{"result"}),
		parts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hoard_cachelet_split_parts_total",
			Help: "Ranges of split downloads by source: self (this cachelet's own store download), peer, fallback (a peer failed and this cachelet read its range from the store)."}, []string{"source"}),
		bandwidth: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "hoard_cachelet_bandwidth_bytes_per_second",
			Help: "Profiled bandwidth (median of recent samples): store (BW_BS) and peer (BW_inst)."}, []string{"link"}),
		scaleVotes: prometheus.NewCounter(prometheus.CounterOpts{Name: "hoard_cachelet_bandwidth_votes_total",
			Help: "Urgent scale-out votes sent for a large download."}),
		served: prometheus.NewCounter(prometheus.CounterOpts{Name: "hoard_cachelet_ranges_served_total",
			Help: "Byte ranges downloaded from the store for a peer's split download."}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{s.fetches, s.parts, s.bandwidth, s.scaleVotes, s.served} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return s, nil
}

func (s *splitter) addStore(n int64, d time.Duration) {
	s.mu.Lock()
	if s.storeBW.Add(n, d) {
		bw, _ := s.storeBW.Bandwidth()
		s.bandwidth.WithLabelValues("store").Set(bw)
	}
	s.mu.Unlock()
}

func (s *splitter) addPeer(n int64, d time.Duration) {
	s.mu.Lock()
	if s.peerBW.Add(n, d) {
		bw, _ := s.peerBW.Bandwidth()
		s.bandwidth.WithLabelValues("peer").Set(bw)
	}
	s.mu.Unlock()
}

// Bandwidths returns the profiled store and peer bandwidths in bytes per
// second (0 where nothing was measured); both 0 without the policy.
func (c *Cachelet) Bandwidths() (store, peer float64) {
	s := c.split
	if s == nil {
		return 0, 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	store, _ = s.storeBW.Bandwidth()
	peer, _ = s.peerBW.Bandwidth()
	return store, peer
}

// splittable marks a store body of a whole object, which install may
// split (a peer's body is not: its owner already did).
type splittable struct{ io.ReadCloser }

// splits reports whether an object of info's size is downloaded under the
// bandwidth policy.
func (s *splitter) splits(info store.ObjectInfo) bool {
	return s != nil && info.Size >= s.scfg.MinObjectSize && info.Size > s.cfg.PrefixBytes
}

// probeIfStale measures the network to a random peer when the last
// measurement is older than ProbeMaxAge (or there is none).
func (s *splitter) probeIfStale(ctx context.Context, peers []string) {
	s.mu.Lock()
	now := s.clock.Now()
	stale := s.peerBW.Len() == 0 || now.Sub(s.lastProbe) > s.cfg.ProbeMaxAge
	if stale {
		s.lastProbe = now
	}
	s.mu.Unlock()
	if !stale {
		return
	}
	addr := ""
	if len(peers) > 0 {
		addr = peers[rand.IntN(len(peers))]
	} else if s.self != nil {
		// Alone, the one path to measure is to this cachelet's own peer
		// listener: on one node that is the path new instances will
		// have; across nodes the first split's probe corrects it.
		addr = s.self.PeerAddr()
	}
	if addr == "" {
		return
	}
	d, err := s.peers.Probe(ctx, addr, s.cfg.ProbeBytes)
	if err != nil {
		return
	}
	s.addPeer(s.cfg.ProbeBytes, d)
}

// fillSplit fills e from a store body of the whole object under the
// bandwidth policy, and admits it like fill.
func (c *Cachelet) fillSplit(e *cache.Entry, body io.ReadCloser) error {
	defer c.wg.Done()
	start := c.clock.Now()
	ctx, cancel := c.fillContext(context.Background())
	err := c.split.download(ctx, e, body)
	cancel()
	body.Close()
	c.admit(e, err, start)
	return err
}

// download reads the object's prefix (a store bandwidth sample),
// plans the rest, scales out if the plan says so, and fills the rest from
// this cachelet's body and its peers' ranges.
func (s *splitter) download(ctx context.Context, e *cache.Entry, body io.ReadCloser) error {
	k, info, size := e.Key(), e.Info(), e.Size()

	peers := s.list.PeerAddrs()
	probed := make(chan struct{})
	go func() { defer close(probed); s.probeIfStale(ctx, peers) }()

	// The prefix, timed from its first byte: the model has no latency
	// term, only bandwidth.
	prefix := s.cfg.PrefixBytes
	var first [1]byte
	if _, err := io.ReadFull(body, first[:]); err != nil {
		e.Abort(fmt.Errorf("store body: %w", err))
		return err
	}
	t1 := s.clock.Now()
	if err := e.FillPrefix(io.MultiReader(bytes.NewReader(first[:]), body), prefix); err != nil {
		return err
	}
	s.addStore(prefix-1, s.clock.Now().Sub(t1))
	<-probed

	// The plan for the rest.
	rest := size - prefix
	current := 1 + len(peers)
	hints := Hints{LoadTime: -1, MaxInstances: current}
	if s.cfg.Platform != nil {
		hctx, hcancel := context.WithTimeout(ctx, 2*time.Second)
		h, err := s.cfg.Platform.Hints(hctx)
		hcancel()
		if err == nil {
			hints = h
		} else {
			s.log.Warn("bandwidth policy: no hints from the platform; splitting among the members running", "err", err)
		}
	}
	s.mu.Lock()
	m := scaling.Measure(nil, s.storeBW, s.peerBW)
	s.mu.Unlock()
	m.LoadTime = hints.LoadTime
	maxN := max(hints.MaxInstances, 1)
	if m.LoadTime < 0 {
		// Without a measured load time the plan cannot price new
		// instances: it splits among the running ones only.
		m.LoadTime, maxN = 0, current
	}
	plan, err := scaling.PlanBandwidth(rest, current, maxN, m, s.scfg)
	if err != nil {
		// Unmeasured: download alone, as without the policy.
		plan = scaling.BandwidthPlan{N: 1, Reason: err.Error()}
	}
	n := min(plan.N, current)
	if plan.ScaleOut && s.cfg.Platform != nil {
		s.scaleVotes.Inc()
		v := plan.Vote()
		v.Reason = fmt.Sprintf("%s/%s: %s", k.Bucket, k.Object, plan.Reason)
		if err := s.cfg.Platform.Vote(ctx, v); err != nil {
			s.log.Warn("bandwidth policy: scale-out vote refused", "err", err)
		} else {
			wait := min(s.cfg.MaxWait, 3*hints.LoadTime+time.Second)
			peers = s.waitPeers(ctx, plan.N-1, wait)
			n = min(plan.N, 1+len(peers))
		}
	}
	s.log.Info("bandwidth plan", "bucket", k.Bucket, "key", k.Object, "size", bytesize.Human(size),
		"plan", plan.String(), "cachelets", n, "store_bw", bytesize.Human(int64(m.StoreBW))+"/s", "peer_bw", bytesize.Human(int64(m.PeerBW))+"/s")

	// Peers take the ranges after this cachelet's own, in a random order
	// of the members, so that concurrent splits spread.
	rand.Shuffle(len(peers), func(i, j int) { peers[i], peers[j] = peers[j], peers[i] })
	ranges := scaling.Ranges(rest, n)
	parts := make([]cache.Part, len(ranges))
	pctx, pcancel := context.WithCancel(ctx)
	defer pcancel()
	for i, r := range ranges {
		off := prefix + r.Off
		parts[i] = cache.Part{Off: off, Len: r.Len}
		if i == 0 {
			parts[i].Fill = func(dst []byte, progress func(int64)) error {
				t := s.clock.Now()
				err := readInto(dst, body, progress)
				if err == nil {
					s.addStore(int64(len(dst)), s.clock.Now().Sub(t))
					s.parts.WithLabelValues("self").Inc()
				} else {
					pcancel()
				}
				return err
			}
			continue
		}
		addr := peers[i-1]
		parts[i].Fill = func(dst []byte, progress func(int64)) error {
			err := s.fillRange(pctx, addr, k, info.ETag, off, dst, progress)
			if err != nil {
				pcancel()
			}
			return err
		}
	}
	verify := fullObjectCheck(info)
	if err := e.FillParts(parts, verify); err != nil {
		s.fetches.WithLabelValues("failed").Inc()
		return err
	}
	if n > 1 {
		s.fetches.WithLabelValues("split").Inc()
	} else {
		s.fetches.WithLabelValues("alone").Inc()
	}
	return nil
}

// waitPeers waits until at least want other members are in the ring, or
// for d, and returns the members then.
func (s *splitter) waitPeers(ctx context.Context, want int, d time.Duration) []string {
	deadline := s.clock.Now().Add(d)
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		peers := s.list.PeerAddrs()
		if len(peers) >= want || !s.clock.Now().Before(deadline) {
			return peers
		}
		select {
		case <-ctx.Done():
			return peers
		case <-t.C:
		}
	}
}

// fillRange fills dst with the object's bytes from off through the peer
// at addr, and reads from the store itself what the peer could not send
// (down, cut off, an answer that failed verification): a failed peer
// costs time, never the download. A peer's bytes are published to readers
// only once the whole range verified (the MAC that follows the answer's body is checked
// before the last bytes are read), so a failed range is read again from
// the store whole and readers never see bytes it replaced. An object that
// changed (store.ErrPreconditionFailed) fails the range.
func (s *splitter) fillRange(ctx context.Context, addr string, k cache.Key, etag string, off int64, dst []byte, progress func(int64)) error {
	t := s.clock.Now()
	body, err := s.peers.Range(ctx, addr, k.Bucket, k.Object, etag, off, int64(len(dst)))
	if err == nil {
		err = readInto(dst, body, func(int64) {})
		body.Close()
		if err == nil {
			progress(int64(len(dst)))
			s.parts.WithLabelValues("peer").Inc()
			return nil
		}
	}
	if errors.Is(err, store.ErrPreconditionFailed) || ctx.Err() != nil {
		return err
	}
	s.log.Warn("peer range failed; reading it from the store", "peer", addr, "bucket", k.Bucket, "key", k.Object,
		"off", off, "len", len(dst), "after", s.clock.Now().Sub(t).Round(time.Millisecond), "err", err)
	s.parts.WithLabelValues("fallback").Inc()
	rng := store.ByteRange{Start: off, End: off + int64(len(dst)) - 1}
	sb, _, _, err := s.store.Get(ctx, k.Bucket, k.Object, store.GetOptions{Range: &rng, IfMatch: etag})
	if err != nil {
		return err
	}
	defer sb.Close()
	return readInto(dst, sb, progress)
}

// readInto fills dst from r in fill steps, reporting progress.
func readInto(dst []byte, r io.Reader, progress func(int64)) error {
	const step = 256 << 10
	var total int64
	for total < int64(len(dst)) {
		end := min(total+step, int64(len(dst)))
		n, err := io.ReadFull(r, dst[total:end])
		total += int64(n)
		progress(total)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				err = fmt.Errorf("body ended after %d of %d bytes: %w", total, len(dst), io.ErrUnexpectedEOF)
			}
			return err
		}
	}
	return nil
}

// fullObjectCheck returns a check of the assembled object against the
// full-object checksums the store reported, or nil when it reported none
// (composite checksums of multipart uploads cover parts, not the
// object's bytes as one).
func fullObjectCheck(info store.ObjectInfo) func([]byte) error {
	if strings.EqualFold(info.ChecksumType, "COMPOSITE") {
		return nil
	}
	want := map[checksum.Algorithm]string{}
	for name, v := range info.Checksums {
		a, err := checksum.ParseAlgorithm(name)
		if err != nil || strings.Contains(v, "-") {
			continue
		}
		want[a] = v
	}
	if len(want) == 0 {
		return nil
	}
	return func(b []byte) error {
		vr, err := checksum.NewVerifyingReader(bytes.NewReader(b), want, "")
		if err != nil {
			return nil // an algorithm this build cannot check: the ETag and the ranges' CRCs stand
		}
		if _, err := io.Copy(io.Discard, vr); err != nil {
			return fmt.Errorf("assembled object fails the store's checksum: %w", err)
		}
		return nil
	}
}

// PeerRange downloads a byte range of an object from the store for a
// peer's split download (peer.Ranger). The bytes are not cached here.
func (c *Cachelet) PeerRange(ctx context.Context, bucket, key, etag string, off, n int64) (io.ReadCloser, error) {
	if c.split == nil {
		return nil, fmt.Errorf("%w: the bandwidth policy is off here", store.ErrUnavailable)
	}
	rng := store.ByteRange{Start: off, End: off + n - 1}
	body, _, _, err := c.store.Get(ctx, bucket, key, store.GetOptions{Range: &rng, IfMatch: etag})
	if err != nil {
		return nil, err
	}
	c.split.served.Inc()
	return &timedBody{ReadCloser: body, start: c.clock.Now(), clock: c.clock, want: n, done: c.split.addStore}, nil
}

// timedBody reports a whole body's transfer as a bandwidth sample.
type timedBody struct {
	io.ReadCloser
	start time.Time
	clock clock.Clock
	want  int64
	got   int64
	done  func(int64, time.Duration)
}

func (b *timedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.got += int64(n)
	if b.got == b.want && b.done != nil {
		b.done(b.got, b.clock.Now().Sub(b.start))
		b.done = nil
	}
	return n, err
}
