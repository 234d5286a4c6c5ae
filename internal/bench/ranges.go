package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/cachelet"
	"github.com/hoard-io/hoard/internal/instance"
	"github.com/hoard-io/hoard/internal/netshape"
	s3store "github.com/hoard-io/hoard/internal/store/s3"
)

// The ranged-read benchmark (`hoard bench ranges`): random ranges of
// large objects read through hoard and straight from the store, the
// store behind a shaped link (a netshape preset, by default Faa$T's
// 90 MB/s with 20 ms per exchange), all in one run. Each cold range is
// read from the store directly and through hoard one after the other
// (hoard's knowledge of the object dropped first, with
// Cachelet.Invalidate, untimed), so both see the same load; the warm
// passes read the same ranges again. Every byte read is checked.

// RangesConfig configures RunRanges.
type RangesConfig struct {
	// Objects and their sizes (uniform in [MinSize, MaxSize]); default 2
	// of 100-160 MiB.
	Objects          int
	MinSize, MaxSize int64
	// Ranges read per target, and their lengths (uniform); default 24
	// of 1-8 MiB.
	Ranges             int
	MinRange, MaxRange int64
	// PageSize is hoard's page size; default cachelet.DefaultPageSize.
	PageSize int64
	// Budget is hoard's cache budget; default 512 MiB. Objects larger
	// than MaxObject (default 64 MiB) are never kept whole.
	Budget, MaxObject int64
	// WholeToo also measures the whole-object path of objects small
	// enough to keep (the budget is raised to MaxSize for it).
	WholeToo bool
	// Preset names the store link's shaping (netshape); default "faast".
	Preset string
	// MinIOBinary; default localstore.FindBinary("minio").
	MinIOBinary string
	TempDir     string
	Seed        uint64
	Progress    io.Writer
	Log         *slog.Logger
}

func (c *RangesConfig) defaults() error {
	def := func(v *int64, d int64) {
		if *v == 0 {
			*v = d
		}
	}
	if c.Objects == 0 {
		c.Objects = 2
	}
	if c.Ranges == 0 {
		c.Ranges = 24
	}
	def(&c.MinSize, 100<<20)
	def(&c.MaxSize, 160<<20)
	def(&c.MinRange, 1<<20)
	def(&c.MaxRange, 8<<20)
	def(&c.PageSize, cachelet.DefaultPageSize)
	def(&c.Budget, 512<<20)
	def(&c.MaxObject, 64<<20)
	if c.Preset == "" {
		c.Preset = "faast"
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	if c.Objects < 1 || c.Ranges < 1 || c.MinSize < 1 || c.MaxSize < c.MinSize || c.MinRange < 1 || c.MaxRange < c.MinRange ||
		c.MaxRange > c.MinSize || c.MaxObject > c.Budget || c.MaxObject < c.MaxRange+2*c.PageSize {
		return fmt.Errorf("bench: ranges: bad settings (%d objects of %d-%d, %d ranges of %d-%d, budget %d, max object %d, page %d): "+
			"ranges must fit the objects, and a range widened to pages must fit the largest object kept",
			c.Objects, c.MinSize, c.MaxSize, c.Ranges, c.MinRange, c.MaxRange, c.Budget, c.MaxObject, c.PageSize)
	}
	return nil
}

// RangesReport is what RunRanges measured.
type RangesReport struct {
	Config  RangesConfig
	Link    string // the store link's shaping, as netshape prints it
	Targets []RangesTarget
	// RequestedBytes is the bytes of the cold ranges; the targets'
	// StoreBytes compare with it.
	RequestedBytes int64
}

// RangesTarget is one target's figures.
type RangesTarget struct {
	Name, About string
	Total       Summary // time to the last byte
	FirstByte   Summary // time to the first byte
	// StoreBytes is what hoard asked the store for in this pass (its
	// hoard_cachelet_page_store_bytes_total), -1 where not counted.
	StoreBytes int64
}

// Target names.
const (
	RangesDirect  = "store direct"
	RangesCold    = "hoard cold"
	RangesWarm    = "hoard warm"
	RangesLocal   = "hoard warm, local"
	RangesNoPages = "hoard cold, no pages"
	RangesWhole   = "hoard cold, no pages, kept whole"
)

type rangeRead struct {
	obj        int
	start, end int64 // inclusive
}

// rangeObject is object i's bytes at [off, off+len(p)): a function of
// the offset, so ranges are checked without holding the objects.
func rangeObjectBytes(seed uint64, obj int, off int64, p []byte) {
	const block = 64 << 10
	var buf [block]byte
	for len(p) > 0 {
		b := off / block
		r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), byte(obj), byte(obj >> 8), byte(b), byte(b >> 8), byte(b >> 16), byte(b >> 24)})
		_, _ = r.Read(buf[:])
		n := copy(p, buf[off-b*block:])
		p, off = p[n:], off+int64(n)
	}
}

type rangeObjectReader struct {
	seed      uint64
	obj       int
	off, size int64
}

func (r *rangeObjectReader) Read(p []byte) (int, error) {
	if r.off >= r.size {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), r.size-r.off)]
	rangeObjectBytes(r.seed, r.obj, r.off, p)
	r.off += int64(len(p))
	return len(p), nil
}

// RunRanges runs the benchmark.
func RunRanges(ctx context.Context, cfg RangesConfig) (*RangesReport, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	preset, err := netshape.LookupPreset(cfg.Preset)
	if err != nil {
		return nil, err
	}
	say := func(format string, args ...any) { fmt.Fprintf(cfg.Progress, "ranges: "+format+"\n", args...) }
	tmp, err := os.MkdirTemp(cfg.TempDir, "hoard-bench-ranges-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	srv, storeCore, err := startStore(ctx, cfg.MinIOBinary, tmp, cfg.Log)
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	endpoint := srv.Endpoint()
	rep := &RangesReport{Config: cfg, Link: "none"}
	if preset.Store.Shaped() {
		shaper, err := netshape.Start(ctx, netshape.Config{Logger: cfg.Log, LogFile: filepath.Join(tmp, "toxiproxy.log")})
		if err != nil {
			return nil, err
		}
		defer shaper.Close()
		link, err := shaper.Shape(ctx, "store", srv.Endpoint(), preset.Store, preset.Store)
		if err != nil {
			return nil, err
		}
		endpoint, rep.Link = link.Endpoint, preset.Store.String()
	}

	rnd := rand.New(rand.NewPCG(cfg.Seed, 0x7261))
	sizes := make([]int64, cfg.Objects)
	for i := range sizes {
		sizes[i] = cfg.MinSize + rnd.Int64N(cfg.MaxSize-cfg.MinSize+1)
		say("uploading object %d of %s", i, FormatSize(sizes[i]))
		if _, err := storeCore.Client.PutObject(ctx, benchBucket, rangeKey(i), &rangeObjectReader{seed: cfg.Seed, obj: i, size: sizes[i]}, sizes[i],
			minio.PutObjectOptions{ContentType: "application/octet-stream", PartSize: 64 << 20}); err != nil {
			return nil, fmt.Errorf("bench: ranges: upload: %w", err)
		}
	}
	reads := make([]rangeRead, cfg.Ranges)
	for i := range reads {
		o := rnd.IntN(cfg.Objects)
		n := cfg.MinRange + rnd.Int64N(cfg.MaxRange-cfg.MinRange+1)
		start := rnd.Int64N(sizes[o] - n + 1)
		reads[i] = rangeRead{obj: o, start: start, end: start + n - 1}
		rep.RequestedBytes += n
	}

	direct, err := NewS3Client(endpoint, srv.AccessKey(), srv.SecretKey(), benchRegion)
	if err != nil {
		return nil, err
	}
	start := func(mode cachelet.ReadMode, pageSize, maxObject int64) (*instance.Instance, *minio.Core, error) {
		in, err := instance.Start(ctx, instance.Config{
			MetricsListen: "off", Region: benchRegion, AccessKey: clientKey, SecretKey: clientSec,
			Store: s3store.Config{Endpoint: endpoint, AccessKey: srv.AccessKey(), SecretKey: srv.SecretKey(), Region: benchRegion},
			Cachelet: cachelet.Config{ReadMode: mode, PageSize: pageSize,
				Cache: cache.Config{Budget: max(cfg.Budget, maxObject), MaxObjectSize: maxObject}},
		}, cfg.Log)
		if err != nil {
			return nil, nil, err
		}
		core, err := NewS3Client(in.Endpoint(), clientKey, clientSec, benchRegion)
		if err != nil {
			_ = in.Close(context.Background())
			return nil, nil, err
		}
		return in, core, nil
	}
	closeIn := func(in *instance.Instance) {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = in.Close(cctx)
	}
	type pass struct {
		total, first []time.Duration
	}
	read := func(core *minio.Core, r rangeRead, p *pass) error {
		d, fb, err := readRange(ctx, core, cfg.Seed, r)
		if err != nil {
			return err
		}
		if p != nil {
			p.total, p.first = append(p.total, d), append(p.first, fb)
		}
		return nil
	}
	target := func(name, about string, p *pass, storeBytes int64) {
		rep.Targets = append(rep.Targets, RangesTarget{Name: name, About: about,
			Total: Summarize(p.total, 0), FirstByte: Summarize(p.first, 0), StoreBytes: storeBytes})
	}

	// Strong (the default), with pages: cold interleaved with the store
	// direct, then warm.
	in, core, err := start(cachelet.ReadVersionCheck, cfg.PageSize, cfg.MaxObject)
	if err != nil {
		return nil, err
	}
	defer closeIn(in)
	say("cold: %d ranges, store direct and hoard one after the other", len(reads))
	var dp, cp, wp pass
	b0 := pageStoreBytes(in)
	for _, r := range reads {
		if err := read(direct, r, &dp); err != nil {
			return nil, fmt.Errorf("bench: ranges: store direct: %w", err)
		}
		in.Cachelet().Invalidate(benchBucket, rangeKey(r.obj))
		if err := read(core, r, &cp); err != nil {
			return nil, fmt.Errorf("bench: ranges: hoard cold: %w", err)
		}
	}
	b1 := pageStoreBytes(in)
	say("warm: the same ranges again")
	for _, r := range reads {
		if err := read(core, r, &wp); err != nil {
			return nil, fmt.Errorf("bench: ranges: hoard warm: %w", err)
		}
	}
	b2 := pageStoreBytes(in)
	target(RangesDirect, "GET of the range from MinIO through the shaped link", &dp, -1)
	target(RangesCold, "hoard strong, the range's pages fetched as one range and kept", &cp, b1-b0)
	target(RangesWarm, "hoard strong, the same ranges again: pages in memory, one conditional GET each", &wp, b2-b1)

	// Local: pages filled untimed, then read without asking the store.
	lin, lcore, err := start(cachelet.ReadLocal, cfg.PageSize, cfg.MaxObject)
	if err != nil {
		return nil, err
	}
	defer closeIn(lin)
	var lp pass
	for _, r := range reads {
		if err := read(lcore, r, nil); err != nil {
			return nil, fmt.Errorf("bench: ranges: hoard local fill: %w", err)
		}
	}
	l0 := pageStoreBytes(lin)
	for _, r := range reads {
		if err := read(lcore, r, &lp); err != nil {
			return nil, fmt.Errorf("bench: ranges: hoard local: %w", err)
		}
	}
	target(RangesLocal, "hoard read-mode local, the same ranges again: pages in memory, no store request", &lp, pageStoreBytes(lin)-l0)
	closeIn(lin)

	// Before pages: a ranged read of an object too large to keep whole.
	nin, ncore, err := start(cachelet.ReadVersionCheck, -1, cfg.MaxObject)
	if err != nil {
		return nil, err
	}
	defer closeIn(nin)
	say("cold without pages")
	var np pass
	for _, r := range reads {
		nin.Cachelet().Invalidate(benchBucket, rangeKey(r.obj))
		if err := read(ncore, r, &np); err != nil {
			return nil, fmt.Errorf("bench: ranges: hoard without pages: %w", err)
		}
	}
	target(RangesNoPages, "hoard strong without pages (as before them): the object is too large to keep, so a whole GET is opened for its size, then the range asked for", &np, -1)
	closeIn(nin)

	// Before pages, an object small enough to keep: the read waits while
	// the whole object downloads up to its range.
	if cfg.WholeToo {
		win, wcore, err := start(cachelet.ReadVersionCheck, -1, cfg.MaxSize)
		if err != nil {
			return nil, err
		}
		defer closeIn(win)
		say("cold without pages, objects kept whole")
		var wp pass
		for _, r := range reads {
			win.Cachelet().Invalidate(benchBucket, rangeKey(r.obj))
			if err := read(wcore, r, &wp); err != nil {
				return nil, fmt.Errorf("bench: ranges: hoard without pages, kept whole: %w", err)
			}
		}
		target(RangesWhole, "hoard strong without pages (as before them), objects small enough to keep: the whole object is fetched, and the read waits until it arrives up to the range", &wp, -1)
	}
	return rep, nil
}

func rangeKey(i int) string { return fmt.Sprintf("ranges/object-%d", i) }

// pageStoreBytes reads in's hoard_cachelet_page_store_bytes_total.
func pageStoreBytes(in *instance.Instance) int64 {
	mfs, err := in.Registry().Gather()
	if err != nil {
		return -1
	}
	for _, mf := range mfs {
		if mf.GetName() == "hoard_cachelet_page_store_bytes_total" && len(mf.GetMetric()) == 1 {
			return int64(mf.GetMetric()[0].GetCounter().GetValue())
		}
	}
	return -1
}

// readRange reads r through core and checks every byte; it returns the
// time to the last byte and to the first.
func readRange(ctx context.Context, core *minio.Core, seed uint64, r rangeRead) (total, first time.Duration, err error) {
	var opts minio.GetObjectOptions
	if err := opts.SetRange(r.start, r.end); err != nil {
		return 0, 0, err
	}
	n := r.end - r.start + 1
	got := make([]byte, n)
	t0 := time.Now()
	body, _, _, err := core.GetObject(ctx, benchBucket, rangeKey(r.obj), opts)
	if err != nil {
		return 0, 0, err
	}
	defer body.Close()
	k, err := io.ReadFull(body, got[:1])
	first = time.Since(t0)
	if err == nil {
		var m int
		m, err = io.ReadFull(body, got[1:])
		k += m
	}
	total = time.Since(t0)
	if err != nil {
		return 0, 0, fmt.Errorf("range %d-%d of object %d: %d of %d bytes: %w", r.start, r.end, r.obj, k, n, err)
	}
	if extra, _ := body.Read(make([]byte, 1)); extra > 0 {
		return 0, 0, fmt.Errorf("range %d-%d of object %d: more bytes than asked for", r.start, r.end, r.obj)
	}
	want := make([]byte, n)
	rangeObjectBytes(seed, r.obj, r.start, want)
	if !bytes.Equal(got, want) {
		return 0, 0, errors.New("bench: ranges: wrong bytes in range")
	}
	return total, first, nil
}
