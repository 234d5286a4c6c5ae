package blockfmt

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// Source gives an object's bytes by range: a local file, a ranged GET.
type Source interface {
	// FetchAt fills p with the object's bytes at off; it returns an error
	// unless it filled all of p. A Reader calls it from one goroutine at a
	// time and never for bytes past the object's end.
	FetchAt(ctx context.Context, p []byte, off int64) error
}

// ReaderAtSource adapts an io.ReaderAt (an *os.File, a bytes.Reader).
func ReaderAtSource(r io.ReaderAt) Source { return readerAtSource{r} }

type readerAtSource struct{ r io.ReaderAt }

func (s readerAtSource) FetchAt(_ context.Context, p []byte, off int64) error {
	n, err := s.r.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// ReaderOption sets a Reader's parameters.
type ReaderOption func(*readerConfig)

type readerConfig struct {
	cacheBlocks int
	tailGuess   int
	maxFetch    int
	maxIndex    int64
	maxBlocks   int64
	maxEntries  int64
}

// WithCacheBlocks sets how many decompressed blocks a Reader keeps
// (default 8; at least 1).
func WithCacheBlocks(n int) ReaderOption {
	return func(c *readerConfig) { c.cacheBlocks = max(n, 1) }
}

// WithMaxIndex bounds the index (block table and TOC, in bytes) a
// Reader reads and holds (default and most MaxIndex). NewReader refuses
// an object whose footer declares a larger one, with an error wrapping
// ErrTooLarge, before it reads any of the index: with WithMaxBlocks and
// WithMaxEntries, what an untrusted object makes a Reader allocate is
// bounded by the caller, not by the object.
func WithMaxIndex(n int64) ReaderOption {
	return func(c *readerConfig) { c.maxIndex = min(max(n, 0), MaxIndex) }
}

// WithMaxBlocks bounds the blocks of an object a Reader opens (default:
// what the index's bound allows); more is ErrTooLarge.
func WithMaxBlocks(n int64) ReaderOption {
	return func(c *readerConfig) { c.maxBlocks = max(n, 0) }
}

// WithMaxEntries bounds the TOC entries of an archive a Reader opens
// (default MaxEntries); more is ErrTooLarge.
func WithMaxEntries(n int64) ReaderOption {
	return func(c *readerConfig) { c.maxEntries = min(max(n, 0), MaxEntries) }
}

// Stats counts a Reader's fetches from its Source.
type Stats struct {
	// Fetches and BytesFetched count FetchAt calls and their bytes.
	Fetches, BytesFetched int64
	// BlocksDecoded counts blocks decompressed and verified.
	BlocksDecoded int64
}

// Reader reads an object's uncompressed bytes, fetching and verifying only
// the blocks that cover what is read, and keeps the last few decoded
// blocks. It is safe for concurrent use; reads are serialized.
type Reader struct {
	src       Source
	f         footer
	lengths   []uint32 // per block: compressed length, storedBit for stored
	sums      []uint32
	offs      []int64 // per block: offset in the object
	toc       []Entry
	byPath    map[string]int
	dirs      map[string][]int // directory ("." for the root) -> its entries
	maxFetch  int
	dec       *zstd.Decoder
	cacheSize int

	mu     sync.Mutex
	cache  []cached
	tick   uint64
	stats  Stats
	fetch  []byte
	header bool // header checked

	indexSum [sha256.Size]byte // of the index and footer (IndexSHA256)
}

type cached struct {
	block int
	data  []byte
	used  uint64
}

// NewReader reads the tail of an object of size bytes (the footer and
// index, in one fetch unless the index is large) and checks it.
func NewReader(ctx context.Context, src Source, size int64, opts ...ReaderOption) (*Reader, error) {
	cfg := readerConfig{cacheBlocks: 8, tailGuess: 64 << 10, maxFetch: 8 << 20, maxIndex: MaxIndex, maxBlocks: MaxIndex / blockEntry, maxEntries: MaxEntries}
	for _, o := range opts {
		o(&cfg)
	}
	r := &Reader{src: src, cacheSize: cfg.cacheBlocks}
	if size < headerLen+footerLen {
		return nil, formatErr("%d bytes is too short for an object", size)
	}
	tail := min(size, int64(cfg.tailGuess))
	buf := make([]byte, tail)
	if err := r.fetchAt(ctx, buf, size-tail); err != nil {
		return nil, err
	}
	f, err := parseFooter(buf[len(buf)-footerLen:], size)
	if err != nil {
		return nil, err
	}
	switch {
	case int64(f.indexLen) > cfg.maxIndex:
		return nil, fmt.Errorf("%w: an index of %d bytes, over the %d this reader holds", ErrTooLarge, f.indexLen, cfg.maxIndex)
	case int64(f.blocks) > cfg.maxBlocks:
		return nil, fmt.Errorf("%w: %d blocks, over the %d this reader holds", ErrTooLarge, f.blocks, cfg.maxBlocks)
	case int64(f.entries) > cfg.maxEntries:
		return nil, fmt.Errorf("%w: %d entries, over the %d this reader holds", ErrTooLarge, f.entries, cfg.maxEntries)
	}
	r.f = f
	var index []byte
	if need := int64(f.indexLen) + footerLen; need <= tail {
		index = buf[tail-need : tail-footerLen]
	} else {
		// The index is larger than the guess; its length is bounded by
		// the reader's bound (WithMaxIndex) and by the object's size
		// (parseFooter).
		index = make([]byte, f.indexLen)
		if err := r.fetchAt(ctx, index, int64(f.indexOff)); err != nil {
			return nil, err
		}
	}
	if checksum(index) != f.indexCRC {
		return nil, fmt.Errorf("%w: index", ErrChecksum)
	}
	h := sha256.New()
	h.Write(index)
	h.Write(buf[len(buf)-footerLen:])
	h.Sum(r.indexSum[:0])
	if err := r.parseIndex(index); err != nil {
		return nil, err
	}
	r.maxFetch = max(cfg.maxFetch, int(f.blockSize)+int(f.blockSize)/2)
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
		zstd.WithDecoderMaxWindow(uint64(windowFor(int(f.blockSize)))),
		zstd.WithDecoderMaxMemory(uint64(f.blockSize)), zstd.WithDecodeAllCapLimit(true))
	if err != nil {
		return nil, fmt.Errorf("blockfmt: %w", err)
	}
	r.dec = dec
	return r, nil
}

func (r *Reader) parseIndex(index []byte) error {
	le := binary.LittleEndian
	f := r.f
	n := int(f.blocks)
	r.lengths = make([]uint32, n)
	r.sums = make([]uint32, n)
	r.offs = make([]int64, n)
	off := uint64(headerLen)
	for i := range n {
		l, sum := le.Uint32(index[i*8:]), le.Uint32(index[i*8+4:])
		raw := r.blockLen(i)
		switch {
		case l&storedBit != 0 && int64(l&^storedBit) != raw:
			return formatErr("block %d stored with %d bytes, want %d", i, l&^storedBit, raw)
		case l&storedBit == 0 && (l == 0 || int64(l) >= raw):
			return formatErr("block %d compressed to %d bytes from %d", i, l, raw)
		}
		r.lengths[i], r.sums[i], r.offs[i] = l, sum, int64(off)
		off += uint64(l &^ storedBit)
	}
	if off != f.indexOff {
		return formatErr("blocks end at %d, index starts at %d", off, f.indexOff)
	}
	rest := index[n*8:]
	if f.flags&flagArchive == 0 {
		if len(rest) != 0 {
			return formatErr("%d bytes after the block table", len(rest))
		}
		return nil
	}
	r.toc = make([]Entry, 0, f.entries)
	r.byPath = make(map[string]int, f.entries)
	r.dirs = map[string][]int{}
	next := int64(0) // files lie end to end, in TOC order
	for i := 0; i < int(f.entries); i++ {
		if len(rest) < 2 {
			return formatErr("TOC entry %d truncated", i)
		}
		pl := int(le.Uint16(rest))
		if len(rest) < tocFixed+pl {
			return formatErr("TOC entry %d truncated", i)
		}
		e := Entry{Path: string(rest[2 : 2+pl])}
		b := rest[2+pl:]
		mode, eoff, esize := le.Uint32(b), le.Uint64(b[4:]), le.Uint64(b[12:])
		rest = b[20:]
		e.Mode = fs.FileMode(mode)
		if !validPath(e.Path) {
			return formatErr("TOC entry %d: invalid path %q", i, e.Path)
		}
		if _, dup := r.byPath[e.Path]; dup {
			return formatErr("TOC entry %d: %s twice", i, e.Path)
		}
		if dir := path.Dir(e.Path); dir != "." {
			if p, ok := r.byPath[dir]; !ok || !r.toc[p].Mode.IsDir() {
				return formatErr("TOC entry %d: %s before its directory", i, e.Path)
			}
		}
		switch e.Mode.Type() {
		case fs.ModeDir:
			if eoff != 0 || esize != 0 {
				return formatErr("directory %s with bytes", e.Path)
			}
		case 0:
			if eoff != uint64(next) || esize > f.size-eoff {
				return formatErr("file %s at %d+%d, want it at %d within %d bytes", e.Path, eoff, esize, next, f.size)
			}
			e.Offset, e.Size = int64(eoff), int64(esize)
			next += e.Size
		default:
			return formatErr("%s: mode %v is neither a regular file nor a directory", e.Path, e.Mode)
		}
		if e.Mode&^(fs.ModeDir|fs.ModePerm) != 0 {
			return formatErr("%s: mode %v has bits besides type and permissions", e.Path, e.Mode)
		}
		r.byPath[e.Path] = len(r.toc)
		r.dirs[path.Dir(e.Path)] = append(r.dirs[path.Dir(e.Path)], len(r.toc))
		r.toc = append(r.toc, e)
	}
	if len(rest) != 0 {
		return formatErr("%d bytes after the TOC", len(rest))
	}
	if uint64(next) != f.size {
		return formatErr("files hold %d bytes of %d", next, f.size)
	}
	return nil
}

// blockLen is block i's uncompressed length.
func (r *Reader) blockLen(i int) int64 {
	bs := int64(r.f.blockSize)
	return min(bs, int64(r.f.size)-int64(i)*bs)
}

func (r *Reader) fetchAt(ctx context.Context, p []byte, off int64) error {
	r.stats.Fetches++
	r.stats.BytesFetched += int64(len(p))
	if err := r.src.FetchAt(ctx, p, off); err != nil {
		return fmt.Errorf("blockfmt: fetch %d bytes at %d: %w", len(p), off, err)
	}
	return nil
}

// Size is the object's uncompressed size.
func (r *Reader) Size() int64 { return int64(r.f.size) }

// BlockSize is the object's block size.
func (r *Reader) BlockSize() int { return int(r.f.blockSize) }

// Blocks is the object's number of blocks.
func (r *Reader) Blocks() int { return int(r.f.blocks) }

// IsArchive reports whether the object has a TOC.
func (r *Reader) IsArchive() bool { return r.f.flags&flagArchive != 0 }

// IndexSHA256 is the hex SHA-256 of the object's index and footer. The
// index holds every block's CRC-32C, so a digest recorded when the object
// was written (as the controller does for code packages) binds the
// blocks read later to that object; a reader compares it before trusting
// a lazily read object.
func (r *Reader) IndexSHA256() string { return hex.EncodeToString(r.indexSum[:]) }

// BlockSpan returns where block i's stored (compressed) bytes lie in the
// object: its offset and length.
func (r *Reader) BlockSpan(i int) (off, n int64) {
	return r.offs[i], int64(r.lengths[i] &^ storedBit)
}

// Stats returns the counts so far.
func (r *Reader) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats
}

// Close releases the decoder. The Reader must not be used after.
func (r *Reader) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.dec != nil {
		r.dec.Close()
		r.dec = nil
	}
	return nil
}

// ReadAt reads uncompressed bytes at off (io.ReaderAt) with a background
// context; see ReadAtContext.
func (r *Reader) ReadAt(p []byte, off int64) (int, error) {
	return r.ReadAtContext(context.Background(), p, off)
}

// ReadAtContext reads len(p) uncompressed bytes at off, fetching the
// blocks that cover them and are not cached, consecutive blocks in one
// fetch (of at most 8 MiB). It returns io.EOF with fewer bytes at the
// object's end, and an error wrapping ErrChecksum or ErrFormat for a
// block that does not decode to its checksum.
func (r *Reader) ReadAtContext(ctx context.Context, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("blockfmt: negative offset")
	}
	size := int64(r.f.size)
	if off >= size {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	want := p
	if int64(len(p)) > size-off {
		want = p[:size-off]
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.dec == nil {
		return 0, errors.New("blockfmt: read after Close")
	}
	bs := int64(r.f.blockSize)
	n := 0
	for n < len(want) {
		pos := off + int64(n)
		b := int(pos / bs)
		data, err := r.block(ctx, b, int((off+int64(len(want))-1)/bs))
		if err != nil {
			return n, err
		}
		n += copy(want[n:], data[pos-int64(b)*bs:])
	}
	if len(want) < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// block returns block b's uncompressed bytes, from the cache or fetched
// along with the uncached blocks after it up to last. The bytes are valid
// until the next call.
func (r *Reader) block(ctx context.Context, b, last int) ([]byte, error) {
	r.tick++
	for i := range r.cache {
		if r.cache[i].block == b {
			r.cache[i].used = r.tick
			return r.cache[i].data, nil
		}
	}
	// Fetch b and the following uncached blocks up to last in one range.
	end := b + 1
	total := int64(r.lengths[b] &^ storedBit)
	for end <= last && end-b < r.cacheSize && !r.cached(end) {
		l := int64(r.lengths[end] &^ storedBit)
		if total+l > int64(r.maxFetch) {
			break
		}
		total += l
		end++
	}
	start := r.offs[b]
	withHeader := b == 0 && !r.header
	if withHeader {
		start = 0
		total += headerLen
	}
	if int64(cap(r.fetch)) < total {
		r.fetch = make([]byte, total)
	}
	buf := r.fetch[:total]
	if err := r.fetchAt(ctx, buf, start); err != nil {
		return nil, err
	}
	if withHeader {
		if err := r.checkHeader(buf[:headerLen]); err != nil {
			return nil, err
		}
		r.header = true
		buf = buf[headerLen:]
	}
	var first []byte
	for i := b; i < end; i++ {
		l := int(r.lengths[i] &^ storedBit)
		data, err := r.decode(i, buf[:l])
		if err != nil {
			return nil, err
		}
		buf = buf[l:]
		if i == b {
			first = data
		}
	}
	return first, nil
}

func (r *Reader) cached(b int) bool {
	for _, c := range r.cache {
		if c.block == b {
			return true
		}
	}
	return false
}

// checkHeader checks the header against the footer.
func (r *Reader) checkHeader(h []byte) error {
	le := binary.LittleEndian
	if string(h[:8]) != magic || le.Uint16(h[8:]) != version || le.Uint32(h[12:]) != r.f.blockSize {
		return formatErr("header does not match the footer")
	}
	return nil
}

// decode decompresses and verifies block i into a cache slot (evicting
// the least recently used) and returns its bytes.
func (r *Reader) decode(i int, comp []byte) ([]byte, error) {
	slot := r.slot()
	raw := r.blockLen(i)
	var data []byte
	if r.lengths[i]&storedBit != 0 {
		data = append(slot.data[:0], comp...)
	} else {
		if int64(cap(slot.data)) < raw {
			slot.data = make([]byte, 0, raw)
		}
		var err error
		data, err = r.dec.DecodeAll(comp, slot.data[:0:raw])
		if err != nil {
			slot.block = -1
			return nil, formatErr("block %d: %v", i, err)
		}
	}
	r.stats.BlocksDecoded++
	if int64(len(data)) != raw || checksum(data) != r.sums[i] {
		slot.block = -1
		return nil, fmt.Errorf("%w: block %d", ErrChecksum, i)
	}
	slot.block, slot.data, slot.used = i, data, r.tick
	return data, nil
}

// slot returns the cache slot to fill: a new one while the cache has room,
// else the least recently used.
func (r *Reader) slot() *cached {
	if len(r.cache) < r.cacheSize {
		r.cache = append(r.cache, cached{block: -1})
		return &r.cache[len(r.cache)-1]
	}
	lru := 0
	for i := range r.cache {
		if r.cache[i].used < r.cache[lru].used {
			lru = i
		}
	}
	r.cache[lru].block = -1
	return &r.cache[lru]
}

// DecodeBlock decompresses block i from its stored bytes (the span
// BlockSpan(i) names) and verifies them against the block's checksum. It
// returns new bytes, the block's uncompressed length, or an error wrapping
// ErrChecksum or ErrFormat; it leaves the Reader's own cache alone, so a
// caller that keeps blocks elsewhere (a cachelet) decodes through it.
func (r *Reader) DecodeBlock(i int, stored []byte) ([]byte, error) {
	if i < 0 || i >= len(r.lengths) {
		return nil, fmt.Errorf("blockfmt: block %d of %d", i, len(r.lengths))
	}
	l := r.lengths[i]
	if int64(len(stored)) != int64(l&^storedBit) {
		return nil, formatErr("block %d: %d stored bytes, want %d", i, len(stored), l&^storedBit)
	}
	raw := r.blockLen(i)
	var data []byte
	if l&storedBit != 0 {
		data = append(make([]byte, 0, raw), stored...)
	} else {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.dec == nil {
			return nil, errors.New("blockfmt: read after Close")
		}
		var err error
		data, err = r.dec.DecodeAll(stored, make([]byte, 0, raw))
		if err != nil {
			return nil, formatErr("block %d: %v", i, err)
		}
	}
	if int64(len(data)) != raw || checksum(data) != r.sums[i] {
		return nil, fmt.Errorf("%w: block %d", ErrChecksum, i)
	}
	return data, nil
}
