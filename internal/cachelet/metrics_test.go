package cachelet

import (
	"io"
	"strings"
	"testing"
	"time"
)

// TestReadSeriesPerOutcome closes tracked reads of every outcome, and of
// one no table names, twice each: each is counted under its own label,
// and a listed outcome's series are looked up once.
func TestReadSeriesPerOutcome(t *testing.T) {
	m := newEnv(t, nil).c.m
	outcomes := append(readOutcomes[:], Outcome("unlisted"))
	for i, o := range outcomes {
		for range 2 {
			body := m.trackWhole(io.NopCloser(strings.NewReader("abc")), o, time.Now(), 3)
			if _, err := io.ReadAll(body); err != nil {
				t.Fatal(err)
			}
			body.Close()
		}
		if got := toFloat64(m.reads.WithLabelValues(string(o))); got != 2 {
			t.Errorf("reads{%s} = %v, want 2", o, got)
		}
		if got := toFloat64(m.readBytes.WithLabelValues(string(o))); got != 6 {
			t.Errorf("read_bytes{%s} = %v, want 6", o, got)
		}
		if i < len(readOutcomes) && m.readSeries[i].Load() != m.readSeriesOf(o) {
			t.Errorf("%s: series looked up again", o)
		}
	}
}
