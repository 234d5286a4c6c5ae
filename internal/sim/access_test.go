package sim

import (
	"math"
	"testing"
	"time"
)

// TestImprovementHandComputed: with a simple model (local 1 s, remote
// 2 s, store 10 s per read, no transfer time to speak of), one
// application reading an object three times (LM, LH, LH) and another
// reading one once (LM) save (30−12)/30 and 0 of their time.
func TestImprovementHandComputed(t *testing.T) {
	fast := 1e18 // bytes per second: transfers cost nothing
	model := AccessModel{
		Local:  AccessCost{Latency: time.Second, BytesPerSecond: fast},
		Remote: AccessCost{Latency: 2 * time.Second, BytesPerSecond: fast},
		Store:  AccessCost{Latency: 10 * time.Second, BytesPerSecond: fast},
	}
	other := read(4, "x", 10)
	other.App = "other"
	r := run(t, Config{CacheSizes: []int64{100}, KeepAlives: []KeepAlive{}, Access: model},
		read(1, "a", 10), read(2, "a", 10), read(3, "a", 10), other)
	imp := r.Caches[0].Improvement
	if imp == nil {
		t.Fatal("no improvement reported")
	}
	near := func(got, want float64) bool { return math.Abs(got-want) < 1e-9 }
	if !near(imp.HoardSeconds, 10+1+1+10) || !near(imp.DirectSeconds, 40) {
		t.Errorf("seconds: hoard %v, direct %v; want 22, 40", imp.HoardSeconds, imp.DirectSeconds)
	}
	if !near(imp.Overall, 1-22.0/40) || !near(imp.Mean, (1-12.0/30)/2) || !near(imp.AtLeastHalf, 0.5) {
		t.Errorf("improvement %+v", imp)
	}
	if len(imp.Quantiles) != 21 || !near(imp.Quantiles[0], 0) || !near(imp.Quantiles[20], 1-12.0/30) {
		t.Errorf("quantiles %v", imp.Quantiles)
	}
}

// TestImprovementRemote: a remote hit costs the remote read, a remote
// miss the store's and the hop, and transfer time follows the bytes.
func TestImprovementRemote(t *testing.T) {
	m := AccessModel{
		Local:  AccessCost{Latency: 0, BytesPerSecond: 1000},
		Remote: AccessCost{Latency: time.Second, BytesPerSecond: 100},
		Store:  AccessCost{Latency: 10 * time.Second, BytesPerSecond: 10},
	}
	for _, tc := range []struct {
		o    Outcome
		n    int64
		want float64
	}{
		{LocalHit, 1000, 1}, {RemoteHit, 100, 2}, {LocalMiss, 10, 11}, {PassThrough, 100, 20}, {RemoteMiss, 100, 20 + 2},
	} {
		if got := m.seconds(tc.o, tc.n); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s of %d bytes: %v s, want %v", tc.o, tc.n, got, tc.want)
		}
	}
}

func TestParseAccessModel(t *testing.T) {
	m, err := ParseAccessModel("store=5ms+1GB/s, local=10us+2GiB")
	if err != nil {
		t.Fatal(err)
	}
	if m.Store != (AccessCost{5 * time.Millisecond, 1e9}) || m.Local != (AccessCost{10 * time.Microsecond, 2 << 30}) || m.Remote != DefaultAccessModel.Remote {
		t.Errorf("parsed %+v", m)
	}
	if m, err := ParseAccessModel(""); err != nil || m != DefaultAccessModel {
		t.Errorf("empty: %+v %v", m, err)
	}
	for _, bad := range []string{"store=5ms", "store=5ms+0B", "disk=1ms+1GB", "store=fast+1GB", "store", "store=-1ms+1GB"} {
		if _, err := ParseAccessModel(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
