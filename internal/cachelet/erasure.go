package cachelet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/erasure"
	"github.com/hoard-io/hoard/internal/peer"
	"github.com/hoard-io/hoard/internal/store"
)

// The erasure-coded path of large objects [InfiniCache] (ADR 23). An
// object of at least the threshold is kept as k+r shards on k+r distinct
// members of the application, not whole in one cachelet's memory:
//
//   - fill: the key's owner, reading it from the store (a local or remote
//     miss), streams it to its reader as a pass-through and, in the
//     background, reads it again, codes it stripe by stripe and streams
//     the pieces to their holders in parallel (one fill at a time per
//     cachelet, a bounded number of stripes in flight: erasure_stream.go);
//   - read: a cachelet that knows the key is large checks the version
//     as its read mode says (erasure_check.go), asks all k+r holders for the stripes covering the
//     range, decodes from the first k that arrive whole and verified, and
//     cancels the rest; fewer than k is a miss served by the ordinary path
//     (the owner or the store), which fills the shards again;
//   - write: Invalidate (called by every write) drops the key's shards on
//     their holders; the shards are keyed by the store's ETag, so a
//     version the store no longer has is never read back in any case.
//
// The one hook in the read path is in Get (ecGet) and fetch (ecFill).

// ErasureHit: a read decoded from shards held by the application's
// cachelets.
const ErasureHit Outcome = "erasure_hit"

// ShardPeers is the client side of the shard operations (peer.Client).
type ShardPeers interface {
	ShardPut(ctx context.Context, addr, bucket, key, etag string, index int, manifest string, body io.Reader, size int64) error
	ShardGet(ctx context.Context, addr, bucket, key, etag string, first, end int) (*peer.Shard, error)
	ShardDelete(ctx context.Context, addr, bucket, key, etag string) error
}

// ShardPlacer places shards on the application's members (cluster.Member).
type ShardPlacer interface {
	// Place returns the peer addresses of the n members holding shards
	// 0..n-1 of bucket/key, nil when there are fewer than n members.
	Place(bucket, key string, n int) []string
	PeerAddresser
}

// ErasureConfig turns the erasure-coded path on.
type ErasureConfig struct {
	// Coding: k, r, threshold, chunk (erasure.Config's defaults).
	erasure.Config `yaml:",inline"`
	// Memory is the byte budget of the shards this cachelet holds for
	// the application, taken out of Cache.Budget when the cachelet
	// starts. Default a quarter of Cache.Budget.
	Memory int64 `yaml:"memory"`
	// Window is how many stripes one round of shard requests fetches
	// (the most a read holds decoded at once). Default 4.
	Window int `yaml:"window"`
	// Timeout bounds one round of shard requests, and each shard write
	// of a fill. Default 30 s.
	Timeout time.Duration `yaml:"timeout"`

	// RebuildRate bounds the bytes a second this cachelet sends when it
	// rebuilds shards after a membership change. Default 64 MiB/s.
	RebuildRate int64 `yaml:"rebuild_rate"`
	// RebuildDelay is how long a rebuild waits after a membership change,
	// so that members lost together are rebuilt in one pass. Default 1 s.
	RebuildDelay time.Duration `yaml:"rebuild_delay"`
	// WarmUp is how often the cachelet visits every shard it holds
	// (erasure_warm.go). Default 60 s; negative: never.
	WarmUp time.Duration `yaml:"warm_up"`
	// Backup is how often the cachelet sends the shards it holds that
	// changed since the last backup to its backup holder
	// (erasure_backup.go). Default 5 min; negative: never.
	Backup time.Duration `yaml:"backup"`
	// BackupMemory bounds the backups of its peers' shards this cachelet
	// keeps, apart from Memory: taken out of Cache.Budget as well, so
	// that backups never take the place of shards. Default a quarter of
	// Memory (none when Backup is negative).
	BackupMemory int64 `yaml:"backup_memory"`

	// Placer and Peers: default from Router and Peers (cluster.Member,
	// peer.Client).
	Placer ShardPlacer  `yaml:"-"`
	Peers  ShardPeers   `yaml:"-"`
	Logger *slog.Logger `yaml:"-"`
}

func (c *ErasureConfig) validate(cfg *Config) error {
	if err := c.Config.Validate(); err != nil {
		return err
	}
	if c.Memory < 0 || c.Window < 0 || c.Timeout < 0 || c.RebuildRate < 0 || c.RebuildDelay < 0 {
		return errors.New("cachelet: erasure memory, window, timeout and rebuild settings must not be negative")
	}
	if c.RebuildRate == 0 {
		c.RebuildRate = 64 << 20
	}
	if c.RebuildDelay == 0 {
		c.RebuildDelay = time.Second
	}
	if c.WarmUp == 0 {
		c.WarmUp = DefaultWarmUp
	}
	if c.Backup == 0 {
		c.Backup = DefaultBackup
	}
	if cfg.Cache.Budget <= 0 {
		return errors.New("cachelet: erasure coding needs a positive budget to take its memory from")
	}
	if c.Memory == 0 {
		c.Memory = cfg.Cache.Budget / 4
	}
	switch {
	case c.BackupMemory < 0:
		return fmt.Errorf("cachelet: erasure backup memory %d must not be negative", c.BackupMemory)
	case c.Backup < 0:
		c.BackupMemory = 0
	case c.BackupMemory == 0:
		c.BackupMemory = c.Memory / 4
	}
	if c.Memory+c.BackupMemory >= cfg.Cache.Budget {
		return fmt.Errorf("cachelet: erasure memory %d and backup memory %d must together be below the budget %d (the memory tier has the rest)",
			c.Memory, c.BackupMemory, cfg.Cache.Budget)
	}
	if c.Window == 0 {
		c.Window = 4
	}
	if c.Timeout == 0 {
		c.Timeout = 30 * time.Second
	}
	if c.Placer == nil {
		c.Placer, _ = cfg.Router.(ShardPlacer)
	}
	if c.Peers == nil {
		c.Peers, _ = cfg.Peers.(ShardPeers)
	}
	return nil
}

// DefaultWarmUp and DefaultBackup are ErasureConfig's WarmUp and
// Backup defaults, InfiniCache's.
const (
	DefaultWarmUp = time.Minute
	DefaultBackup = 5 * time.Minute
)

// held is the erasure-coded path's part of the budget at the start: the
// shards' and the backups'.
func (c *ErasureConfig) held() int64 { return c.Memory + c.BackupMemory }

// shareOf is the shard store's and the backups' share of a whole budget
// of n bytes: the share they were of the budget at the start.
func (e *ecPath) shareOf(n int64) int64 {
	return int64(float64(n) * float64(e.cfg.held()) / float64(e.c.cfg.Cache.Budget))
}

// setBudget gives the shard store and the backups a share of n bytes
// between them, as they were split at the start, and returns the bytes
// evicted.
func (e *ecPath) setBudget(n int64) (freed int64) {
	backups := int64(float64(n) * float64(e.cfg.BackupMemory) / float64(e.cfg.held()))
	return e.shards.SetBudget(n-backups) + e.bk.store.SetBudget(backups)
}

// rebuildTime is how long sending n bytes takes at RebuildRate.
func (c *ErasureConfig) rebuildTime(n int64) time.Duration {
	return time.Duration(float64(n) / float64(c.RebuildRate) * float64(time.Second))
}

// errNoApplication: erasure coding without the members to hold shards.
var errNoApplication = errors.New("cachelet: erasure coding needs an application (a membership that places shards, and the peer protocol)")

// ecPath is a cachelet's erasure-coded path; nil when off.
type ecPath struct {
	cfg    ErasureConfig
	c      *Cachelet
	shards *erasure.Store

	mu    sync.Mutex
	large map[cache.Key]largeKey // keys seen at or above the threshold: the version seen
	// trustGen is the generation of versions a read may trust
	// (erasure_check.go); an ownership change starts a new one.
	trustGen uint64
	// invalidated counts writes' invalidations (erasure_check.go).
	invalidated uint64
	filling     map[cache.Key]bool
	fillSem     chan struct{} // one fill at a time
	kick        chan struct{} // a rebuild pass is due

	rebuilds     *prometheus.CounterVec
	rebuiltBytes prometheus.Counter

	// Risk (erasure_risk.go), under mu.
	lastMembers  map[string]bool
	losses       []time.Time
	lostTotal    int64       // departures seen since the start
	faults       []time.Time // shards warm-ups dropped
	departed     []string    // members left since the last takeover (erasure_backup.go)
	lastRebuild  time.Duration
	memberLosses prometheus.Counter
	riskMemo     riskMemo // the last model computed, by its inputs

	counts struct{ hits, misses, fallbacks, rebuilt, restored, warmUps, warmBytes atomic.Int64 } // ErasureCounters

	// Version checks that reads share (erasure_check.go).
	checks checks

	// Backups (erasure_backup.go).
	bk backupState

	// Warm-up (erasure_warm.go).
	lastWarm                                     atomic.Int64 // unix nanoseconds
	warmUps, warmBytes, warmSeconds, warmDropped prometheus.Counter

	reads, fills    *prometheus.CounterVec
	shardsFetched   *prometheus.CounterVec
	deletes, stored prometheus.Counter
}

// maxPendingFills bounds the fills waiting for their turn.
const maxPendingFills = 64

// maxLargeKeys bounds the set of keys known to be large.
const maxLargeKeys = 100000

func newECPath(c *Cachelet, cfg ErasureConfig, reg prometheus.Registerer) *ecPath {
	e := &ecPath{cfg: cfg, c: c, shards: erasure.NewStore(cfg.Memory), large: map[cache.Key]largeKey{},
		filling: map[cache.Key]bool{}, fillSem: make(chan struct{}, 1), kick: make(chan struct{}, 1)}
	e.rebuildMetrics(reg)
	e.riskMetrics(reg)
	e.warmMetrics(reg)
	e.backupInit(reg)
	// The members already there when the cachelet is built: the ring may
	// have formed before it, with no change left to tell it of them, and a
	// departure must count against them.
	e.noteMembers()
	e.reads = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hoard_erasure_reads_total",
		Help: "Reads of large objects by result: hit (decoded from shards), miss (fewer than k shards: the ordinary path served it), fallback (a later window had fewer than k: the store served the rest)."}, []string{"result"})
	e.fills = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hoard_erasure_fills_total",
		Help: "Objects coded into shards and written to their holders, by result: full (all k+r written), degraded (at least k), failed."}, []string{"result"})
	e.shardsFetched = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hoard_erasure_shard_requests_total",
		Help: "Shard requests of reads by result: used, late (cancelled once k had arrived), missing, corrupt (did not verify)."}, []string{"result"})
	e.deletes = prometheus.NewCounter(prometheus.CounterOpts{Name: "hoard_erasure_invalidations_total",
		Help: "Writes that dropped the shard sets of a large object's older versions."})
	e.stored = prometheus.NewCounter(prometheus.CounterOpts{Name: "hoard_erasure_shards_received_total",
		Help: "Shards this cachelet accepted from its peers (verified)."})
	held := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "hoard_erasure_held_bytes",
		Help: "Bytes of shards this cachelet holds for its application."}, func() float64 { return float64(e.shards.Stats().Bytes) })
	if reg != nil {
		reg.MustRegister(e.reads, e.fills, e.shardsFetched, e.deletes, e.stored, held)
	}
	return e
}

func (e *ecPath) knows(k cache.Key) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.large[k]
	return ok
}

// saw notes the version and size of k as a read found it (or a write
// made it: such an info carries no LastModified, and a read checks it
// before it serves it; see trusted).
func (e *ecPath) saw(k cache.Key, info store.ObjectInfo) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.cfg.Applies(info.Size) {
		delete(e.large, k)
		return
	}
	if len(e.large) >= maxLargeKeys {
		for old := range e.large { // drop any one: a forgotten key is read the ordinary way
			delete(e.large, old)
			break
		}
	}
	e.large[k] = largeKey{info: info, gen: e.trustGen}
}

// ecGet serves a read of a key known to be large from its shards. ok
// false: not served here (not large, not enough members, fewer than k
// shards), the ordinary path serves it.
func (c *Cachelet) ecGet(ctx context.Context, k cache.Key, rng *store.ByteRange, start time.Time) (_ *Object, ok bool, _ error) {
	e := c.ec
	if !e.knows(k) {
		return nil, false, nil
	}
	if c.keys.isUnpersisted(k) {
		return nil, false, nil // a write held here is newer than any shards
	}
	info, ok := c.ecVersion(ctx, k) // the version check (erasure_check.go)
	if !ok {
		return nil, false, nil // the ordinary path gives the store's answer
	}
	if !e.cfg.Applies(info.Size) {
		return nil, false, nil
	}
	addrs := e.cfg.Placer.Place(k.Bucket, k.Object, e.cfg.Shards())
	if addrs == nil {
		return nil, false, nil
	}
	obj := &Object{Info: info, Outcome: ErasureHit}
	off, n := int64(0), info.Size
	if rng != nil {
		r, err := ResolveRange(*rng, info.Size)
		if err != nil {
			return nil, true, err
		}
		obj.Range = &r
		off, n = r.Start, r.End-r.Start+1
	}
	rd := &ecReader{e: e, k: k, info: info, addrs: addrs, off: off, left: n}
	rd.ctx, rd.cancel = context.WithCancel(ctx)
	if err := rd.next(); err != nil {
		rd.Close()
		e.reads.WithLabelValues("miss").Inc()
		e.counts.misses.Add(1)
		c.log.Debug("erasure read missed", "bucket", k.Bucket, "key", k.Object, "err", err)
		return nil, false, nil
	}
	e.reads.WithLabelValues("hit").Inc()
	e.counts.hits.Add(1)
	c.access.read(k, info.ETag, info.Size, ErasureHit, start)
	obj.Body = c.m.track(rd, ErasureHit, start)
	return obj, true, nil
}

// ecReader streams a range of a sharded object, a window of stripes at a
// time, fetching the next window while the current one is read. A later
// window that cannot be decoded has the store serve the rest.
type ecReader struct {
	e      *ecPath
	ctx    context.Context // the read's; cancelled by Close
	cancel context.CancelFunc
	k      cache.Key
	info   store.ObjectInfo
	addrs  []string
	// manifest is the encoded manifest of the first window: every later
	// window must decode from the same.
	manifest  string
	off, left int64 // the next byte of the object to return, and how many remain
	buf       []byte
	// rest is the store's body of the rest of the range, once a window
	// could not be decoded.
	rest io.ReadCloser
	// ahead delivers the window at off, fetched in the background; nil
	// when none is under way.
	ahead chan decoded
}

// decoded is a window of stripes fetched and decoded: the object's bytes
// of stripes [first, ...), and the manifest they decoded with.
type decoded struct {
	first   int
	out     []byte
	encoded string
	err     error
}

func (r *ecReader) Read(p []byte) (int, error) {
	if r.rest != nil {
		return r.rest.Read(p)
	}
	if len(r.buf) == 0 {
		if r.left == 0 {
			return 0, io.EOF
		}
		if err := r.next(); err != nil {
			// The shards of a later window are gone (or damaged): the
			// store serves the rest, pinned to the version read so far.
			r.e.reads.WithLabelValues("fallback").Inc()
			r.e.counts.fallbacks.Add(1)
			rng := &store.ByteRange{Start: r.off, End: r.off + r.left - 1}
			body, _, _, serr := r.e.c.store.Get(r.ctx, r.k.Bucket, r.k.Object, store.GetOptions{Range: rng, IfMatch: r.info.ETag})
			if serr != nil {
				return 0, fmt.Errorf("%w (the store: %v)", err, serr)
			}
			r.rest = body
			return r.rest.Read(p)
		}
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// Close ends the read and waits for the window being fetched, if any.
func (r *ecReader) Close() error {
	r.cancel()
	if r.ahead != nil {
		<-r.ahead
		r.ahead = nil
	}
	r.buf, r.left = nil, 0
	if r.rest != nil {
		return r.rest.Close()
	}
	return nil
}

// next makes the window holding byte r.off the one read, and starts
// fetching the one after.
func (r *ecReader) next() error {
	var d decoded
	if r.ahead != nil {
		d = <-r.ahead
		r.ahead = nil
	} else {
		first, end := r.span()
		d = r.window(r.ctx, first, end, r.manifest)
	}
	if d.err != nil {
		return d.err
	}
	r.manifest = d.encoded
	lo := r.off - int64(d.first)*r.stripe()
	n := min(int64(len(d.out))-lo, r.left)
	r.buf = d.out[lo : lo+n]
	r.off += n
	r.left -= n
	if r.left > 0 {
		first, end := r.span()
		ch, want := make(chan decoded, 1), r.manifest
		r.ahead = ch
		go func() { ch <- r.window(r.ctx, first, end, want) }()
	}
	return nil
}

// stripe is the bytes of the object in one stripe.
func (r *ecReader) stripe() int64 {
	return int64(r.e.cfg.DataShards) * int64(r.e.cfg.ChunkFor(r.info.Size))
}

// span is the window of stripes holding byte r.off: at most Window.
func (r *ecReader) span() (first, end int) {
	ss := r.stripe()
	first, end = int(r.off/ss), int((r.off+r.left-1)/ss)+1
	return first, min(end, first+r.e.cfg.Window)
}

// window fetches stripes [first, end) from the holders and decodes them.
// It only reads r's fixed fields, so it may run beside Read.
func (r *ecReader) window(ctx context.Context, first, end int, want string) decoded {
	got, err := r.e.fetchWindow(ctx, r.k, r.info, r.addrs, first, end, want)
	if err != nil {
		return decoded{err: err}
	}
	cd, err := erasure.NewCoder(got.m)
	if err != nil {
		return decoded{err: err}
	}
	out := make([]byte, 0, int64(end-first)*got.m.StripeSize())
	for s := first; s < end; s++ {
		pieces := make([][]byte, got.m.Shards())
		for i, b := range got.pieces {
			if b != nil {
				j := (s - first) * got.m.Chunk
				pieces[i] = b[j : j+got.m.Chunk : j+got.m.Chunk]
			}
		}
		if out, err = cd.Decode(out, s, pieces); err != nil {
			return decoded{err: err}
		}
	}
	return decoded{first: first, out: out, encoded: got.encoded}
}

// window is what fetchWindow gathered: the manifest and, per shard, its
// pieces of the window (nil where missing).
type window struct {
	m       *erasure.Manifest
	encoded string
	pieces  [][]byte
}

type shardReply struct {
	index    int
	manifest string
	data     []byte
	err      error
}

// fetchWindow asks every holder for stripes [first, end) of its shard and
// returns once k shards with the same manifest (want, when set) arrived
// verified; the requests still running are cancelled (first-k).
// erasure.ErrTooFewShards when fewer than k could be had.
func (e *ecPath) fetchWindow(ctx context.Context, k cache.Key, info store.ObjectInfo, addrs []string, first, end int, want string) (*window, error) {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
	defer cancel()
	replies := make(chan shardReply, len(addrs))
	self := e.cfg.Placer.PeerAddr()
	for _, addr := range addrs {
		go func() { replies <- e.fetchShard(ctx, addr == self, addr, k, info, first, end) }()
	}
	groups := map[string]*window{}
	counts := map[string]int{}
	for got := 1; got <= len(addrs); got++ {
		rep := <-replies
		if rep.err != nil {
			label := "missing"
			if errors.Is(rep.err, erasure.ErrCorrupt) || errors.Is(rep.err, erasure.ErrBadManifest) {
				label = "corrupt"
				e.c.log.Warn("shard did not verify", "bucket", k.Bucket, "key", k.Object, "err", rep.err)
			}
			e.shardsFetched.WithLabelValues(label).Inc()
			continue
		}
		if want != "" && rep.manifest != want {
			e.shardsFetched.WithLabelValues("corrupt").Inc()
			continue
		}
		w := groups[rep.manifest]
		if w == nil {
			m, _ := erasure.ParseManifest(rep.manifest) // parsed once already
			w = &window{m: m, encoded: rep.manifest, pieces: make([][]byte, m.Shards())}
			groups[rep.manifest] = w
		}
		if w.pieces[rep.index] != nil {
			continue
		}
		w.pieces[rep.index] = rep.data
		counts[rep.manifest]++
		e.shardsFetched.WithLabelValues("used").Inc()
		if counts[rep.manifest] == w.m.Data {
			cancel()
			// The rest are late: counted as they come back, off this path.
			go func(n int) {
				for range n {
					<-replies
					e.shardsFetched.WithLabelValues("late").Inc()
				}
			}(len(addrs) - got)
			return w, nil
		}
	}
	return nil, erasure.ErrTooFewShards
}

// fetchShard reads stripes [first, end) of the shard a holder keeps of
// k at info's version and verifies them against the holder's manifest,
// which must describe info's version.
func (e *ecPath) fetchShard(ctx context.Context, local bool, addr string, k cache.Key, info store.ObjectInfo, first, end int) shardReply {
	var rep shardReply
	if local {
		var data []byte
		rep.index, rep.manifest, data, rep.err = e.shards.Pieces(k.Bucket, k.Object, info.ETag, first, end)
		rep.data = data
	} else {
		sh, err := e.cfg.Peers.ShardGet(ctx, addr, k.Bucket, k.Object, info.ETag, first, end)
		if err != nil {
			return shardReply{err: err}
		}
		defer sh.Body.Close()
		if sh.Size > int64(end-first)*int64(e.cfg.ChunkSize) {
			return shardReply{err: fmt.Errorf("%w: %d bytes for %d stripes", erasure.ErrBadManifest, sh.Size, end-first)}
		}
		rep.index, rep.manifest = sh.Index, sh.Manifest
		rep.data = make([]byte, sh.Size)
		if _, err := io.ReadFull(sh.Body, rep.data); err != nil {
			return shardReply{err: err}
		}
	}
	if rep.err != nil {
		return rep
	}
	m, err := erasure.ParseManifest(rep.manifest)
	switch {
	case err != nil:
		return shardReply{err: err}
	case m.ETag != info.ETag || m.Size != info.Size || m.Data != e.cfg.DataShards || m.Parity != e.cfg.ParityShards || m.Chunk != e.cfg.ChunkFor(info.Size):
		// Another version, or another layout (a member configured
		// otherwise): the reader's offsets would not hold.
		return shardReply{err: fmt.Errorf("%w: the holder's manifest describes another object or layout", erasure.ErrBadManifest)}
	}
	if err := m.Verify(rep.index, first, rep.data); err != nil {
		return shardReply{err: err}
	}
	if len(rep.data) != (end-first)*m.Chunk {
		return shardReply{err: fmt.Errorf("%w: short shard", erasure.ErrBadManifest)}
	}
	return rep
}

// ecSharded notes k's size and says whether it is an object the
// application keeps as shards (large enough, a shard no larger than a
// holder keeps, and enough members).
func (c *Cachelet) ecSharded(k cache.Key, info store.ObjectInfo) bool {
	e := c.ec
	e.saw(k, info)
	return e.cfg.Applies(info.Size) && e.coded(info.Size)/int64(e.cfg.Shards()) <= e.shards.Stats().Budget &&
		e.cfg.Placer.Place(k.Bucket, k.Object, e.cfg.Shards()) != nil
}

// coded is the bytes of all the shards of an object of size bytes.
func (e *ecPath) coded(size int64) int64 {
	chunk := int64(e.cfg.ChunkFor(size))
	stripe := chunk * int64(e.cfg.DataShards)
	return (size + stripe - 1) / stripe * chunk * int64(e.cfg.Shards())
}

// ecFill starts coding k into shards in the background when info says it
// is large and the application has enough members: the caller streams the
// object it holds through. It reports whether it took the object.
func (c *Cachelet) ecFill(k cache.Key, info store.ObjectInfo) bool {
	e := c.ec
	if !c.ecSharded(k, info) {
		return false
	}
	addrs := e.cfg.Placer.Place(k.Bucket, k.Object, e.cfg.Shards())
	e.mu.Lock()
	if e.filling[k] || len(e.filling) >= maxPendingFills {
		// Under way already, or too many waiting: a later read asks again.
		e.mu.Unlock()
		return true
	}
	e.filling[k] = true
	e.mu.Unlock()
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer func() {
			e.mu.Lock()
			delete(e.filling, k)
			e.mu.Unlock()
		}()
		// One fill codes at a time (each holds a stripe and a window
		// of pieces per holder: erasure_stream.go).
		select {
		case e.fillSem <- struct{}{}:
		case <-c.stopped.Done():
			return
		}
		defer func() { <-e.fillSem }()
		ctx, cancel := c.fillContext(context.Background())
		defer cancel()
		written, err := e.fill(ctx, k, info, addrs)
		switch {
		case err != nil || written < e.cfg.DataShards:
			e.fills.WithLabelValues("failed").Inc()
			c.log.Warn("erasure fill failed", "bucket", k.Bucket, "key", k.Object, "written", written, "err", err)
		case written < len(addrs):
			e.fills.WithLabelValues("degraded").Inc()
		default:
			e.fills.WithLabelValues("full").Inc()
		}
	}()
	return true
}

// ecInvalidate drops the shard sets of k on their holders, in the
// background (bounded by the timeout): a write changed the object.
func (c *Cachelet) ecInvalidate(k cache.Key) {
	e := c.ec
	e.mu.Lock()
	lk, known := e.large[k]
	etag := lk.info.ETag
	delete(e.large, k)
	e.invalidated++
	e.mu.Unlock()
	if !known {
		return
	}
	// Only the version last seen: a write's new version may be sharded
	// by the time a delete arrives, and must stay.
	e.shards.Delete(k.Bucket, k.Object, etag)
	e.dropVersion(k.Bucket, k.Object, etag)
	addrs := e.cfg.Placer.Place(k.Bucket, k.Object, e.cfg.Shards())
	self := e.cfg.Placer.PeerAddr()
	e.deletes.Inc()
	for _, addr := range addrs {
		if addr == self {
			continue
		}
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			ctx, cancel := context.WithTimeout(c.stopped, e.cfg.Timeout)
			defer cancel()
			if err := e.cfg.Peers.ShardDelete(ctx, addr, k.Bucket, k.Object, etag); err != nil {
				c.log.Debug("shard delete failed", "bucket", k.Bucket, "key", k.Object, "holder", addr, "err", err)
			}
		}()
	}
}
