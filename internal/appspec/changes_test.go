package appspec

import (
	"errors"
	"strings"
	"testing"

	"github.com/hoard-io/hoard/internal/cacheconfig"
)

// cache.store_changes reaches the cachelets' settings; relay and auto
// make the controller follow the buckets; anything else is refused.
func TestStoreChangesSpec(t *testing.T) {
	base := "name: a\nbuckets: {dat: read-only}\nfunctions: {f: {handler: m.h}}\n"
	for _, c := range []struct {
		cache string
		want  cacheconfig.ChangesMode
		relay bool
	}{
		{"{consistency: owner}", cacheconfig.ChangesOff, false},
		{"{consistency: owner, store_changes: off}", cacheconfig.ChangesOff, false},
		{"{consistency: owner, store_changes: listen}", cacheconfig.ChangesListen, false},
		{"{consistency: owner, store_changes: relay}", cacheconfig.ChangesRelay, true},
		{"{consistency: local, store_changes: auto}", cacheconfig.ChangesAuto, true},
	} {
		s, err := Parse([]byte(base + "cache: " + c.cache + "\n"))
		if err != nil {
			t.Errorf("%s: %v", c.cache, err)
			continue
		}
		if got := s.Cache.Settings().StoreChanges; got != c.want || s.Cache.FollowsRelay() != c.relay {
			t.Errorf("%s: store_changes %q relay %v, want %q %v", c.cache, got, s.Cache.FollowsRelay(), c.want, c.relay)
		}
		raw, _ := s.Marshal()
		if s2, err := Parse(raw); err != nil || s2.Cache.Settings().StoreChanges != c.want {
			t.Errorf("%s re-parsed: %v", c.cache, err)
		}
	}
	_, err := Parse([]byte(base + "cache: {store_changes: sometimes}\n"))
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "want off, listen, relay or auto") {
		t.Errorf("store_changes sometimes: %v", err)
	}
}
