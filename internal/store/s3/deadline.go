package s3store

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/hoard-io/hoard/internal/store"
)

// Why a store call was cut short by its own deadline rather than by the
// caller: both wrap store.ErrUnavailable, so a hung store reads like an
// unreachable one (503 to clients, nothing cached).
var (
	errCallDeadline = fmt.Errorf("%w: no answer within the call timeout", store.ErrUnavailable)
	errStalled      = fmt.Errorf("%w: no progress within the idle timeout", store.ErrUnavailable)
)

// small bounds a small request (HEAD, DELETE, bucket calls) by the call
// timeout. minio-go retries inside the same context, so the bound covers
// every attempt.
func (s *Store) small(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, s.callTimeout, errCallDeadline)
}

// copyRateFloor is the slowest rate, in bytes a second, at which a store
// is expected to copy an object inside itself: a copy's answer may take
// CallTimeout plus the source's size at this rate.
const copyRateFloor = 8 << 20

// perCall is how many keys of a DeleteObjects, or parts of a multipart
// completion, a store is given one CallTimeout for.
const (
	deletesPerCall = 100
	partsPerCall   = 1000
)

// bounded bounds a call that does work in proportion to n units (keys,
// parts) by one CallTimeout per perCall units or part of them: a few
// seconds for the common small call, more for a large one, never
// unbounded.
func (s *Store) bounded(ctx context.Context, n, perCall int) (context.Context, context.CancelFunc) {
	calls := max(1, (n+perCall-1)/perCall)
	return context.WithTimeoutCause(ctx, time.Duration(calls)*s.callTimeout, errCallDeadline)
}

// copyDeadline is how long a copy of size bytes may take before the store
// answers: CallTimeout plus the size at copyRateFloor, at most the
// transport's ResponseHeaderTimeout, which bounds it anyway.
func (s *Store) copyDeadline(size int64) time.Duration {
	d := s.callTimeout + time.Duration(float64(max(size, 0))/copyRateFloor*float64(time.Second))
	if s.responseHeaderTimeout > 0 {
		d = min(d, s.responseHeaderTimeout)
	}
	return d
}

// failed maps err from a call made with cctx, derived from the caller's
// ctx: a call ended by its own deadline is ErrUnavailable, anything else
// goes through mapError.
func failed(ctx, cctx context.Context, op, bucket, key string, err error) error {
	if err != nil && ctx.Err() == nil && cctx.Err() != nil {
		if cause := context.Cause(cctx); cause == errCallDeadline || cause == errStalled {
			return fmt.Errorf("s3store: %s %s/%s: %w: %v", op, bucket, key, cause, err)
		}
	}
	return mapError(ctx, op, bucket, key, err)
}

// watchdog cancels a context when nothing happened for a while: a body
// may take as long as it needs, as long as bytes keep moving. Safe for
// concurrent use.
type watchdog struct {
	timer  *time.Timer
	idle   time.Duration
	cancel context.CancelCauseFunc
}

// newWatchdog returns a context that is cancelled with cause when first
// is over without a kick, or later when idle passes between kicks.
func newWatchdog(ctx context.Context, first, idle time.Duration, cause error) (context.Context, *watchdog) {
	cctx, cancel := context.WithCancelCause(ctx)
	w := &watchdog{idle: idle, cancel: cancel}
	w.timer = time.AfterFunc(first, func() { cancel(cause) })
	return cctx, w
}

// kick records progress and waits idle for the next.
func (w *watchdog) kick() { w.timer.Reset(w.idle) }

// pause stops the clock while the wait is not the store's: a download
// whose reader is busy elsewhere (a slow client), an upload reading its
// own source. A kick starts it again.
func (w *watchdog) pause() { w.timer.Stop() }

// stop releases the watchdog and its context.
func (w *watchdog) stop() {
	w.timer.Stop()
	w.cancel(context.Canceled)
}

// progressOf wraps an upload body so that w measures only the time spent
// on the store's side: paused while the body's own source is read (a
// slow client is not the store's fault), kicked when a read returns. It
// keeps r seekable when it is (minio-go rewinds seekable bodies to retry).
func progressOf(r io.Reader, w *watchdog) io.Reader {
	p := &progress{r: r, w: w}
	if rs, ok := r.(io.ReadSeeker); ok {
		return &seekProgress{progress: p, s: rs}
	}
	return p
}

type progress struct {
	r io.Reader
	w *watchdog
}

func (p *progress) Read(b []byte) (int, error) {
	p.w.pause()
	n, err := p.r.Read(b)
	p.w.kick()
	return n, err
}

type seekProgress struct {
	*progress
	s io.Seeker
}

func (p *seekProgress) Seek(off int64, whence int) (int64, error) {
	p.w.kick()
	return p.s.Seek(off, whence)
}

// deadlineTransport bounds requests whose caller cannot pass a context
// (minio-go's page-level list calls): the answer's headers must come
// within first, then the body must keep moving (idle). A request cut
// short fails with an error wrapping errCallDeadline.
type deadlineTransport struct {
	rt          http.RoundTripper
	first, idle time.Duration
}

func (t deadlineTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, wd := newWatchdog(req.Context(), t.first, t.idle, errCallDeadline)
	resp, err := t.rt.RoundTrip(req.WithContext(ctx))
	if err != nil {
		if req.Context().Err() == nil && ctx.Err() != nil {
			err = fmt.Errorf("%w: %v", context.Cause(ctx), err)
		}
		wd.stop()
		return nil, err
	}
	wd.pause()
	resp.Body = &watchedBody{rc: resp.Body, ctx: ctx, parent: req.Context(), wd: wd}
	return resp, nil
}

// watchedBody runs its watchdog while a read waits on the store, and says
// why a read failed when the watchdog ended it.
type watchedBody struct {
	rc          io.ReadCloser
	ctx, parent context.Context
	wd          *watchdog
}

func (b *watchedBody) Read(p []byte) (int, error) {
	b.wd.kick()
	n, err := b.rc.Read(p)
	b.wd.pause()
	if err != nil && err != io.EOF && b.parent.Err() == nil && b.ctx.Err() != nil {
		err = fmt.Errorf("%w: %v", context.Cause(b.ctx), err)
	}
	return n, err
}

func (b *watchedBody) Close() error {
	err := b.rc.Close()
	b.wd.stop()
	return err
}
