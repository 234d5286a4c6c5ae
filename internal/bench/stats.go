// Package bench measures hoard against the baselines it is meant to be
// compared with: the object store read directly, Redis holding the same
// bytes, and a plain loopback TCP copy. `hoard bench access` drives it.
//
// Latencies are summarised with exact percentiles (nearest rank over the
// sorted samples, so every reported figure is a sample that was measured);
// throughput is bytes moved over the time spent moving them, one request
// at a time.
package bench

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Summary describes the timed requests of one target at one object size.
type Summary struct {
	// N is the number of timed requests.
	N int `json:"n"`
	// Bytes is the size of each response body.
	Bytes int64 `json:"bytes"`
	// Durations marshal as integer nanoseconds.
	Min   time.Duration `json:"min_ns"`
	P50   time.Duration `json:"p50_ns"`
	P99   time.Duration `json:"p99_ns"`
	Max   time.Duration `json:"max_ns"`
	Mean  time.Duration `json:"mean_ns"`
	Total time.Duration `json:"total_ns"`
	// MBps is 10^6 bytes per second: Bytes*N/Total.
	MBps float64 `json:"mb_per_s"`
}

// Summarize computes a Summary of samples, each the duration of one request
// that moved bytes bytes. samples is not modified.
func Summarize(samples []time.Duration, bytes int64) Summary {
	s := Summary{N: len(samples), Bytes: bytes}
	if len(samples) == 0 {
		return s
	}
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	for _, d := range sorted {
		s.Total += d
	}
	s.Min, s.Max = sorted[0], sorted[len(sorted)-1]
	s.P50 = Percentile(sorted, 50)
	s.P99 = Percentile(sorted, 99)
	s.Mean = s.Total / time.Duration(len(sorted))
	if s.Total > 0 {
		s.MBps = float64(bytes) * float64(len(sorted)) / s.Total.Seconds() / 1e6
	}
	return s
}

// Percentile returns the p-th percentile (0 < p <= 100) of sorted samples by
// the nearest-rank method: the smallest sample such that at least p% of
// the samples are less than or equal to it. sorted must be in ascending
// order and not empty. With fewer than 100 samples the 99th percentile is
// the maximum.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		panic("bench: percentile of no samples")
	}
	if p <= 0 {
		return sorted[0]
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// FormatDuration prints a latency with four significant digits in a unit
// that suits it: "812ns", "41.27µs", "3.104ms", "1.250s".
func FormatDuration(d time.Duration) string {
	switch {
	case d < time.Microsecond:
		return fmt.Sprintf("%dns", d.Nanoseconds())
	case d < time.Millisecond:
		return sig4(float64(d)/float64(time.Microsecond)) + "µs"
	case d < time.Second:
		return sig4(float64(d)/float64(time.Millisecond)) + "ms"
	default:
		return sig4(d.Seconds()) + "s"
	}
}

// sig4 formats v (1 <= v < 1000) with four significant digits.
func sig4(v float64) string {
	switch {
	case v < 10:
		return fmt.Sprintf("%.3f", v)
	case v < 100:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.1f", v)
	}
}

// FormatSize prints a byte count in binary units when it is a whole
// multiple of one: "1 KiB", "256 MiB", "1500 B".
func FormatSize(n int64) string {
	units := []struct {
		name string
		mult int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}}
	for _, u := range units {
		if n >= u.mult && n%u.mult == 0 {
			return fmt.Sprintf("%d %s", n/u.mult, u.name)
		}
	}
	return fmt.Sprintf("%d B", n)
}

// FormatMBps prints a throughput in MB/s (10^6 bytes per second).
func FormatMBps(v float64) string {
	switch {
	case v == 0:
		return "-"
	case v < 10:
		return fmt.Sprintf("%.2f", v)
	case v < 100:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.0f", v)
	}
}

// MeanStddev returns the mean of samples and their sample standard
// deviation (n-1 in the denominator; zero for fewer than two samples).
func MeanStddev(samples []time.Duration) (mean, stddev time.Duration) {
	if len(samples) == 0 {
		return 0, 0
	}
	var sum float64
	for _, d := range samples {
		sum += float64(d)
	}
	m := sum / float64(len(samples))
	if len(samples) < 2 {
		return time.Duration(math.Round(m)), 0
	}
	var sq float64
	for _, d := range samples {
		x := float64(d) - m
		sq += x * x
	}
	return time.Duration(math.Round(m)), time.Duration(math.Round(math.Sqrt(sq / float64(len(samples)-1))))
}
