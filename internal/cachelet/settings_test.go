package cachelet

import (
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/cacheconfig"
)

// ApplySettings is where a settings document becomes a Config.
func TestApplySettings(t *testing.T) {
	var c Config
	c.Cache.Budget = 5 << 20
	err := c.ApplySettings(cacheconfig.Settings{Consistency: "owner-async", Eviction: cacheconfig.PolicyTTL,
		TTL: cacheconfig.Duration(time.Minute), MaxObjectSize: 1 << 20, NoWriteCache: true, MemoryLimitOverhead: 48 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if c.WriteTarget != WriteOwner || c.WriteMode != WriteAsync || c.ReadMode != ReadOwner ||
		c.Cache.Policy != cache.PolicyTTL || c.Cache.TTL != time.Minute || c.Cache.Budget != 5<<20 ||
		c.Cache.MaxObjectSize != 1<<20 || !c.DisableWriteCaching || c.MemoryLimitOverhead != 48<<20 {
		t.Fatalf("config %+v", c)
	}
	// The zero document is every default; a read mode replaces the
	// consistency's.
	var d Config
	if err := d.ApplySettings(cacheconfig.Settings{ReadMode: ReadLocal, Budget: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	if d.WriteTarget != WriteStore || d.WriteMode != WriteSync || d.ReadMode != ReadLocal || d.Cache.Budget != 1<<20 {
		t.Fatalf("config %+v", d)
	}
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := d.ApplySettings(cacheconfig.Settings{Consistency: "eventual"}); err == nil {
		t.Fatal("an unknown consistency applied")
	}
}

// Settings gives back what ApplySettings was given.
func TestSettingsRoundTrip(t *testing.T) {
	for _, s := range []cacheconfig.Settings{
		{Consistency: "strong", Eviction: cacheconfig.PolicyOwnerLRU, Budget: 1 << 20, MaxObjectSize: 1 << 19},
		{Consistency: "owner-local-read", Eviction: cacheconfig.PolicySizeAware, LargeObjectSize: 4 << 10, Budget: 1 << 20, MaxObjectSize: 1 << 10},
		{Consistency: "local-async", ReadMode: ReadOwner, Eviction: cacheconfig.PolicyTTL, TTL: cacheconfig.Duration(time.Hour),
			Budget: 1 << 20, MaxObjectSize: 1 << 19, NoWriteCache: true, MemoryLimitOverhead: 1},
		{Consistency: "strong", ReadMode: ReadLocal, Eviction: cacheconfig.PolicyOwnerLRU, Budget: 1 << 20, MaxObjectSize: 1 << 19},
		{Consistency: "owner", Eviction: cacheconfig.PolicyOwnerLRU, Budget: 1 << 20, MaxObjectSize: 1 << 19,
			Migrate: cacheconfig.Migrate{HotReads: 3, HotIdle: cacheconfig.Duration(time.Minute), MaxObjects: 9, MaxBytes: 1 << 19, Timeout: cacheconfig.Duration(time.Second)}},
		{Consistency: "owner", Eviction: cacheconfig.PolicyOwnerLRU, Budget: 1 << 20, MaxObjectSize: 1 << 19, Migrate: cacheconfig.Migrate{Off: true}},
	} {
		var c Config
		if err := c.ApplySettings(s); err != nil {
			t.Fatal(err)
		}
		if got := c.Settings(); got != s {
			t.Errorf("round trip\n got %+v\nwant %+v", got, s)
		}
	}
}
