package s3store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/s3utils"
	"github.com/minio/minio-go/v7/pkg/signer"

	"github.com/hoard-io/hoard/internal/store"
)

// ErrPassRequest: Pass was handed a request it cannot send (no bucket, a
// URL that is not a relative path).
var ErrPassRequest = errors.New("s3store: malformed pass-through request")

// hopHeaders are the hop-by-hop headers (RFC 9110 §7.6.1) and Expect:
// none is forwarded in either direction. A request's Host and
// Content-Length are net/http's to write, from the request's own fields.
var (
	hopHeaders = []string{
		"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization",
		"Te", "Trailer", "Transfer-Encoding", "Upgrade", "Expect",
	}
	ownHeaders = []string{"Host", "Content-Length"}
	// signatureHeaders are the client's signature, which the store's
	// replaces.
	signatureHeaders = []string{"Authorization", "X-Amz-Date", "X-Amz-Security-Token", "X-Amz-Content-Sha256"}
)

// Pass sends req to the store as it is, signed with the store's own
// identity, and returns the store's answer, whatever its status: the
// caller relays it and must close its body. It is the pass-through of
// requests hoard does not answer from its cache (ADR 0018).
//
// req names the bucket and key in a path-style, relative URL
// ("/bucket/key?query", Path decoded); its headers, query and body go
// to the store unchanged, except what belongs to one hop only
// (Connection, Transfer-Encoding, Expect, ...) and any Authorization,
// X-Amz-Date, X-Amz-Security-Token and X-Amz-Content-Sha256, which the
// signature replaces. The caller removes the client's own signature from
// the query. The body is sent unsigned (UNSIGNED-PAYLOAD), or signed by
// the hex SHA-256 req's X-Amz-Content-Sha256 gives (the client's, which
// the store then checks), or, where that header is
// STREAMING-AWS4-HMAC-SHA256-PAYLOAD (the client's body came in signed
// chunks, which the caller has decoded and verifies as they stream), in
// aws-chunked chunks signed anew with the store's identity, streamed,
// with req.ContentLength (-1: chunked); it is not retried. A request
// with a Trailer (a checksum whose value its body sets once read to its
// end) is sent as S3's unsigned aws-chunked stream with that trailer.
//
// Deadlines: the store's answer must begin within CallTimeout after the
// request (body included) was sent, and every read of the answer's body
// must make progress within IdleTimeout; a request with a body has
// IdleTimeout for each step of the upload, counting only the store's
// share (a slow client is not cut off). A copy (x-amz-copy-source) or a
// multipart completion may work long before the store answers: they are
// given time in proportion to their work (answerDeadline). A call cut
// short fails with an error wrapping store.ErrUnavailable.
//
// Safe for concurrent use.
func (s *Store) Pass(ctx context.Context, req *http.Request) (*http.Response, error) {
	out, err := s.outgoing(ctx, req)
	if err != nil {
		return nil, err
	}
	first, err := s.answerDeadline(ctx, req)
	if err != nil {
		return nil, err
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
	for _, h := range hopHeaders {
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
	// A body signed by its SHA-256 (hex) is sent signed by it, so the
	// store checks it too: a body cut short, or not the one signed, is
	// never committed, whatever a store does with a request cut short.
	payload := req.Header.Get("X-Amz-Content-Sha256")
	chunks := payload == streamingSigned
	if len(payload) != 2*sha256.Size || !isHex(payload) {
		payload = ""
	}
	payload = strings.ToLower(payload)
	for k, vs := range req.Header {
		out.Header[k] = append([]string(nil), vs...)
	}
	formSigned := req.Header.Get(FormSignedHeader) != ""
	out.Header.Del(FormSignedHeader)
	for _, hs := range [][]string{hopHeaders, ownHeaders, signatureHeaders} {
		for _, h := range hs {
			out.Header.Del(h)
		}
	}
	out.ContentLength = req.ContentLength
	if req.Body != nil && req.Body != http.NoBody && req.ContentLength != 0 {
		out.Body = io.NopCloser(req.Body)
	} else {
		out.ContentLength = 0
	}
	if s.accessKey == "" || formSigned {
		return out, nil
	}
	if len(req.Trailer) > 0 && out.ContentLength > 0 {
		out.Header.Set("X-Amz-Content-Sha256", "STREAMING-UNSIGNED-PAYLOAD-TRAILER")
		return signer.SignV4Trailer(*out, s.accessKey, s.secretKey, "", s.region, req.Trailer), nil
	}
	if chunks && out.ContentLength > 0 {
		// Signed chunks of the store's identity, the last (empty) one
		// signed too: a body cut short lacks it, and the store refuses
		// the request rather than commit what arrived (versitygw
		// records a part, or an object, cut short when its body was
		// sent unsigned).
		return signer.StreamingSignV4(out, s.accessKey, s.secretKey, "", s.region, out.ContentLength, time.Now().UTC(), newSHA256()), nil
	}
	if payload == "" {
		payload = "UNSIGNED-PAYLOAD"
	}
	out.Header.Set("X-Amz-Content-Sha256", payload)
	return signer.SignV4(*out, s.accessKey, s.secretKey, "", s.region), nil
}

// streamingSigned is the X-Amz-Content-Sha256 of a body sent in signed
// aws-chunked chunks.
const streamingSigned = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"

// sha256Hasher is the hash StreamingSignV4 wants: a SHA-256 that can be
// closed.
type sha256Hasher struct{ hash.Hash }

func (sha256Hasher) Close() {}

func newSHA256() sha256Hasher { return sha256Hasher{sha256.New()} }

func isHex(s string) bool {
	_, err := hex.DecodeString(s)
	return err == nil
}

// answerDeadline is how long the store may take to begin its answer to
// req once it has the request: CallTimeout, but a copy is given time in
// proportion to its source's size (which is asked for first, within the
// call timeout, as Copy does), and a multipart completion time in
// proportion to its parts (about one per 64 bytes of its body, one
// CallTimeout per thousand).
func (s *Store) answerDeadline(ctx context.Context, req *http.Request) (time.Duration, error) {
	if src := req.Header.Get("X-Amz-Copy-Source"); src != "" {
		size, err := s.copySourceSize(ctx, src, req.Header.Get("X-Amz-Copy-Source-Range"))
		if err != nil {
			return 0, fmt.Errorf("s3store: pass %s %s: %w", req.Method, req.URL.Path, err)
		}
		return s.copyDeadline(size), nil
	}
	if _, completing := req.URL.Query()["uploadId"]; completing && req.Method == http.MethodPost {
		parts := int(max(req.ContentLength, 0) / 64)
		return time.Duration(max(1, (parts+partsPerCall-1)/partsPerCall)) * s.callTimeout, nil
	}
	return s.callTimeout, nil
}

// copySourceSize is the number of bytes a copy from src
// ("[/]bucket/key[?versionId=v]", URL-encoded) moves: the source's size,
// or that of rng ("bytes=a-b"). A source that cannot be asked about
// counts as empty: the store answers the copy with its own error.
func (s *Store) copySourceSize(ctx context.Context, src, rng string) (int64, error) {
	if r, err := parseCopyRange(rng); err == nil {
		return r, nil
	}
	raw, query, _ := strings.Cut(src, "?")
	p, err := url.PathUnescape(strings.TrimPrefix(raw, "/"))
	if err != nil {
		return 0, nil
	}
	bucket, key, _ := strings.Cut(p, "/")
	if bucket == "" || key == "" {
		return 0, nil
	}
	var opts minio.StatObjectOptions
	if q, err := url.ParseQuery(query); err == nil {
		opts.VersionID = q.Get("versionId")
	}
	cctx, cancel := s.small(ctx)
	defer cancel()
	oi, err := s.core.StatObject(cctx, bucket, key, opts)
	if err != nil {
		if err = failed(ctx, cctx, "stat copy source", bucket, key, err); errors.Is(err, store.ErrUnavailable) || ctx.Err() != nil {
			return 0, err
		}
		return 0, nil
	}
	return oi.Size, nil
}

// parseCopyRange is the length of an x-amz-copy-source-range.
func parseCopyRange(v string) (int64, error) {
	spec, ok := strings.CutPrefix(v, "bytes=")
	if !ok {
		return 0, errors.New("not a byte range")
	}
	a, b, ok := strings.Cut(spec, "-")
	if !ok {
		return 0, errors.New("not a byte range")
	}
	first, err1 := strconv.ParseInt(a, 10, 64)
	last, err2 := strconv.ParseInt(b, 10, 64)
	if err1 != nil || err2 != nil || last < first {
		return 0, errors.New("not a byte range")
	}
	return last - first + 1, nil
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
