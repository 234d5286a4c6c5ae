package s3store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/minio/minio-go/v7/pkg/s3utils"
	"github.com/minio/minio-go/v7/pkg/signer"

	"github.com/hoard-io/hoard/internal/store"
)

// ErrPassRequest: Pass was handed a request it cannot send (no bucket, a
// URL that is not a relative path).
var ErrPassRequest = errors.New("s3store: malformed pass-through request")

// hopHeaders are the hop-by-hop headers (RFC 9110 §7.6.1) and the ones
// net/http sets itself: none is forwarded in either direction.
var hopHeaders = []string{
	"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade", "Expect", "Host", "Content-Length",
}

// Pass sends req to the store as it is, signed with the store's own
// identity, and returns the store's answer, whatever its status: the
// caller relays it and must close its body. It is the pass-through of
// requests hoard does not answer from its cache (ADR 0017).
//
// req names the bucket and key in a path-style, relative URL
// ("/bucket/key?query", Path decoded); its headers, query and body go
// to the store unchanged, except what belongs to one hop only
// (Connection, Transfer-Encoding, Expect, ...) and any Authorization,
// X-Amz-Date, X-Amz-Security-Token and X-Amz-Content-Sha256, which the
// signature replaces. The caller removes the client's own signature from
// the query. The body is sent unsigned (UNSIGNED-PAYLOAD), streamed,
// with req.ContentLength (-1: chunked); it is not retried. A request
// with a Trailer (a checksum whose value its body sets once read to its
// end) is sent as S3's unsigned aws-chunked stream with that trailer.
//
// Deadlines: the store's answer must begin within CallTimeout after the
// request (body included) was sent, and every read of the answer's body
// must make progress within IdleTimeout; a request with a body has
// IdleTimeout for each step of the upload, counting only the store's
// share (a slow client is not cut off). A copy (x-amz-copy-source) or a
// multipart completion may work on gigabytes before the store answers:
// their answer is given the transport's ResponseHeaderTimeout instead. A
// call cut short fails with an error wrapping store.ErrUnavailable.
//
// Safe for concurrent use.
func (s *Store) Pass(ctx context.Context, req *http.Request) (*http.Response, error) {
	out, err := s.outgoing(ctx, req)
	if err != nil {
		return nil, err
	}
	first := s.callTimeout
	if slowAnswer(req) {
		first = s.responseHeaderTimeout
	}
	var wd *watchdog
	cctx := ctx
	if out.Body != nil {
		cctx, wd = newWatchdog(ctx, s.idleTimeout, s.idleTimeout, errStalled)
		out.Body = io.NopCloser(&answerWait{r: progressOf(out.Body, wd), wd: wd, first: first})
	} else {
		cctx, wd = newWatchdog(ctx, first, s.idleTimeout, errCallDeadline)
	}
	out = out.WithContext(cctx)
	resp, err := s.transport.RoundTrip(out)
	if err != nil {
		if ctx.Err() == nil && cctx.Err() != nil {
			err = fmt.Errorf("s3store: pass %s %s: %w: %v", req.Method, req.URL.Path, context.Cause(cctx), err)
		} else if ctx.Err() == nil {
			err = fmt.Errorf("s3store: pass %s %s: %w: %v", req.Method, req.URL.Path, store.ErrUnavailable, err)
		} else {
			err = fmt.Errorf("s3store: pass %s %s: %w", req.Method, req.URL.Path, err)
		}
		wd.stop()
		return nil, err
	}
	wd.pause()
	for _, h := range hopHeaders[:len(hopHeaders)-2] {
		resp.Header.Del(h)
	}
	resp.Body = &watchedBody{rc: resp.Body, ctx: cctx, parent: ctx, wd: wd}
	return resp, nil
}

// outgoing builds the signed request for the store from req.
func (s *Store) outgoing(ctx context.Context, req *http.Request) (*http.Request, error) {
	if req.URL == nil || req.URL.Host != "" || req.URL.Scheme != "" || !strings.HasPrefix(req.URL.Path, "/") {
		return nil, fmt.Errorf("%w: want a relative path-style URL", ErrPassRequest)
	}
	bucket, key, _ := strings.Cut(req.URL.Path[1:], "/")
	if bucket == "" && key != "" {
		return nil, fmt.Errorf("%w: no bucket", ErrPassRequest)
	}
	u := *s.endpoint
	u.Path = req.URL.Path
	if s.virtualHost && bucket != "" {
		u.Host = bucket + "." + u.Host
		u.Path = "/" + key
	}
	// The path on the wire is the one the signature covers: the store
	// (MinIO, and minio-go for every typed call) canonicalises the
	// decoded path with S3's own escaping.
	u.RawPath = s3utils.EncodePath(u.Path)
	u.RawQuery = req.URL.RawQuery
	out, err := http.NewRequestWithContext(ctx, req.Method, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrPassRequest, err)
	}
	out.URL = &u
	for k, vs := range req.Header {
		out.Header[k] = append([]string(nil), vs...)
	}
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	for _, h := range []string{"Authorization", "X-Amz-Date", "X-Amz-Security-Token", "X-Amz-Content-Sha256"} {
		out.Header.Del(h)
	}
	out.ContentLength = req.ContentLength
	if req.Body != nil && req.Body != http.NoBody && req.ContentLength != 0 {
		out.Body = io.NopCloser(req.Body)
	} else {
		out.ContentLength = 0
	}
	if s.accessKey == "" {
		return out, nil
	}
	if len(req.Trailer) > 0 && out.ContentLength > 0 {
		out.Header.Set("X-Amz-Content-Sha256", "STREAMING-UNSIGNED-PAYLOAD-TRAILER")
		return signer.SignV4Trailer(*out, s.accessKey, s.secretKey, "", s.region, req.Trailer), nil
	}
	out.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
	return signer.SignV4(*out, s.accessKey, s.secretKey, "", s.region), nil
}

// slowAnswer reports whether the store may rightly work long before it
// answers req: a copy, or the completion of a multipart upload.
func slowAnswer(req *http.Request) bool {
	if req.Header.Get("X-Amz-Copy-Source") != "" {
		return true
	}
	_, completing := req.URL.Query()["uploadId"]
	return req.Method == http.MethodPost && completing
}

// answerWait ends an upload's watch on its body: once the body is sent,
// the store has first to begin its answer.
type answerWait struct {
	r     io.Reader
	wd    *watchdog
	first time.Duration
}

func (a *answerWait) Read(p []byte) (int, error) {
	n, err := a.r.Read(p)
	if err == io.EOF {
		a.wd.timer.Reset(a.first)
	}
	return n, err
}

// passEndpoint parses the configured endpoint for Pass; Validate has
// checked it.
func passEndpoint(endpoint string) *url.URL {
	u, _ := url.Parse(endpoint)
	u.Path, u.RawPath = "", ""
	return u
}
