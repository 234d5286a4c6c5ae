package s3api

import (
	"context"
	"net"
	"net/http"
	"time"

	"github.com/hoard-io/hoard/internal/notify"
)

// Notifier is told of every object write answered with success: the
// platform's cache triggers. It must not block (*notify.Notifier queues).
type Notifier interface {
	Notify(notify.Event)
}

// notifySizeTimeout bounds the store request that learns the size of a
// copied or completed object for its event.
const notifySizeTimeout = 10 * time.Second

// notify tells the Notifier, if any, of a write just answered: name is
// the event, etag the one the client got.
func (s *Server) notify(r *http.Request, rq *request, name string, size int64, etag string) {
	if s.cfg.Notifier == nil {
		return
	}
	ip := r.RemoteAddr
	if host, _, err := net.SplitHostPort(ip); err == nil {
		ip = host
	}
	var principal string
	if rq.auth != nil {
		principal = rq.auth.AccessKey
	}
	ev := notify.Event{
		Name: name, Time: time.Now(), Region: s.cfg.Region, Bucket: rq.bucket, Key: rq.key,
		Size: size, ETag: etag, Principal: principal, SourceIP: ip, RequestID: rq.id,
	}
	if m, ok := s.cl.Media(rq.bucket, rq.key, etag); ok {
		ev.Media = &m
	}
	s.cfg.Notifier.Notify(ev)
}

// notifyUnsized is notify for writes whose answer does not carry the
// object's size (CopyObject, CompleteMultipartUpload): the response is
// flushed first, so the client does not wait, then the store says the
// size. If the store no longer holds that version (a later write replaced
// it) or cannot answer, the event still goes out, with size 0: the write
// happened.
func (s *Server) notifyUnsized(w http.ResponseWriter, r *http.Request, rq *request, name, etag string) {
	if s.cfg.Notifier == nil {
		return
	}
	_ = http.NewResponseController(w).Flush()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), notifySizeTimeout)
	defer cancel()
	var size int64
	info, err := s.cl.Store().Stat(ctx, rq.bucket, rq.key)
	switch {
	case err != nil:
		s.log.Warn("event sent without the object's size: the store did not say it", "bucket", rq.bucket, "key", rq.key,
			"event", name, "err", err, "request_id", rq.id)
	case info.ETag != etag:
		s.log.Debug("event sent without the object's size: overwritten meanwhile", "bucket", rq.bucket, "key", rq.key,
			"event", name, "request_id", rq.id)
	default:
		size = info.Size
	}
	s.notify(r, rq, name, size, etag)
}
