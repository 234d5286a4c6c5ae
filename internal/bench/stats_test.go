package bench

import (
	"testing"
	"time"
)

func durs(ns ...int64) []time.Duration {
	out := make([]time.Duration, len(ns))
	for i, n := range ns {
		out[i] = time.Duration(n)
	}
	return out
}

func TestPercentileNearestRank(t *testing.T) {
	// 1..100: the p-th percentile is exactly p.
	var hundred []time.Duration
	for i := 1; i <= 100; i++ {
		hundred = append(hundred, time.Duration(i))
	}
	tests := []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{"single", durs(7), 50, 7},
		{"single p99", durs(7), 99, 7},
		{"even p50 is lower middle", durs(1, 2, 3, 4), 50, 2},
		{"odd p50 is middle", durs(1, 2, 3, 4, 5), 50, 3},
		{"p99 of 10 is max", durs(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 99, 10},
		{"p0 is min", durs(3, 4, 5), 0, 3},
		{"p100 is max", durs(3, 4, 5), 100, 5},
		{"hundred p50", hundred, 50, 50},
		{"hundred p99", hundred, 99, 99},
		{"hundred p1", hundred, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Percentile(tt.sorted, tt.p); got != tt.want {
				t.Errorf("Percentile(%v, %v) = %v, want %v", tt.sorted, tt.p, got, tt.want)
			}
		})
	}
}

func TestPercentilePanicsOnEmpty(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("no panic")
		}
	}()
	Percentile(nil, 50)
}

func TestSummarize(t *testing.T) {
	in := durs(4e6, 1e6, 3e6, 2e6) // unsorted on purpose
	s := Summarize(in, 1_000_000)
	if in[0] != 4e6 {
		t.Error("Summarize modified its input")
	}
	if s.N != 4 || s.Bytes != 1_000_000 {
		t.Errorf("N, Bytes = %d, %d", s.N, s.Bytes)
	}
	if s.Min != 1e6 || s.Max != 4e6 || s.P50 != 2e6 || s.P99 != 4e6 {
		t.Errorf("min %v max %v p50 %v p99 %v", s.Min, s.Max, s.P50, s.P99)
	}
	if s.Total != 10e6 || s.Mean != 2.5e6 {
		t.Errorf("total %v mean %v", s.Total, s.Mean)
	}
	// 4 MB in 10 ms = 400 MB/s.
	if s.MBps < 399.999 || s.MBps > 400.001 {
		t.Errorf("MBps = %v, want 400", s.MBps)
	}
}

func TestSummarizeEmpty(t *testing.T) {
	s := Summarize(nil, 10)
	if s.N != 0 || s.P50 != 0 || s.MBps != 0 {
		t.Errorf("%+v", s)
	}
}

func TestFormatDuration(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{812, "812ns"},
		{1500, "1.500µs"},
		{41270, "41.27µs"},
		{412300, "412.3µs"},
		{3104000, "3.104ms"},
		{31040000, "31.04ms"},
		{1250 * time.Millisecond, "1.250s"},
		{12 * time.Second, "12.00s"},
	}
	for _, tt := range tests {
		if got := FormatDuration(tt.d); got != tt.want {
			t.Errorf("FormatDuration(%d) = %q, want %q", tt.d, got, tt.want)
		}
	}
}

func TestFormatSize(t *testing.T) {
	tests := []struct {
		n    int64
		want string
	}{
		{1 << 10, "1 KiB"},
		{4 << 10, "4 KiB"},
		{256 << 20, "256 MiB"},
		{1 << 30, "1 GiB"},
		{1500, "1500 B"},
		{1536 << 10, "1536 KiB"},
		{0, "0 B"},
	}
	for _, tt := range tests {
		if got := FormatSize(tt.n); got != tt.want {
			t.Errorf("FormatSize(%d) = %q, want %q", tt.n, got, tt.want)
		}
	}
}

func TestFormatMBps(t *testing.T) {
	for v, want := range map[float64]string{0: "-", 1.234: "1.23", 48.25: "48.2", 1627.4: "1627"} {
		if got := FormatMBps(v); got != want {
			t.Errorf("FormatMBps(%v) = %q, want %q", v, got, want)
		}
	}
}

func TestPlanFor(t *testing.T) {
	for _, quick := range []bool{false, true} {
		prev := 1 << 30
		for _, size := range DefaultSizes {
			p := PlanFor(size, quick)
			if p.Iterations < p.MinIterations || p.Warmup < 1 || p.TimeCap <= 0 {
				t.Errorf("quick=%v size %d: %+v", quick, size, p)
			}
			if p.Iterations > prev {
				t.Errorf("quick=%v: iterations grow with size at %d", quick, size)
			}
			prev = p.Iterations
		}
		if small, big := PlanFor(1<<10, quick), PlanFor(256<<20, quick); small.Iterations <= big.Iterations {
			t.Errorf("quick=%v: 1 KiB %d iterations, 256 MiB %d", quick, small.Iterations, big.Iterations)
		}
	}
	if PlanFor(1<<10, true).Iterations >= PlanFor(1<<10, false).Iterations {
		t.Error("quick does not run fewer iterations")
	}
}
