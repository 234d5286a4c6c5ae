// Package cacheconfig names a cachelet's settings — Faa$T's six
// consistency settings, the read modes, the eviction policies — and holds
// Settings, the one document that carries them from an application's
// spec (package appspec) to the cachelet that applies them (package
// cachelet), across the node agent's hand-over to `hoard serve`.
//
// It is pure: no I/O and no mutable state. The tables are fixed arrays,
// handed out as copies, so no caller can change what another one sees.
package cacheconfig

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// WriteTarget is where a write must land before it counts as done
// (Faa$T's Table 3).
type WriteTarget string

const (
	// WriteStore: the store (the default; strong, highest fault tolerance).
	WriteStore WriteTarget = "store"
	// WriteOwner: the key's owner cachelet, which persists to the store in
	// the background.
	WriteOwner WriteTarget = "owner"
	// WriteLocal: this cachelet, which persists to the store in the
	// background; no other cachelet learns of the write.
	WriteLocal WriteTarget = "local"
)

// WriteMode says whether the writer waits for its target.
type WriteMode string

const (
	// WriteSync: the writer waits until the target holds the write.
	WriteSync WriteMode = "sync"
	// WriteAsync: the writer returns once the write is queued.
	WriteAsync WriteMode = "async"
)

// ReadMode says how far a read trusts the memory copy.
type ReadMode string

const (
	// ReadVersionCheck confirms every cached copy against the store with a
	// conditional request before serving it. The default: strong.
	ReadVersionCheck ReadMode = "version-check"
	// ReadLocal serves cached copies without asking the store.
	ReadLocal ReadMode = "local"
	// ReadOwner confirms cached copies with the key's owner, which holds
	// the newest version written through the application's cachelets;
	// the owner itself trusts its memory. Objects changed in the store
	// behind hoard's back are not seen until the owner drops its copy.
	ReadOwner ReadMode = "owner"
)

// ValidReadMode reports whether m is one of the three read modes.
func ValidReadMode(m ReadMode) bool {
	return m == ReadVersionCheck || m == ReadLocal || m == ReadOwner
}

// Consistency is one of Faa$T's six write/read settings.
type Consistency struct {
	Name   string
	Target WriteTarget
	Mode   WriteMode
	Read   ReadMode
}

// DefaultConsistency is the setting an application gets unless it asks
// for another.
const DefaultConsistency = "strong"

// consistencies are the six settings, the default first. A fixed array:
// Consistencies hands out copies.
var consistencies = [...]Consistency{
	{"strong", WriteStore, WriteSync, ReadVersionCheck},
	{"owner", WriteOwner, WriteSync, ReadOwner},
	{"owner-async", WriteOwner, WriteAsync, ReadOwner},
	{"owner-local-read", WriteOwner, WriteSync, ReadLocal},
	{"local", WriteLocal, WriteSync, ReadLocal},
	{"local-async", WriteLocal, WriteAsync, ReadLocal},
}

// Consistencies returns the six settings an application may choose, in
// Faa$T's order, the default first. The slice is the caller's.
func Consistencies() []Consistency { return append([]Consistency(nil), consistencies[:]...) }

// ConsistencyNames lists the six settings' names, the default first.
func ConsistencyNames() []string {
	out := make([]string, len(consistencies))
	for i, c := range consistencies {
		out[i] = c.Name
	}
	return out
}

// ParseConsistency returns the setting of that name.
func ParseConsistency(name string) (Consistency, error) {
	for _, c := range consistencies {
		if c.Name == name {
			return c, nil
		}
	}
	return Consistency{}, fmt.Errorf("unknown consistency %q (valid: %s)", name, strings.Join(ConsistencyNames(), ", "))
}

// ValidWrite reports whether a write target and mode make one of the six
// settings.
func ValidWrite(t WriteTarget, m WriteMode) bool {
	for _, c := range consistencies {
		if c.Target == t && c.Mode == m {
			return true
		}
	}
	return false
}

// Policy names an eviction policy: the order in which the cache gives up
// complete entries when it needs room (package cache implements them).
type Policy string

const (
	// PolicyOwnerLRU evicts the entries this cachelet does not own first,
	// least recently used first, then the owned ones in LRU order. With
	// no ring every entry is owned and this is plain LRU. The default.
	PolicyOwnerLRU Policy = "owner-lru"
	// PolicySizeAware evicts in four classes, each in LRU order: entries
	// not owned and large, then the smaller ones not owned, then owned
	// large ones, then owned small ones.
	PolicySizeAware Policy = "size-aware"
	// PolicyTTL expires each entry a fixed time after it was added; when
	// room is needed, the entries closest to expiry go first.
	PolicyTTL Policy = "ttl"
	// PolicyGDSF is Greedy-Dual-Size-Frequency: the entry of least
	// uses per byte goes first, aged by an inflation value. It favours
	// many small, often read objects (object hit ratio over byte hit
	// ratio).
	PolicyGDSF Policy = "gdsf"
	// PolicyS3FIFO is S3-FIFO: a small FIFO queue that most one-hit
	// objects leave quickly, a main FIFO queue with reinsertion, and a
	// ghost queue of recently evicted keys.
	PolicyS3FIFO Policy = "s3-fifo"
	// PolicyWTinyLFU is W-TinyLFU: a small LRU window, then a segmented
	// LRU main space admitting only entries used more often than the one
	// they would evict, by a count-min sketch of recent uses.
	PolicyWTinyLFU Policy = "w-tinylfu"
)

// policies are the eviction policies, the default first.
var policies = [...]Policy{PolicyOwnerLRU, PolicySizeAware, PolicyTTL, PolicyGDSF, PolicyS3FIFO, PolicyWTinyLFU}

// Policies returns the eviction policies, the default first. The slice is
// the caller's.
func Policies() []Policy { return append([]Policy(nil), policies[:]...) }

// ParsePolicy returns the policy of that name.
func ParsePolicy(name string) (Policy, error) {
	for _, p := range policies {
		if string(p) == name {
			return p, nil
		}
	}
	names := make([]string, len(policies))
	for i, p := range policies {
		names[i] = string(p)
	}
	return "", fmt.Errorf("unknown eviction policy %q (valid: %s)", name, strings.Join(names, ", "))
}

// Settings is a cachelet's cache configuration as one document: what an
// application's spec asks for (appspec.CacheSpec.Settings) or `hoard
// serve`'s flags say, and what the cachelet applies
// (cachelet.Config.ApplySettings). The zero value is valid and means every
// default. Its JSON form is what the node agent hands the cachelet.
type Settings struct {
	// Consistency is one of the six settings (Consistencies); default
	// DefaultConsistency, "strong". It sets the write target and mode and
	// the read mode.
	Consistency string `json:"consistency,omitempty"`
	// ReadMode, when set, replaces the consistency's read mode (`hoard
	// serve --read-mode`); default: the consistency's.
	ReadMode ReadMode `json:"read_mode,omitempty"`
	// Eviction is the eviction policy; default PolicyOwnerLRU.
	Eviction Policy `json:"eviction,omitempty"`
	// TTL is how long an object stays cached under PolicyTTL (required
	// there, and only there).
	TTL Duration `json:"ttl,omitempty"`
	// LargeObjectSize is, under PolicySizeAware (and only there), the
	// size in bytes above which an object is large; default 0: the
	// cache's (12 KiB).
	LargeObjectSize int64 `json:"large_object_bytes,omitempty"`
	// Budget is the memory tier's size in bytes; default 0: the process's
	// default (instance.DefaultBudget).
	Budget int64 `json:"budget_bytes,omitempty"`
	// MaxObjectSize is the largest object kept in memory, in bytes;
	// larger ones stream through. Default 0: half the budget.
	MaxObjectSize int64 `json:"max_object_bytes,omitempty"`
	// NoWriteCache: do not keep the bytes of objects written through the
	// cachelet. Default false.
	NoWriteCache bool `json:"no_write_cache,omitempty"`
	// ServeStaleIfError serves a cached copy whose validation failed
	// because the store is unavailable, marked stale, instead of
	// answering 503 (cachelet.Config.ServeStaleIfError). Default false.
	ServeStaleIfError bool `json:"serve_stale_if_error,omitempty"`
	// MemoryLimitOverhead, when positive, is what the cachelet's process
	// may hold besides the budget: the Go runtime's soft memory limit
	// follows the budget so that the process stays within budget plus
	// this (cachelet.Config.MemoryLimitOverhead). Default 0: `hoard
	// serve` takes DefaultMemoryOverhead; elsewhere the limit is left
	// alone.
	MemoryLimitOverhead int64 `json:"memory_limit_overhead_bytes,omitempty"`
	// SweepInterval is how often the memory tier is swept (OFC §6.3):
	// entries read fewer than SweepMinReads times, or not read for
	// SweepIdle, are dropped (to the disk tier when there is one). An
	// entry admitted by a read faces the count once cached a whole
	// interval; one admitted without a read (pre-warmed, written,
	// migrated in) once a whole interval has passed since its first read,
	// and until that read only the idle rule applies to it (package
	// cache, sweep.go). Default 0: OFC's 300 s.
	SweepInterval Duration `json:"sweep_interval,omitempty"`
	// SweepOff turns the sweep off (with no SweepInterval, SweepMinReads
	// or SweepIdle).
	SweepOff bool `json:"sweep_off,omitempty"`
	// SweepMinReads and SweepIdle: OFC's 5 reads and 30 minutes by
	// default.
	SweepMinReads int      `json:"sweep_min_reads,omitempty"`
	SweepIdle     Duration `json:"sweep_idle,omitempty"`
	// Erasure, when set, keeps large objects as Reed-Solomon shards over
	// the application's cachelets (cachelet.ErasureConfig). Default nil:
	// off.
	Erasure *Erasure `json:"erasure,omitempty"`
	// Migrate bounds how hot objects move to their owner on a ring
	// change or a shrink (OFC §4; cachelet.MigrateConfig). The zero value
	// is the default: on, OFC's thresholds, 64 objects and 64 MiB per
	// migration, 2 s per offer.
	Migrate Migrate `json:"migrate,omitzero"`
	// FinalOutputs are where the application's final outputs land:
	// objects its functions write and none of them reads (OFC §6). A
	// write under one is not kept in memory once the store has it (under
	// the store write target, not kept at all; under owner and local,
	// dropped when persisted). Reads of such an object are cached as any
	// other. Written as locations "bucket/prefix" ("bucket" for all of
	// it) separated by commas, so that Settings stay comparable
	// (ParseLocations). Default none.
	FinalOutputs string `json:"final_outputs,omitempty"`
	// DurableWrites is where a write the cachelet holds for the store is
	// kept before it is acknowledged (ADR 0030): DurableOff (memory),
	// DurableLog (fsynced to a log on the node's disk) or
	// DurableReplicated (and a copy at a second member, on another node
	// where there is one). The log needs the node's disk tier
	// directory. Default off.
	DurableWrites DurableMode `json:"durable_writes,omitempty"`
	// DurableShadow, with DurableWrites, puts a placeholder of each
	// durable write in the store before it is acknowledged (ADR 0030,
	// amendment "shadows"): an empty object whose user metadata names
	// the pending version, replaced by the delivery. Readers through
	// hoard never serve it; readers outside hoard see it until the
	// delivery. Default false.
	DurableShadow bool `json:"durable_shadow,omitempty"`
	// StoreChanges is how the cachelet follows the store's changes to
	// notice writers outside hoard (ChangesMode; ADR 0028, ADR 0033).
	// Default off.
	StoreChanges ChangesMode `json:"store_changes,omitempty"`
	// DurableBackupMaxBytes, with DurableReplicated, bounds the bytes of
	// other members' writes a cachelet keeps as their backup, and the
	// largest record a reader takes from a backup (give every member of
	// an application the same). At least MinDurableBackupBytes; default
	// DefaultDurableBackupBytes.
	DurableBackupMaxBytes int64 `json:"durable_backup_max_bytes,omitempty"`
	// DurableBackupTimeout, with DurableReplicated, bounds one backup's
	// answer (its fsync included): a write's copy, after which the owner
	// tries the next member, and a reader's question while a key's owner
	// is down. Between MinDurableBackupTimeout and
	// MaxDurableBackupTimeout; default DefaultDurableBackupTimeout.
	DurableBackupTimeout Duration `json:"durable_backup_timeout,omitempty"`
}

// Bounds and defaults of Settings.DurableBackupMaxBytes and
// DurableBackupTimeout (ADR 0030, amendment "a second copy").
const (
	// DurableLogMaxBytes is the durable log's default bound
	// (writelog.DefaultMaxBytes, which the platform does not change).
	DurableLogMaxBytes          = 256 << 20
	DefaultDurableBackupBytes   = 64 << 20
	MinDurableBackupBytes       = 1 << 20
	DefaultDurableBackupTimeout = 3 * time.Second
	MinDurableBackupTimeout     = 100 * time.Millisecond
	MaxDurableBackupTimeout     = time.Minute
)

// ValidateDurableBackup checks a backup bound and timeout (0: the
// default) on their own; what is wrong is named by the keys
// bytesKey and timeoutKey (a flag's or a file's).
func ValidateDurableBackup(maxBytes int64, timeout time.Duration, bytesKey, timeoutKey string) error {
	if maxBytes != 0 && maxBytes < MinDurableBackupBytes {
		return fmt.Errorf("%w: %s %d: want at least %d (1MiB): a write larger than the bound goes through to the store before it is acknowledged", ErrInvalid, bytesKey, maxBytes, MinDurableBackupBytes)
	}
	if timeout != 0 && (timeout < MinDurableBackupTimeout || timeout > MaxDurableBackupTimeout) {
		return fmt.Errorf("%w: %s %v: want between %v and %v", ErrInvalid, timeoutKey, timeout, MinDurableBackupTimeout, MaxDurableBackupTimeout)
	}
	return nil
}

// DurableMode is Settings.DurableWrites.
type DurableMode string

// The durable write modes; "" is off.
const (
	DurableOff        DurableMode = ""
	DurableLog        DurableMode = "on"
	DurableReplicated DurableMode = "replicated"
)

// ParseDurableMode reads off|on|replicated (also false|true, as `hoard
// serve --durable-writes` does).
func ParseDurableMode(s string) (DurableMode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "off", "false":
		return DurableOff, nil
	case "on", "true":
		return DurableLog, nil
	case "replicated":
		return DurableReplicated, nil
	}
	return "", fmt.Errorf("%w: durable_writes %q: want off, on (a log on the node's disk) or replicated (the log and a copy at a second member)", ErrInvalid, s)
}

// validateDurable checks DurableWrites against the consistency c: the
// log is for writes held before the store has them (the owner and local
// targets), its copy at a second member for the owner targets, whose key
// owner picks the member.
func (s Settings) validateDurable(c Consistency) error {
	if s.DurableWrites == DurableOff {
		return nil
	}
	if m, err := ParseDurableMode(string(s.DurableWrites)); err != nil || m != s.DurableWrites {
		return fmt.Errorf("%w: durable_writes %q: want off, on or replicated", ErrInvalid, s.DurableWrites)
	}
	if c.Target != WriteOwner && c.Target != WriteLocal {
		return fmt.Errorf("%w: durable_writes %s needs a consistency whose writes are held before the store has them (owner, owner-async, owner-local-read, local, local-async); under %s every write is in the store before it is acknowledged", ErrInvalid, s.DurableWrites, c.Name)
	}
	if s.DurableWrites == DurableReplicated && c.Target != WriteOwner {
		return fmt.Errorf("%w: durable_writes replicated needs an owner consistency (owner, owner-async, owner-local-read): the key's owner keeps the write and picks the member that keeps its copy; under %s use durable_writes on", ErrInvalid, c.Name)
	}
	return nil
}

// validateBackup checks the backup's bound and timeout: only with
// durable_writes replicated, each within its bounds.
func (s Settings) validateBackup() error {
	if s.DurableBackupMaxBytes == 0 && s.DurableBackupTimeout == 0 {
		return nil
	}
	if s.DurableWrites != DurableReplicated {
		return fmt.Errorf("%w: durable_backup_max_bytes and durable_backup_timeout need durable_writes replicated (they bound the copy a second member keeps)", ErrInvalid)
	}
	if s.DurableBackupMaxBytes < 0 || s.DurableBackupTimeout < 0 {
		return fmt.Errorf("%w: durable_backup_max_bytes and durable_backup_timeout must not be negative", ErrInvalid)
	}
	if s.DurableBackupMaxBytes > DurableLogMaxBytes {
		// The cachelet's log keeps the copies too, under its default
		// bound (a document sets no other).
		return fmt.Errorf("%w: durable_backup_max_bytes %d exceeds the durable log's bound %d (256MiB): the copies are kept in the log too", ErrInvalid, s.DurableBackupMaxBytes, DurableLogMaxBytes)
	}
	return ValidateDurableBackup(s.DurableBackupMaxBytes, s.DurableBackupTimeout.D(), "durable_backup_max_bytes", "durable_backup_timeout")
}

// Location is a bucket and a key prefix ("" for the whole bucket).
type Location struct {
	Bucket string `json:"bucket"`
	Prefix string `json:"prefix,omitempty"`
}

// Contains reports whether bucket/key lies under l.
func (l Location) Contains(bucket, key string) bool {
	return l.Bucket == bucket && strings.HasPrefix(key, l.Prefix)
}

// Overlaps reports whether some key lies under both l and o.
func (l Location) Overlaps(o Location) bool {
	return l.Bucket == o.Bucket && (strings.HasPrefix(l.Prefix, o.Prefix) || strings.HasPrefix(o.Prefix, l.Prefix))
}

// MaxFinalOutputs bounds Settings.FinalOutputs.
const MaxFinalOutputs = 64

// String writes l as ParseLocations reads it.
func (l Location) String() string { return l.Bucket + "/" + l.Prefix }

// ParseLocations reads "bucket/prefix,bucket2,..." (Settings.FinalOutputs):
// at most MaxFinalOutputs locations, each with a bucket.
func ParseLocations(s string) ([]Location, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []Location
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		bucket, prefix, _ := strings.Cut(part, "/")
		if bucket == "" {
			return nil, fmt.Errorf("%w: location %q needs a bucket (bucket/prefix)", ErrInvalid, part)
		}
		out = append(out, Location{Bucket: bucket, Prefix: prefix})
	}
	if len(out) > MaxFinalOutputs {
		return nil, fmt.Errorf("%w: at most %d final_outputs locations", ErrInvalid, MaxFinalOutputs)
	}
	return out, nil
}

// JoinLocations writes locs as ParseLocations reads them.
func JoinLocations(locs []Location) string {
	parts := make([]string, len(locs))
	for i, l := range locs {
		parts[i] = l.String()
	}
	return strings.Join(parts, ",")
}

// Migrate bounds the migration of hot objects to their owners when the
// ring changes or the budget shrinks (ADR 0032). Zero fields take the
// defaults.
type Migrate struct {
	// Off turns migration off: nothing offered, offers refused.
	Off bool `json:"off,omitempty"`
	// HotReads and HotIdle say what is hot: read at least HotReads times,
	// the last within HotIdle. 0: the sweep's thresholds when set, else
	// OFC's 5 reads and 30 minutes.
	HotReads int      `json:"hot_reads,omitempty"`
	HotIdle  Duration `json:"hot_idle,omitempty"`
	// MaxObjects and MaxBytes bound one migration; 0: 64 and 64 MiB.
	// A shrink holds its hot evicted bytes until offered, so MaxBytes is
	// memory beyond the budget for that long.
	MaxObjects int   `json:"max_objects,omitempty"`
	MaxBytes   int64 `json:"max_bytes,omitempty"`
	// Timeout bounds each offer to a peer; 0: 2 s.
	Timeout Duration `json:"timeout,omitempty"`
}

// Bounds of the migration settings: what one migration may move and how
// long an offer may take.
const (
	MaxMigrateObjects = 1 << 16
	MaxMigrateBytes   = 1 << 30
	MaxMigrateTimeout = time.Minute
)

func (m Migrate) validate() error {
	switch {
	case m.HotReads < 0 || m.HotIdle < 0 || m.MaxObjects < 0 || m.MaxBytes < 0 || m.Timeout < 0:
		return fmt.Errorf("%w: migrate settings must not be negative", ErrInvalid)
	case m.Off && m != (Migrate{Off: true}):
		return fmt.Errorf("%w: migrate is off: its other settings would do nothing", ErrInvalid)
	case m.MaxObjects > MaxMigrateObjects:
		return fmt.Errorf("%w: migrate max_objects %d: at most %d", ErrInvalid, m.MaxObjects, MaxMigrateObjects)
	case m.MaxBytes > MaxMigrateBytes:
		return fmt.Errorf("%w: migrate max_bytes %d: at most %d (1 GiB)", ErrInvalid, m.MaxBytes, int64(MaxMigrateBytes))
	case m.Timeout.D() > MaxMigrateTimeout:
		return fmt.Errorf("%w: migrate timeout %s: at most %s", ErrInvalid, m.Timeout.D(), MaxMigrateTimeout)
	}
	return nil
}

// Erasure is an application's erasure coding of large objects: K data
// and R parity shards on K+R distinct cachelets (InfiniCache).
type Erasure struct {
	DataShards   int `json:"data_shards"`
	ParityShards int `json:"parity_shards"`
	// Threshold is the smallest object sharded, in bytes; 0: 10 MB.
	Threshold int64 `json:"threshold_bytes,omitempty"`
	// Memory is the bytes of shards a cachelet holds for the
	// application, out of its budget; 0: a quarter of the budget.
	Memory int64 `json:"memory_bytes,omitempty"`
	// BackupMemory is the bytes of its peers' shard backups a cachelet
	// keeps, apart from Memory and out of its budget too; 0: a quarter of
	// Memory (none when backups are off).
	BackupMemory int64 `json:"backup_memory_bytes,omitempty"`
	// Chunk is the most bytes of one shard per stripe; 0: 1 MiB.
	Chunk int64 `json:"chunk_bytes,omitempty"`
	// WarmUp is how often a cachelet visits every shard it holds; 0:
	// every 60 s.
	WarmUp Duration `json:"warm_up,omitempty"`
	// Backup is how often a cachelet sends the shards it holds that
	// changed since its last backup to its backup holder; 0: every 5
	// minutes.
	Backup Duration `json:"backup,omitempty"`
}

// MaxErasureShards bounds K+R.
const MaxErasureShards = 64

// ParseShards reads "K+R" (e.g. "10+2"), K and R at least 1, K+R at most
// MaxErasureShards.
func ParseShards(s string) (k, r int, err error) {
	ks, rs, ok := strings.Cut(s, "+")
	k, err1 := strconv.Atoi(ks)
	r, err2 := strconv.Atoi(rs)
	if !ok || err1 != nil || err2 != nil || k < 1 || r < 1 || k+r > MaxErasureShards {
		return 0, 0, fmt.Errorf("%w: shards %q: want K+R with K, R >= 1 and K+R <= %d (e.g. 10+2)", ErrInvalid, s, MaxErasureShards)
	}
	return k, r, nil
}

func (e *Erasure) validate() error {
	if e.DataShards < 1 || e.ParityShards < 1 || e.DataShards+e.ParityShards > MaxErasureShards {
		return fmt.Errorf("%w: erasure %d+%d: want K, R >= 1 and K+R <= %d", ErrInvalid, e.DataShards, e.ParityShards, MaxErasureShards)
	}
	if e.Threshold < 0 || e.Memory < 0 || e.BackupMemory < 0 || e.Chunk < 0 {
		return fmt.Errorf("%w: erasure sizes must not be negative", ErrInvalid)
	}
	if e.WarmUp < 0 || e.Backup < 0 {
		return fmt.Errorf("%w: erasure warm-up (%s) and backup (%s) intervals must not be negative", ErrInvalid, time.Duration(e.WarmUp), time.Duration(e.Backup))
	}
	return nil
}

// OFC's sweep: every 300 s, objects with fewer than 5 reads or none for
// 30 minutes (Settings.SweepInterval).
const (
	OFCSweepInterval = 300 * time.Second
	OFCSweepMinReads = 5
	OFCSweepIdle     = 30 * time.Minute
)

// DefaultMemoryOverhead is what a `hoard serve` process holds besides its
// cache's budget, at most, under load: the binary's resident pages (25-35
// MiB, depending on how the kernel caches the binary), the Go runtime, the cache's pool of free chunks (at most
// 8 MiB), connections' and transfers' buffers, and garbage not yet
// collected. The cachelet keeps the Go
// runtime's soft memory limit at the budget plus this, less the binary's
// resident pages, so that the process's resident memory stays within
// budget + DefaultMemoryOverhead (docs/benchmarks.md measures it). The
// platform's instances are sized with it (docs/platform.md).
const DefaultMemoryOverhead = 64 << 20

// ErrInvalid marks every Settings error.
var ErrInvalid = errors.New("invalid cache settings")

// Validate checks the settings without changing them.
func (s Settings) Validate() error {
	if s.Consistency != "" {
		if _, err := ParseConsistency(s.Consistency); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalid, err)
		}
	}
	if s.ReadMode != "" && !ValidReadMode(s.ReadMode) {
		return fmt.Errorf("%w: unknown read mode %q (want %s, %s or %s)", ErrInvalid, s.ReadMode, ReadVersionCheck, ReadOwner, ReadLocal)
	}
	p := s.Eviction
	if p == "" {
		p = PolicyOwnerLRU
	}
	if _, err := ParsePolicy(string(p)); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	switch {
	case p == PolicyTTL && s.TTL <= 0:
		return fmt.Errorf("%w: eviction %s needs a positive TTL", ErrInvalid, PolicyTTL)
	case p != PolicyTTL && s.TTL != 0:
		return fmt.Errorf("%w: a TTL is for eviction %s, not %s", ErrInvalid, PolicyTTL, p)
	}
	if s.LargeObjectSize != 0 && p != PolicySizeAware {
		return fmt.Errorf("%w: a large object size is for eviction %s, not %s", ErrInvalid, PolicySizeAware, p)
	}
	if s.Budget < 0 || s.MaxObjectSize < 0 || s.MemoryLimitOverhead < 0 || s.LargeObjectSize < 0 {
		return fmt.Errorf("%w: sizes must not be negative", ErrInvalid)
	}
	if s.SweepInterval < 0 || s.SweepMinReads < 0 || s.SweepIdle < 0 {
		return fmt.Errorf("%w: sweep settings must not be negative", ErrInvalid)
	}
	if s.SweepOff && (s.SweepInterval != 0 || s.SweepMinReads != 0 || s.SweepIdle != 0) {
		return fmt.Errorf("%w: sweep is off: sweep_interval, sweep_min_reads and sweep_idle are for a sweep that is on", ErrInvalid)
	}
	if _, err := ParseLocations(s.FinalOutputs); err != nil {
		return err
	}
	if err := s.Migrate.validate(); err != nil {
		return err
	}
	if err := s.validateChanges(); err != nil {
		return err
	}
	if s.DurableShadow && s.DurableWrites == DurableOff {
		return fmt.Errorf("%w: durable_shadow needs durable_writes on or replicated (a placeholder stands for a logged write)", ErrInvalid)
	}
	if err := s.validateBackup(); err != nil {
		return err
	}
	if s.DurableWrites != DurableOff {
		c, err := s.Resolved()
		if err != nil {
			return err
		}
		if err := s.validateDurable(c); err != nil {
			return err
		}
	}
	if s.Erasure != nil {
		return s.Erasure.validate()
	}
	return nil
}

// Resolved returns the consistency the settings name (the default when
// unnamed) with ReadMode applied.
func (s Settings) Resolved() (Consistency, error) {
	name := s.Consistency
	if name == "" {
		name = DefaultConsistency
	}
	c, err := ParseConsistency(name)
	if err != nil {
		return Consistency{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if s.ReadMode != "" {
		c.Read = s.ReadMode
	}
	return c, nil
}

// Duration is a time.Duration written in JSON as Go writes it ("10m0s")
// and read from such a string.
type Duration time.Duration

// D is the duration as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a duration string ("30s", "10m").
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration: want a string such as \"30s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration: %w", err)
	}
	*d = Duration(v)
	return nil
}
