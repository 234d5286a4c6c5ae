package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/hoard-io/hoard/internal/cacheconfig"
	"github.com/hoard-io/hoard/internal/cachelet"
	"github.com/hoard-io/hoard/internal/control"
	"github.com/hoard-io/hoard/internal/disktier"
	"github.com/hoard-io/hoard/internal/instance"
	"github.com/hoard-io/hoard/internal/writelog"
)

// diskFlags are `hoard serve`'s disk tier settings (package disktier),
// defaulting to what a configuration document says (the agent's per-node
// setting).
type diskFlags struct {
	dir              string
	budget, minSize  byteSize
	maxAge, interval time.Duration
	fsync            bool
	group            bool // the document's: shared with the directory's group
	durable          durableMode
	logBytes         byteSize
	shadow           bool
	backupBytes      byteSize      // --durable-backup-max-bytes
	backupTimeout    time.Duration // --durable-backup-timeout
}

// durableMode is --durable-writes: off, the log on this node ("true",
// also written alone as --durable-writes), or the log plus a second copy
// at another member ("replicated").
type durableMode string

const (
	durableOff        durableMode = ""
	durableLog        durableMode = "true"
	durableReplicated durableMode = "replicated"
)

func (d *durableMode) String() string {
	if d == nil || *d == durableOff {
		return "false"
	}
	return string(*d)
}

func (d *durableMode) Set(s string) error {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "false", "off", "0", "":
		*d = durableOff
	case "true", "on", "1", "log":
		*d = durableLog
	case "replicated":
		*d = durableReplicated
	default:
		return fmt.Errorf("%q: want true (the log on this node), replicated (the log and a copy at a second member) or false", s)
	}
	return nil
}

// IsBoolFlag lets --durable-writes stand alone (true).
func (d *durableMode) IsBoolFlag() bool { return true }

func (d *diskFlags) register(fs *flag.FlagSet, def *control.Disk, cache cacheconfig.Settings) {
	durable, shadow := cache.DurableWrites, cache.DurableShadow
	if def == nil {
		def = &control.Disk{}
	}
	// A document's cache.durable_writes (an application's spec) is the
	// flag's default.
	switch durable {
	case cacheconfig.DurableLog:
		d.durable = durableLog
	case cacheconfig.DurableReplicated:
		d.durable = durableReplicated
	}
	d.budget, d.minSize = byteSize(def.Budget), byteSize(def.MinObjectSize)
	d.group = def.Group
	dir := def.Dir
	if def.DirFD >= 3 {
		// Inherited open (a jailed cachelet: the path is not walkable).
		dir = fmt.Sprintf("/proc/self/fd/%d", def.DirFD)
	}
	fs.StringVar(&d.dir, "disk-dir", dir, "the application's disk tier directory on this node, shared by its instances here and kept across restarts (made 0700); empty: memory only")
	fs.Var(&d.budget, "disk-budget", "with --disk-dir: the most bytes the disk tier's files hold (required)")
	fs.Var(&d.minSize, "disk-min-object-size", fmt.Sprintf("with --disk-dir: the smallest object worth a file (default %dKiB)", disktier.DefaultMinObjectSize>>10))
	fs.DurationVar(&d.maxAge, "disk-max-age", def.MaxAge.D(), "with --disk-dir: remove files unread this long (default 24h; negative: never)")
	fs.DurationVar(&d.interval, "disk-clean-interval", 0, "with --disk-dir: how often the cleaner rescans the directory for budget and age (default 1m)")
	fs.Var(&d.durable, "durable-writes", "with --disk-dir and the owner or local write target: acknowledge a write only once it is appended and fsynced to a log under the disk tier's directory, and deliver what a crashed predecessor with the same --id left there on start; =replicated (owner targets, with --etcd-endpoints): and once a second member of the application (on another --node when there is one) logged a copy too, which it delivers if this member is lost with its node (alone in an application: the log only, said once); no member takes the copy: acknowledged once the store has it (default off: held writes live in memory until the store has them)")
	fs.Var(&d.logBytes, "durable-log-bytes", fmt.Sprintf("with --durable-writes: the most bytes of writes the log holds before the store has them; a write that finds it full waits for room (default %dMiB)", writelog.DefaultMaxBytes>>20))
	fs.BoolVar(&d.shadow, "durable-shadow", shadow, "with --durable-writes: before a write is acknowledged, put an empty placeholder at its key in the store, its metadata (x-amz-meta-hoard-pending) naming the pending version, conditional on the version the write replaces; the delivery replaces it, readers through hoard never serve it, readers outside hoard see the empty placeholder until then; a placeholder the store refuses: acknowledged once the store has the write (default off)")
	d.backupBytes = byteSize(cache.DurableBackupMaxBytes)
	fs.Var(&d.backupBytes, "durable-backup-max-bytes", fmt.Sprintf("with --durable-writes=replicated: the most bytes of other members' writes this cachelet keeps as their backup (in memory and in its log) until their owners settle them; past it a copy is refused and its owner tries another member; also the largest copy a reader takes from a backup while a key's owner is down, so give every member of an application the same; at least 1MiB, at most --durable-log-bytes (default %dMiB)", cacheconfig.DefaultDurableBackupBytes>>20))
	fs.DurationVar(&d.backupTimeout, "durable-backup-timeout", cache.DurableBackupTimeout.D(), fmt.Sprintf("with --durable-writes=replicated: how long a write waits for one backup's answer (its fsync included) before its owner tries the next member, and how long a reader whose key's owner is down waits for the backups' answers (then 503); %v to %v (default %v)", cacheconfig.MinDurableBackupTimeout, cacheconfig.MaxDurableBackupTimeout, cacheconfig.DefaultDurableBackupTimeout))
	fs.BoolVar(&d.fsync, "disk-fsync", def.Fsync, "with --disk-dir: fsync each file before renaming it into place (default off: a torn file fails its checksum and is a miss)")
}

// apply sets cfg's disk tier, checking the flags together.
func (d *diskFlags) apply(cfg *instance.Config) error {
	if d.logBytes < 0 {
		return fmt.Errorf("%w: --durable-log-bytes must not be negative", errUsage)
	}
	if d.logBytes != 0 && d.durable == durableOff {
		return fmt.Errorf("%w: --durable-log-bytes needs --durable-writes", errUsage)
	}
	if d.shadow && d.durable == durableOff {
		return fmt.Errorf("%w: --durable-shadow needs --durable-writes (a placeholder stands for a logged write)", errUsage)
	}
	if err := d.checkBackup(); err != nil {
		return err
	}
	if d.dir == "" {
		if d.budget != 0 {
			return fmt.Errorf("%w: --disk-budget needs --disk-dir", errUsage)
		}
		if d.durable != durableOff {
			return fmt.Errorf("%w: --durable-writes needs --disk-dir (the log lives there)", errUsage)
		}
		return nil
	}
	if d.durable != durableOff {
		if cfg.Cachelet.WriteTarget != cachelet.WriteOwner && cfg.Cachelet.WriteTarget != cachelet.WriteLocal {
			return fmt.Errorf("%w: --durable-writes needs a consistency whose writes are held before the store has them (owner/sync, owner/async, local); under the others every write is in the store before it is acknowledged", errUsage)
		}
		cfg.DurableWrites = true
		cfg.DurableLog = writelog.Config{MaxBytes: int64(d.logBytes)}
		cfg.DurableShadow = d.shadow
	}
	if d.durable == durableReplicated {
		if cfg.Cachelet.WriteTarget != cachelet.WriteOwner {
			return fmt.Errorf("%w: --durable-writes=replicated needs an owner consistency (owner, owner-async, owner-local-read): the key's owner keeps the write and picks the member that keeps its copy; under local use --durable-writes", errUsage)
		}
		cfg.DurableBackup = &cachelet.BackupConfig{MaxBytes: int64(d.backupBytes), Timeout: d.backupTimeout}
	}
	if d.budget <= 0 {
		return fmt.Errorf("%w: --disk-dir needs a positive --disk-budget", errUsage)
	}
	cfg.Disk = disktier.Config{Dir: d.dir, Budget: int64(d.budget), MinObjectSize: int64(d.minSize),
		MaxAge: d.maxAge, CleanInterval: d.interval, Fsync: d.fsync, Group: d.group}
	c := cfg.Disk
	if err := c.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return nil
}

// drainLogTimeout bounds a drain run (control.Document.DrainLog); the
// agent bounds it too.
const drainLogTimeout = 2 * time.Minute

// drainLog is `hoard serve --document` with DrainLog: the writes of the
// durable log of instance cfg.ID, whose cachelet died, delivered to the
// store (instance.DrainLog). The application's peer secret gives the
// placeholder key.
func drainLog(ctx context.Context, cfg instance.Config, peerSecret string, log *slog.Logger, stdout io.Writer) error {
	if len(peerSecret) > 0 {
		cfg.Secret = []byte(peerSecret)
	}
	ctx, cancel := context.WithTimeout(ctx, drainLogTimeout)
	defer cancel()
	n, err := instance.DrainLog(ctx, cfg, log)
	if err != nil {
		return fmt.Errorf("draining the durable log of %s (%d writes): %w", cfg.ID, n, err)
	}
	fmt.Fprintf(stdout, "hoard: the durable log of %s drained: %d writes delivered or superseded\n", cfg.ID, n)
	return nil
}

// checkBackup checks --durable-backup-max-bytes and
// --durable-backup-timeout: only with --durable-writes=replicated, each
// within its bounds, the bound within the log's (the copies sit in this
// member's log too).
func (d *diskFlags) checkBackup() error {
	if d.backupBytes == 0 && d.backupTimeout == 0 {
		return nil
	}
	if d.durable != durableReplicated {
		return fmt.Errorf("%w: --durable-backup-max-bytes and --durable-backup-timeout need --durable-writes=replicated", errUsage)
	}
	if d.backupBytes < 0 || d.backupTimeout < 0 {
		return fmt.Errorf("%w: --durable-backup-max-bytes and --durable-backup-timeout must not be negative", errUsage)
	}
	if err := cacheconfig.ValidateDurableBackup(int64(d.backupBytes), d.backupTimeout, "--durable-backup-max-bytes", "--durable-backup-timeout"); err != nil {
		return fmt.Errorf("%w: %v", errUsage, strings.TrimPrefix(err.Error(), cacheconfig.ErrInvalid.Error()+": "))
	}
	logBytes := cmp.Or(int64(d.logBytes), writelog.DefaultMaxBytes)
	if int64(d.backupBytes) > logBytes {
		return fmt.Errorf("%w: --durable-backup-max-bytes %d exceeds --durable-log-bytes %d: the copies are kept in this member's log too", errUsage, d.backupBytes, logBytes)
	}
	return nil
}
