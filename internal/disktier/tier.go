// Package disktier is the cache's disk tier (CacheFlow): a directory per
// application on each node, with its own byte budget and LRU, that holds
// objects evicted from the memory of the application's cachelets on that
// node and outlives them, so that an instance loaded again on the node
// starts warm.
//
// Files are named by a hash of bucket and key (never by the key), in a
// fan-out of 256 subdirectories. Each file carries its object's metadata
// and a CRC32C of its bytes recorded when it was written; every read
// verifies it before a byte is served (and again as the bytes stream), so
// a damaged file is a miss, dropped and counted, never wrong bytes.
//
// Writes are crash-safe: a file is written under tmp/ and renamed into
// place, so a reader sees a whole file or none. By default files are not
// fsynced (Config.Fsync): the tier is a cache, and a file torn by a power
// loss fails its checksum and is dropped on its first read.
//
// Several processes (the application's instances on one node) share one
// directory without locks: renames are atomic, an open file outlives its
// unlinking, and each process keeps an index of what it has seen (the
// pure core, internal/diskindex) that its cleaner rebuilds from the
// directory every Config.CleanInterval. Reads refresh a file's mtime,
// which is the recency every process's cleaner orders by. The budget is
// kept by each writer on its own view and by every rescan on the whole
// directory: between two rescans the directory may exceed it by what the
// other processes wrote meanwhile.
//
// A disk that fills or fails degrades the tier to memory-only for
// Config.RetryAfter (metric hoard_disk_degraded); a failure is never an
// error to a client: reads miss and spills are skipped.
package disktier

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hoard-io/hoard/internal/clock"
	"github.com/hoard-io/hoard/internal/diskindex"
	"github.com/hoard-io/hoard/internal/store"
)

// Config configures a Tier.
type Config struct {
	// Dir is the application's directory on this node, shared by its
	// instances there. Required; made (0700) if missing.
	Dir string
	// Budget is the most bytes the tier's files hold. Required (> 0).
	Budget int64
	// MinObjectSize is the smallest object worth a file: below it the
	// store's round trip, which a version check pays anyway, costs about
	// what moving the bytes does. Default 16 KiB; 1 keeps every object.
	MinObjectSize int64
	// MaxAge removes files not read or written for this long. Default 24 h;
	// negative: no age limit.
	MaxAge time.Duration
	// CleanInterval is how often the cleaner rescans the directory and
	// enforces budget and age. Default 1 minute.
	CleanInterval time.Duration
	// PendingBytes bounds the evicted objects held in memory while they
	// wait for their write (memory outside the cache's budget): beyond
	// it, evictions are not spilled. Default 16 MiB.
	PendingBytes int64
	// Fsync syncs each file before it is renamed into place. Default
	// false (a torn file fails its checksum and is a miss).
	Fsync bool
	// Group shares the tier with the directory's group: the application's
	// other instances on the node, which run as uids of their own (the
	// node agent makes the directory theirs, mode 02770). Directories are
	// made 02770 and files 0640. Default false: 0700 and 0600, for
	// instances that run as one uid.
	Group bool
	// RetryAfter is how long the tier stays memory-only after a write
	// failed (a full or failing disk). Default 30 s.
	RetryAfter time.Duration

	Clock      clock.Clock           // default: the system clock
	Logger     *slog.Logger          // default: discard
	Registerer prometheus.Registerer // nil: no metrics exported
}

// Defaults of Config.
const (
	DefaultMinObjectSize = 16 << 10
	DefaultMaxAge        = 24 * time.Hour
	DefaultCleanInterval = time.Minute
	DefaultPendingBytes  = 16 << 20
	DefaultRetryAfter    = 30 * time.Second
)

// Validate checks the config and fills in defaults.
func (c *Config) Validate() error {
	if c.Dir == "" {
		return errors.New("disktier: a directory is required")
	}
	if c.Budget <= 0 {
		return errors.New("disktier: budget must be positive")
	}
	if c.MinObjectSize == 0 {
		c.MinObjectSize = DefaultMinObjectSize
	}
	if c.MinObjectSize < 0 {
		return errors.New("disktier: min object size must not be negative")
	}
	if c.MaxAge == 0 {
		c.MaxAge = DefaultMaxAge
	}
	if c.CleanInterval == 0 {
		c.CleanInterval = DefaultCleanInterval
	}
	if c.CleanInterval < 0 {
		return errors.New("disktier: clean interval must be positive")
	}
	if c.PendingBytes == 0 {
		c.PendingBytes = DefaultPendingBytes
	}
	if c.PendingBytes < 0 {
		return errors.New("disktier: pending bytes must be positive")
	}
	if c.RetryAfter == 0 {
		c.RetryAfter = DefaultRetryAfter
	}
	if c.RetryAfter < 0 {
		return errors.New("disktier: retry-after must be positive")
	}
	c.Clock = clock.Or(c.Clock)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Errors of Open.
var (
	// ErrNotFound: the tier holds no file for the object.
	ErrNotFound = errors.New("disktier: not on disk")
	// ErrCorrupt: the object's file failed its checks (its checksum, its
	// header, or the key it names); it has been dropped.
	ErrCorrupt = errors.New("disktier: file failed its checksum")
)

// Tier is one application's disk tier on one node, as one process sees it.
// Its methods are safe for concurrent use.
type Tier struct {
	cfg Config
	log *slog.Logger
	m   *metrics

	mu       sync.Mutex
	idx      *diskindex.Index
	known    map[string]knownFile // files this process wrote or verified, by name
	pending  map[string]*job      // spills queued or being written, by name
	held     int64                // bytes of pending spills
	degraded time.Time            // memory-only until then
	settled  *sync.Cond           // on mu: broadcast when a job ends

	queue     chan *job
	stop      chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
}

// New opens (or makes) the tier's directory, indexes what is in it (an
// instance reloaded on the node starts warm) and starts its writer and
// cleaner, which Close stops.
func New(cfg Config) (*Tier, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	t := &Tier{
		cfg:     cfg,
		log:     cfg.Logger,
		idx:     diskindex.New(cfg.Budget),
		known:   map[string]knownFile{},
		pending: map[string]*job{},
		queue:   make(chan *job, 1024),
		stop:    make(chan struct{}),
	}
	for _, d := range []string{cfg.Dir, filepath.Join(cfg.Dir, objectsDir), filepath.Join(cfg.Dir, tmpDir)} {
		if err := t.mkdir(d); err != nil {
			return nil, fmt.Errorf("disktier: %w", err)
		}
	}
	t.settled = sync.NewCond(&t.mu)
	t.m = newMetrics(t, cfg.Registerer)
	t.clean()
	t.wg.Add(2)
	go t.writer()
	go t.cleaner()
	return t, nil
}

// mkdir makes a directory of the tier, shared with its group under
// Config.Group.
func (t *Tier) mkdir(d string) error {
	if !t.cfg.Group {
		return os.MkdirAll(d, 0o700)
	}
	return SharedDir(d)
}

// Dir is the tier's directory.
func (t *Tier) Dir() string { return t.cfg.Dir }

// Close stops taking spills, writes those still queued (for at most 5 s;
// the rest are dropped, their bodies closed), stops the cleaner and waits
// for both. Idempotent.
func (t *Tier) Close() error {
	t.closeOnce.Do(func() {
		close(t.stop)
		t.wg.Wait()
		for {
			select {
			case j := <-t.queue:
				t.finish(j)
				continue
			default:
			}
			break
		}
	})
	return nil
}

// Settle waits until every spill queued so far is written or dropped.
func (t *Tier) Settle() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for len(t.pending) > 0 {
		t.settled.Wait()
	}
}

// Stats is a snapshot of the tier as this process sees it.
type Stats struct {
	Objects  int
	Bytes    int64
	Budget   int64
	Degraded bool
}

// Stats returns a snapshot.
func (t *Tier) Stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return Stats{Objects: t.idx.Len(), Bytes: t.idx.Bytes(), Budget: t.idx.Budget(), Degraded: t.isDegraded()}
}

// isDegraded reports whether the tier is memory-only now. Called with mu
// held.
func (t *Tier) isDegraded() bool { return t.cfg.Clock.Now().Before(t.degraded) }

// fail records a failed disk operation; a failed write degrades the tier.
func (t *Tier) fail(op string, err error) {
	t.m.errors.WithLabelValues(op).Inc()
	if op == "write" {
		t.mu.Lock()
		t.degraded = t.cfg.Clock.Now().Add(t.cfg.RetryAfter)
		t.mu.Unlock()
		t.log.Warn("disk tier write failed: memory-only for a while", "dir", t.cfg.Dir, "retry_after", t.cfg.RetryAfter, "err", err)
		return
	}
	t.log.Warn("disk tier operation failed", "op", op, "dir", t.cfg.Dir, "err", err)
}

// Remove drops the object's file, and any spill of it not yet written:
// a write or delete made the copy obsolete.
func (t *Tier) Remove(bucket, key string) {
	name := nameOf(bucket, key)
	t.mu.Lock()
	defer t.mu.Unlock()
	if j := t.pending[name]; j != nil {
		j.cancelled = true
	}
	t.drop(name, "invalidated")
}

// knownFile is what a process knows of a file it wrote or read: whose
// object it holds, and which version.
type knownFile struct{ bucket, key, etag string }

// RemovePrefix drops the files of bucket's keys under prefix that this
// process wrote or read (a file only another process touched is not
// known here: it leaves by LRU or age), and any spill of such keys not yet
// written. It returns how many files it removed. The node agent's drop of
// a pipeline run's intermediate objects reaches the disk this way.
func (t *Tier) RemovePrefix(bucket, prefix string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	match := func(b, k string) bool { return b == bucket && strings.HasPrefix(k, prefix) }
	for _, j := range t.pending {
		if match(j.bucket, j.key) {
			j.cancelled = true
		}
	}
	n := 0
	for name, f := range t.known {
		if match(f.bucket, f.key) {
			t.drop(name, "invalidated")
			n++
		}
	}
	return n
}

// drop removes a file and forgets it. Called with mu held.
func (t *Tier) drop(name, reason string) {
	delete(t.known, name)
	t.idx.Remove(name)
	err := os.Remove(t.path(name))
	switch {
	case err == nil:
		t.m.removed.WithLabelValues(reason).Inc()
	case !errors.Is(err, os.ErrNotExist):
		t.m.errors.WithLabelValues("remove").Inc()
	}
}

// Write writes one object to disk now, waiting for nothing queued: a
// cachelet closing keeps what it holds in memory this way. It takes
// body and closes it. Errors: a refusal (too small, too large, degraded)
// or the disk's error; either way the tier is unchanged.
func (t *Tier) Write(ctx context.Context, bucket, key string, info store.ObjectInfo, body io.ReadCloser) error {
	j := &job{name: nameOf(bucket, key), bucket: bucket, key: key, info: info, body: body}
	if reason := t.refuse(j, false); reason != "" {
		body.Close()
		t.m.spills.WithLabelValues(reason).Inc()
		return fmt.Errorf("disktier: not written (%s)", reason)
	}
	if err := ctx.Err(); err != nil {
		t.finish(j)
		return err
	}
	return t.write(j)
}
