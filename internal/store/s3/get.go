package s3store

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/s3utils"

	"github.com/hoard-io/hoard/internal/store"
)

// The read path's GET, and HEAD (Stat), are built, signed and sent by this package itself
// rather than by minio-go: it is the request every miss and every version
// check sends, and minio-go's per-request work (its canonical request
// from maps, a signing key derived anew, a bucket-name regexp, its
// ObjectInfo parse that infoFromHeader repeats) cost about as much CPU as
// the rest of a small miss. Behaviour is minio-go's, kept: the same
// names refused before sending, the same errors (minio.ErrorResponse,
// mapped by mapError), the same retries (retryable transport errors,
// codes and statuses, up to MaxAttempts, exponential backoff with full
// jitter), the same deadlines (the watchdog). Redirects are not followed,
// as a signed request cannot follow one.

// Retry backoff, minio-go's: attempt i waits up to min(retryCap,
// retryUnit*2^i), less a random share of it.
const (
	retryUnit = 200 * time.Millisecond
	retryCap  = time.Second
	// maxErrorBody bounds what is read of an error answer's body.
	maxErrorBody = 64 << 10
)

// retryableCodes and retryableStatus are the S3 codes and HTTP statuses
// worth another attempt (minio-go's lists).
var (
	retryableCodes = map[string]bool{
		"RequestError": true, "RequestTimeout": true, "Throttling": true, "ThrottlingException": true,
		"RequestLimitExceeded": true, "RequestThrottled": true, "InternalError": true,
		"ExpiredToken": true, "ExpiredTokenException": true, "SlowDown": true, "SlowDownWrite": true,
		"SlowDownRead": true,
	}
	retryableStatus = map[int]bool{
		http.StatusRequestTimeout: true, http.StatusTooManyRequests: true, 499: true,
		http.StatusInternalServerError: true, http.StatusBadGateway: true,
		http.StatusServiceUnavailable: true, http.StatusGatewayTimeout: true, 520: true,
	}
)

// Stat returns an object's info (a HEAD request). It asks for checksums,
// which cost a HEAD nothing. A key whose current version is a delete
// marker (versioned bucket) fails with a *store.DeleteMarkerError that
// wraps store.ErrNoSuchKey.
func (s *Store) Stat(ctx context.Context, bucket, key string) (store.ObjectInfo, error) {
	if err := checkNames(bucket, key); err != nil {
		return store.ObjectInfo{}, mapError(ctx, "stat", bucket, key, err)
	}
	cctx, cancel := s.small(ctx)
	defer cancel()
	resp, err := s.send(cctx, http.MethodHead, bucket, key, statHeaders)
	if err != nil {
		err = failed(ctx, cctx, "stat", bucket, key, err)
		if resp != nil && resp.Header.Get("x-amz-delete-marker") == "true" && errors.Is(err, store.ErrNoSuchKey) {
			err = fmt.Errorf("s3store: stat %s/%s: %w", bucket, key, &store.DeleteMarkerError{VersionID: resp.Header.Get("x-amz-version-id")})
		}
		return store.ObjectInfo{}, err
	}
	resp.Body.Close()
	info, _, err := infoFromHeader(bucket, key, http.StatusOK, resp.Header)
	if err != nil {
		return store.ObjectInfo{}, fmt.Errorf("s3store: stat %s/%s: %w: bad response: %v", bucket, key, store.ErrUnavailable, err)
	}
	return info, nil
}

// statHeaders are the headers of every Stat.
var statHeaders = []signedHeader{{"x-amz-checksum-mode", "X-Amz-Checksum-Mode", "ENABLED"}}

// Get opens an object for reading; see store.Store. rng is the range the
// body holds when the store answered 206, nil when the body is the whole
// object.
func (s *Store) Get(ctx context.Context, bucket, key string, opts store.GetOptions) (io.ReadCloser, store.ObjectInfo, *store.ByteRange, error) {
	if err := checkNames(bucket, key); err != nil {
		return nil, store.ObjectInfo{}, nil, mapError(ctx, "get", bucket, key, err)
	}
	// Sorted by name, as signing wants them.
	var buf [4]signedHeader
	hs := buf[:0]
	if opts.IfMatch != "" {
		hs = append(hs, signedHeader{"if-match", "If-Match", quoteETag(opts.IfMatch)})
	}
	if opts.IfNoneMatch != "" {
		hs = append(hs, signedHeader{"if-none-match", "If-None-Match", quoteETag(opts.IfNoneMatch)})
	}
	if opts.Range != nil {
		h, err := rangeHeader(*opts.Range)
		if err != nil {
			return nil, store.ObjectInfo{}, nil, fmt.Errorf("s3store: get %s/%s: %w", bucket, key, err)
		}
		hs = append(hs, signedHeader{"range", "Range", h})
	}
	if opts.ChecksumMode {
		// Verification of the body is the caller's decision.
		hs = append(hs, signedHeader{"x-amz-checksum-mode", "X-Amz-Checksum-Mode", "ENABLED"})
	}
	// The answer's headers must come within the call timeout, every
	// attempt included, then the body must keep moving.
	cctx, wd := newWatchdog(ctx, s.callTimeout, s.idleTimeout, errCallDeadline)
	resp, err := s.send(cctx, http.MethodGet, bucket, key, hs)
	if err != nil { // resp's body, if any, is closed
		wd.stop()
		if err == errNotModified { // the store answered: nothing to map
			return nil, store.ObjectInfo{}, nil, err
		}
		return nil, store.ObjectInfo{}, nil, failed(ctx, cctx, "get", bucket, key, err)
	}
	wd.pause()
	status := http.StatusOK
	if resp.StatusCode == http.StatusPartialContent || resp.Header.Get("Content-Range") != "" {
		status = http.StatusPartialContent
	}
	info, rng, err := infoFromHeader(bucket, key, status, resp.Header)
	if err != nil {
		resp.Body.Close()
		wd.stop()
		return nil, store.ObjectInfo{}, nil, fmt.Errorf("s3store: get %s/%s: %w: bad response: %v", bucket, key, store.ErrUnavailable, err)
	}
	return &bodyReader{rc: resp.Body, ctx: ctx, cctx: cctx, wd: wd, bucket: bucket, key: key}, info, rng, nil
}

// checkNames refuses what minio-go refuses before sending a request, with
// its errors: a bucket name S3 cannot address, an empty key, a key longer
// than 1024 bytes or not UTF-8.
func checkNames(bucket, key string) error {
	if !plainBucketName(bucket) {
		if err := s3utils.CheckValidBucketName(bucket); err != nil {
			return minio.ErrorResponse{StatusCode: http.StatusBadRequest, Code: minio.InvalidBucketName, Message: err.Error()}
		}
	}
	if err := s3utils.CheckValidObjectName(key); err != nil {
		return minio.ErrorResponse{StatusCode: http.StatusBadRequest, Code: minio.XMinioInvalidObjectName, Message: err.Error()}
	}
	return nil
}

// plainBucketName reports whether name is 3 to 63 lower-case letters,
// digits and hyphens, beginning and ending with a letter or digit: valid
// for s3utils.CheckValidBucketName too, without its regular expressions.
// Any other name is left to it.
func plainBucketName(name string) bool {
	if len(name) < 3 || len(name) > 63 || name[0] == '-' || name[len(name)-1] == '-' {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// send tries a GET or HEAD of bucket/key with headers hs until the store
// answers 200 or 206, an answer or an error not worth retrying, or
// MaxAttempts. A 304 comes back as errNotModified, alone; any other
// answer that is not 200 or 206 as a minio.ErrorResponse, with the answer
// (its body closed) when there was one, for its headers.
func (s *Store) send(ctx context.Context, method, bucket, key string, hs []signedHeader) (*http.Response, error) {
	var (
		err  error
		last *http.Response
	)
	for attempt := range s.maxAttempts {
		if attempt > 0 {
			wait := min(retryCap, retryUnit<<(attempt-1))
			wait -= time.Duration(rand.Float64() * float64(wait))
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			}
		}
		var resp *http.Response
		req := s.newRequest(ctx, method, bucket, key, hs)
		resp, err = s.roundTripper(req).RoundTrip(req)
		if err != nil {
			last = nil
			err = &url.Error{Op: method, URL: s.scheme + "://" + s.host + "/" + bucket + "/" + key, Err: err}
			if !retryableRequestError(ctx, err) {
				return nil, err
			}
			continue
		}
		if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusPartialContent {
			return resp, nil
		}
		if resp.StatusCode == http.StatusNotModified {
			// A version check's answer, on every read under
			// version-check: no body to parse, no code to classify
			// (a 304 has no body; one sent anyway is read to its
			// end, bounded, so that the connection can serve again).
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
			resp.Body.Close()
			return nil, errNotModified
		}
		e := errorResponse(resp, bucket, key)
		err, last = e, resp
		if !retryableCodes[e.Code] && !retryableStatus[resp.StatusCode] {
			break
		}
	}
	if cerr := ctx.Err(); cerr != nil {
		return nil, cerr
	}
	return last, err
}

// roundTripper is what sends req: the caller's-goroutine fetch
// transport, unless a proxy from the environment applies to req (only
// net/http's Transport speaks to proxies).
func (s *Store) roundTripper(req *http.Request) http.RoundTripper {
	if s.transport.Proxy != nil {
		if u, err := s.transport.Proxy(req); err != nil || u != nil {
			return s.transport
		}
	}
	return s.fetch
}

// newRequest builds and signs a GET or HEAD of bucket/key with headers
// hs.
func (s *Store) newRequest(ctx context.Context, method, bucket, key string, hs []signedHeader) *http.Request {
	host, plain := s.host, "/"+key
	if s.virtualHost {
		host = bucket + "." + host
	} else {
		plain = "/" + bucket + plain
	}
	var pb [256]byte
	escaped := string(appendEscapedPath(pb[:0], plain))
	u := &url.URL{Scheme: s.scheme, Host: host, Path: plain}
	if escaped != plain {
		u.RawPath = escaped
	}
	h := make(http.Header, len(hs)+4)
	for _, sh := range hs {
		h[sh.header] = []string{sh.value}
	}
	h["User-Agent"] = userAgent
	req := (&http.Request{
		Method: method, URL: u, Host: host, Header: h,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
	}).WithContext(ctx)
	if s.signer != nil {
		s.signer.sign(req, time.Now(), host, escaped, hs)
	}
	return req
}

// userAgent names hoard to the store.
var userAgent = []string{"hoard"}

// errorResponse reads an answer that is not a success as minio-go would:
// the S3 error document when there is one, else a code derived from the
// status; MinIO's x-minio-error-code and -desc headers win. It closes
// resp's body.
func errorResponse(resp *http.Response, bucket, key string) minio.ErrorResponse {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	resp.Body.Close()
	e := minio.ErrorResponse{StatusCode: resp.StatusCode, Server: resp.Header.Get("Server")}
	if len(body) == 0 || xml.NewDecoder(bytes.NewReader(body)).Decode(&e) != nil {
		e = minio.ErrorResponse{StatusCode: resp.StatusCode, BucketName: bucket, Key: key}
		switch resp.StatusCode {
		case http.StatusNotFound:
			e.Code = minio.NoSuchKey
			e.Message = "The specified key does not exist."
		case http.StatusForbidden:
			e.Code = minio.AccessDenied
			e.Message = "Access Denied."
		case http.StatusConflict:
			e.Code = "Conflict"
			e.Message = "Bucket not empty."
		case http.StatusPreconditionFailed:
			e.Code = minio.PreconditionFailed
			e.Message = "At least one of the pre-conditions you specified did not hold"
		default:
			e.Code = resp.Status
			e.Message = resp.Status
			if len(body) > 0 {
				e.Message = string(body[:min(len(body), 1024)])
			}
			e.Key = ""
		}
	}
	if code := resp.Header.Get("x-minio-error-code"); code != "" {
		e.Code = code
	}
	if desc := resp.Header.Get("x-minio-error-desc"); desc != "" {
		e.Message = strings.Trim(desc, `"`)
	}
	if e.RequestID == "" {
		e.RequestID = resp.Header.Get("x-amz-request-id")
	}
	e.StatusCode = resp.StatusCode
	return e
}

// retryableRequestError reports whether a request that failed with err
// before any answer is worth another attempt (minio-go's rule): an
// internal timeout is, the caller's cancellation and a TLS setup the
// store will refuse again are not.
func retryableRequestError(ctx context.Context, err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return ctx.Err() == nil
	}
	var unknownCA x509.UnknownAuthorityError
	if errors.As(err, &unknownCA) {
		return false
	}
	var notTLS tls.RecordHeaderError // a plain HTTP server answered the handshake
	if errors.As(err, &notTLS) {
		return false
	}
	return !strings.Contains(err.Error(), "server gave HTTP response to HTTPS client")
}
