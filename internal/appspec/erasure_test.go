package appspec

import (
	"errors"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/cacheconfig"
)

func TestErasureSpec(t *testing.T) {
	base := "name: a\nfunctions: {f: {handler: m.h}}\n"
	s, err := Parse([]byte(base + "cache: {budget: 256MiB, erasure: {threshold: 20MB, warm_up: 30s, backup: 2m}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	got := s.Cache.Settings().Erasure
	if got == nil || *got != (cacheconfig.Erasure{DataShards: 10, ParityShards: 2, Threshold: 20_000_000, WarmUp: cacheconfig.Duration(30 * time.Second), Backup: cacheconfig.Duration(2 * time.Minute)}) {
		t.Fatalf("settings %+v, want 10+2 over 20 MB", got)
	}
	// Through Marshal and Parse again, as the controller stores it.
	raw, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if s2, err := Parse(raw); err != nil || *s2.Cache.Settings().Erasure != *got {
		t.Fatalf("re-parsed: %v", err)
	}
	if s, err := Parse([]byte(base)); err != nil || s.Cache.Settings().Erasure != nil {
		t.Fatal("erasure coding on by default")
	}
	for _, bad := range []string{"{shards: 10}", "{shards: 0+2}", "{shards: 60+10}", "{memory: 1GiB}", "{warm_up: -1s}", "{backup: -1m}"} {
		if _, err := Parse([]byte(base + "cache: {budget: 256MiB, erasure: " + bad + "}\n")); !errors.Is(err, ErrInvalid) {
			t.Errorf("erasure %s: %v, want ErrInvalid", bad, err)
		}
	}
}
