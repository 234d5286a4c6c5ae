package appspec

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// cache.durable_backup_max_bytes and cache.durable_backup_timeout reach
// the cachelets' settings (and survive a round trip through the
// document's JSON); a value out of bounds, or either without
// durable_writes replicated, is refused at deploy saying why.
func TestDurableBackupSpec(t *testing.T) {
	base := "name: a\nfunctions: {f: {handler: m.h}}\n"
	s, err := Parse([]byte(base + "cache: {consistency: owner, durable_writes: replicated, durable_backup_max_bytes: 16MiB, durable_backup_timeout: 1500ms}\n"))
	if err != nil {
		t.Fatal(err)
	}
	got := s.Cache.Settings()
	if got.DurableBackupMaxBytes != 16<<20 || got.DurableBackupTimeout.D() != 1500*time.Millisecond {
		t.Errorf("settings: bound %d, timeout %v", got.DurableBackupMaxBytes, got.DurableBackupTimeout.D())
	}
	if err := got.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
	if s, err := Parse([]byte(base + "cache: {consistency: owner, durable_writes: replicated}\n")); err != nil || s.Cache.Settings().DurableBackupMaxBytes != 0 || s.Cache.Settings().DurableBackupTimeout != 0 {
		t.Errorf("by default: %v", err)
	}
	for _, c := range []struct{ cache, says string }{
		{"{consistency: owner, durable_writes: on, durable_backup_max_bytes: 8MiB}", "need durable_writes replicated"},
		{"{consistency: owner, durable_backup_timeout: 2s}", "need durable_writes replicated"},
		{"{consistency: owner, durable_writes: replicated, durable_backup_max_bytes: 64KiB}", "durable_backup_max_bytes 65536: want at least 1048576"},
		{"{consistency: owner, durable_writes: replicated, durable_backup_max_bytes: 1GiB}", "exceeds the durable log's bound"},
		{"{consistency: owner, durable_writes: replicated, durable_backup_timeout: 10ms}", "durable_backup_timeout 10ms: want between 100ms and 1m0s"},
		{"{consistency: owner, durable_writes: replicated, durable_backup_timeout: 5m}", "want between"},
		{"{consistency: owner, durable_writes: replicated, durable_backup_timeout: -1s}", "bad duration"},
	} {
		_, err := Parse([]byte(base + "cache: " + c.cache + "\n"))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want ErrInvalid saying %q", c.cache, err, c.says)
		}
	}
	if _, err := Parse([]byte(base + "cache: {consistency: owner, durable_writes: replicated, durable_backup_timeout: soon}\n")); err == nil {
		t.Error("durable_backup_timeout soon: accepted")
	}
	// A document made by other means is checked the same.
	neg := got
	neg.DurableBackupMaxBytes = -1
	if err := neg.Validate(); err == nil || !strings.Contains(err.Error(), "must not be negative") {
		t.Errorf("a negative bound: %v", err)
	}
}
