package cachelet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hoard-io/hoard/internal/blockfmt"
	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/store"
)

// Unpacked reads (ADR 0020's amendment): an object stored in the block
// format (hoard pack) read as the bytes it packs, a range of them costing
// the store only the blocks that cover it. It is a path of its own, asked
// for explicitly (the S3 front's x-hoard-unpacked header): a plain GET,
// ranged or not, is of the object as the store holds it, the packed
// container, and goes through Get and pages as any object.
//
// Every read asks the store for the object's current version (one Stat),
// after the writes to the key still queued here or at other cachelets
// (owner and local write targets) are delivered (Settle);
// the object's index is read once per version (its tail, pinned to the
// ETag) and kept in a small table; each block is fetched as a ranged GET
// pinned to the ETag, decoded and checked against its CRC-32C before it
// is kept or served, and kept decoded as a cache entry of its own (named,
// like pages, with a NUL no key holds, and by the ETag, so no other
// version's read takes it). A block that does not match its checksum is
// never kept nor served: the read fails (ErrBlockChecksum).

// ErrNotPacked: an unpacked read of an object that is not in the block
// format. Nothing is served and nothing kept.
var ErrNotPacked = errors.New("cachelet: the object is not in the block format")

// ErrBlockChecksum: a block of the object, as the store holds it, does
// not match its checksum; none of its bytes were served or kept.
var ErrBlockChecksum = errors.New("cachelet: a block of the object does not match its checksum")

const (
	// unpackedReadersMax bounds the table of opened indexes; an index
	// of more than unpackedIndexBlocks blocks is read for its request
	// and not kept (at 16 bytes a block, at most 1 MiB each).
	unpackedReadersMax  = 16
	unpackedIndexBlocks = 1 << 16
	// unpackedRunMax bounds one store fetch of consecutive missing
	// blocks (stored bytes), as blockfmt's reader does; their decoded
	// bytes, held until served, are bounded by twice that (but a run
	// holds at least one block).
	unpackedRunMax = 8 << 20
)

// Unpacked is an open unpacked read.
type Unpacked struct {
	// Info is the packed object's, as the store holds it.
	Info store.ObjectInfo
	// Size is the length of the bytes it packs.
	Size int64
	// Range is the resolved range of those bytes (both ends inclusive),
	// or nil when Body holds all of them.
	Range *store.ByteRange
	// Body must be closed. Its bytes come block by block; a block that
	// fails later than the first ends it short (an error, never other
	// bytes).
	Body    io.ReadCloser
	Outcome Outcome
}

// Length is the number of bytes in Body.
func (u *Unpacked) Length() int64 {
	if u.Range == nil {
		return u.Size
	}
	return u.Range.End - u.Range.Start + 1
}

// unpackedState is the table of opened indexes and the metrics.
type unpackedState struct {
	mu      sync.Mutex
	readers map[unpackedVersion]*blockfmt.Reader

	reads      *prometheus.CounterVec // hoard_cachelet_unpacked_reads_total{result}
	blocks     *prometheus.CounterVec // hoard_cachelet_unpacked_blocks_total{source}
	storeBytes prometheus.Counter     // hoard_cachelet_unpacked_store_bytes_total
}

type unpackedVersion struct {
	k    cache.Key
	etag string
}

func newUnpackedState(reg prometheus.Registerer) *unpackedState {
	u := &unpackedState{
		readers: make(map[unpackedVersion]*blockfmt.Reader),
		reads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hoard_cachelet_unpacked_reads_total",
			Help: "Unpacked reads of block-format objects (x-hoard-unpacked): hit (every block cached), filled (blocks fetched from the store), not_packed (refused), corrupt (a block did not match its checksum), error.",
		}, []string{"result"}),
		blocks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hoard_cachelet_unpacked_blocks_total",
			Help: "Blocks that unpacked reads served, by where they came from (cache, store).",
		}, []string{"source"}),
		storeBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hoard_cachelet_unpacked_store_bytes_total",
			Help: "Bytes unpacked reads fetched from the store (indexes and blocks).",
		}),
	}
	for _, r := range []string{"hit", "filled", "not_packed", "corrupt", "error"} {
		u.reads.WithLabelValues(r)
	}
	for _, s := range []string{"cache", "store"} {
		u.blocks.WithLabelValues(s)
	}
	if reg != nil {
		reg.MustRegister(u.reads, u.blocks, u.storeBytes)
	}
	return u
}

// GetUnpacked opens rng (nil: all) of the bytes bucket/key packs in the
// block format (see the top of the file).
//
// Errors: ErrNotPacked, ErrBlockChecksum, store.ErrNoSuchKey,
// store.ErrNoSuchBucket, store.ErrInvalidRange, store.ErrUnavailable,
// store.ErrPreconditionFailed (the object was replaced while read).
func (c *Cachelet) GetUnpacked(ctx context.Context, bucket, key string, rng *store.ByteRange) (*Unpacked, error) {
	start := c.clock.Now()
	if strings.IndexByte(key, 0) >= 0 {
		return nil, errNULKey
	}
	k := cache.Key{Bucket: bucket, Object: key}
	// Writes still queued (owner and local write targets) first: the
	// blocks are read from the store.
	if err := c.Settle(ctx, bucket, key); err != nil {
		return nil, c.unpackedFailed(err)
	}
	sctx, cancel := context.WithTimeout(ctx, c.cfg.FillTimeout)
	info, err := c.store.Stat(sctx, bucket, key)
	cancel()
	if err != nil {
		return nil, c.unpackedFailed(err)
	}
	rd, err := c.unpackedReader(ctx, k, info)
	if err != nil {
		return nil, c.unpackedFailed(err)
	}
	size := rd.Size()
	r := store.ByteRange{Start: 0, End: size - 1}
	if rng != nil {
		if r, err = ResolveRange(*rng, size); err != nil {
			return nil, c.unpackedFailed(err)
		}
	}
	b := &unpackedBody{c: c, ctx: ctx, k: k, info: info, rd: rd, pos: r.Start, end: r.End}
	if size > 0 {
		// The first run now, so that a failure is an error answer
		// rather than a body cut short.
		if err := b.next(); err != nil {
			b.Close()
			return nil, c.unpackedFailed(err)
		}
	}
	o, result := LocalHit, "hit"
	if b.fromStore {
		o, result = LocalMiss, "filled"
	}
	c.unpacked.reads.WithLabelValues(result).Inc()
	u := &Unpacked{Info: info, Size: size, Body: c.m.track(b, o, start), Outcome: o}
	if rng != nil {
		u.Range = &r
	}
	return u, nil
}

// unpackedFailed counts a failed unpacked read and names its error.
func (c *Cachelet) unpackedFailed(err error) error {
	u := c.unpacked
	switch {
	case errors.Is(err, ErrNotPacked):
		u.reads.WithLabelValues("not_packed").Inc()
	case errors.Is(err, ErrBlockChecksum):
		u.reads.WithLabelValues("corrupt").Inc()
	case errors.Is(err, store.ErrNoSuchKey), errors.Is(err, store.ErrNoSuchBucket), errors.Is(err, store.ErrInvalidRange):
	default:
		u.reads.WithLabelValues("error").Inc()
	}
	return err
}

// unpackedReader returns the opened index of version info of k, from the
// table or read from the store (its tail, pinned to the ETag).
func (c *Cachelet) unpackedReader(ctx context.Context, k cache.Key, info store.ObjectInfo) (*blockfmt.Reader, error) {
	u := c.unpacked
	v := unpackedVersion{k: k, etag: info.ETag}
	u.mu.Lock()
	rd := u.readers[v]
	u.mu.Unlock()
	if rd != nil {
		return rd, nil
	}
	src := &unpackedSource{c: c, k: k, etag: info.ETag}
	rd, err := blockfmt.NewReader(ctx, src, info.Size, blockfmt.WithCacheBlocks(1))
	switch {
	case errors.Is(err, blockfmt.ErrFormat), errors.Is(err, blockfmt.ErrChecksum):
		return nil, fmt.Errorf("%w: %s: %w", ErrNotPacked, k, err)
	case err != nil:
		return nil, err
	}
	if rd.Blocks() <= unpackedIndexBlocks {
		u.mu.Lock()
		if len(u.readers) >= unpackedReadersMax {
			for old := range u.readers {
				delete(u.readers, old) // dropped, not closed: a read may hold it
				break
			}
		}
		u.readers[v] = rd
		u.mu.Unlock()
	}
	return rd, nil
}

// unpackedSource reads an object's bytes from the store, pinned to one
// ETag; a Reader uses it for the index only (blocks come through
// unpackedBody).
type unpackedSource struct {
	c    *Cachelet
	k    cache.Key
	etag string
}

func (s *unpackedSource) FetchAt(ctx context.Context, p []byte, off int64) error {
	return s.c.unpackedFetch(ctx, s.k, s.etag, p, off)
}

// unpackedFetch fills p with the object's bytes at off, as version etag.
func (c *Cachelet) unpackedFetch(ctx context.Context, k cache.Key, etag string, p []byte, off int64) error {
	if len(p) == 0 {
		return nil
	}
	fctx, cancel := context.WithTimeout(ctx, c.cfg.FillTimeout)
	defer cancel()
	body, _, _, err := c.store.Get(fctx, k.Bucket, k.Object, store.GetOptions{
		Range:   &store.ByteRange{Start: off, End: off + int64(len(p)) - 1},
		IfMatch: etag,
	})
	if err != nil {
		return err
	}
	defer body.Close()
	n, err := io.ReadFull(body, p)
	c.unpacked.storeBytes.Add(float64(n))
	if err != nil {
		return fmt.Errorf("%w: %s: %w", store.ErrUnavailable, k, err)
	}
	return nil
}

// unpackedBlockKey names decoded block i of version etag of k in the
// cache: a name no key has (a NUL), apart from pages' (pageKey) by its
// "b" mark.
func unpackedBlockKey(k cache.Key, etag string, i int) cache.Key {
	return cache.Key{Bucket: k.Bucket, Object: k.Object + "\x00" + etag + "\x00b" + strconv.Itoa(i)}
}

// unpackedBody serves bytes [pos, end] of the unpacked object, a run of
// blocks at a time: the cached ones from their entries, the missing ones
// fetched together, verified and kept.
type unpackedBody struct {
	c         *Cachelet
	ctx       context.Context
	k         cache.Key
	info      store.ObjectInfo
	rd        *blockfmt.Reader
	pos, end  int64 // next byte to queue, last byte
	segs      []io.ReadCloser
	fromStore bool // a block came from the store
	err       error
}

func (b *unpackedBody) Read(p []byte) (int, error) {
	for {
		if len(b.segs) > 0 {
			n, err := b.segs[0].Read(p)
			if err == io.EOF {
				b.segs[0].Close()
				b.segs = b.segs[1:]
				if n == 0 {
					continue
				}
				err = nil
			}
			return n, err
		}
		if b.err != nil {
			return 0, b.err
		}
		if b.pos > b.end {
			return 0, io.EOF
		}
		if err := b.next(); err != nil {
			b.err = err
			return 0, err
		}
	}
}

func (b *unpackedBody) Close() error {
	for _, s := range b.segs {
		s.Close()
	}
	b.segs = nil
	if b.err == nil {
		b.err = errors.New("cachelet: read after Close")
	}
	return nil
}

// next queues the next run: the cached blocks from pos on, up to the
// first missing one, or the missing blocks from pos on (at most
// unpackedRunMax stored bytes), fetched in one ranged GET.
func (b *unpackedBody) next() error {
	c, u := b.c, b.c.unpacked
	bs := int64(b.rd.BlockSize())
	first, last := int(b.pos/bs), int(b.end/bs)
	seg := func(i int) (from, n int64) {
		base := int64(i) * bs
		from = max(b.pos, base) - base
		to := min(b.end+1, base+bs) - base
		return from, to - from
	}
	i := first
	for ; i <= last; i++ {
		e := c.cache.Get(unpackedBlockKey(b.k, b.info.ETag, i))
		if e == nil || !e.Acquire() {
			break
		}
		from, n := seg(i)
		b.segs = append(b.segs, e.ReadCloser(from, n))
		b.pos = int64(i)*bs + from + n
		u.blocks.WithLabelValues("cache").Inc()
	}
	if i > first {
		return nil
	}
	// Missing blocks: fetch the run, verify each, keep and serve.
	off, total := b.rd.BlockSpan(first)
	j := first + 1
	for ; j <= last && int64(j-first+1)*bs <= unpackedRunMax*2; j++ {
		if e := c.cache.Peek(unpackedBlockKey(b.k, b.info.ETag, j)); e != nil {
			break
		}
		_, l := b.rd.BlockSpan(j)
		if total+l > unpackedRunMax {
			break
		}
		total += l
	}
	stored := make([]byte, total)
	if err := c.unpackedFetch(b.ctx, b.k, b.info.ETag, stored, off); err != nil {
		return err
	}
	b.fromStore = true
	for i := first; i < j; i++ {
		_, l := b.rd.BlockSpan(i)
		data, err := b.rd.DecodeBlock(i, stored[:l])
		stored = stored[l:]
		if err != nil {
			c.log.Warn("block does not match its checksum", "bucket", b.k.Bucket, "key", b.k.Object,
				"etag", b.info.ETag, "block", i, "err", err)
			return fmt.Errorf("%w: %s block %d: %w", ErrBlockChecksum, b.k, i, err)
		}
		c.keepUnpackedBlock(b.k, b.info, i, data)
		from, n := seg(i)
		b.segs = append(b.segs, io.NopCloser(bytes.NewReader(data[from:from+n])))
		b.pos = int64(i)*bs + from + n
		u.blocks.WithLabelValues("store").Inc()
	}
	return nil
}

// keepUnpackedBlock adds a verified decoded block to the cache, where it
// fits.
func (c *Cachelet) keepUnpackedBlock(k cache.Key, info store.ObjectInfo, i int, data []byte) {
	n := int64(len(data))
	if !c.cache.Admissible(n) {
		return
	}
	binfo := info
	binfo.Size, binfo.Checksums, binfo.ChecksumType = n, nil, ""
	e := c.cache.ReserveEntry(cache.ForPage, unpackedBlockKey(k, info.ETag, i), binfo)
	if e == nil {
		return
	}
	if _, err := e.ReadFrom(bytes.NewReader(data)); err != nil {
		c.cache.Release(e.Charge())
		e.Release()
		return
	}
	c.cache.Add(e)
	e.Release()
}
