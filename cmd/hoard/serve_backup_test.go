package main

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/cacheconfig"
	"github.com/hoard-io/hoard/internal/cachelet"
	"github.com/hoard-io/hoard/internal/control"
	"github.com/hoard-io/hoard/internal/instance"
)

// The backup's bound and timeout (--durable-backup-max-bytes,
// --durable-backup-timeout; cache.durable_backup_* in a configuration
// file or an application's document) reach the cachelet's
// BackupConfig; the command line wins over the file, the file over the
// document, the document over the defaults.
func TestDurableBackupSettings(t *testing.T) {
	disk := &control.Disk{Dir: t.TempDir(), Budget: 16 << 20}
	const file = `
disk: {dir: DIR, budget: 16MiB}
cache:
  durable_writes: replicated
  durable_backup_max_bytes: 16MiB
  durable_backup_timeout: 1500ms
`
	for _, tc := range []struct {
		name    string
		doc     cacheconfig.Settings
		file    bool
		args    []string
		bytes   int64
		timeout time.Duration
	}{
		{name: "defaults", doc: cacheconfig.Settings{DurableWrites: cacheconfig.DurableReplicated}},
		{name: "document", doc: cacheconfig.Settings{DurableWrites: cacheconfig.DurableReplicated, DurableBackupMaxBytes: 8 << 20, DurableBackupTimeout: cacheconfig.Duration(2 * time.Second)},
			bytes: 8 << 20, timeout: 2 * time.Second},
		{name: "file", file: true, bytes: 16 << 20, timeout: 1500 * time.Millisecond},
		{name: "file over document", doc: cacheconfig.Settings{DurableWrites: cacheconfig.DurableReplicated, DurableBackupMaxBytes: 8 << 20}, file: true,
			bytes: 16 << 20, timeout: 1500 * time.Millisecond},
		{name: "flags over file", file: true, args: []string{"--durable-backup-max-bytes", "32MiB", "--durable-backup-timeout", "5s"},
			bytes: 32 << 20, timeout: 5 * time.Second},
		{name: "flags", args: []string{"--durable-writes=replicated", "--durable-backup-timeout", "250ms"}, timeout: 250 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("serve", flag.ContinueOnError)
			var df diskFlags
			df.register(fs, disk, tc.doc)
			config := configFlag(fs)
			args := tc.args
			if tc.file {
				args = append([]string{"--config", writeConfig(t, strings.Replace(file, "DIR", t.TempDir(), 1))}, args...)
			}
			if err := fs.Parse(args); err != nil {
				t.Fatal(err)
			}
			if err := applyConfig(fs, *config); err != nil {
				t.Fatal(err)
			}
			var cfg instance.Config
			cfg.Cachelet.WriteTarget = cachelet.WriteOwner
			if err := df.apply(&cfg); err != nil {
				t.Fatal(err)
			}
			if cfg.DurableBackup == nil {
				t.Fatal("no backup: replicated durable writes are off")
			}
			if got := cfg.DurableBackup; got.MaxBytes != tc.bytes || got.Timeout != tc.timeout {
				t.Errorf("backup bound %d, timeout %v; want %d, %v", got.MaxBytes, got.Timeout, tc.bytes, tc.timeout)
			}
		})
	}
}

// A bad backup bound or timeout, or one without replicated durable
// writes, is a usage error that says why, and nothing starts.
func TestDurableBackupFlagErrors(t *testing.T) {
	disk := []string{"--disk-dir", t.TempDir(), "--disk-budget", "16MiB", "--consistency", "owner"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--durable-writes", "--durable-backup-max-bytes", "8MiB"}, "--durable-backup-max-bytes and --durable-backup-timeout need --durable-writes=replicated"},
		{[]string{"--durable-backup-timeout", "2s"}, "need --durable-writes=replicated"},
		{[]string{"--durable-writes=replicated", "--durable-backup-max-bytes", "512KiB"}, "--durable-backup-max-bytes 524288: want at least 1048576"},
		{[]string{"--durable-writes=replicated", "--durable-backup-timeout", "10ms"}, "--durable-backup-timeout 10ms: want between 100ms and 1m0s"},
		{[]string{"--durable-writes=replicated", "--durable-backup-timeout", "2m"}, "want between 100ms and 1m0s"},
		{[]string{"--durable-writes=replicated", "--durable-backup-timeout", "-1s"}, "must not be negative"},
		{[]string{"--durable-writes=replicated", "--durable-backup-max-bytes", "512MiB"}, "--durable-backup-max-bytes 536870912 exceeds --durable-log-bytes 268435456"},
		{[]string{"--durable-writes=replicated", "--durable-log-bytes", "32MiB", "--durable-backup-max-bytes", "64MiB"}, "exceeds --durable-log-bytes 33554432"},
		{[]string{"--durable-writes=replicated", "--durable-backup-max-bytes", "lots"}, `invalid value "lots"`},
	} {
		err := runServe(t.Context(), append(append(append(baseServeArgs(t, "bkt"), disk...), tc.args...), "--log-level", "error"), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
	// In a configuration file: the error names the file and the key.
	path := writeConfig(t, "cache: {durable_writes: replicated, durable_backup_timeout: soon}\n")
	err := runServe(t.Context(), append(append(baseServeArgs(t, "bkt"), disk...), "--config", path), io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), `cache.durable_backup_timeout: bad value "soon"`) {
		t.Errorf("a bad timeout in the file: %v", err)
	}
}
