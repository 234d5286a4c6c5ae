package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/hoard-io/hoard/internal/cacheconfig"
	"github.com/hoard-io/hoard/internal/cachelet"
	"github.com/hoard-io/hoard/internal/instance"
)

// erasureFlags are serve's settings of the erasure-coded path of large
// objects (ADR 0023).
type erasureFlags struct {
	shards            string // "K+R" or "off"
	threshold, memory byteSize
	backupMemory      byteSize
	chunk             byteSize
	warmUp, backup    time.Duration
}

// register registers the flags with def's values as their defaults (a
// configuration document's, which the agent writes from the spec).
func (f *erasureFlags) register(fs *flag.FlagSet, def *cacheconfig.Erasure) {
	shards := "off"
	if def != nil {
		shards = fmt.Sprintf("%d+%d", def.DataShards, def.ParityShards)
		f.threshold, f.memory, f.chunk = byteSize(def.Threshold), byteSize(def.Memory), byteSize(def.Chunk)
		f.backupMemory = byteSize(def.BackupMemory)
		f.warmUp, f.backup = def.WarmUp.D(), def.Backup.D()
	}
	fs.StringVar(&f.shards, "erasure", shards, "with --etcd-endpoints: keep objects of at least --erasure-threshold as K data + R parity Reed-Solomon shards on K+R distinct cachelets of the application, e.g. 10+2; off: no erasure coding")
	fs.Var(&f.threshold, "erasure-threshold", "with --erasure: the smallest object sharded (default 10MB)")
	fs.Var(&f.memory, "erasure-memory", "with --erasure: the memory for shards held for the application, taken out of --budget before the memory tier's defaults (--max-object-size, reservations) are set from the rest; below --budget (default: budget/4)")
	fs.Var(&f.backupMemory, "erasure-backup-memory", "with --erasure: the memory for the backups of other cachelets' shards kept here, apart from --erasure-memory and taken out of --budget too (default: a quarter of --erasure-memory; none with backups off)")
	fs.DurationVar(&f.warmUp, "erasure-warmup", f.warmUp, "with --erasure: how often the cachelet visits every shard it holds, keeping them resident and checked (default 60s)")
	fs.DurationVar(&f.backup, "erasure-backup", f.backup, "with --erasure: how often the cachelet sends the shards it holds that changed since its last backup to its backup holder (its ring successor), which hands them to a replacement (default 5m)")
	fs.Var(&f.chunk, "erasure-chunk", "with --erasure: the most bytes of one shard per stripe, what a ranged read fetches at least per shard (default 1MiB)")
}

// apply sets cfg's erasure coding from the flags.
func (f *erasureFlags) apply(cfg *instance.Config) error {
	if f.shards == "off" || f.shards == "" {
		return nil
	}
	kn, rn, err := cacheconfig.ParseShards(f.shards)
	if err != nil {
		return fmt.Errorf("%w: --erasure: %v (or off)", errUsage, err)
	}
	if cfg.Registry == nil {
		return fmt.Errorf("%w: --erasure needs an application (--etcd-endpoints)", errUsage)
	}
	if f.warmUp < 0 || f.backup < 0 {
		return fmt.Errorf("%w: --erasure-warmup (%s) and --erasure-backup (%s) must not be negative", errUsage, f.warmUp, f.backup)
	}
	ec := &cachelet.ErasureConfig{Memory: int64(f.memory), BackupMemory: int64(f.backupMemory), WarmUp: f.warmUp, Backup: f.backup}
	ec.DataShards, ec.ParityShards = kn, rn
	ec.Threshold, ec.ChunkSize = int64(f.threshold), int(f.chunk)
	cfg.Cachelet.Erasure = ec
	return nil
}
