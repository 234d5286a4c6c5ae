package cachelet

import (
	"fmt"

	"github.com/hoard-io/hoard/internal/cacheconfig"
)

// WriteTarget is where a write must land before it counts as done
// (Faa$T's Table 3); package cacheconfig names the targets.
type WriteTarget = cacheconfig.WriteTarget

const (
	// WriteStore: the store (the default; strong, highest fault tolerance).
	WriteStore = cacheconfig.WriteStore
	// WriteOwner: the key's owner cachelet, which persists to the store in
	// the background.
	WriteOwner = cacheconfig.WriteOwner
	// WriteLocal: this cachelet, which persists to the store in the
	// background; no other cachelet learns of the write.
	WriteLocal = cacheconfig.WriteLocal
)

// WriteMode says whether the writer waits for its target.
type WriteMode = cacheconfig.WriteMode

const (
	// WriteSync: the writer waits until the target holds the write.
	WriteSync = cacheconfig.WriteSync
	// WriteAsync: the writer returns once the write is queued.
	WriteAsync = cacheconfig.WriteAsync
)

// Consistency is one of Faa$T's six write/read settings
// (cacheconfig.Consistencies lists them), with Apply for a Config.
type Consistency struct{ cacheconfig.Consistency }

// Consistencies returns the six settings, the default first; the slice is
// the caller's.
func Consistencies() []Consistency {
	all := cacheconfig.Consistencies()
	out := make([]Consistency, len(all))
	for i, c := range all {
		out[i] = Consistency{c}
	}
	return out
}

// ParseConsistency returns the setting of that name.
func ParseConsistency(name string) (Consistency, error) {
	c, err := cacheconfig.ParseConsistency(name)
	if err != nil {
		return Consistency{}, fmt.Errorf("cachelet: %w", err)
	}
	return Consistency{c}, nil
}

// Apply sets the config's write and read settings.
func (s Consistency) Apply(cfg *Config) {
	cfg.WriteTarget, cfg.WriteMode, cfg.ReadMode = s.Target, s.Mode, s.Read
}

// ApplySettings sets the cache settings of c from s: consistency (write
// target and mode, read mode), eviction policy and TTL, budget, largest
// cached object, write caching and the memory limit's overhead. It is the
// one place where a cacheconfig.Settings becomes a Config; zero sizes
// leave c's as they are (their defaults come later).
func (c *Config) ApplySettings(s cacheconfig.Settings) error {
	if err := s.Validate(); err != nil {
		return fmt.Errorf("cachelet: %w", err)
	}
	cons, err := s.Resolved()
	if err != nil {
		return fmt.Errorf("cachelet: %w", err)
	}
	Consistency{cons}.Apply(c)
	c.Cache.Policy = s.Eviction
	c.Cache.TTL = s.TTL.D()
	c.Cache.LargeObjectSize = s.LargeObjectSize
	if s.Budget > 0 {
		c.Cache.Budget = s.Budget
	}
	if s.MaxObjectSize > 0 {
		c.Cache.MaxObjectSize = s.MaxObjectSize
	}
	c.DisableWriteCaching = s.NoWriteCache
	c.FinalOutputs, _ = cacheconfig.ParseLocations(s.FinalOutputs) // checked by Validate
	c.ServeStaleIfError = s.ServeStaleIfError
	if s.MemoryLimitOverhead > 0 {
		c.MemoryLimitOverhead = s.MemoryLimitOverhead
	}
	c.Sweep = SweepConfig{Off: s.SweepOff, Interval: s.SweepInterval.D(), MinReads: s.SweepMinReads, Idle: s.SweepIdle.D()}
	m := s.Migrate
	c.Migrate = MigrateConfig{Disabled: m.Off, HotReads: m.HotReads, HotIdle: m.HotIdle.D(),
		MaxObjects: m.MaxObjects, MaxBytes: m.MaxBytes, Timeout: m.Timeout.D()}
	c.Erasure = nil
	if e := s.Erasure; e != nil {
		c.Erasure = &ErasureConfig{Memory: e.Memory, BackupMemory: e.BackupMemory, WarmUp: e.WarmUp.D(), Backup: e.Backup.D()}
		c.Erasure.DataShards, c.Erasure.ParityShards = e.DataShards, e.ParityShards
		c.Erasure.Threshold, c.Erasure.ChunkSize = e.Threshold, int(e.Chunk)
	}
	return nil
}

// validateWrites checks the write settings against the six rows.
func (c *Config) validateWrites() error {
	if c.WriteTarget == "" {
		c.WriteTarget = WriteStore
	}
	if c.WriteMode == "" {
		c.WriteMode = WriteSync
	}
	if cacheconfig.ValidWrite(c.WriteTarget, c.WriteMode) {
		return nil
	}
	return fmt.Errorf("cachelet: write target %q with mode %q is not a supported setting", c.WriteTarget, c.WriteMode)
}

// Settings is the inverse of ApplySettings: c's cache settings as one
// document, for a caller that wants to see what a cachelet applied. The
// consistency is the one of the six whose write target, write mode and
// read mode c has; a read mode that none of them pairs with c's writes
// is reported as ReadMode beside the writes' first setting.
func (c Config) Settings() cacheconfig.Settings {
	s := cacheconfig.Settings{
		Eviction: c.Cache.Policy, TTL: cacheconfig.Duration(c.Cache.TTL), LargeObjectSize: c.Cache.LargeObjectSize,
		Budget: c.Cache.Budget, MaxObjectSize: c.Cache.MaxObjectSize,
		NoWriteCache: c.DisableWriteCaching, MemoryLimitOverhead: c.MemoryLimitOverhead,
		ServeStaleIfError: c.ServeStaleIfError, FinalOutputs: cacheconfig.JoinLocations(c.FinalOutputs),
		SweepOff: c.Sweep.Off, SweepInterval: cacheconfig.Duration(c.Sweep.Interval), SweepMinReads: c.Sweep.MinReads, SweepIdle: cacheconfig.Duration(c.Sweep.Idle),
	}
	s.Migrate = c.Migrate.settings(c.Sweep)
	if e := c.Erasure; e != nil {
		s.Erasure = &cacheconfig.Erasure{DataShards: e.DataShards, ParityShards: e.ParityShards,
			Threshold: e.Threshold, Memory: e.Memory, BackupMemory: e.BackupMemory, Chunk: int64(e.ChunkSize),
			WarmUp: cacheconfig.Duration(max(e.WarmUp, 0)), Backup: cacheconfig.Duration(max(e.Backup, 0))}
	}
	target, mode, read := c.WriteTarget, c.WriteMode, c.ReadMode
	if target == "" {
		target = WriteStore
	}
	if mode == "" {
		mode = WriteSync
	}
	if read == "" {
		read = ReadVersionCheck
	}
	for _, cons := range cacheconfig.Consistencies() {
		if cons.Target != target || cons.Mode != mode {
			continue
		}
		if cons.Read == read {
			s.Consistency, s.ReadMode = cons.Name, ""
			return s
		}
		if s.Consistency == "" {
			s.Consistency, s.ReadMode = cons.Name, read
		}
	}
	return s
}
