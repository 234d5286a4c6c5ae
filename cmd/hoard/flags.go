package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hoard-io/hoard/internal/bytesize"
	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/cachelet"
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

// cacheFlags registers the cache settings shared by serve and up.
type cacheFlags struct {
	budget, maxObject byteSize
	readMode          string
	noWriteCache      bool
	eviction          string
	ttl               time.Duration
	consistency       string
}

func (c *cacheFlags) register(fs *flag.FlagSet) {
	fs.Var(&c.budget, "budget", "memory budget of the cache (default: a quarter of the memory limit)")
	fs.Var(&c.maxObject, "max-object-size", "largest object kept in memory; larger ones stream through (default: budget/2)")
	fs.StringVar(&c.readMode, "read-mode", string(cachelet.ReadVersionCheck),
		"version-check: confirm every cached copy with the store (strong); local: trust the cached copy")
	fs.BoolVar(&c.noWriteCache, "no-write-cache", false, "do not keep the bytes of objects written through the cache")
	fs.StringVar(&c.eviction, "eviction", string(cache.PolicyOwnerLRU), "eviction policy: owner-lru, size-aware or ttl")
	fs.DurationVar(&c.ttl, "ttl", 0, "with --eviction ttl: how long an object stays cached")
	fs.StringVar(&c.consistency, "consistency", "", "write/read setting: strong (default), owner, owner-async, owner-local-read, local, local-async (sets --read-mode)")
}

func (c *cacheFlags) apply(cfg *instance.Config) error {
	cfg.Cachelet.Cache.Budget = int64(c.budget)
	cfg.Cachelet.Cache.MaxObjectSize = int64(c.maxObject)
	cfg.Cachelet.ReadMode = cachelet.ReadMode(c.readMode)
	cfg.Cachelet.DisableWriteCaching = c.noWriteCache
	cfg.Cachelet.Cache.Policy = cache.Policy(c.eviction)
	cfg.Cachelet.Cache.TTL = c.ttl
	if c.consistency != "" {
		s, err := cachelet.ParseConsistency(c.consistency)
		if err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		s.Apply(&cfg.Cachelet)
	}
	return nil
}

// envDefault returns the environment variable's value, or def.
func envDefault(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

// storeFlags registers the store settings shared by controller and agent.
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
