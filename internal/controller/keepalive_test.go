package controller

import (
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/appspec"
	"github.com/hoard-io/hoard/internal/keepalive"
)

// An instance that ran an invocation unloads at once under a pre-warm
// window, unless its application keeps shards on its instances: then it
// stays at least keep_alive.
func TestKeepForShardHolders(t *testing.T) {
	spec := &appspec.Spec{KeepAlive: appspec.Duration(10 * time.Minute)}
	a := &app{spec: spec, decision: keepalive.Decision{Mode: keepalive.ModeHistogram, PreWarm: time.Minute, KeepAlive: 2 * time.Minute}}
	used, preloaded := &inst{}, &inst{preloaded: true}
	if got := a.keepFor(used); got != 0 {
		t.Fatalf("without erasure coding: kept %s, want an unload at once", got)
	}
	if got := a.keepFor(preloaded); got != 2*time.Minute {
		t.Fatalf("pre-loaded: kept %s, want the histogram's 2m", got)
	}
	spec.Cache.Erasure = &appspec.ErasureSpec{Shards: "10+2"}
	for _, in := range []*inst{used, preloaded} {
		if got := a.keepFor(in); got != 10*time.Minute {
			t.Fatalf("with erasure coding (preloaded %v): kept %s, want keep_alive 10m", in.preloaded, got)
		}
	}
	a.decision.KeepAlive = time.Hour
	if got := a.keepFor(used); got != time.Hour {
		t.Fatalf("with erasure coding: kept %s, want the histogram's longer 1h", got)
	}
	a.decision.Mode = keepalive.ModeFixed
	if got := a.keepFor(used); got != 10*time.Minute {
		t.Fatalf("fixed mode: kept %s", got)
	}
}
