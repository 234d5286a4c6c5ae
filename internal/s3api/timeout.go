package s3api

import (
	"errors"
	"io"
	"net/http"
	"os"
	"time"
)

// Defaults for Config's body limits.
const (
	// DefaultBodyIdleTimeout is how long a request body may send nothing.
	DefaultBodyIdleTimeout = 10 * time.Second
	// DefaultBodyMinRate is the slowest average a request body may keep
	// once DefaultBodyRateGrace has passed: 16 KiB/s.
	DefaultBodyMinRate = 16 << 10
	// DefaultBodyRateGrace is the time a body is given before its
	// average rate is held to BodyMinRate.
	DefaultBodyRateGrace = 10 * time.Second
)

// errRequestTimeout is S3's answer to a body that stalls or trickles.
var errRequestTimeout = apiErr("RequestTimeout", http.StatusBadRequest,
	"Your socket connection to the server was not read from or written to within the timeout period.")

// deadliner is what timedBody needs of the connection: an
// http.ResponseController.
type deadliner interface {
	SetReadDeadline(time.Time) error
}

// timedBody bounds how slowly a client may send its request body. Before
// every read it sets the connection's read deadline to the sooner of now
// plus the idle timeout and the moment the bytes received so far fall below
// the minimum average rate (counted after the grace period), so a body
// that stalls fails its read with a timeout instead of holding the request
// open. Deadlines on the connection need no goroutine or timer.
//
// It is used by the one request goroutine; timedOut may be read after.
type timedBody struct {
	r     io.ReadCloser
	conn  deadliner
	idle  time.Duration
	rate  int64 // bytes a second; 0: no minimum
	grace time.Duration
	now   func() time.Time
	start time.Time
	n     int64
	late  bool
	set   bool // a deadline was set on the connection
}

func newTimedBody(r io.ReadCloser, conn deadliner, cfg *Config, now func() time.Time) *timedBody {
	return &timedBody{r: r, conn: conn, idle: cfg.BodyIdleTimeout, rate: cfg.BodyMinRate,
		grace: cfg.BodyRateGrace, now: now, start: now()}
}

func (b *timedBody) Read(p []byte) (int, error) {
	if b.late {
		return 0, errRequestTimeout
	}
	now := b.now()
	dl := now.Add(b.idle)
	if b.rate > 0 {
		if rd := b.start.Add(b.grace + time.Duration(float64(b.n)/float64(b.rate)*float64(time.Second))); rd.Before(dl) {
			dl = rd
		}
	}
	if !dl.After(now) {
		b.late = true
		return 0, errRequestTimeout
	}
	if b.conn.SetReadDeadline(dl) == nil {
		b.set = true
	}
	n, err := b.r.Read(p)
	b.n += int64(n)
	if err != nil && err != io.EOF && (errors.Is(err, os.ErrDeadlineExceeded) || (b.set && !b.now().Before(dl))) {
		b.late = true
		return n, errRequestTimeout
	}
	return n, err
}

// Close closes the body. The deadline stays: the server drains what is
// left of an unread body after the handler, and that drain must not wait
// on a stalled client either. The server sets the connection's deadlines
// afresh before reading its next request.
func (b *timedBody) Close() error { return b.r.Close() }

// timedOut reports whether the body was cut off for being too slow.
func (b *timedBody) timedOut() bool { return b != nil && b.late }
