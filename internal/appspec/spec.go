// Package appspec reads and checks an application's spec (hoard.yaml):
// its functions, triggers, pipelines and cache settings, and packs an
// application directory into the code package the platform stores and its
// agents unpack. It is pure: no network, and file access only in Pack and
// Unpack. docs/platform.md describes the format.
package appspec

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/hoard-io/hoard/internal/bytesize"
	"github.com/hoard-io/hoard/internal/cacheconfig"
	"github.com/hoard-io/hoard/internal/grant"
)

// FileName is the spec's name at the root of an application directory.
const FileName = "hoard.yaml"

// PlatformBucket is the platform's own bucket by default (code packages,
// access metadata): no application may be granted it.
const PlatformBucket = "hoard-platform"

// Defaults and bounds of the spec's settings.
const (
	DefaultMemory       = 256 << 20
	MinMemory           = 32 << 20
	MaxMemory           = 16 << 30
	DefaultTimeout      = 60 * time.Second
	MaxTimeout          = 15 * time.Minute
	DefaultKeepAlive    = 10 * time.Minute
	DefaultMaxInstances = 4
	MaxMaxInstances     = 64
	DefaultCacheBudget  = 64 << 20
	MinCacheBudget      = 1 << 20
	MaxSpecBytes        = 1 << 20
)

// ErrInvalid marks every spec error.
var ErrInvalid = errors.New("invalid application spec")

// Size is a byte count written "256MiB" (or a plain number of bytes).
type Size int64

// UnmarshalYAML reads a size with a unit.
func (s *Size) UnmarshalYAML(n *yaml.Node) error {
	v, err := bytesize.Parse(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %v", n.Line, err)
	}
	*s = Size(v)
	return nil
}

// MarshalYAML writes the size with a binary unit.
func (s Size) MarshalYAML() (any, error) { return bytesize.Format(int64(s)), nil }

// Duration is a Go duration written "30s", "10m".
type Duration time.Duration

// UnmarshalYAML reads a duration.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil || v < 0 {
		return fmt.Errorf("line %d: bad duration %q (want e.g. 30s, 10m)", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration as Go does.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// D is the duration as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// Spec is one application.
type Spec struct {
	// Name names the application: its ring, its instances, its URLs.
	Name string `yaml:"name"`
	// Runtime runs its functions; "python3", the only one so far.
	Runtime string `yaml:"runtime,omitempty"`
	// Memory is the booked memory of an instance, for its functions.
	Memory Size `yaml:"memory,omitempty"`
	// Timeout bounds one invocation.
	Timeout Duration `yaml:"timeout,omitempty"`
	// KeepAlive is how long an idle instance stays loaded.
	KeepAlive Duration `yaml:"keep_alive,omitempty"`
	// MaxInstances bounds compute scaling.
	MaxInstances int `yaml:"max_instances,omitempty"`
	// Buckets are the store's buckets the application's functions may
	// reach, each read-only or read-write; nothing else. Its cachelets
	// refuse every other bucket, and sign to the store with an identity
	// of the application's own that reaches only these.
	Buckets Buckets `yaml:"buckets,omitempty"`
	// Cache configures every instance's cachelet.
	Cache CacheSpec `yaml:"cache,omitempty"`
	// Scaling tunes the scale controller's policies.
	Scaling ScalingSpec `yaml:"scaling,omitempty"`
	// Functions by name.
	Functions map[string]*Function `yaml:"functions"`
	// Triggers bind HTTP paths and object writes to functions or pipelines.
	Triggers []*Trigger `yaml:"triggers,omitempty"`
	// Pipelines by name.
	Pipelines map[string]*Pipeline `yaml:"pipelines,omitempty"`
}

// Buckets is the spec's `buckets:`, written as a mapping of name to access
//
//	buckets: {photos: read-write, models: read-only}
//
// or as a list
//
//	buckets:
//	  - {name: photos, access: read-write}
type Buckets []grant.Bucket

// UnmarshalYAML reads either form.
func (b *Buckets) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.MappingNode:
		out := make(Buckets, 0, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode || v.Kind != yaml.ScalarNode {
				return fmt.Errorf("line %d: buckets: want bucket: read-only or bucket: read-write", k.Line)
			}
			out = append(out, grant.Bucket{Name: k.Value, Access: grant.Access(v.Value)})
		}
		*b = out
		return nil
	case yaml.SequenceNode:
		// Decoded by hand: a node's Decode does not inherit the
		// decoder's strictness, and unknown fields are errors.
		out := make(Buckets, 0, len(n.Content))
		for _, e := range n.Content {
			if e.Kind != yaml.MappingNode {
				return fmt.Errorf("line %d: buckets: want {name, access}", e.Line)
			}
			var g grant.Bucket
			for i := 0; i+1 < len(e.Content); i += 2 {
				k, v := e.Content[i], e.Content[i+1]
				switch {
				case v.Kind != yaml.ScalarNode:
					return fmt.Errorf("line %d: buckets: %s: want a string", v.Line, k.Value)
				case k.Value == "name":
					g.Name = v.Value
				case k.Value == "access":
					g.Access = grant.Access(v.Value)
				default:
					return fmt.Errorf("line %d: buckets: field %s not found (want name and access)", k.Line, k.Value)
				}
			}
			out = append(out, g)
		}
		*b = out
		return nil
	}
	return fmt.Errorf("line %d: buckets: want a mapping of bucket to access or a list of {name, access}", n.Line)
}

// Set is the buckets as the grant its cachelets enforce.
func (b Buckets) Set() *grant.Set { return &grant.Set{Buckets: append([]grant.Bucket{}, b...)} }

func (b Buckets) validate() error {
	if err := grant.Validate(b); err != nil {
		return invalid("buckets: %v", err)
	}
	for _, g := range b {
		if g.Name == PlatformBucket {
			return invalid("buckets: %s is the platform's own bucket", g.Name)
		}
	}
	return nil
}

// CacheSpec is the cachelets' configuration.
type CacheSpec struct {
	// Consistency is one of Faa$T's six settings (cacheconfig.Consistencies).
	Consistency string `yaml:"consistency,omitempty"`
	// Eviction is the eviction policy: owner-lru, size-aware, ttl, gdsf,
	// s3-fifo or w-tinylfu.
	Eviction string `yaml:"eviction,omitempty"`
	// TTL is how long an object stays cached, with eviction ttl.
	TTL Duration `yaml:"ttl,omitempty"`
	// Budget is the cachelet's memory, inside the instance's limit.
	Budget Size `yaml:"budget,omitempty"`
	// Shared puts the cache inside the booked memory, as in Faa$T: the
	// instance's limit is the largest booked memory alone, and the cache
	// (up to Budget, which must then be below it) uses what the function
	// does not; the node agent's memory daemon evicts when the two come
	// near the limit. Default false: the limit is the booked memory plus
	// Budget, so the function always keeps all it booked.
	Shared bool `yaml:"shared,omitempty"`
	// ServeStaleIfError serves a cached copy the store cannot confirm
	// (down, hung, past its deadline), marked x-hoard-stale, instead of
	// answering 503. Default false.
	ServeStaleIfError bool `yaml:"serve_stale_if_error,omitempty"`
	// Sweep: how often each cachelet's memory is swept (Sweep, ADR 36;
	// default 300s): objects read fewer than SweepMinReads times (5), or
	// not for SweepIdle (30m), leave memory for the node's disk tier.
	Sweep         Sweep    `yaml:"sweep,omitempty"`
	SweepMinReads int      `yaml:"sweep_min_reads,omitempty"`
	SweepIdle     Duration `yaml:"sweep_idle,omitempty"`
	// DiskBudget caps the application's disk tier on each node below the
	// node's (agent --disk-budget); default: the node's. NoDisk keeps the
	// application in memory only, wherever nodes have a disk tier.
	DiskBudget Size `yaml:"disk_budget,omitempty"`
	NoDisk     bool `yaml:"no_disk,omitempty"`
	// Erasure keeps the application's large objects as Reed-Solomon
	// shards over its instances' cachelets (InfiniCache). Default: off.
	Erasure *ErasureSpec `yaml:"erasure,omitempty"`
	// Migrate bounds how each cachelet moves its hot objects to their
	// owner when the ring changes (an instance joins or leaves) or its
	// budget shrinks, instead of dropping them (OFC §4). Default: on,
	// hot = read 5 times, the last within 30m (the sweep's thresholds
	// when set), at most 64 objects and 64MiB per migration, 2s per offer.
	Migrate MigrateSpec `yaml:"migrate,omitempty"`
	// FinalOutputs are where the application's final outputs land: what
	// its functions write and none of them reads (OFC §6). A write there
	// leaves the cachelet's memory once the store has it. Each must be a
	// read-write bucket of the application, and none may overlap what an
	// object trigger fires on or a pipeline's intermediate location (a
	// function reads those). Default none.
	FinalOutputs []Location `yaml:"final_outputs,omitempty"`
	// Admission says which reads are cached: "all" (the default) or
	// "benefit", OFC's admission by predicted benefit: a function's
	// misses are not kept while extracting and loading its data take at
	// most half of its run time, measured per function over its recent
	// invocations (package admission; docs/design/admission.md).
	Admission string `yaml:"admission,omitempty"`
	// DurableWrites keeps each write a cachelet holds for the store
	// (the owner and local consistencies) on disk before it is
	// acknowledged (ADR 0030): "off" (the default: in memory until the
	// store has it), "on" (fsynced to a log on the instance's node) or
	// "replicated" (the owner consistencies: and a copy at a second
	// instance, on another node where there is one, so that losing a
	// node loses none). Needs nodes with a disk tier (agent
	// --disk-budget), and not no_disk.
	DurableWrites string `yaml:"durable_writes,omitempty"`
	// DurableShadow, with durable_writes on or replicated, puts an
	// empty placeholder of each write in the store before it is
	// acknowledged, its user metadata naming the pending version (ADR
	// 0030, amendment "shadows"; OFC's shadow objects). Readers outside
	// hoard see the empty placeholder until the write is delivered.
	// Default false.
	DurableShadow bool `yaml:"durable_shadow,omitempty"`
	// StoreChanges: off (default), listen, relay or auto: how the
	// cachelets notice writes made straight to the store (ADR 0033).
	StoreChanges string `yaml:"store_changes,omitempty"`
	// durable_backup_max_bytes, durable_backup_timeout (durable.go).
	DurableBackup `yaml:",inline"`
}

// Admission settings (Cache.Admission).
const (
	AdmitAll     = "all"
	AdmitBenefit = "benefit"
)

// MigrateSpec bounds the migration of hot objects (CacheSpec.Migrate).
type MigrateSpec struct {
	// Off turns migration off.
	Off bool `yaml:"off,omitempty"`
	// HotReads and HotIdle: what is hot.
	HotReads int      `yaml:"hot_reads,omitempty"`
	HotIdle  Duration `yaml:"hot_idle,omitempty"`
	// MaxObjects and MaxBytes bound one migration.
	MaxObjects int  `yaml:"max_objects,omitempty"`
	MaxBytes   Size `yaml:"max_bytes,omitempty"`
	// Timeout bounds each offer to a peer.
	Timeout Duration `yaml:"timeout,omitempty"`
}

func (m MigrateSpec) settings() cacheconfig.Migrate {
	return cacheconfig.Migrate{Off: m.Off, HotReads: m.HotReads, HotIdle: cacheconfig.Duration(m.HotIdle),
		MaxObjects: m.MaxObjects, MaxBytes: int64(m.MaxBytes), Timeout: cacheconfig.Duration(m.Timeout)}
}

// ErasureSpec is an application's erasure coding of large objects.
type ErasureSpec struct {
	// Shards is "K+R": K data and R parity shards on K+R distinct
	// instances; an object survives the loss of any R. Default "10+2".
	Shards string `yaml:"shards,omitempty"`
	// Threshold is the smallest object sharded. Default 10MB.
	Threshold Size `yaml:"threshold,omitempty"`
	// Memory is what each cachelet keeps of shards for the application,
	// out of the cache budget. Default a quarter of the budget.
	Memory Size `yaml:"memory,omitempty"`
	// BackupMemory is what each cachelet keeps of its peers' shard
	// backups, apart from Memory and out of the cache budget too. Default
	// a quarter of Memory.
	BackupMemory Size `yaml:"backup_memory,omitempty"`
	// WarmUp is how often each cachelet visits every shard it holds,
	// keeping an idle instance's shards resident and checked. Default 60s.
	WarmUp Duration `yaml:"warm_up,omitempty"`
	// Backup is how often each cachelet sends the shards it holds that
	// changed since its last backup to its backup holder (its ring
	// successor), which hands them to a replacement. Default 5m.
	Backup Duration `yaml:"backup,omitempty"`
}

// ScalingSpec tunes the scale controller's policies for the application.
type ScalingSpec struct {
	// LatencyTarget is the median end-to-end latency (queueing and cold
	// starts included) the application should stay under: the compute
	// policy votes one more instance when the median over a round is
	// above it with every instance busy, and never votes one away while
	// it is. 0, the default, sets no target: latency alone never scales.
	LatencyTarget Duration `yaml:"latency_target,omitempty"`
	// MinInstances is the fewest loaded instances the scale controller
	// and keep-alive leave the application once it has them: neither
	// unloads an idle instance below it (a newer version's deploy still
	// replaces them, and instances are not started ahead of
	// invocations for it). 0, the default, is 1 for the scale
	// controller and none for keep-alive. At most max_instances.
	MinInstances int `yaml:"min_instances,omitempty"`
}

func (s *ScalingSpec) validate(maxInstances int) error {
	if t := s.LatencyTarget.D(); t != 0 && (t < time.Millisecond || t > MaxTimeout) {
		return invalid("scaling: latency_target %s: want 1ms to %s, or 0 for none", t, MaxTimeout)
	}
	if s.MinInstances < 0 || s.MinInstances > maxInstances {
		return invalid("scaling: min_instances %d: want 0 to max_instances (%d)", s.MinInstances, maxInstances)
	}
	return nil
}

// Settings is what the spec asks of each instance's cachelet, as the one
// document the cachelet applies (cacheconfig.Settings). Shared is not in
// it: where the cache's memory lives is the node agent's business.
func (c CacheSpec) Settings() cacheconfig.Settings {
	return cacheconfig.Settings{
		Consistency: c.Consistency,
		Eviction:    cacheconfig.Policy(c.Eviction),
		TTL:         cacheconfig.Duration(c.TTL),
		Budget:      int64(c.Budget),

		ServeStaleIfError: c.ServeStaleIfError,
		SweepOff:          c.Sweep.Off, SweepInterval: cacheconfig.Duration(c.Sweep.Every), SweepMinReads: c.SweepMinReads, SweepIdle: cacheconfig.Duration(c.SweepIdle),
		Erasure:      c.Erasure.settings(),
		Migrate:      c.Migrate.settings(),
		FinalOutputs: cacheconfig.JoinLocations(c.finalOutputs()),

		DurableWrites:         c.durableMode(),
		DurableShadow:         c.DurableShadow,
		StoreChanges:          c.changesMode(),
		DurableBackupMaxBytes: int64(c.DurableBackupMaxBytes), DurableBackupTimeout: cacheconfig.Duration(c.DurableBackupTimeout),
	}
}

// validateFinalOutputs checks cache.final_outputs against the buckets,
// the object triggers and the pipelines' intermediate locations.
func (s *Spec) validateFinalOutputs() error {
	if len(s.Cache.FinalOutputs) > cacheconfig.MaxFinalOutputs {
		return invalid("cache: final_outputs: at most %d locations", cacheconfig.MaxFinalOutputs)
	}
	for _, fo := range s.Cache.finalOutputs() {
		if strings.Contains(fo.Bucket, ",") || strings.Contains(fo.Prefix, ",") {
			return invalid("cache: final_outputs %s: a location may not contain ','", fo)
		}
		if a, ok := s.Buckets.Set().Lookup(fo.Bucket); !ok || a != grant.ReadWrite {
			return invalid("cache: final_outputs %s: bucket %q is not one of the application's read-write buckets", fo, fo.Bucket)
		}
		for _, t := range s.Triggers {
			if t != nil && t.Object != nil && fo.Overlaps(cacheconfig.Location{Bucket: t.Object.Bucket, Prefix: t.Object.Prefix}) {
				return invalid("cache: final_outputs %s overlaps the object trigger on %s/%s, whose function reads what is written there",
					fo, t.Object.Bucket, t.Object.Prefix)
			}
		}
		for name, p := range s.Pipelines {
			if p != nil && p.Intermediate != nil && fo.Overlaps(cacheconfig.Location{Bucket: p.Intermediate.Bucket, Prefix: p.Intermediate.Prefix}) {
				return invalid("cache: final_outputs %s overlaps pipeline %s's intermediate location, which its stages read", fo, name)
			}
		}
	}
	return nil
}

// settings is e as the cachelet's settings (validated: Shards parses).
func (e *ErasureSpec) settings() *cacheconfig.Erasure {
	if e == nil {
		return nil
	}
	k, r, _ := cacheconfig.ParseShards(e.Shards)
	return &cacheconfig.Erasure{DataShards: k, ParityShards: r, Threshold: int64(e.Threshold), Memory: int64(e.Memory),
		BackupMemory: int64(e.BackupMemory), WarmUp: cacheconfig.Duration(e.WarmUp), Backup: cacheconfig.Duration(e.Backup)}
}

// Function is one function of the application.
type Function struct {
	// Handler is "module.function", imported from the application directory.
	Handler string `yaml:"handler"`
	// Memory overrides the application's booked memory (upwards or down).
	Memory Size `yaml:"memory,omitempty"`
	// Timeout overrides the application's timeout.
	Timeout Duration `yaml:"timeout,omitempty"`
}

// Trigger binds an HTTP path or object writes to a function or a pipeline.
type Trigger struct {
	// HTTP is the path under /http/APP that invokes the target.
	HTTP string `yaml:"http,omitempty"`
	// Object fires the target when an object is created that matches.
	Object *ObjectFilter `yaml:"object,omitempty"`
	// Function or Pipeline is the target; exactly one is set.
	Function string `yaml:"function,omitempty"`
	Pipeline string `yaml:"pipeline,omitempty"`
}

// ObjectFilter matches created objects by bucket, key prefix and suffix.
type ObjectFilter struct {
	Bucket string `yaml:"bucket"`
	Prefix string `yaml:"prefix,omitempty"`
	Suffix string `yaml:"suffix,omitempty"`
}

// Match reports whether an object created at bucket/key matches.
func (f *ObjectFilter) Match(bucket, key string) bool {
	return f.Bucket == bucket && strings.HasPrefix(key, f.Prefix) && strings.HasSuffix(key, f.Suffix)
}

// Pipeline is a DAG of stages, each a function.
type Pipeline struct {
	// Intermediate is where the stages put the run's intermediate objects:
	// under Prefix + run id + "/". Optional.
	Intermediate *Location `yaml:"intermediate,omitempty"`
	// DeleteIntermediate also deletes the intermediate objects from the
	// store when the run ends (they are always dropped from the cache).
	DeleteIntermediate bool `yaml:"delete_intermediate,omitempty"`
	// Stages in any order; After names the stages one waits for.
	Stages []*Stage `yaml:"stages"`
}

// Location is a bucket and a key prefix.
type Location struct {
	Bucket string `yaml:"bucket" json:"bucket"`
	Prefix string `yaml:"prefix,omitempty" json:"prefix"`
}

// Stage is one step of a pipeline.
type Stage struct {
	Name     string         `yaml:"name"`
	Function string         `yaml:"function"`
	After    []string       `yaml:"after,omitempty"`
	Args     map[string]any `yaml:"args,omitempty"`
}

var (
	appNameRE  = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$`)
	funcNameRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_-]{0,63}$`)
	handlerRE  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$`)
	bucketRE   = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)
	httpPathRE = regexp.MustCompile(`^(/[A-Za-z0-9._~-]+)+$|^/$`)
)

// Parse reads a spec strictly (unknown fields are errors), fills in the
// defaults and checks it.
func Parse(data []byte) (*Spec, error) {
	if len(data) > MaxSpecBytes {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrInvalid, FileName, MaxSpecBytes)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var s Spec
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

// Marshal writes the spec back as YAML (with its defaults filled in).
func (s *Spec) Marshal() ([]byte, error) { return yaml.Marshal(s) }

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// Validate fills in defaults and checks every field and reference.
func (s *Spec) Validate() error {
	if !appNameRE.MatchString(s.Name) {
		return invalid("name %q: want 1-40 of a-z, 0-9 and '-', not starting or ending with '-'", s.Name)
	}
	if s.Runtime == "" {
		s.Runtime = "python3"
	}
	if s.Runtime != "python3" {
		return invalid("runtime %q: only python3 is supported", s.Runtime)
	}
	if s.Memory == 0 {
		s.Memory = DefaultMemory
	}
	if err := checkMemory("memory", s.Memory); err != nil {
		return err
	}
	if s.Timeout == 0 {
		s.Timeout = Duration(DefaultTimeout)
	}
	if err := checkTimeout("timeout", s.Timeout); err != nil {
		return err
	}
	if s.KeepAlive == 0 {
		s.KeepAlive = Duration(DefaultKeepAlive)
	}
	if s.KeepAlive.D() < time.Second {
		return invalid("keep_alive %s: at least 1s", s.KeepAlive.D())
	}
	if s.MaxInstances == 0 {
		s.MaxInstances = DefaultMaxInstances
	}
	if s.MaxInstances < 1 || s.MaxInstances > MaxMaxInstances {
		return invalid("max_instances %d: want 1-%d", s.MaxInstances, MaxMaxInstances)
	}
	if err := s.Buckets.validate(); err != nil {
		return err
	}
	if err := s.Cache.validate(); err != nil {
		return err
	}
	if err := s.Scaling.validate(s.MaxInstances); err != nil {
		return err
	}
	if len(s.Functions) == 0 {
		return invalid("no functions")
	}
	for name, f := range s.Functions {
		if !funcNameRE.MatchString(name) {
			return invalid("function name %q: want 1-64 of A-Z, a-z, 0-9, '_' and '-'", name)
		}
		if f == nil {
			return invalid("function %s: empty", name)
		}
		if !handlerRE.MatchString(f.Handler) {
			return invalid("function %s: handler %q: want module.function (e.g. main.handler)", name, f.Handler)
		}
		if f.Memory == 0 {
			f.Memory = s.Memory
		}
		if err := checkMemory("function "+name+": memory", f.Memory); err != nil {
			return err
		}
		if f.Timeout == 0 {
			f.Timeout = s.Timeout
		}
		if err := checkTimeout("function "+name+": timeout", f.Timeout); err != nil {
			return err
		}
	}
	switch s.Cache.Admission {
	case "", AdmitAll, AdmitBenefit:
	default:
		return invalid("cache: admission %q: want %q or %q", s.Cache.Admission, AdmitAll, AdmitBenefit)
	}
	if s.Cache.Shared && int64(s.Cache.Budget) >= s.BookedMemory() {
		return invalid("cache: budget %s with shared: true must be below the booked memory (%s), which the function shares with the cache",
			bytesize.Format(int64(s.Cache.Budget)), bytesize.Format(s.BookedMemory()))
	}
	for name, p := range s.Pipelines {
		if err := s.validatePipeline(name, p); err != nil {
			return err
		}
	}
	paths := map[string]bool{}
	for i, t := range s.Triggers {
		if t == nil {
			return invalid("trigger %d: empty", i+1)
		}
		if err := s.validateTrigger(t, paths); err != nil {
			return fmt.Errorf("%w (trigger %d)", err, i+1)
		}
	}
	return s.validateFinalOutputs()
}

func checkMemory(what string, m Size) error {
	if m < MinMemory || m > MaxMemory {
		return invalid("%s %s: want %s to %s", what, bytesize.Format(int64(m)), bytesize.Format(MinMemory), bytesize.Format(MaxMemory))
	}
	return nil
}

func checkTimeout(what string, d Duration) error {
	if d.D() < time.Millisecond || d.D() > MaxTimeout {
		return invalid("%s %s: want 1ms to %s", what, d.D(), MaxTimeout)
	}
	return nil
}

func (c *CacheSpec) validate() error {
	if c.Consistency == "" {
		c.Consistency = cacheconfig.DefaultConsistency
	}
	if _, err := cacheconfig.ParseConsistency(c.Consistency); err != nil {
		return invalid("cache: %v", err)
	}
	if c.Eviction == "" {
		c.Eviction = string(cacheconfig.PolicyOwnerLRU)
	}
	switch cacheconfig.Policy(c.Eviction) {
	case cacheconfig.PolicyOwnerLRU, cacheconfig.PolicySizeAware, cacheconfig.PolicyGDSF,
		cacheconfig.PolicyS3FIFO, cacheconfig.PolicyWTinyLFU:
		if c.TTL != 0 {
			return invalid("cache: ttl is for eviction ttl, not %s", c.Eviction)
		}
	case cacheconfig.PolicyTTL:
		if c.TTL.D() <= 0 {
			return invalid("cache: eviction ttl needs a ttl (e.g. 10m)")
		}
	default:
		return invalid("cache: eviction %q: want owner-lru, size-aware, ttl, gdsf, s3-fifo or w-tinylfu", c.Eviction)
	}
	if e := c.Erasure; e != nil && e.Shards == "" {
		e.Shards = "10+2"
	}
	if err := c.validateDurable(); err != nil {
		return err
	}
	if err := c.Settings().Validate(); err != nil {
		return invalid("cache: %v", err)
	}
	if c.DiskBudget < 0 || (c.NoDisk && c.DiskBudget != 0) {
		return invalid("cache: disk_budget %d: want a positive size, and not with no_disk", c.DiskBudget)
	}
	if c.Budget == 0 {
		c.Budget = DefaultCacheBudget
	}
	if c.Budget < MinCacheBudget || c.Budget > MaxMemory {
		return invalid("cache: budget %s: want %s to %s", bytesize.Format(int64(c.Budget)), bytesize.Format(MinCacheBudget), bytesize.Format(MaxMemory))
	}
	if e := c.Erasure; e != nil {
		if _, _, err := cacheconfig.ParseShards(e.Shards); err != nil {
			return invalid("cache: erasure: %v", err)
		}
		if e.Threshold < 0 || e.Memory < 0 || e.BackupMemory < 0 || e.Memory+e.BackupMemory >= c.Budget {
			return invalid("cache: erasure: threshold must not be negative, memory and backup_memory together below the budget")
		}
		if e.WarmUp < 0 || e.Backup < 0 {
			return invalid("cache: erasure: warm_up (%s) and backup (%s) must not be negative", e.WarmUp.D(), e.Backup.D())
		}
	}
	return nil
}

func (s *Spec) validateTrigger(t *Trigger, paths map[string]bool) error {
	switch {
	case (t.HTTP == "") == (t.Object == nil):
		return invalid("a trigger has exactly one of http and object")
	case (t.Function == "") == (t.Pipeline == ""):
		return invalid("a trigger targets exactly one of function and pipeline")
	case t.Function != "" && s.Functions[t.Function] == nil:
		return invalid("trigger targets function %q, which the spec does not define", t.Function)
	case t.Pipeline != "" && s.Pipelines[t.Pipeline] == nil:
		return invalid("trigger targets pipeline %q, which the spec does not define", t.Pipeline)
	}
	if t.HTTP != "" {
		if !httpPathRE.MatchString(t.HTTP) || strings.Contains(t.HTTP, "/./") || strings.Contains(t.HTTP, "/../") || strings.HasSuffix(t.HTTP, "/..") || strings.HasSuffix(t.HTTP, "/.") {
			return invalid("http path %q: want /segment[/segment...] of A-Z, a-z, 0-9 and . _ ~ -", t.HTTP)
		}
		if paths[t.HTTP] {
			return invalid("http path %q bound twice", t.HTTP)
		}
		paths[t.HTTP] = true
		return nil
	}
	if !bucketRE.MatchString(t.Object.Bucket) {
		return invalid("object trigger: bucket %q is not a valid bucket name", t.Object.Bucket)
	}
	if _, ok := s.Buckets.Set().Lookup(t.Object.Bucket); !ok {
		return invalid("object trigger: bucket %s is not in buckets", t.Object.Bucket)
	}
	if len(t.Object.Prefix) > 1024 || len(t.Object.Suffix) > 1024 {
		return invalid("object trigger: prefix and suffix are at most 1024 bytes")
	}
	return nil
}

func (s *Spec) validatePipeline(name string, p *Pipeline) error {
	if !funcNameRE.MatchString(name) {
		return invalid("pipeline name %q: want 1-64 of A-Z, a-z, 0-9, '_' and '-'", name)
	}
	if p == nil || len(p.Stages) == 0 {
		return invalid("pipeline %s: no stages", name)
	}
	if p.Intermediate != nil && !bucketRE.MatchString(p.Intermediate.Bucket) {
		return invalid("pipeline %s: intermediate bucket %q is not a valid bucket name", name, p.Intermediate.Bucket)
	}
	if p.Intermediate != nil && !s.Buckets.Set().Allows(p.Intermediate.Bucket, true) {
		return invalid("pipeline %s: intermediate bucket %s must be in buckets as read-write", name, p.Intermediate.Bucket)
	}
	if p.Intermediate == nil && p.DeleteIntermediate {
		return invalid("pipeline %s: delete_intermediate without intermediate", name)
	}
	stages := map[string]*Stage{}
	for _, st := range p.Stages {
		if st == nil || !funcNameRE.MatchString(st.Name) {
			return invalid("pipeline %s: every stage needs a name of A-Z, a-z, 0-9, '_' and '-'", name)
		}
		if stages[st.Name] != nil {
			return invalid("pipeline %s: stage %q defined twice", name, st.Name)
		}
		if s.Functions[st.Function] == nil {
			return invalid("pipeline %s: stage %s runs function %q, which the spec does not define", name, st.Name, st.Function)
		}
		stages[st.Name] = st
	}
	for _, st := range p.Stages {
		for _, a := range st.After {
			if stages[a] == nil {
				return invalid("pipeline %s: stage %s waits for unknown stage %q", name, st.Name, a)
			}
		}
	}
	if _, err := p.Order(); err != nil {
		return invalid("pipeline %s: %v", name, err)
	}
	return nil
}

// Order returns the stages in an order where each comes after those it
// waits for (ties by name), or an error naming a cycle.
func (p *Pipeline) Order() ([]*Stage, error) {
	done := map[string]bool{}
	var out []*Stage
	for len(out) < len(p.Stages) {
		var ready []*Stage
		for _, st := range p.Stages {
			if done[st.Name] {
				continue
			}
			ok := true
			for _, a := range st.After {
				ok = ok && done[a]
			}
			if ok {
				ready = append(ready, st)
			}
		}
		if len(ready) == 0 {
			var left []string
			for _, st := range p.Stages {
				if !done[st.Name] {
					left = append(left, st.Name)
				}
			}
			sort.Strings(left)
			return nil, fmt.Errorf("stages %s wait for each other (a cycle)", strings.Join(left, ", "))
		}
		sort.Slice(ready, func(i, j int) bool { return ready[i].Name < ready[j].Name })
		for _, st := range ready {
			done[st.Name] = true
		}
		out = append(out, ready...)
	}
	return out, nil
}

// BookedMemory is the largest booked memory of the functions: what any
// one invocation may use.
func (s *Spec) BookedMemory() int64 {
	var m int64
	for _, f := range s.Functions {
		m = max(m, int64(f.Memory))
	}
	return m
}

// InstanceMemory is what one instance is allowed, its sandbox's memory
// limit: the largest booked memory of the functions plus the cache's
// budget, or, with cache.shared, the largest booked memory alone (the
// cache lives inside it); plus, either way, what the cachelet's process
// holds besides its cache (cacheconfig.DefaultMemoryOverhead: its binary,
// the Go runtime, its buffers), which is neither the function's nor the
// cache's.
func (s *Spec) InstanceMemory() int64 {
	if s.Cache.Shared {
		return s.BookedMemory() + cacheconfig.DefaultMemoryOverhead
	}
	return s.BookedMemory() + int64(s.Cache.Budget) + cacheconfig.DefaultMemoryOverhead
}

// FunctionNames lists the functions, sorted.
func (s *Spec) FunctionNames() []string {
	out := make([]string, 0, len(s.Functions))
	for n := range s.Functions {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
