package cachelet

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/cacheconfig"
	"github.com/hoard-io/hoard/internal/store"
)

func finalOutputs(cfg *Config) {
	cfg.FinalOutputs = []cacheconfig.Location{{Bucket: testBucket, Prefix: "out/"}}
}

// Under the store write target a final output is in the store when the
// write is answered and never in memory; other writes are kept. A read of
// the final output afterwards is served right and cached like any read.
func TestFinalOutputNotKeptUnderStore(t *testing.T) {
	e := newEnv(t, finalOutputs)
	out, in := object("out/report", 1, 8<<10), object("in/table", 1, 8<<10)
	e.cput("out/report", out)
	e.cput("in/table", in)
	if e.c.cache.Peek(cache.Key{Bucket: testBucket, Object: "out/report"}) != nil {
		t.Error("a final output's write is held in memory")
	}
	if e.c.cache.Peek(cache.Key{Bucket: testBucket, Object: "in/table"}) == nil {
		t.Error("a write outside the final outputs is not kept")
	}
	if got := toFloat64(e.c.m.finalOutputs.WithLabelValues("written")); got != 1 {
		t.Errorf("final outputs dropped{written} = %v, want 1", got)
	}
	e.mustRead("out/report", out, LocalMiss)
	e.settle()
	e.mustRead("out/report", out, LocalHit)
	e.mustRead("in/table", in, LocalHit)
}

// Under a background write target the final output is the only copy
// until the store has it: kept and served meanwhile, dropped once
// persisted; a write outside stays.
func TestFinalOutputDroppedOncePersisted(t *testing.T) {
	e := newEnv(t, func(cfg *Config) {
		finalOutputs(cfg)
		cfg.WriteTarget, cfg.ReadMode = WriteLocal, ReadLocal
	})
	out, in := object("out/report", 1, 8<<10), object("in/table", 1, 8<<10)
	e.st.SetDown(true) // persistence waits
	e.cput("out/report", out)
	e.cput("in/table", in)
	k := cache.Key{Bucket: testBucket, Object: "out/report"}
	if e.c.cache.Peek(k) == nil {
		t.Fatal("a final output not yet in the store is not held")
	}
	e.mustRead("out/report", out, LocalHit)
	e.st.SetDown(false)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := e.c.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	for e.c.cache.Peek(k) != nil || toFloat64(e.c.m.finalOutputs.WithLabelValues("persisted")) != 1 {
		if ctx.Err() != nil {
			t.Fatalf("the persisted final output is still held (dropped{persisted} = %v)", toFloat64(e.c.m.finalOutputs.WithLabelValues("persisted")))
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := e.st.Stat(t.Context(), testBucket, "out/report"); err != nil {
		t.Fatalf("the final output is not in the store: %v", err)
	}
	if e.c.cache.Peek(cache.Key{Bucket: testBucket, Object: "in/table"}) == nil {
		t.Error("a persisted write outside the final outputs is not kept")
	}
	e.mustRead("out/report", out, LocalMiss)
}

// A newer write of the key while the older one persists is not dropped
// with it.
func TestFinalOutputNewerWriteStays(t *testing.T) {
	e := newEnv(t, func(cfg *Config) {
		finalOutputs(cfg)
		cfg.WriteTarget, cfg.ReadMode = WriteLocal, ReadLocal
	})
	e.st.SetDown(true)
	e.cput("out/report", object("out/report", 1, 4<<10))
	v2 := object("out/report", 2, 4<<10)
	e.cput("out/report", v2)
	e.mustRead("out/report", v2, LocalHit)
	e.st.SetDown(false)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := e.c.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	// The newest write is dropped once persisted too, and what is read
	// afterwards is it, from the store.
	k := cache.Key{Bucket: testBucket, Object: "out/report"}
	for e.c.cache.Peek(k) != nil {
		if ctx.Err() != nil {
			t.Fatal("the persisted final output is still held")
		}
		time.Sleep(time.Millisecond)
	}
	e.mustRead("out/report", v2, LocalMiss)
}

// Under the owner settings, final outputs written through any member end
// up in the store and in no member's memory, and read right everywhere.
func TestFinalOutputsUnderOwner(t *testing.T) {
	for _, name := range []string{"owner", "owner-async"} {
		t.Run(name, func(t *testing.T) {
			s, _ := ParseConsistency(name)
			g := newGroup(t, 3, func(cfg *Config) { s.Apply(cfg); finalOutputs(cfg) })
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			keys := map[string][]byte{}
			for i := range 12 {
				k := fmt.Sprintf("out/part-%d", i)
				keys[k] = object(k, 1, 2000)
				if _, err := g.members[i%3].Put(ctx, testBucket, k, bytes.NewReader(keys[k]), 2000, store.PutOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			for _, c := range g.members {
				if err := c.Drain(ctx); err != nil {
					t.Fatal(err)
				}
			}
			for k := range keys {
				for i, c := range g.members {
					for c.cache.Peek(cache.Key{Bucket: testBucket, Object: k}) != nil {
						if ctx.Err() != nil {
							t.Fatalf("cachelet %d still holds the persisted final output %s", i, k)
						}
						time.Sleep(time.Millisecond)
					}
				}
				if _, err := g.st.Stat(ctx, testBucket, k); err != nil {
					t.Fatalf("%s not in the store: %v", k, err)
				}
			}
			for k, want := range keys {
				for i := range g.members {
					if got, _, err := g.read(t, i, k); err != nil || !bytes.Equal(got, want) {
						t.Fatalf("cachelet %d read %s: %v (%d bytes)", i, k, err, len(got))
					}
				}
			}
		})
	}
}
