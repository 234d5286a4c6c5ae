package appspec

import "github.com/hoard-io/hoard/internal/cacheconfig"

// DurableBackup bounds the copy of each write a second instance keeps
// under durable_writes replicated (ADR 0030, amendment "a second
// copy"); zero values are the defaults. Checked with the rest of the
// cache's settings (cacheconfig.Settings.Validate).
type DurableBackup struct {
	// DurableBackupMaxBytes bounds the bytes of other instances' writes
	// one instance keeps as their backup (default 64MiB, at least 1MiB).
	DurableBackupMaxBytes Size `yaml:"durable_backup_max_bytes,omitempty"`
	// DurableBackupTimeout bounds one backup's answer (default 3s,
	// between 100ms and 1m).
	DurableBackupTimeout Duration `yaml:"durable_backup_timeout,omitempty"`
}

// durableMode is c.DurableWrites as the cachelet's setting; a value that
// does not parse is passed on as it is, for Validate to refuse.
func (c CacheSpec) durableMode() cacheconfig.DurableMode {
	m, err := cacheconfig.ParseDurableMode(c.DurableWrites)
	if err != nil {
		return cacheconfig.DurableMode(c.DurableWrites)
	}
	return m
}

// validateDurable checks cache.durable_writes on its own: a known value,
// and not with no_disk (its log lives on the node's disk). Its rule
// against the consistency is cacheconfig.Settings.Validate's.
func (c CacheSpec) validateDurable() error {
	if _, err := cacheconfig.ParseDurableMode(c.DurableWrites); err != nil {
		return invalid("cache: %v", err)
	}
	if c.NoDisk && c.durableMode() != cacheconfig.DurableOff {
		return invalid("cache: durable_writes %s keeps its log on the node's disk: not with no_disk", c.durableMode())
	}
	return nil
}
