package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/cachelet"
	"github.com/hoard-io/hoard/internal/disktier"
	"github.com/hoard-io/hoard/internal/instance"
	"github.com/hoard-io/hoard/internal/localstore"
	"github.com/hoard-io/hoard/internal/netshape"
	s3store "github.com/hoard-io/hoard/internal/store/s3"
)

// DiskConfig configures `hoard bench disk`: a working set larger than
// the memory budget, read again and again through one cachelet, with the
// store behind a shaped link.
type DiskConfig struct {
	MinIOBinary string
	// Preset is the store link's netshape preset; default "faast"
	// (90 MB/s, 20 ms per exchange).
	Preset string
	// Objects of Size bytes make the working set; default 24 of 4 MiB.
	Objects int
	Size    int64
	// Budget is the memory tier's budget; default a third of the working
	// set.
	Budget int64
	// Passes over the working set after the cold one; default 2.
	Passes  int
	TempDir string
	// Progress receives progress lines; nil discards.
	Progress io.Writer
	Log      *slog.Logger
}

func (c *DiskConfig) defaults() {
	if c.Preset == "" {
		c.Preset = "faast"
	}
	if c.Objects <= 0 {
		c.Objects = 24
	}
	if c.Size <= 0 {
		c.Size = 4 << 20
	}
	if c.Budget <= 0 {
		c.Budget = int64(c.Objects) * c.Size / 3
	}
	if c.Passes <= 0 {
		c.Passes = 2
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
}

// DiskReport is what `hoard bench disk` measured, every variant in one
// run against one store behind one link.
type DiskReport struct {
	Link      string        `json:"link"`
	Objects   int           `json:"objects"`
	Size      int64         `json:"size"`
	Budget    int64         `json:"budget"`
	Passes    int           `json:"passes"`
	Variants  []DiskVariant `json:"variants"`
	CacheFlow string        `json:"cacheflow"`
}

// DiskVariant is one way of reading: its reads' latencies and how the
// cachelet served them.
type DiskVariant struct {
	Name     string         `json:"name"`
	Reads    Summary        `json:"reads"`
	Outcomes map[string]int `json:"outcomes"`
}

// CacheFlowFigures are the paper's own (../shared/papers/cacheflow.txt
// §4): data transfer time down 82.55% over an image pipeline's function
// chain, and up to 3.84x faster (62.64% less in total) over a video
// pipeline's, local disk at 573 MB/s against a network at 85 MB/s.
const CacheFlowFigures = "CacheFlow: transfer time -82.55% (image chain), up to 3.84x faster and -62.64% in total (video chain); disk 573 MB/s vs network 85 MB/s"

// RunDisk runs the experiment: MinIO behind the preset's link; the
// working set read directly from the store (the baseline); through a
// memory-only cachelet whose budget is below the working set (every read
// a miss under LRU's cyclic worst case); through one with the disk tier
// (misses once, then disk hits); and through a cachelet started again
// over that disk tier (an instance reloaded on its node) against a cold
// one.
func RunDisk(ctx context.Context, cfg DiskConfig) (*DiskReport, error) {
	cfg.defaults()
	tmp, err := os.MkdirTemp(cfg.TempDir, "hoard-bench-disk-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	say := func(f string, a ...any) { fmt.Fprintf(cfg.Progress, f+"\n", a...) }

	srv, err := localstore.StartMinIO(ctx, localstore.Config{Binary: cfg.MinIOBinary, DataDir: filepath.Join(tmp, "minio"),
		Addr: "127.0.0.1:0", AccessKey: "benchdisk", SecretKey: "benchdisk-secret", Logger: cfg.Log})
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	ps, err := netshape.LookupPreset(cfg.Preset)
	if err != nil {
		return nil, err
	}
	endpoint, link := srv.Endpoint(), LinkLoopback
	if ps.Store.Shaped() {
		shaper, err := netshape.Start(ctx, netshape.Config{Logger: cfg.Log, LogFile: filepath.Join(tmp, "toxiproxy.log")})
		if err != nil {
			return nil, err
		}
		defer shaper.Close()
		px, err := shaper.Shape(ctx, "store", srv.Endpoint(), ps.Store, ps.Store)
		if err != nil {
			return nil, err
		}
		endpoint, link = px.Endpoint, cfg.Preset+" ("+ps.Store.String()+")"
	}
	rep := &DiskReport{Link: link, Objects: cfg.Objects, Size: cfg.Size, Budget: cfg.Budget, Passes: cfg.Passes, CacheFlow: CacheFlowFigures}

	direct, err := NewS3Client(srv.Endpoint(), srv.AccessKey(), srv.SecretKey(), benchRegion)
	if err != nil {
		return nil, err
	}
	const bucket = "diskbench"
	if err := direct.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
		return nil, err
	}
	keys := make([]string, cfg.Objects)
	buf := make([]byte, cfg.Size)
	for i := range keys {
		keys[i] = fmt.Sprintf("working-set/%03d", i)
		rand.Read(buf)
		if _, err := direct.PutObject(ctx, bucket, keys[i], bytes.NewReader(buf), cfg.Size, "", "", minio.PutObjectOptions{}); err != nil {
			return nil, err
		}
	}
	say("uploaded %d objects of %s; store link %s", cfg.Objects, FormatSize(cfg.Size), link)

	// passes reads the working set n times in order through core and
	// returns the variant.
	passes := func(name string, core *minio.Core, n int) (DiskVariant, error) {
		v := DiskVariant{Name: name, Outcomes: map[string]int{}}
		var samples []time.Duration
		rbuf := make([]byte, readBufSize)
		for range n {
			for _, k := range keys {
				t0 := time.Now()
				body, _, hdr, err := core.GetObject(ctx, bucket, k, minio.GetObjectOptions{})
				if err != nil {
					return v, fmt.Errorf("%s: GET %s: %w", name, k, err)
				}
				got, err := drain(body, rbuf)
				body.Close()
				if err != nil || got != cfg.Size {
					return v, fmt.Errorf("%s: GET %s: %d bytes, %v", name, k, got, err)
				}
				samples = append(samples, time.Since(t0))
				o := hdr.Get("x-hoard-read")
				if o == "" {
					o = "store"
				}
				v.Outcomes[o]++
			}
		}
		v.Reads = Summarize(samples, cfg.Size)
		say("%-34s p50 %s  mean %s  %v", name, FormatDuration(v.Reads.P50), FormatDuration(v.Reads.Mean), v.Outcomes)
		return v, nil
	}
	start := func(diskDir string) (*instance.Instance, *minio.Core, error) {
		icfg := instance.Config{
			MetricsListen: "off", Region: benchRegion, AccessKey: clientKey, SecretKey: clientSec,
			Store:    s3store.Config{Endpoint: endpoint, AccessKey: srv.AccessKey(), SecretKey: srv.SecretKey(), Region: benchRegion},
			Cachelet: cachelet.Config{Cache: cache.Config{Budget: cfg.Budget, MaxObjectSize: min(cfg.Budget, 2*cfg.Size)}},
		}
		if diskDir != "" {
			icfg.Disk = disktier.Config{Dir: diskDir, Budget: 4 * int64(cfg.Objects) * cfg.Size}
		}
		in, err := instance.Start(ctx, icfg, cfg.Log)
		if err != nil {
			return nil, nil, err
		}
		core, err := NewS3Client(in.Endpoint(), clientKey, clientSec, benchRegion)
		if err != nil {
			closeInstance(in)
			return nil, nil, err
		}
		return in, core, nil
	}
	add := func(v DiskVariant, err error) error {
		rep.Variants = append(rep.Variants, v)
		return err
	}

	shaped, err := NewS3Client(endpoint, srv.AccessKey(), srv.SecretKey(), benchRegion)
	if err != nil {
		return nil, err
	}
	if err := add(passes("store direct", shaped, cfg.Passes)); err != nil {
		return rep, err
	}

	mem, core, err := start("")
	if err != nil {
		return rep, err
	}
	err = errors.Join(add(passes("memory only: cold pass", core, 1)), add(passes("memory only: warm passes", core, cfg.Passes)))
	closeInstance(mem)
	if err != nil {
		return rep, err
	}

	diskDir := filepath.Join(tmp, "disk")
	dsk, core, err := start(diskDir)
	if err != nil {
		return rep, err
	}
	err = errors.Join(add(passes("disk tier: cold pass", core, 1)), add(passes("disk tier: warm passes", core, cfg.Passes)))
	closeInstance(dsk) // keeps what memory holds on disk
	if err != nil {
		return rep, err
	}
	again, core, err := start(diskDir)
	if err != nil {
		return rep, err
	}
	err = add(passes("disk tier: reloaded instance, 1st pass", core, 1))
	closeInstance(again)
	return rep, err
}

func closeInstance(in *instance.Instance) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = in.Close(ctx)
}
