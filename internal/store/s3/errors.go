package s3store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"syscall"

	"github.com/minio/minio-go/v7"

	"github.com/hoard-io/hoard/internal/store"
)

// classify is the one place that turns what the store answered into
// hoard's vocabulary: a store sentinel, store.ErrUnavailable, or nil when
// the answer is an S3 error without a sentinel (relayed as *store.APIError).
//
// HEAD responses have no body, so for them code is whatever minio-go
// derived: MinIO's x-minio-error-code header when present (it tells
// NoSuchBucket from NoSuchKey), else NoSuchKey for any 404 on an object.
// Stores without such a header therefore report a missing bucket on Stat
// as ErrNoSuchKey; callers that must tell the two apart ask HeadBucket.
func classify(code string, status int) error {
	switch code {
	case "NoSuchKey":
		return store.ErrNoSuchKey
	case "NoSuchBucket":
		return store.ErrNoSuchBucket
	case "NotModified":
		return store.ErrNotModified
	case "PreconditionFailed":
		return store.ErrPreconditionFailed
	case "InvalidRange":
		return store.ErrInvalidRange
	case "BucketNotEmpty":
		return store.ErrBucketNotEmpty
	case "BucketAlreadyOwnedByYou", "BucketAlreadyExists":
		return store.ErrBucketExists
	case "NoSuchUpload":
		return store.ErrNoSuchUpload
	case "SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout",
		"XMinioServerNotInitialized", "XMinioStorageFull":
		// RequestTimeout is a 400, but it means the connection stalled:
		// the request did not reach a verdict, so nothing may be cached.
		return store.ErrUnavailable
	}
	// Codes minio-go synthesises from a bodiless answer are the HTTP
	// status line ("304 Not Modified"), so fall back to the status.
	switch {
	case status == http.StatusNotModified:
		return store.ErrNotModified
	case status == http.StatusPreconditionFailed:
		return store.ErrPreconditionFailed
	case status == http.StatusRequestedRangeNotSatisfiable:
		return store.ErrInvalidRange
	case status >= 500:
		return store.ErrUnavailable
	}
	return nil
}

// errNotModified is Get's error when the store answered a conditional
// GET 304, made once: version checks get it on most reads.
var errNotModified = fmt.Errorf("s3store: get: %w", store.ErrNotModified)

// mapError wraps err, a failure of operation op on bucket/key, for
// callers: errors.Is finds the store sentinel, errors.As a *store.APIError.
// The caller's own cancellation stays recognisable as context.Canceled or
// DeadlineExceeded.
func mapError(ctx context.Context, op, bucket, key string, err error) error {
	if err == nil {
		return nil
	}
	where := op
	if bucket != "" {
		where += " " + bucket
		if key != "" {
			where += "/" + key
		}
	}
	if ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return fmt.Errorf("s3store: %s: %w", where, err)
	}
	var resp minio.ErrorResponse
	if errors.As(err, &resp) && resp.Code != "" {
		if s := classify(resp.Code, resp.StatusCode); s != nil {
			if s == store.ErrUnavailable {
				return fmt.Errorf("s3store: %s: %w: %s (%d): %s", where, s, resp.Code, resp.StatusCode, resp.Message)
			}
			return fmt.Errorf("s3store: %s: %w", where, s)
		}
		if resp.StatusCode == 0 {
			// minio-go refused the request before sending it
			// (invalid bucket or key name, bad argument): the store
			// would have said 400.
			resp.StatusCode = http.StatusBadRequest
		}
		return fmt.Errorf("s3store: %s: %w", where, &store.APIError{
			Code: resp.Code, Message: resp.Message, StatusCode: resp.StatusCode,
		})
	}
	if isNetworkError(err) {
		return fmt.Errorf("s3store: %s: %w: %v", where, store.ErrUnavailable, err)
	}
	return fmt.Errorf("s3store: %s: %w", where, err)
}

// isNetworkError reports whether err means the store could not be talked
// to: refused or reset connections, timeouts, DNS failures, a connection
// closed mid-response.
func isNetworkError(err error) bool {
	var (
		netErr net.Error
		urlErr *url.Error
		opErr  *net.OpError
		dnsErr *net.DNSError
	)
	switch {
	case errors.As(err, &netErr), errors.As(err, &urlErr), errors.As(err, &opErr), errors.As(err, &dnsErr):
		return true
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return true
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return true
	case errors.Is(err, context.DeadlineExceeded):
		// A deadline that is not the caller's: an internal timeout.
		return true
	}
	return false
}

// bodyReader wraps a GET body so that a store that fails mid-stream (the
// connection drops) reports ErrUnavailable, like a failure before the
// headers would. io.EOF passes through untouched.
// The idle watchdog wd, whose context cctx the request runs under, runs
// only while a read waits on the store: a reader that pauses between
// reads (a slow client) is not cut off. Close releases it.
type bodyReader struct {
	rc     io.ReadCloser
	ctx    context.Context
	cctx   context.Context
	wd     *watchdog
	bucket string
	key    string
}

func (b *bodyReader) Read(p []byte) (int, error) {
	b.wd.kick()
	n, err := b.rc.Read(p)
	b.wd.pause()
	if err != nil && err != io.EOF {
		err = failed(b.ctx, b.cctx, "get (body)", b.bucket, b.key, err)
	}
	return n, err
}

func (b *bodyReader) Close() error {
	err := b.rc.Close()
	b.wd.stop()
	return err
}

func isNoSuchKey(err error) bool { return errors.Is(err, store.ErrNoSuchKey) }

// errorIs reports whether err is any of targets.
func errorIs(err error, targets ...error) bool {
	for _, t := range targets {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}

func isCtxErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// isAPIError reports whether err is a *store.APIError with one of codes.
func isAPIError(err error, codes ...string) bool {
	var apiErr *store.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	for _, c := range codes {
		if apiErr.Code == c {
			return true
		}
	}
	return false
}
