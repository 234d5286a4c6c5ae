package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hoard-io/hoard/internal/bytesize"
	"github.com/hoard-io/hoard/internal/cacheconfig"
	"github.com/hoard-io/hoard/internal/etcdauth"
	"github.com/hoard-io/hoard/internal/instance"
	"github.com/hoard-io/hoard/internal/rig"
)

// byteSize is a flag value like "512MiB", "2GiB", "1500000".
type byteSize int64

func (b *byteSize) String() string { return strconv.FormatInt(int64(*b), 10) }

func (b *byteSize) Set(s string) error {
	n, err := parseBytes(s)
	if err != nil {
		return err
	}
	*b = byteSize(n)
	return nil
}

// parseBytes reads sizes with binary (KiB, MiB, GiB) or decimal (KB, MB, GB) units.
func parseBytes(s string) (int64, error) { return bytesize.Parse(s) }

// cacheFlags registers the cache settings shared by serve and up; they
// become one cacheconfig.Settings, which the cachelet applies.
type cacheFlags struct {
	budget, maxObject byteSize
	readMode          string
	noWriteCache      bool
	serveStale        bool
	eviction          string
	ttl               time.Duration
	consistency       string
	sweep             sweepFlag
	sweepIdle         time.Duration
	sweepMinReads     int
	finalOutputs      string
	memoryOverhead    int64 // not a flag: from a configuration document
	migrate           migrateFlags
}

// migrateFlags are the bounds of hot objects' migration (ADR 0032).
type migrateFlags struct {
	on               bool
	hotReads, maxObj int
	hotIdle, timeout time.Duration
	maxBytes         byteSize
}

func (m *migrateFlags) register(fs *flag.FlagSet, def cacheconfig.Migrate) {
	m.maxBytes = byteSize(def.MaxBytes)
	fs.BoolVar(&m.on, "migrate", !def.Off, "with an application: offer hot objects to their owner when the ring changes or the budget shrinks, instead of dropping them; false: none offered, offers refused")
	fs.IntVar(&m.hotReads, "migrate-hot-reads", def.HotReads, "with --migrate: the fewest reads that make an object hot (default: --sweep-min-reads, 5)")
	fs.DurationVar(&m.hotIdle, "migrate-hot-idle", def.HotIdle.D(), "with --migrate: a hot object was read within this (default: --sweep-idle, 30m)")
	fs.IntVar(&m.maxObj, "migrate-max-objects", def.MaxObjects, "with --migrate: the most objects one migration offers, hottest first (default 64)")
	fs.Var(&m.maxBytes, "migrate-max-bytes", "with --migrate: the most bytes one migration offers; a shrink holds them beyond the budget until offered (default 64MiB)")
	fs.DurationVar(&m.timeout, "migrate-timeout", def.Timeout.D(), "with --migrate: the deadline of each offer to a peer (default 2s)")
}

func (m *migrateFlags) settings() cacheconfig.Migrate {
	if !m.on {
		return cacheconfig.Migrate{Off: true}
	}
	return cacheconfig.Migrate{HotReads: m.hotReads, HotIdle: cacheconfig.Duration(m.hotIdle),
		MaxObjects: m.maxObj, MaxBytes: int64(m.maxBytes), Timeout: cacheconfig.Duration(m.timeout)}
}

// sweepFlag is --sweep: how often memory is swept, or off.
type sweepFlag struct {
	off   bool
	every time.Duration // 0: OFC's
}

func (f *sweepFlag) String() string {
	switch {
	case f == nil:
		return ""
	case f.off:
		return "off"
	case f.every == 0:
		return cacheconfig.OFCSweepInterval.String()
	}
	return f.every.String()
}

// Set takes a positive duration, or off (also 0).
func (f *sweepFlag) Set(s string) error {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "off", "0", "0s":
		f.off, f.every = true, 0
		return nil
	}
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil || d <= 0 {
		return fmt.Errorf("%q: want a positive duration such as 300s, or off", s)
	}
	f.off, f.every = false, d
	return nil
}

func (c *cacheFlags) register(fs *flag.FlagSet) { c.registerWith(fs, cacheconfig.Settings{}) }

// registerWith registers the flags with def's values as their defaults
// (`hoard serve --config`: the document's settings, which flags override).
func (c *cacheFlags) registerWith(fs *flag.FlagSet, def cacheconfig.Settings) {
	c.budget, c.maxObject = byteSize(def.Budget), byteSize(def.MaxObjectSize)
	c.memoryOverhead = def.MemoryLimitOverhead
	eviction := string(def.Eviction)
	if eviction == "" {
		eviction = string(cacheconfig.PolicyOwnerLRU)
	}
	fs.Var(&c.budget, "budget", "memory budget of the cache (default: a quarter of the memory limit)")
	fs.Var(&c.maxObject, "max-object-size", "largest object kept in memory; larger ones stream through (default: half of the memory tier, --budget less any --erasure-memory)")
	fs.StringVar(&c.readMode, "read-mode", string(def.ReadMode),
		"version-check: confirm every cached copy with the store (strong); local: trust the cached copy; owner: ask the key's owner (default: the --consistency setting's, version-check for strong)")
	fs.BoolVar(&c.noWriteCache, "no-write-cache", def.NoWriteCache, "do not keep the bytes of objects written through the cache")
	fs.BoolVar(&c.serveStale, "serve-stale-if-error", def.ServeStaleIfError, "serve a cached copy, marked x-hoard-stale, when the store cannot confirm it (instead of 503)")
	fs.StringVar(&c.eviction, "eviction", eviction, "eviction policy: owner-lru, size-aware, ttl, gdsf, s3-fifo or w-tinylfu")
	fs.DurationVar(&c.ttl, "ttl", def.TTL.D(), "with --eviction ttl: how long an object stays cached")
	fs.StringVar(&c.consistency, "consistency", def.Consistency, "write/read setting: strong (default), owner, owner-async, owner-local-read, local, local-async")
	c.sweep = sweepFlag{off: def.SweepOff, every: def.SweepInterval.D()}
	fs.Var(&c.sweep, "sweep", "sweep memory this often (OFC's 300s), or off (also 0): objects read fewer than --sweep-min-reads times, or not for --sweep-idle, are dropped (to the disk tier when there is one); pre-warmed and written objects face the count a whole interval after their first read")
	fs.IntVar(&c.sweepMinReads, "sweep-min-reads", def.SweepMinReads, "the sweep's fewest reads that keep an object (default 5)")
	fs.DurationVar(&c.sweepIdle, "sweep-idle", def.SweepIdle.D(), "the sweep's longest time without a read (default 30m)")
	c.migrate.register(fs, def.Migrate)
	fs.StringVar(&c.finalOutputs, "final-outputs", def.FinalOutputs, "where final outputs land (written, never read by the application's functions), as bucket/prefix,...: writes there leave memory once the store has them")
}

// settings is the flags as one document.
func (c *cacheFlags) settings() (cacheconfig.Settings, error) {
	s := cacheconfig.Settings{
		Consistency: c.consistency, ReadMode: cacheconfig.ReadMode(c.readMode),
		Eviction: cacheconfig.Policy(c.eviction), TTL: cacheconfig.Duration(c.ttl),
		Budget: int64(c.budget), MaxObjectSize: int64(c.maxObject),
		NoWriteCache: c.noWriteCache, MemoryLimitOverhead: c.memoryOverhead,
		ServeStaleIfError: c.serveStale,
		SweepOff:          c.sweep.off, SweepInterval: cacheconfig.Duration(c.sweep.every), SweepMinReads: c.sweepMinReads, SweepIdle: cacheconfig.Duration(c.sweepIdle),
		FinalOutputs: c.finalOutputs,
		Migrate:      c.migrate.settings(),
	}
	if s.Consistency != "" {
		if _, err := cacheconfig.ParseConsistency(s.Consistency); err != nil {
			return s, fmt.Errorf("%w: %v", errUsage, err)
		}
	}
	return s, s.Validate()
}

// apply sets cfg's cache settings from the flags.
func (c *cacheFlags) apply(cfg *instance.Config) error {
	s, err := c.settings()
	if err != nil {
		return err
	}
	return cfg.Cachelet.ApplySettings(s)
}

// envDefault returns the environment variable's value, or def.
func envDefault(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

// storeFlags registers the store settings shared by controller and agent.
// etcdFlags registers --etcd-endpoints and --etcd-credentials for the
// controller and the agent (user says whose the credentials are); the
// returned function fills cfg once fs is parsed.
func etcdFlags(fs *flag.FlagSet, cfg *rig.Config, user string) func() error {
	endpoints := fs.String("etcd-endpoints", envDefault("HOARD_ETCD_ENDPOINTS", ""), "comma-separated etcd client URLs (env HOARD_ETCD_ENDPOINTS)")
	creds := fs.String("etcd-credentials", "", `a file (mode 0600) holding etcd's {"username", "password"} where etcd has authentication on: `+user)
	return func() error {
		cfg.EtcdEndpoints = splitList(*endpoints)
		if *creds == "" {
			return nil
		}
		c, err := etcdauth.ReadFile(*creds)
		if err != nil {
			return err
		}
		cfg.EtcdCredentials = c
		return nil
	}
}

func storeFlags(fs *flag.FlagSet, cfg *rig.Config) {
	fs.StringVar(&cfg.StoreEndpoint, "store-endpoint", envDefault("HOARD_STORE_ENDPOINT", ""), "the store's S3 endpoint URL (env HOARD_STORE_ENDPOINT)")
	fs.StringVar(&cfg.StoreAccessKey, "store-access-key", envDefault("HOARD_STORE_ACCESS_KEY", ""), "the store's access key (env HOARD_STORE_ACCESS_KEY)")
	fs.StringVar(&cfg.StoreSecretKey, "store-secret-key", envDefault("HOARD_STORE_SECRET_KEY", ""), "the store's secret key (env HOARD_STORE_SECRET_KEY)")
	fs.StringVar(&cfg.Region, "region", "us-east-1", "region")
}

// reorder moves flags after positional arguments to the front, so that
// `hoard invoke APP FN --data {}` works as well as the flag-first form.
// bools names the flags that take no value.
func reorder(args []string, bools map[string]bool) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if strings.HasPrefix(a, "-") && len(a) > 1 {
			flags = append(flags, a)
			name := strings.TrimLeft(a, "-")
			if !strings.Contains(name, "=") && !bools[name] && i+1 < len(args) {
				i++
				flags = append(flags, args[i])
			}
			continue
		}
		pos = append(pos, a)
	}
	return append(flags, pos...)
}

// secretFlag is a flag holding a secret: its value, however it was set
// (document, environment, flag), never shows in -h.
type secretFlag struct{ p *string }

func (f secretFlag) String() string { return "" }

func (f secretFlag) Set(v string) error { *f.p = v; return nil }

// or returns the first non-empty string.
func or(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}
