package appspec

import (
	"errors"
	"strings"
	"testing"

	"github.com/hoard-io/hoard/internal/cacheconfig"
)

func TestDurableWritesSpec(t *testing.T) {
	base := "name: a\nfunctions: {f: {handler: m.h}}\n"
	for _, c := range []struct {
		cache string
		want  cacheconfig.DurableMode
	}{
		{"{consistency: owner}", cacheconfig.DurableOff},
		{"{consistency: owner, durable_writes: off}", cacheconfig.DurableOff},
		{"{consistency: owner, durable_writes: false}", cacheconfig.DurableOff},
		{"{consistency: owner, durable_writes: on}", cacheconfig.DurableLog},
		{"{consistency: owner, durable_writes: true}", cacheconfig.DurableLog},
		{"{consistency: local-async, durable_writes: on}", cacheconfig.DurableLog},
		{"{consistency: owner, durable_writes: replicated}", cacheconfig.DurableReplicated},
		{"{consistency: owner-async, durable_writes: replicated}", cacheconfig.DurableReplicated},
		{"{consistency: owner-local-read, durable_writes: Replicated}", cacheconfig.DurableReplicated},
	} {
		s, err := Parse([]byte(base + "cache: " + c.cache + "\n"))
		if err != nil {
			t.Errorf("%s: %v", c.cache, err)
			continue
		}
		if got := s.Cache.Settings().DurableWrites; got != c.want {
			t.Errorf("%s: durable_writes %q, want %q", c.cache, got, c.want)
		}
		// Through Marshal and Parse again, as the controller stores it.
		raw, err := s.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if s2, err := Parse(raw); err != nil || s2.Cache.Settings().DurableWrites != c.want {
			t.Errorf("%s re-parsed: %v", c.cache, err)
		}
	}
	// cache.durable_shadow reaches the cachelets' settings.
	s, err := Parse([]byte(base + "cache: {consistency: owner, durable_writes: replicated, durable_shadow: true}\n"))
	if err != nil || !s.Cache.Settings().DurableShadow {
		t.Errorf("durable_shadow: %v", err)
	}
	if s, err := Parse([]byte(base + "cache: {consistency: owner, durable_writes: on}\n")); err != nil || s.Cache.Settings().DurableShadow {
		t.Errorf("durable_shadow by default: %v", err)
	}
	for _, c := range []struct{ cache, says string }{
		{"{consistency: owner, durable_writes: twice}", "want off, on"},
		{"{durable_writes: on}", "under strong every write is in the store"},
		{"{consistency: strong, durable_writes: replicated}", "under strong every write is in the store"},
		{"{consistency: local, durable_writes: replicated}", "needs an owner consistency"},
		{"{consistency: local-async, durable_writes: replicated}", "needs an owner consistency"},
		{"{consistency: owner, durable_writes: replicated, no_disk: true}", "not with no_disk"},
		{"{consistency: owner, durable_writes: on, no_disk: true}", "not with no_disk"},
		{"{consistency: owner, durable_shadow: true}", "durable_shadow needs durable_writes"},
		{"{consistency: owner, durable_writes: off, durable_shadow: true}", "durable_shadow needs durable_writes"},
	} {
		_, err := Parse([]byte(base + "cache: " + c.cache + "\n"))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.says) || !strings.Contains(err.Error(), "durable_writes") {
			t.Errorf("%s: %v, want ErrInvalid saying %q", c.cache, err, c.says)
		}
	}
}
