package cachelet

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/cacheconfig"
	"github.com/hoard-io/hoard/internal/disktier"
)

// TestSweepLoop: every interval, objects read too rarely leave memory
// (for the disk tier, where there is one); the others stay.
func TestSweepLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tier, err := disktier.New(disktier.Config{Dir: t.TempDir(), Budget: 16 << 20, CleanInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		defer tier.Close()
		e := newEnv(t, func(c *Config) {
			c.Sweep = SweepConfig{Interval: 5 * time.Minute}
			c.Disk = tier
		})
		hot, cold := object("hot", 1, 100<<10), object("cold", 1, 100<<10)
		e.storePut("hot", hot)
		e.storePut("cold", cold)
		e.mustRead("hot", hot, LocalMiss)
		e.mustRead("cold", cold, LocalMiss)
		e.settle()
		for range 5 {
			e.mustRead("hot", hot, LocalHit)
		}
		time.Sleep(4 * time.Minute) // no sweep yet
		synctest.Wait()
		if s := e.c.Stats(); s.Swept != 0 {
			t.Fatalf("swept %d before the interval", s.Swept)
		}
		time.Sleep(time.Minute + time.Second)
		synctest.Wait()
		tier.Settle()
		if s := e.c.Stats(); s.Swept != 1 || s.Objects != 1 {
			t.Fatalf("after a sweep: %+v, want cold swept, hot kept", s)
		}
		e.mustRead("hot", hot, LocalHit)
		e.mustRead("cold", cold, DiskHit)
		if got := toFloat64(e.c.m.sweptBytes); got < 100<<10 {
			t.Errorf("swept bytes %v", got)
		}
	})
}

// TestExpireLoop: under the ttl policy, expired objects leave memory
// without a lookup.
func TestExpireLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, func(c *Config) {
			c.Cache = cache.Config{Budget: testBudget, MaxObjectSize: testMaxSize, Policy: cache.PolicyTTL, TTL: time.Minute}
		})
		data := object("k", 1, 10<<10)
		e.storePut("k", data)
		e.mustRead("k", data, LocalMiss)
		e.settle()
		time.Sleep(80 * time.Second)
		synctest.Wait()
		if s := e.c.Stats(); s.Expired != 1 || s.Objects != 0 {
			t.Fatalf("stats %+v: want the expired object dropped", s)
		}
	})
}

func TestSweepSettings(t *testing.T) {
	var c Config
	if err := c.ApplySettings(settingsWithSweep(300*time.Second, 0, 0)); err != nil {
		t.Fatal(err)
	}
	if err := c.Sweep.validate(); err != nil || c.Sweep != (SweepConfig{Interval: 300 * time.Second, MinReads: 5, Idle: 30 * time.Minute}) {
		t.Fatalf("sweep %+v, %v: want OFC's defaults", c.Sweep, err)
	}
	if err := c.ApplySettings(settingsWithSweep(0, 3, 0)); err == nil {
		t.Error("min reads without an interval accepted")
	}
	if err := c.ApplySettings(settingsWithSweep(-time.Second, 0, 0)); err == nil {
		t.Error("a negative interval accepted")
	}
}

func settingsWithSweep(every time.Duration, minReads int, idle time.Duration) cacheconfig.Settings {
	return cacheconfig.Settings{SweepInterval: cacheconfig.Duration(every), SweepMinReads: minReads, SweepIdle: cacheconfig.Duration(idle)}
}
