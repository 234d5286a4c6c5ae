package cachelet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/store"
)

// Pages (ADR 0021): a ranged read of an object not cached whole is
// fetched from the store as a range, widened to whole pages of PageSize
// bytes, and those pages are kept as cache entries of their own, so that
// ranges of objects of any size are cached, evicted and fetched a page at
// a time. A page is named by its object's key, the object's ETag and its
// index, so pages of two versions never serve one read: a read takes
// every page of one ETag, the one the store (or, under ReadLocal, the
// page index) names. The page index remembers, per key, the version whose
// pages a read under ReadLocal may trust; writes through the cachelet
// (Invalidate) forget it. Under ReadVersionCheck a read of cached pages
// still asks the store, with one conditional ranged GET.
//
// The hooks into the rest of the cachelet are narrow: Get sends ranged
// reads of objects it holds no whole entry of here (rangeUsesPages),
// Invalidate forgets the index (pages.forget), and Close stops new page
// fills (pages.close) before it waits for the running ones.

// DefaultPageSize is the size of a page when Config.PageSize is 0.
const DefaultPageSize = 128 << 10

// pageIndexMax bounds the page index: past it, an arbitrary key is
// forgotten (its pages are found again by the next read that asks the
// store).
const pageIndexMax = 1 << 16

// pages is the page index and the page fills in flight.
type pages struct {
	size int64 // bytes per page; <= 0: off

	mu       sync.Mutex
	index    map[cache.Key]store.ObjectInfo // the version whose pages are trusted
	gen      uint64                         // bumped by every forget
	inflight map[cache.Key]*cache.Entry     // pages being filled, by page key
	closed   bool

	reads      *prometheus.CounterVec // hoard_cachelet_page_reads_total{result}
	storeBytes prometheus.Counter     // hoard_cachelet_page_store_bytes_total
}

func newPages(size int64, reg prometheus.Registerer) *pages {
	p := &pages{
		size:     size,
		index:    make(map[cache.Key]store.ObjectInfo),
		inflight: make(map[cache.Key]*cache.Entry),
		reads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hoard_cachelet_page_reads_total",
			Help: "Ranged reads served through pages: hit (every page cached), filled (pages fetched from the store as a range), passed (the range streamed from the store, not cached).",
		}, []string{"result"}),
		storeBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hoard_cachelet_page_store_bytes_total",
			Help: "Bytes of the ranged store answers that page reads asked for.",
		}),
	}
	for _, r := range []string{"hit", "filled", "passed"} {
		p.reads.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(p.reads, p.storeBytes)
	}
	return p
}

// rangeUsesPages reports whether a ranged read of k goes through pages:
// pages are on, reads trust the store or memory (not an owner, whose
// newest version may not be in the store yet), writes go to the store,
// and no whole copy of k is cached or being filled or written (which
// serves its ranges itself).
func (c *Cachelet) rangeUsesPages(k cache.Key) bool {
	return c.pages.size > 0 && c.cfg.ReadMode != ReadOwner && c.cfg.WriteTarget == WriteStore &&
		!c.cfg.ownerMode() && c.cache.Peek(k) == nil && !c.keys.holds(k)
}

// pageKey names page i of version etag of k in the cache. Keys never hold
// a NUL (the S3 front refuses them), so a page's name is no object's.
// isPage reports whether k names a page (pageKey) rather than an object:
// pages stay in memory, never spilled to the disk tier, which keeps whole
// objects.
func isPage(k cache.Key) bool { return strings.IndexByte(k.Object, 0) >= 0 }

func pageKey(k cache.Key, etag string, i int64) cache.Key {
	return cache.Key{Bucket: k.Bucket, Object: k.Object + "\x00" + etag + "\x00" + strconv.FormatInt(i, 10)}
}

// lookup returns the version whose pages the index trusts, and the
// index's generation (to hand to record).
func (p *pages) lookup(k cache.Key) (store.ObjectInfo, bool, uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	info, ok := p.index[k]
	return info, ok, p.gen
}

// record makes info k's trusted version, unless a write forgot anything
// since generation gen was read (the answer may predate it).
func (p *pages) record(k cache.Key, info store.ObjectInfo, gen uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gen != gen {
		return
	}
	if _, ok := p.index[k]; !ok && len(p.index) >= pageIndexMax {
		for old := range p.index {
			delete(p.index, old)
			break
		}
	}
	p.index[k] = info
}

// forget drops k's trusted version (a write or delete through the
// cachelet): its pages stay until evicted, but no read under ReadLocal
// takes them without asking the store first.
func (p *pages) forget(k cache.Key) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gen++
	delete(p.index, k)
}

// close refuses later page fills; Close then waits for the running ones.
func (p *pages) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
}

// held returns a reference to each page of version info covering r, from
// the cache or a fill in flight, or nil (holding nothing) when one is
// missing.
func (c *Cachelet) heldPages(k cache.Key, info store.ObjectInfo, r store.ByteRange) []*cache.Entry {
	p := c.pages
	first, last := r.Start/p.size, r.End/p.size
	held := make([]*cache.Entry, 0, last-first+1)
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := first; i <= last; i++ {
		pk := pageKey(k, info.ETag, i)
		e := p.inflight[pk]
		if e == nil {
			// A fill adds its page to the cache before it leaves
			// inflight, so a page is in one or the other.
			e = c.cache.Get(pk)
		}
		if e == nil || e.Aborted() || !e.Acquire() {
			releaseAll(held)
			return nil
		}
		held = append(held, e)
	}
	return held
}

func releaseAll(es []*cache.Entry) {
	for _, e := range es {
		e.Release()
	}
}

// getRange serves a ranged read through pages (see the top of the file).
func (c *Cachelet) getRange(ctx context.Context, k cache.Key, req store.ByteRange, start time.Time) (*Object, error) {
	if strings.IndexByte(k.Object, 0) >= 0 {
		return nil, errNULKey
	}
	obj, err := c.pageRead(ctx, k, req, start, true)
	if errors.Is(err, errSpanShort) {
		// A span chosen for the size the index knew missed the range
		// of the object as it is now: ask for the range as for an
		// object never seen.
		obj, err = c.pageRead(ctx, k, req, start, false)
		if errors.Is(err, errSpanShort) {
			c.m.readErrors.Inc()
			err = fmt.Errorf("%w: %w", store.ErrUnavailable, err)
		}
	}
	return obj, err
}

// pageRead is one try of getRange; useIndex says whether it may trust the
// size the page index knows to choose the span.
func (c *Cachelet) pageRead(ctx context.Context, k cache.Key, req store.ByteRange, start time.Time, useIndex bool) (*Object, error) {
	info, known, gen := c.pages.lookup(k)
	known = known && useIndex
	var r store.ByteRange
	var err error
	if known {
		r, err = ResolveRange(req, info.Size)
		known = err == nil // else the store judges the range
	}
	if known {
		if held := c.heldPages(k, info, r); held != nil {
			if c.cfg.ReadMode == ReadLocal {
				return c.servePages(k, info, r, held, LocalHit, "hit", start), nil
			}
			// The store's word, for the pages' span: not modified
			// serves them; a new version comes back as the answer
			// to fill pages from.
			body, ninfo, got, err := c.rangeGet(ctx, k, c.pageSpan(r, info.Size), info.ETag)
			switch {
			case errors.Is(err, store.ErrNotModified):
				c.m.validations.WithLabelValues("fresh").Inc()
				return c.servePages(k, info, r, held, LocalHit, "hit", start), nil
			case err == nil:
				c.m.validations.WithLabelValues("changed").Inc()
				releaseAll(held)
				c.pages.record(k, ninfo, gen)
				return c.fillPages(k, req, body, ninfo, got, start, true)
			case errors.Is(err, store.ErrUnavailable) && c.cfg.ServeStaleIfError:
				c.m.validations.WithLabelValues("error").Inc()
				return c.servePages(k, info, r, held, StaleHit, "hit", start), nil
			}
			releaseAll(held)
			return nil, c.rangeFailed(k, err)
		}
	}
	span := req
	if known {
		span = c.pageSpan(r, info.Size)
		if span.End-span.Start+1 > c.cfg.Cache.MaxObjectSize {
			span = r // too long to keep: streamed, so the range alone
		}
	} else if req.Start >= 0 {
		span = store.ByteRange{Start: req.Start / c.pages.size * c.pages.size, End: -1}
		if req.End >= 0 {
			span.End = (req.End/c.pages.size+1)*c.pages.size - 1
		}
	} // a suffix of an unknown size is asked for as is
	// A function whose inputs are not worth caching (admit.go) keeps no
	// page: the store is asked for its range alone.
	keep := c.Admitting()
	if !keep {
		span = req
		if known {
			span = r
		}
	}
	body, ninfo, got, err := c.rangeGet(ctx, k, span, "")
	if err != nil {
		return nil, c.rangeFailed(k, err)
	}
	c.pages.record(k, ninfo, gen)
	return c.fillPages(k, req, body, ninfo, got, start, keep)
}

// errSpanShort: the store's answer does not hold the range, because the
// object changed size since its span was chosen.
var errSpanShort = errors.New("cachelet: the store's answer does not cover the range")

// rangeFailed ends a page read the store refused.
func (c *Cachelet) rangeFailed(k cache.Key, err error) error {
	switch {
	case errors.Is(err, store.ErrNoSuchKey), errors.Is(err, store.ErrNoSuchBucket):
		c.pages.forget(k)
	case errors.Is(err, store.ErrInvalidRange):
	default:
		c.m.readErrors.Inc()
	}
	return err
}

// pageSpan is r widened to whole pages of an object of size bytes.
func (c *Cachelet) pageSpan(r store.ByteRange, size int64) store.ByteRange {
	ps := c.pages.size
	return store.ByteRange{Start: r.Start / ps * ps, End: min((r.End/ps+1)*ps, size) - 1}
}

// rangeGet asks the store for span of k (conditional on ifNoneMatch when
// set) and returns the answer and the span it holds.
func (c *Cachelet) rangeGet(ctx context.Context, k cache.Key, span store.ByteRange, ifNoneMatch string) (io.ReadCloser, store.ObjectInfo, store.ByteRange, error) {
	fctx, cancel := c.fillContext(ctx)
	body, info, got, err := c.store.Get(fctx, k.Bucket, k.Object, store.GetOptions{Range: &span, IfNoneMatch: ifNoneMatch})
	if err != nil {
		cancel()
		return nil, store.ObjectInfo{}, store.ByteRange{}, err
	}
	whole := store.ByteRange{Start: 0, End: info.Size - 1}
	if got == nil { // the store sent the whole object
		got = &whole
	}
	c.pages.storeBytes.Add(float64(got.End - got.Start + 1))
	return cancelOnClose{ReadCloser: body, cancel: cancel}, info, *got, nil
}

// fillPages serves req from a store answer holding span got of the
// object info describes: from pages filled from it when got is whole
// pages, they fit and keep is set, else streamed through.
func (c *Cachelet) fillPages(k cache.Key, req store.ByteRange, body io.ReadCloser, info store.ObjectInfo, got store.ByteRange, start time.Time, keep bool) (*Object, error) {
	r, err := ResolveRange(req, info.Size)
	if err != nil {
		body.Close()
		return nil, err
	}
	if r.Start < got.Start || r.End > got.End {
		// The object changed size since the span was chosen for the
		// size known before: the caller asks again.
		body.Close()
		return nil, errSpanShort
	}
	ps := c.pages.size
	aligned := got.Start%ps == 0 && ((got.End+1)%ps == 0 || got.End == info.Size-1)
	if keep && aligned && got.End-got.Start+1 <= c.cfg.Cache.MaxObjectSize {
		if entries := c.newPages(k, info, got); entries != nil {
			// The reader's references: the pages covering r.
			mine := entries[(r.Start-got.Start)/ps : (r.End-got.Start)/ps+1]
			for _, e := range mine {
				e.Acquire() // the fill holds one, so this one is taken
			}
			go c.fillPageRun(entries, body)
			return c.servePages(k, info, r, mine, LocalMiss, "filled", start), nil
		}
	}
	// Streamed through: one store request, the lead-in dropped.
	if skip := r.Start - got.Start; skip > 0 {
		if _, err := io.CopyN(io.Discard, body, skip); err != nil {
			body.Close()
			c.m.readErrors.Inc()
			return nil, fmt.Errorf("%w: %w", store.ErrUnavailable, err)
		}
	}
	c.pages.reads.WithLabelValues("passed").Inc()
	if !keep {
		c.m.counts.notAdmitted.Add(1)
	}
	n := r.End - r.Start + 1
	b := struct {
		io.Reader
		io.Closer
	}{io.LimitReader(body, n), body}
	return &Object{Info: info, Range: &r, Body: c.m.track(b, PassThrough, start), Outcome: PassThrough}, nil
}

// newPages reserves and registers the pages of span got (whole pages of
// the object info describes), each holding the fill's reference, or
// returns nil, holding nothing, when they do not fit or the cachelet
// closed. The caller starts fillPageRun.
func (c *Cachelet) newPages(k cache.Key, info store.ObjectInfo, got store.ByteRange) []*cache.Entry {
	ps := c.pages.size
	pinfo := info
	pinfo.Checksums, pinfo.ChecksumType = nil, ""
	var entries []*cache.Entry
	undo := func() {
		for _, e := range entries {
			c.cache.Release(e.Charge())
			e.Release()
		}
	}
	for off := got.Start; off <= got.End; off += ps {
		pinfo.Size = min(ps, info.Size-off)
		e := c.cache.ReserveEntry(cache.ForPage, pageKey(k, info.ETag, off/ps), pinfo)
		if e == nil {
			undo()
			return nil
		}
		entries = append(entries, e)
	}
	p := c.pages
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		undo()
		return nil
	}
	for _, e := range entries {
		p.inflight[e.Key()] = e
	}
	c.wg.Add(1) // under p.mu, so Close (which closes p first) waits for it
	return entries
}

// fillPageRun fills entries, in order, from body, and adds each complete
// page to the cache; a failure aborts the page it hit and every later
// one (their readers get the error, never partial bytes).
func (c *Cachelet) fillPageRun(entries []*cache.Entry, body io.ReadCloser) {
	defer c.wg.Done()
	defer body.Close()
	var err error
	for _, e := range entries {
		start := c.clock.Now()
		if err == nil {
			_, err = e.ReadFrom(io.LimitReader(body, e.Size()))
		} else {
			e.Abort(err)
		}
		c.admitPage(e, err, start)
	}
}

// admitPage ends a page's fill, as admit does a whole object's, and
// releases the fill's reference.
func (c *Cachelet) admitPage(e *cache.Entry, err error, start time.Time) {
	defer e.Release()
	switch {
	case err != nil:
		c.cache.Release(e.Charge())
		c.m.fills.WithLabelValues("aborted").Inc()
	case c.cache.Add(e):
		c.m.fillOK.Inc()
		c.m.fillSeconds.Observe(c.clock.Now().Sub(start).Seconds())
	default:
		c.m.fills.WithLabelValues("over_budget").Inc()
	}
	p := c.pages
	p.mu.Lock()
	if p.inflight[e.Key()] == e {
		delete(p.inflight, e.Key())
	}
	p.mu.Unlock()
}

// servePages answers r from held, the pages covering it (each holding
// the read's reference, which the body's Close releases).
func (c *Cachelet) servePages(_ cache.Key, info store.ObjectInfo, r store.ByteRange, held []*cache.Entry, o Outcome, result string, start time.Time) *Object {
	ps := c.pages.size
	first := r.Start / ps
	segs := make([]io.ReadCloser, len(held))
	for j, e := range held {
		base := (first + int64(j)) * ps
		from, to := max(r.Start, base), min(r.End+1, base+e.Size())
		segs[j] = e.ReadCloser(from-base, to-from)
	}
	c.pages.reads.WithLabelValues(result).Inc()
	rr := r
	return &Object{Info: info, Range: &rr, Body: c.m.track(&pageReader{segs: segs}, o, start), Outcome: o}
}

// pageReader reads its pages' segments one after the other; Close
// releases every page's reference, read or not.
type pageReader struct {
	segs []io.ReadCloser
	i    int
}

func (p *pageReader) Read(b []byte) (int, error) {
	for p.i < len(p.segs) {
		n, err := p.segs[p.i].Read(b)
		if err == io.EOF {
			p.i++
			if n == 0 {
				continue
			}
			err = nil
		}
		return n, err
	}
	return 0, io.EOF
}

// WriteTo hands each page's spans to w without a copy.
func (p *pageReader) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for ; p.i < len(p.segs); p.i++ {
		n, err := io.Copy(w, p.segs[p.i])
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

func (p *pageReader) Close() error {
	for _, s := range p.segs {
		s.Close()
	}
	p.i = len(p.segs)
	return nil
}
