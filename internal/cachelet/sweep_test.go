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

// TestSweepSparesPrewarmed: a pre-warmed object is not swept for its
// read count before its first read (though a sweep comes while it waits),
// and faces the count a whole interval after that read; an object read
// once after a miss is swept a whole interval after it came in. With the
// sweep off nothing is swept.
func TestSweepSparesPrewarmed(t *testing.T) {
	for _, off := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			e := newEnv(t, func(c *Config) {
				c.Sweep = SweepConfig{Off: off} // default: OFC's, 300 s
			})
			warm, read := object("warm", 1, 10<<10), object("read", 1, 10<<10)
			e.storePut("warm", warm)
			e.storePut("read", read)
			e.mustRead("read", read, LocalMiss)
			res, err := e.c.Prewarm(t.Context(), []cache.Key{{Bucket: testBucket, Object: "warm"}})
			if err != nil || res.Fetched != 1 {
				t.Fatalf("prewarm %+v, %v", res, err)
			}
			e.settle()
			time.Sleep(11 * time.Minute) // two sweeps; warm not read yet
			synctest.Wait()
			wantSwept := uint64(1) // read: one read after a whole interval
			if off {
				wantSwept = 0
			}
			if s := e.c.Stats(); s.Swept != wantSwept {
				t.Fatalf("off %v: swept %d before warm's first read, want %d", off, s.Swept, wantSwept)
			}
			e.mustRead("warm", warm, LocalHit) // its count starts here
			time.Sleep(4 * time.Minute)        // the sweep at 15 min: 4 min after it
			synctest.Wait()
			if s := e.c.Stats(); s.Swept != wantSwept {
				t.Fatalf("off %v: warm swept 4 min after its first read", off)
			}
			time.Sleep(5 * time.Minute) // the sweep at 20 min, a whole interval after its one read
			synctest.Wait()
			if !off {
				wantSwept++
			}
			if s := e.c.Stats(); s.Swept != wantSwept {
				t.Fatalf("off %v: swept %d, want %d (warm, read once in its first interval)", off, s.Swept, wantSwept)
			}
		})
	}
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
	// The zero value is OFC's sweep, on.
	c = Config{}
	if err := c.ApplySettings(cacheconfig.Settings{}); err != nil {
		t.Fatal(err)
	}
	if err := c.Sweep.validate(); err != nil || c.Sweep != (SweepConfig{Interval: 300 * time.Second, MinReads: 5, Idle: 30 * time.Minute}) {
		t.Fatalf("default sweep %+v, %v: want OFC's, on", c.Sweep, err)
	}
	if s := c.Settings(); s.SweepOff || s.SweepInterval.D() != 300*time.Second {
		t.Errorf("settings reported: off %v, interval %s", s.SweepOff, s.SweepInterval.D())
	}
	c = Config{}
	if err := c.ApplySettings(cacheconfig.Settings{SweepOff: true}); err != nil || !c.Sweep.Off {
		t.Fatalf("sweep off: %+v, %v", c.Sweep, err)
	}
	if err := c.Sweep.validate(); err != nil || c.Sweep != (SweepConfig{Off: true}) {
		t.Fatalf("sweep off validated to %+v, %v", c.Sweep, err)
	}
	if s := c.Settings(); !s.SweepOff || s.Validate() != nil {
		t.Errorf("settings reported: %+v, %v", s, s.Validate())
	}
	if err := c.ApplySettings(cacheconfig.Settings{SweepOff: true, SweepMinReads: 3}); err == nil {
		t.Error("min reads with the sweep off accepted")
	}
	if err := c.ApplySettings(settingsWithSweep(-time.Second, 0, 0)); err == nil {
		t.Error("a negative interval accepted")
	}
}

func settingsWithSweep(every time.Duration, minReads int, idle time.Duration) cacheconfig.Settings {
	return cacheconfig.Settings{SweepInterval: cacheconfig.Duration(every), SweepMinReads: minReads, SweepIdle: cacheconfig.Duration(idle)}
}
