package bench

import (
	"bytes"
	"context"
	"crypto/rand"
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
	etcdmembership "github.com/hoard-io/hoard/internal/membership/etcd"
	"github.com/hoard-io/hoard/internal/netshape"
	s3store "github.com/hoard-io/hoard/internal/store/s3"
)

// WritesConfig configures `hoard bench writes`: PUT latency through one
// cachelet under strong (the store's write), the owner setting's
// background persistence (memory) and durable writes (a logged fsync),
// and through the key's owner in an application of two with replicated
// durable writes (a logged fsync here and at the other member), in one
// run against one store.
type WritesConfig struct {
	MinIOBinary string
	// Preset is the store link's netshape preset; default "local"
	// (loopback, unshaped).
	Preset string
	// Sizes are the object sizes; default 4 KiB, 1 MiB, 16 MiB.
	Sizes []int64
	// Writes is how many PUTs per size and setting; default 200 (fewer
	// of the large sizes: at least 8, at most 64 MiB written per size).
	Writes int
	// FreshKeys makes every PUT write a key never written before (by
	// default the PUTs of a size take turns over 16 keys): under durable
	// writes the cachelet then knows nothing of the version each
	// replaces and asks the store (a HEAD beside the body, ADR 0030).
	FreshKeys bool
	// Shadow adds durable writes with shadows (each write's placeholder
	// put in the store before its acknowledgement, ADR 0030) beside
	// durable writes without them.
	Shadow  bool
	TempDir string
	// Progress receives progress lines; nil discards.
	Progress io.Writer
	Log      *slog.Logger
}

func (c *WritesConfig) defaults() {
	if c.Preset == "" {
		c.Preset = "local"
	}
	if len(c.Sizes) == 0 {
		c.Sizes = []int64{4 << 10, 1 << 20, 16 << 20}
	}
	if c.Writes <= 0 {
		c.Writes = 200
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
}

// writesFor is how many PUTs of size to time.
func (c *WritesConfig) writesFor(size int64) int {
	return max(8, min(c.Writes, int((64<<20)/size)))
}

// The settings `hoard bench writes` compares.
const (
	WritesStrong  = "strong"
	WritesMemory  = "owner (background persistence)"
	WritesDurable = "owner + durable writes"
	// WritesShadow: durable writes with --durable-shadow (a synchronous
	// placeholder PUT per write, OFC's shadow object).
	WritesShadow = "owner + durable writes + shadows"
	// WritesReplicated: two cachelets of one application (membership in
	// an embedded etcd, each its own disk directory), every PUT sent to
	// its key's owner, which logs it and has the other log a copy.
	WritesReplicated = "owner + durable writes, replicated"
)

// WritesReport is what `hoard bench writes` measured.
type WritesReport struct {
	Link  string       `json:"link"`
	Cells []WritesCell `json:"cells"`
	OFC   string       `json:"ofc"`
}

// WritesCell is one setting at one size.
type WritesCell struct {
	Setting string  `json:"setting"`
	Size    int64   `json:"size"`
	Puts    Summary `json:"puts"`
}

// OFCWriteFigure is OFC's own (../shared/papers/ofc.txt §7): a write is
// acknowledged after a synchronous, empty "shadow" PUT to the store,
// which takes about 11 ms whatever the object's size.
const OFCWriteFigure = "OFC §7: persisting a write's shadow object (its synchronous, empty placeholder in the store) takes about 11 ms, whatever the output's size"

// RunWrites runs the experiment.
func RunWrites(ctx context.Context, cfg WritesConfig) (*WritesReport, error) {
	cfg.defaults()
	tmp, err := os.MkdirTemp(cfg.TempDir, "hoard-bench-writes-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	say := func(f string, a ...any) { fmt.Fprintf(cfg.Progress, f+"\n", a...) }

	srv, err := localstore.StartMinIO(ctx, localstore.Config{Binary: cfg.MinIOBinary, DataDir: filepath.Join(tmp, "minio"),
		Addr: "127.0.0.1:0", AccessKey: "benchwrites", SecretKey: "benchwrites-secret", Logger: cfg.Log})
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
	direct, err := NewS3Client(srv.Endpoint(), srv.AccessKey(), srv.SecretKey(), benchRegion)
	if err != nil {
		return nil, err
	}
	const bucket = "writebench"
	if err := direct.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
		return nil, err
	}
	rep := &WritesReport{Link: link, OFC: OFCWriteFigure}
	var largest int64
	for _, s := range cfg.Sizes {
		largest = max(largest, s)
	}

	settings := []string{WritesStrong, WritesMemory, WritesDurable, WritesReplicated}
	if cfg.Shadow {
		settings = []string{WritesStrong, WritesMemory, WritesDurable, WritesShadow, WritesReplicated}
	}
	for _, setting := range settings {
		consistency := "owner"
		if setting == WritesStrong {
			consistency = "strong"
		}
		c, err := cachelet.ParseConsistency(consistency)
		if err != nil {
			return rep, err
		}
		icfg := instance.Config{
			MetricsListen: "off", Region: benchRegion, AccessKey: clientKey, SecretKey: clientSec,
			Store:    s3store.Config{Endpoint: endpoint, AccessKey: srv.AccessKey(), SecretKey: srv.SecretKey(), Region: benchRegion},
			Cachelet: cachelet.Config{Cache: cache.Config{Budget: max(256<<20, 8*largest), MaxObjectSize: 2 * largest}},
		}
		c.Apply(&icfg.Cachelet)
		if setting == WritesDurable || setting == WritesShadow {
			icfg.Disk = disktier.Config{Dir: filepath.Join(tmp, "disk"), Budget: 1 << 30}
			icfg.DurableWrites = true
			icfg.DurableShadow = setting == WritesShadow
		}
		var closeAll func()
		var clientFor func(key string) *minio.Core
		if setting == WritesReplicated {
			pair, err := startReplicatedPair(ctx, filepath.Join(tmp, "replicated"), icfg, cfg.Log)
			if err != nil {
				return rep, err
			}
			closeAll = func() {
				pair.Close() // delivers what they hold before the next setting
				pair.etcd.Close()
			}
			clientFor = func(key string) *minio.Core {
				i, err := pair.owner(bucket, key)
				if err != nil {
					i = 0
				}
				return pair.cores[i]
			}
		} else {
			in, err := instance.Start(ctx, icfg, cfg.Log)
			if err != nil {
				return rep, err
			}
			closeAll = func() { closeInstance(in) } // delivers what it holds before the next setting
			core, err := NewS3Client(in.Endpoint(), clientKey, clientSec, benchRegion)
			if err != nil {
				closeAll()
				return rep, err
			}
			clientFor = func(string) *minio.Core { return core }
		}
		for _, size := range cfg.Sizes {
			buf := make([]byte, size)
			rand.Read(buf)
			n := cfg.writesFor(size)
			samples := make([]time.Duration, 0, n)
			for i := range n + 2 { // two untimed warm-up writes
				key := fmt.Sprintf("out/%d/%03d", size, i%16)
				if cfg.FreshKeys {
					key = fmt.Sprintf("fresh/%d/%06d", size, i)
				}
				buf[0] = byte(i)
				core := clientFor(key)
				t0 := time.Now()
				if _, err := core.PutObject(ctx, bucket, key, bytes.NewReader(buf), size, "", "", minio.PutObjectOptions{}); err != nil {
					closeAll()
					return rep, fmt.Errorf("%s: PUT %s: %w", setting, key, err)
				}
				if i >= 2 {
					samples = append(samples, time.Since(t0))
				}
			}
			cell := WritesCell{Setting: setting, Size: size, Puts: Summarize(samples, size)}
			rep.Cells = append(rep.Cells, cell)
			say("%-32s %8s  p50 %s  p99 %s", setting, FormatSize(size), FormatDuration(cell.Puts.P50), FormatDuration(cell.Puts.P99))
		}
		closeAll()
	}
	return rep, nil
}

// replicatedPair is the replicated setting's application: two cachelets
// with replicated durable writes, membership in an embedded etcd.
type replicatedPair struct {
	appCluster
	etcd interface{ Close() }
}

// startReplicatedPair starts two cachelets configured as base (store,
// keys, cache, consistency), each with its own disk directory under dir
// and replicated durable writes, and waits until both see both.
func startReplicatedPair(ctx context.Context, dir string, base instance.Config, log *slog.Logger) (_ *replicatedPair, err error) {
	etcd, err := startEtcd(ctx, filepath.Join(dir, "etcd"))
	if err != nil {
		return nil, err
	}
	p := &replicatedPair{etcd: etcd}
	defer func() {
		if err != nil {
			p.Close()
			etcd.Close()
		}
	}()
	for i := range 2 {
		reg, err := etcdmembership.New(etcdmembership.Config{Endpoints: etcd.Endpoints()})
		if err != nil {
			return nil, err
		}
		p.regs = append(p.regs, reg)
		icfg := base
		icfg.Registry, icfg.App, icfg.ID, icfg.Secret = reg, "writebench", fmt.Sprintf("writebench-%d", i), benchSecret
		icfg.Disk = disktier.Config{Dir: filepath.Join(dir, fmt.Sprintf("disk%d", i)), Budget: 1 << 30}
		icfg.DurableWrites, icfg.DurableBackup = true, &cachelet.BackupConfig{}
		in, err := instance.Start(ctx, icfg, log.With("cachelet", i))
		if err != nil {
			return nil, fmt.Errorf("bench: start cachelet %d: %w", i, err)
		}
		p.ins = append(p.ins, in)
		core, err := NewS3Client(in.Endpoint(), clientKey, clientSec, benchRegion)
		if err != nil {
			return nil, err
		}
		p.cores = append(p.cores, core)
	}
	if err := p.waitRings(ctx, 30*time.Second); err != nil {
		return nil, err
	}
	return p, nil
}

// cell returns the cell of setting at size, or nil.
func (r *WritesReport) cell(setting string, size int64) *WritesCell {
	for i := range r.Cells {
		if r.Cells[i].Setting == setting && r.Cells[i].Size == size {
			return &r.Cells[i]
		}
	}
	return nil
}
