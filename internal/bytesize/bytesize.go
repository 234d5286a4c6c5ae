// Package bytesize reads and writes sizes such as "512MiB", "2GiB" or
// "1500000", in flags and in application specs alike.
package bytesize

import (
	"fmt"
	"strconv"
	"strings"
)

var units = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1},
}

// Parse reads a size with a binary (KiB, MiB, GiB, TiB; K, M, G) or
// decimal (KB, MB, GB, TB) unit, or none (bytes). Fractions are allowed
// ("1.5GiB"); negative sizes are not.
func Parse(s string) (int64, error) {
	in := s
	s = strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 || f*float64(mult) > 1<<62 {
		return 0, fmt.Errorf("bad size %q (want e.g. 512MiB, 2GiB or a number of bytes)", in)
	}
	return int64(f * float64(mult)), nil
}

// Format writes n with the largest binary unit that divides it exactly.
func Format(n int64) string {
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.mult == 0 {
			return strconv.FormatInt(n/u.mult, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}

// Human writes n for people: "512 B", "1.5 KiB", "37.2 MiB".
func Human(n int64) string {
	if n < 1024 {
		return strconv.FormatInt(n, 10) + " B"
	}
	f, unit := float64(n), ""
	for _, u := range []string{"KiB", "MiB", "GiB", "TiB"} {
		f, unit = f/1024, u
		if f < 1024 {
			break
		}
	}
	return strconv.FormatFloat(f, 'f', 1, 64) + " " + unit
}
