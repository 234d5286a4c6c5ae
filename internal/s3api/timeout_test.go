package s3api

import (
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

// fakeConn records the deadlines set; reads fail once the clock has
// passed the last one.
type fakeConn struct{ deadlines []time.Time }

func (f *fakeConn) SetReadDeadline(t time.Time) error {
	f.deadlines = append(f.deadlines, t)
	return nil
}

func TestTimedBodyDeadlines(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cfg := Config{BodyIdleTimeout: 10 * time.Second, BodyMinRate: 100, BodyRateGrace: 5 * time.Second}
	tests := []struct {
		name    string
		elapsed time.Duration // since the body's start, at the read
		sent    int64         // bytes before the read
		want    time.Duration // the deadline set, after the body's start; 0: cut off
	}{
		{"first read: the grace", 0, 0, 5 * time.Second},
		{"early, fast: the rate allows more than idle", time.Second, 10000, 11 * time.Second},
		{"within the rate: what the bytes earned", 4 * time.Second, 300, 8 * time.Second},
		{"below the rate: cut off", 9 * time.Second, 300, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := t0
			conn := &fakeConn{}
			b := newTimedBody(io.NopCloser(strings.NewReader("abc")), conn, &cfg, func() time.Time { return now })
			b.n = tt.sent
			now = t0.Add(tt.elapsed)
			_, err := b.Read(make([]byte, 1))
			if tt.want == 0 {
				if !errors.Is(err, errRequestTimeout) || !b.timedOut() || len(conn.deadlines) != 0 {
					t.Fatalf("err %v, timed out %v, deadlines %v; want cut off before reading", err, b.timedOut(), conn.deadlines)
				}
				return
			}
			if err != nil || len(conn.deadlines) != 1 || !conn.deadlines[0].Equal(t0.Add(tt.want)) {
				t.Fatalf("err %v, deadlines %v; want %v", err, conn.deadlines, t0.Add(tt.want))
			}
		})
	}
}

type deadlineReader struct{}

func (deadlineReader) Read([]byte) (int, error) { return 0, os.ErrDeadlineExceeded }

func TestTimedBodyTimeoutIsRequestTimeout(t *testing.T) {
	cfg := Config{BodyIdleTimeout: time.Second, BodyMinRate: -1, BodyRateGrace: time.Second}
	b := newTimedBody(io.NopCloser(deadlineReader{}), &fakeConn{}, &cfg, time.Now)
	if _, err := b.Read(make([]byte, 1)); !errors.Is(err, errRequestTimeout) || !b.timedOut() {
		t.Fatalf("err %v, timed out %v; want RequestTimeout", err, b.timedOut())
	}
	// Sticky: later reads (the server's drain) fail at once.
	if _, err := b.Read(make([]byte, 1)); !errors.Is(err, errRequestTimeout) {
		t.Fatalf("second read: %v", err)
	}
}
