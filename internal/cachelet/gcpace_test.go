package cachelet

import (
	"math"
	"runtime"
	"runtime/debug"
	runtimemetrics "runtime/metrics"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/store/memstore"
)

func TestGCPercentFor(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		headroom, scanned int64
		want              int
	}{
		{0, 3 * mib, 100},           // no headroom: the runtime's default
		{64 * mib, 0, gcPaceMax},    // nothing scanned yet
		{64 * mib, 4 * mib, 1600},   // a small heap grows by the headroom
		{64 * mib, 64 * mib, 100},   // as large as the headroom: the default
		{64 * mib, 640 * mib, 100},  // larger: never below the default
		{64 * mib, 1 << 10, 100000}, // a tiny heap: bounded
	} {
		if got := gcPercentFor(c.headroom, c.scanned); got != c.want {
			t.Errorf("gcPercentFor(%d, %d) = %d, want %d", c.headroom, c.scanned, got, c.want)
		}
	}
}

// gogc is the collector's GOGC now.
func gogc() int {
	s := []runtimemetrics.Sample{{Name: "/gc/gogc:percent"}}
	runtimemetrics.Read(s)
	return int(s[0].Value.Uint64())
}

// collectUntil runs collections until ok(GOGC) holds (the pacer acts in
// a cleanup after each), or fails after 10 s.
func collectUntil(t *testing.T, what string, ok func(int) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		runtime.GC()
		if g := gogc(); ok(g) {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("GOGC %d after collections: want %s", g, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// newPaced starts a cachelet that keeps the process's memory limit with
// the given overhead (so paces the collector), with a budget far above
// what the test holds (the limit must not be what collects).
func newPaced(t *testing.T, overhead int64) *Cachelet {
	t.Helper()
	c, err := New(Config{Cache: cache.Config{Budget: 4 << 30}, MemoryLimitOverhead: overhead}, memstore.New(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestGCPacer: a cachelet keeping the memory limit paces the collector
// while the live heap is small, leaves the default once it is larger than
// the headroom, and gives back the GOGC it found when the last such
// cachelet closes; $GOGC set leaves the pace alone.
func TestGCPacer(t *testing.T) {
	t.Setenv("GOGC", "")
	limit := debug.SetMemoryLimit(-1)
	found := debug.SetGCPercent(150)
	t.Cleanup(func() {
		debug.SetGCPercent(found)
		debug.SetMemoryLimit(limit)
	})
	runtime.GC()

	const headroom = 96 << 20
	a := newPaced(t, headroom)
	collectUntil(t, "above 150 (a small heap)", func(g int) bool { return g > 150 })

	// A live heap larger than the headroom: the default pace.
	held := make([]byte, 3*headroom)
	for i := range held {
		held[i] = byte(i)
	}
	collectUntil(t, "100 (a large heap)", func(g int) bool { return g == 100 })
	runtime.KeepAlive(held)
	held = nil
	collectUntil(t, "above 150 again (the heap small again)", func(g int) bool { return g > 150 })

	// A second holder with a smaller headroom: the largest paces.
	b := newPaced(t, 8<<20)
	runtime.GC()
	withBoth := gogc()
	if withBoth <= 150 {
		t.Fatalf("GOGC %d with two holders, want above 150", withBoth)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	// b's headroom alone (8 MiB) is below this test binary's heap: the
	// default, never the GOGC found (150) while b holds the pace.
	collectUntil(t, "below what both held", func(g int) bool { return g < withBoth })
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if g := gogc(); g != 150 {
		t.Fatalf("GOGC %d after the last holder closed, want 150 (what it found)", g)
	}
	runtime.GC()
	time.Sleep(50 * time.Millisecond) // a stale cleanup would act now
	if g := gogc(); g != 150 {
		t.Fatalf("GOGC %d after a collection with no holder, want 150", g)
	}

	// $GOGC set: the operator's pace stays.
	t.Setenv("GOGC", "150")
	c := newPaced(t, headroom)
	runtime.GC()
	time.Sleep(50 * time.Millisecond)
	if g := gogc(); g != 150 {
		t.Fatalf("GOGC %d with $GOGC set, want 150 left alone", g)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if l := debug.SetMemoryLimit(-1); l == math.MaxInt64 {
		t.Fatal("the memory limit was not kept") // the pace's condition
	}
}
