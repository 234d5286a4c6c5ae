package erasure

import (
	"math"
	"testing"
	"time"
)

func TestLossProbability(t *testing.T) {
	for _, tc := range []struct {
		k, r     int
		rate     float64 // per instance per second
		window   time.Duration
		want     float64
		describe string
	}{
		{10, 2, 1.0 / 60 / 12, 10 * time.Second, 0.17250659547824793, "12 instances, one lost a minute, 10 s to repair"},
		{10, 2, 1.0 / 600 / 12, 10 * time.Second, 0.00020975287428581338, "one lost every 10 minutes"},
		{10, 1, 1.0 / 60 / 12, 10 * time.Second, 0.9693300912443907, "one parity shard only"},
		{3, 2, 1.0 / 30 / 8, 7 * time.Second, 0.11038065033974923, "the end-to-end test's layout"},
		{10, 2, 0, 10 * time.Second, 0, "no losses"},
		{10, 2, 1, time.Hour, 1, "every instance lost at once"},
	} {
		got := LossProbability(tc.k, tc.r, tc.rate, tc.window, time.Hour)
		if math.Abs(got-tc.want) > 1e-9*max(1, tc.want) {
			t.Errorf("%s: RS(%d+%d) = %v, want %v", tc.describe, tc.k, tc.r, got, tc.want)
		}
	}
	// More parity, or a shorter window, is never riskier.
	a := LossProbability(10, 2, 1e-3, 10*time.Second, time.Hour)
	if b := LossProbability(10, 4, 1e-3, 10*time.Second, time.Hour); b > a {
		t.Errorf("4 parity shards %v riskier than 2 %v", b, a)
	}
	if b := LossProbability(10, 2, 1e-3, time.Second, time.Hour); b > a {
		t.Errorf("1 s window %v riskier than 10 s %v", b, a)
	}
}
