package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/appspec"
	"github.com/hoard-io/hoard/internal/blockfmt"
	"github.com/hoard-io/hoard/internal/lazyfs"
)

// How an agent gets an instance's code (Config.CodeFetch, ADR 0027).
const (
	// CodeFetchAuto is lazy where this host can mount FUSE file systems
	// (root, /dev/fuse), whole elsewhere.
	CodeFetchAuto = ""
	// CodeFetchLazy mounts a block-format package (lazyfs): the instance
	// starts at once and each block is fetched, and verified, when a
	// file's bytes are first read.
	CodeFetchLazy = "lazy"
	// CodeFetchWhole downloads the whole package, checks its digest and
	// unpacks it before the instance starts.
	CodeFetchWhole = "whole"
)

// CodeFetchEnv overrides Config.CodeFetch ("lazy" or "whole").
const CodeFetchEnv = "HOARD_CODE_FETCH"

// CodePushEnv=off keeps a lazily mounted package's blocks from being
// pushed down the function tree (Config.NoCodePush): children read from
// their parents on demand only, a baseline for benchmarks.
const CodePushEnv = "HOARD_CODE_PUSH"

// CodeFetchAheadEnv=on sets Config.CodeFetchAhead: the root of a
// package's function tree fetches it whole in the background.
const CodeFetchAheadEnv = "HOARD_CODE_FETCH_AHEAD"

// CodeRelayEnv=off makes lazily mounted packages come from the store
// only, never from a parent agent (Config.NoCodeRelay): a baseline for
// benchmarks.
const CodeRelayEnv = "HOARD_CODE_RELAY"

// lazyCode is the agent's lazily mounted packages, one per digest, kept
// until the agent closes (the instances of one package share it).
type lazyCode struct {
	mu      sync.Mutex
	mounts  map[string]*mounted // by package digest
	retired lazyfs.Stats        // of mounts gone

	serving chan struct{} // relay answers being made (relay.go)
	streams chan struct{} // block streams being served (pushdown.go)

	errs       prometheus.Counter
	rejected   prometheus.Counter
	reattached prometheus.Counter
	relayed    *prometheus.CounterVec
	pushed     *prometheus.CounterVec
	whole      prometheus.Histogram
}

type mounted struct {
	fs                  *lazyfs.FS
	src                 *relaySource
	packageBytes, files int64
}

// CodeMount describes one lazily mounted code package.
type CodeMount struct {
	SHA256 string
	// PackageBytes is the package object's size in the store;
	// Unpacked the size of its files.
	PackageBytes, Unpacked int64
	// Fetched is what has been read from the store so far (the index
	// included); Opened the files read, in the order first opened.
	Fetched int64
	Opened  []string
	// FromParent and FromStore split what was fetched: from the parent
	// agent in the function tree, and from the store.
	FromParent, FromStore int64
	// Pushed is the part of FromParent the parent pushed as its blocks
	// completed (pushdown.go).
	Pushed int64
	// Parent is the agent asked now ("" for the store).
	Parent string
	// Rejected counts fetches from the parent refused because a block
	// did not match its SHA-256.
	Rejected int64
	// Held is how many of the package's bytes this node holds.
	Held int64
	// Whole is when this node first held the whole package (every
	// block, each from another agent matched against its SHA-256, and
	// the index); zero until then.
	Whole time.Time
	Stats lazyfs.Stats
}

// setupCodeFetch settles Config.CodeFetch (New calls it).
func (a *Agent) setupCodeFetch() error {
	if v := strings.TrimSpace(os.Getenv(CodeFetchEnv)); v != "" {
		a.cfg.CodeFetch = strings.ToLower(v)
	}
	if strings.EqualFold(strings.TrimSpace(os.Getenv(CodeRelayEnv)), "off") {
		a.cfg.NoCodeRelay = true
	}
	if strings.EqualFold(strings.TrimSpace(os.Getenv(CodePushEnv)), "off") {
		a.cfg.NoCodePush = true
	}
	if strings.EqualFold(strings.TrimSpace(os.Getenv(CodeFetchAheadEnv)), "on") {
		a.cfg.CodeFetchAhead = true
	}
	switch a.cfg.CodeFetch {
	case CodeFetchAuto:
		if err := lazyfs.Available(); err != nil {
			a.log.Info("instances' code is downloaded whole before they start", "why", err)
			a.cfg.CodeFetch = CodeFetchWhole
		} else {
			a.cfg.CodeFetch = CodeFetchLazy
		}
	case CodeFetchLazy:
		if err := lazyfs.Available(); err != nil {
			return fmt.Errorf("agent: code fetch %q: %w", CodeFetchLazy, err)
		}
	case CodeFetchWhole:
	default:
		return fmt.Errorf("agent: code fetch %q: want %q or %q", a.cfg.CodeFetch, CodeFetchLazy, CodeFetchWhole)
	}
	if a.cfg.CodeFetch == CodeFetchLazy {
		// Mounts a killed agent left in this directory.
		code := filepath.Join(a.cfg.Dir, "code")
		stale, err := lazyfs.MountsUnder(code)
		if err != nil {
			return fmt.Errorf("agent: %w", err)
		}
		for _, m := range stale {
			if err := lazyfs.Detach(m); err != nil {
				return fmt.Errorf("agent: detaching %s, left by an earlier agent: %w", m, err)
			}
			a.log.Info("detached code mounted by an earlier agent", "dir", m)
		}
	}
	a.lazy = &lazyCode{mounts: map[string]*mounted{}, serving: make(chan struct{}, maxRelayServing), streams: make(chan struct{}, maxPushStreams)}
	a.lazy.errs = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "hoard_agent_lazy_code_read_errors_total",
		Help: "Reads of lazily mounted code answered with an I/O error (a block that could not be fetched or did not verify).",
	})
	a.lazy.relayed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hoard_agent_lazy_code_relay_bytes_total",
		Help: "Bytes of lazily read code packages fetched, by where from (parent: the agent above in the function tree; store).",
	}, []string{"from"})
	a.lazy.pushed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hoard_agent_lazy_code_pushed_bytes_total",
		Help: "Bytes of lazily read code packages' blocks pushed down the function tree as they completed (way: sent to children, received from the parent and kept).",
	}, []string{"way"})
	a.lazy.reattached = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "hoard_agent_lazy_code_reattached_total",
		Help: "Times a lazily read package's parent changed to the one the function tree names, after a parent failed.",
	})
	a.lazy.whole = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "hoard_agent_lazy_code_whole_seconds",
		Help:    "Time from a lazily read package's mount to the agent holding every block of it (from other agents, each matched against its SHA-256), whoever read them: its instances or its parent's pushes.",
		Buckets: prometheus.ExponentialBuckets(0.05, 2, 12),
	})
	a.lazy.rejected = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "hoard_agent_lazy_code_relay_rejected_total",
		Help: "Fetches from a parent agent refused because a block did not match its SHA-256 (the package is then read from the store).",
	})
	if reg := a.cfg.Registerer; reg != nil {
		reg.MustRegister(a.lazy.reattached, a.lazy.pushed, a.lazy.whole)
		reg.MustRegister(a.lazy.errs, a.lazy.rejected, a.lazy.relayed,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "hoard_agent_lazy_code_mounts", Help: "Code packages mounted lazily.",
			}, func() float64 { return float64(len(a.CodeMounts())) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "hoard_agent_lazy_code_fetched_bytes_total",
				Help: "Bytes of lazily mounted code packages fetched from the store.",
			}, func() float64 { return float64(a.lazyTotals().Fetch.BytesFetched) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "hoard_agent_lazy_code_file_opens_total", Help: "Files of lazily mounted code packages opened.",
			}, func() float64 { return float64(a.lazyTotals().Opens) }),
		)
	}
	return nil
}

// codeMount describes the lazily mounted package sha, if there is one.
func (a *Agent) codeMount(sha string) (CodeMount, bool) {
	for _, m := range a.CodeMounts() {
		if m.SHA256 == sha {
			return m, true
		}
	}
	return CodeMount{}, false
}

// lazyTotals sums every mount's counts, those unmounted included.
func (a *Agent) lazyTotals() lazyfs.Stats {
	l := a.lazy
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.retired
	for _, m := range l.mounts {
		s := m.fs.Stats()
		t.Opens += s.Opens
		t.Files += s.Files
		t.ReadErrors += s.ReadErrors
		t.Fetch.Fetches += s.Fetch.Fetches
		t.Fetch.BytesFetched += s.Fetch.BytesFetched
		t.Fetch.BlocksDecoded += s.Fetch.BlocksDecoded
	}
	return t
}

// CodeMounts describes the lazily mounted code packages.
func (a *Agent) CodeMounts() []CodeMount {
	if a.lazy == nil {
		return nil
	}
	a.lazy.mu.Lock()
	defer a.lazy.mu.Unlock()
	out := make([]CodeMount, 0, len(a.lazy.mounts))
	for sum, m := range a.lazy.mounts {
		s := m.fs.Stats()
		out = append(out, CodeMount{SHA256: sum, PackageBytes: m.packageBytes, Unpacked: m.files,
			Fetched: s.Fetch.BytesFetched, Opened: m.fs.Opened(), Stats: s,
			FromParent: m.src.fromParent.Load(), FromStore: m.src.fromStore.Load(), Pushed: m.src.pushed.Load(), Rejected: m.src.rejected.Load(),
			Parent: m.src.currentParent(), Held: m.src.held(), Whole: m.src.wholeAt()})
	}
	return out
}

// lazyCodeDir mounts the package when it can be read lazily: ok is false
// when it cannot (a tar.gz package, one deployed before index digests,
// or lazy fetch off), and the caller downloads it whole. Called under
// codeMu.
func (a *Agent) lazyCodeDir(ctx context.Context, ref api.PackageRef, parents []api.Registration, dir string) (string, bool, error) {
	if a.cfg.CodeFetch != CodeFetchLazy || !strings.HasSuffix(ref.Key, "."+appspec.FormatBlocks) ||
		len(ref.IndexSHA256) != 64 || strings.Trim(ref.IndexSHA256, "0123456789abcdef") != "" {
		return "", false, nil
	}
	l := a.lazy
	l.mu.Lock()
	m := l.mounts[ref.SHA256]
	l.mu.Unlock()
	if m != nil {
		return m.fs.Dir(), true, nil
	}
	a.pruneMounts()
	// A mount left by an agent that ended without unmounting.
	if err := lazyfs.Detach(dir); err != nil {
		return "", true, fmt.Errorf("the code directory %s: %w", dir, err)
	}
	os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", true, err
	}
	src, err := a.newRelaySource(ctx, ref, parents, dir+".raw")
	if err != nil {
		return "", true, err
	}
	if !a.cfg.NoCodePush {
		// The parent's blocks come down as it completes them.
		src.startPush()
	}
	r, err := a.openLazy(ctx, ref, src)
	if err != nil && (errors.Is(err, blockfmt.ErrChecksum) || errors.Is(err, blockfmt.ErrFormat)) && src.distrust() { // the parent's index did not verify
		r, err = a.openLazy(ctx, ref, src)
	}
	if err != nil {
		src.close()
		return "", true, err
	}
	fs, err := lazyfs.Mount(dir, r, lazyfs.Options{
		Name: "hoard-code-" + ref.SHA256[:12],
		OnError: func(file string, err error) {
			l.errs.Inc()
			a.log.Warn("a lazily read code file could not be read", "package", ref.SHA256, "file", file, "err", err)
		},
		// A block from the parent that does not verify: read it again
		// from the store.
		Retry: func(err error) bool {
			return (errors.Is(err, blockfmt.ErrChecksum) || errors.Is(err, blockfmt.ErrFormat)) && src.distrust()
		},
	})
	if err != nil {
		r.Close()
		src.close()
		return "", true, err
	}
	if a.cfg.CodeFetchAhead && len(src.parents) == 0 {
		src.startFetchAhead()
	}
	stat := struct{ Size int64 }{src.size}
	l.mu.Lock()
	l.mounts[ref.SHA256] = &mounted{fs: fs, src: src, packageBytes: stat.Size, files: r.Size()}
	l.mu.Unlock()
	a.log.Info("code mounted lazily", "package", ref.SHA256, "bytes", stat.Size, "dir", dir, "parents", len(src.parents))
	return dir, true, nil
}

// openLazy opens a package for a lazy mount and checks its index against
// the digest the controller recorded at deploy (the index holds every
// block's checksum; the controller checked every block).
func (a *Agent) openLazy(ctx context.Context, ref api.PackageRef, src *relaySource) (*blockfmt.Reader, error) {
	// Within a package's bounds, as the controller checked: a store or a
	// parent that serves another index gets no more memory than that.
	r, err := blockfmt.NewReader(ctx, src, src.size, append(appspec.PackageReaderOptions(), blockfmt.WithCacheBlocks(16))...)
	if err != nil {
		return nil, fmt.Errorf("opening the code package %s/%s: %w", ref.Bucket, ref.Key, err)
	}
	if r.IndexSHA256() != ref.IndexSHA256 || !r.IsArchive() {
		r.Close()
		return nil, fmt.Errorf("the code package %s/%s does not match its digest: %w", ref.Bucket, ref.Key, blockfmt.ErrChecksum)
	}
	if e, ok := r.Lookup(appspec.FileName); !ok || e.Mode.IsDir() {
		r.Close()
		return nil, fmt.Errorf("the code package %s/%s has no %s", ref.Bucket, ref.Key, appspec.FileName)
	}
	return r, nil
}

// pruneMounts unmounts the packages no instance uses any more (an older
// version's, one whose instances were unloaded), so that mounts and their
// local copies stay bounded by the packages in use. Instances are listed
// before they load (Start), so a package being started is in use. Called
// under codeMu.
func (a *Agent) pruneMounts() {
	used := map[string]bool{}
	a.mu.Lock()
	for _, in := range a.instances {
		used[in.req.Package.SHA256] = true
	}
	a.mu.Unlock()
	l := a.lazy
	l.mu.Lock()
	defer l.mu.Unlock()
	for sum, mt := range l.mounts {
		if used[sum] {
			continue
		}
		l.retire(mt)
		err := errors.Join(mt.fs.Unmount(), mt.src.close(), os.Remove(mt.fs.Dir()))
		delete(l.mounts, sum)
		a.log.Info("unused code unmounted", "package", sum, "err", err)
	}
}

// retire adds a mount's counts to those of mounts gone; under l.mu.
func (l *lazyCode) retire(mt *mounted) {
	s := mt.fs.Stats()
	l.retired.Opens += s.Opens
	l.retired.Files += s.Files
	l.retired.ReadErrors += s.ReadErrors
	l.retired.Fetch.Fetches += s.Fetch.Fetches
	l.retired.Fetch.BytesFetched += s.Fetch.BytesFetched
	l.retired.Fetch.BlocksDecoded += s.Fetch.BlocksDecoded
}

// unmountCode unmounts every lazily mounted package (Close, after the
// instances are gone).
func (a *Agent) unmountCode() {
	if a.lazy == nil {
		return
	}
	l := a.lazy
	l.mu.Lock()
	defer l.mu.Unlock()
	var errs []error
	for sum, mt := range l.mounts {
		m := mt.fs
		l.retire(mt)
		if err := m.Unmount(); err != nil {
			errs = append(errs, err)
		}
		if err := mt.src.close(); err != nil {
			errs = append(errs, err)
		}
		os.Remove(filepath.Clean(m.Dir()))
		delete(l.mounts, sum)
	}
	if err := errors.Join(errs...); err != nil {
		a.log.Warn("unmounting lazily read code", "err", err)
	}
}
