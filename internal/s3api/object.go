package s3api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hoard-io/hoard/internal/cachelet"
	"github.com/hoard-io/hoard/internal/notify"
	"github.com/hoard-io/hoard/internal/onewrite"
	"github.com/hoard-io/hoard/internal/peer"
	"github.com/hoard-io/hoard/internal/s3auth"
	"github.com/hoard-io/hoard/internal/store"
)

func (s *Server) getObject(w http.ResponseWriter, r *http.Request, rq *request) error {
	if unpackedRequested(r.Header) {
		return s.getUnpacked(w, r, rq)
	}
	var rng *store.ByteRange
	if h := r.Header.Get("Range"); h != "" {
		if br, ok := parseRange(h); ok {
			rng = &br
		}
	}
	obj, err := s.cl.Get(r.Context(), rq.bucket, rq.key, rng)
	if err != nil {
		return s.deleteMarker(r.Context(), rq, err)
	}
	defer obj.Body.Close()
	h := w.Header()
	switch checkConditions(r.Header, obj.Info) {
	case condPreconditionFailed:
		setValidators(h, obj.Info)
		return errPrecondition
	case condNotModified:
		setValidators(h, obj.Info)
		w.WriteHeader(http.StatusNotModified)
		return nil
	}
	setObjectHeaders(h, obj.Info)
	applyOverrides(h, rq)
	h["Content-Length"] = rq.headerValue(hvContentLength, strconv.FormatInt(obj.Length(), 10))
	h["X-Hoard-Read"] = rq.headerValue(hvRead, string(obj.Outcome))
	if obj.Outcome == cachelet.StaleHit {
		// The store could not confirm this copy (serve_stale_if_error).
		h.Set("x-hoard-stale", "true")
	}
	if obj.Unfollowed {
		// Changes to the bucket are followed, but not now: the copy was
		// checked with the store (ADR 0028).
		h.Set("x-hoard-changes", "unfollowed")
	}
	status := http.StatusOK
	if obj.Range != nil {
		status = http.StatusPartialContent
		h.Set("Content-Range", contentRange(*obj.Range, obj.Info.Size))
	} else {
		setChecksumHeaders(h, r, rq.query, obj.Info)
	}
	w.WriteHeader(status)
	if r.Method == http.MethodHead {
		return nil
	}
	defer onewrite.Hold(w, r, obj.Length())() // a small answer in one write
	if n, err := copyBody(w, obj.Body, obj.Length()); err != nil {
		// Headers are out. A short body is the only signal left; the
		// client's length check turns it into an error, never wrong data.
		s.log.Warn("get aborted mid-body", "bucket", rq.bucket, "key", rq.key, "sent", n,
			"want", obj.Length(), "err", err, "request_id", rq.id)
		panic(http.ErrAbortHandler)
	}
	return nil
}

// directCopy is the body size from which copyBody hands a GET's body to
// the connection.
const directCopy = 64 << 10

// copyBody sends a GET's body of n bytes. A large one goes through the
// response's ReadFrom, which (on plain HTTP) hands it to the TCP
// connection: a cache entry's chunks then go to the socket several at a
// time with writev, as they lie (peer.SocketBody), where io.Copy would have
// them gathered into a buffer first. A small one goes through the
// response's buffer, with the headers.
func copyBody(w http.ResponseWriter, body io.Reader, n int64) (int64, error) {
	if rf, ok := w.(io.ReaderFrom); ok && n >= directCopy {
		return rf.ReadFrom(peer.SocketBody(body))
	}
	return io.Copy(w, body)
}

func (s *Server) headObject(w http.ResponseWriter, r *http.Request, rq *request) error {
	info, err := s.cl.Stat(r.Context(), rq.bucket, rq.key)
	if err != nil {
		return s.deleteMarker(r.Context(), rq, err)
	}
	h := w.Header()
	switch checkConditions(r.Header, info) {
	case condPreconditionFailed:
		setValidators(h, info)
		return errPrecondition
	case condNotModified:
		setValidators(h, info)
		w.WriteHeader(http.StatusNotModified)
		return nil
	}
	setObjectHeaders(h, info)
	applyOverrides(h, rq)
	status, length := http.StatusOK, info.Size
	if hr := r.Header.Get("Range"); hr != "" {
		if br, ok := parseRange(hr); ok {
			res, err := cachelet.ResolveRange(br, info.Size)
			if err != nil {
				return err
			}
			status, length = http.StatusPartialContent, res.End-res.Start+1
			h.Set("Content-Range", contentRange(res, info.Size))
		}
	}
	if status == http.StatusOK {
		setChecksumHeaders(h, r, rq.query, info)
	}
	h.Set("Content-Length", strconv.FormatInt(length, 10))
	w.WriteHeader(status)
	return nil
}

// deleteMarker turns a read's NoSuchKey, in a versioned bucket, into the
// store's answer when the key's latest version is a delete marker: the
// same 404 with x-amz-delete-marker and the marker's x-amz-version-id
// (writeError). The reads' own paths do not carry that through their
// caches and owners; one HEAD at the store does, asked only in buckets
// the store says are versioned (cachelet.BucketVersioned).
func (s *Server) deleteMarker(ctx context.Context, rq *request, err error) error {
	var dm *store.DeleteMarkerError
	if !errors.Is(err, store.ErrNoSuchKey) || errors.As(err, &dm) || !s.cl.BucketVersioned(ctx, rq.bucket) {
		return err
	}
	if _, serr := s.cl.Store().Stat(ctx, rq.bucket, rq.key); errors.As(serr, &dm) {
		return serr
	}
	return err
}

// setValidators sends the object's ETag and Last-Modified with a 304 or a
// 412, as the stores do, so that a client can tell which version the
// condition was judged against.
func setValidators(h http.Header, info store.ObjectInfo) {
	h.Set("ETag", `"`+info.ETag+`"`)
	if !info.LastModified.IsZero() {
		h.Set("Last-Modified", httpDate(info.LastModified))
	}
}

// payloadSize is the decoded length of the request body, which must be
// known: S3 refuses uploads of unknown length.
func payloadSize(rq *request, limit int64) (int64, error) {
	n := rq.auth.DecodedLength
	switch {
	case n < 0:
		return 0, errMissingLength
	case n > limit:
		return 0, errEntityTooLarge
	}
	return n, nil
}

// payloadSigning says how a SigV4 client signed its body: a hex SHA-256
// (hash, which the store can verify again), or chunk by chunk (chunks:
// signatures only hoard can verify, as the body streams).
func payloadSigning(rq *request, h http.Header) (hash string, chunks bool) {
	if rq.auth.Method != s3auth.V4Header {
		return "", false
	}
	v := h.Get("x-amz-content-sha256")
	if len(v) == 2*sha256.Size {
		if _, err := hex.DecodeString(v); err == nil {
			return strings.ToLower(v), false
		}
	}
	return "", strings.HasPrefix(v, "STREAMING-AWS4-")
}

// errCapture remembers the first error reading the client's body, so that
// a verification failure (signature, checksum) is reported as itself and
// not as whatever the store client made of an aborted upload.
type errCapture struct {
	r   io.Reader
	err error
}

func (e *errCapture) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && err != io.EOF && e.err == nil {
		e.err = err
	}
	return n, err
}

// bodyError prefers the client body's own error over the store's.
func bodyError(body *errCapture, err error) error {
	if err != nil && body.err != nil {
		return body.err
	}
	return err
}

func (s *Server) putObject(w http.ResponseWriter, r *http.Request, rq *request) error {
	size, err := payloadSize(rq, MaxObjectSize)
	if err != nil {
		return err
	}
	opts, err := putOptions(r.Header)
	if err != nil {
		return err
	}
	opts.IfMatch, opts.IfNoneMatch = r.Header.Get("If-Match"), r.Header.Get("If-None-Match")
	opts.PayloadSHA256, opts.StreamVerified = payloadSigning(rq, r.Header)
	if s.cl.WritesThrough() && s.canPass() {
		// The write reaches the store before it is acknowledged, with
		// the client's checksum and Content-MD5: the store judges them,
		// and a mismatch gets its own answer.
		rq.auth.LeaveDigestsToStore()
		r.Body = rq.auth.Body
	}
	body := &errCapture{r: newExactBody(r.Body, size)}
	res, err := s.cl.Put(uploadContext(r), rq.bucket, rq.key, body, size, opts)
	if err = bodyError(body, err); err != nil {
		return err
	}
	h := w.Header()
	h.Set("ETag", `"`+res.ETag+`"`)
	if res.VersionID != "" {
		h.Set("x-amz-version-id", res.VersionID)
	}
	setResultChecksums(h, res.Checksums)
	if len(res.Checksums) > 0 {
		// A single PUT's checksum covers the whole object; S3 and the
		// stores say so.
		h.Set("x-amz-checksum-type", "FULL_OBJECT")
	}
	w.WriteHeader(http.StatusOK)
	s.notify(r, rq, notify.ObjectCreatedPut, size, res.ETag)
	return nil
}

func setResultChecksums(h http.Header, sums map[string]string) {
	for algo, v := range sums {
		if v != "" {
			h.Set("x-amz-checksum-"+strings.ToLower(algo), v)
		}
	}
}

func (s *Server) deleteObject(w http.ResponseWriter, r *http.Request, rq *request) error {
	if err := s.cl.Delete(r.Context(), rq.bucket, rq.key); err != nil && !errors.Is(err, store.ErrNoSuchKey) {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) copyObject(w http.ResponseWriter, r *http.Request, rq *request) error {
	src, err := parseCopySource(r.Header.Get("x-amz-copy-source"))
	if err != nil {
		return err
	}
	if src.VersionID != "" || storeOnlyKey(src.Key) {
		// The store answers with the source's version, and judges keys
		// its typed client does not carry: pass it on as is.
		return s.pass(w, r, rq)
	}
	h := r.Header
	src.IfMatch = strings.Trim(h.Get("x-amz-copy-source-if-match"), `"`)
	src.IfNoneMatch = strings.Trim(h.Get("x-amz-copy-source-if-none-match"), `"`)
	var opts store.CopyOptions
	switch d := strings.ToUpper(h.Get("x-amz-metadata-directive")); d {
	case "", "COPY":
	case "REPLACE":
		opts.ReplaceMetadata = true
		if opts.Metadata, err = putOptions(h); err != nil {
			return err
		}
	default:
		return apiErr("InvalidArgument", http.StatusBadRequest, "Unknown metadata directive.")
	}
	if src.Bucket == rq.bucket && src.Key == rq.key && !opts.ReplaceMetadata {
		return apiErr("InvalidRequest", http.StatusBadRequest,
			"This copy request is illegal because it is trying to copy an object to itself without changing the object's metadata.")
	}
	res, err := s.cl.Copy(r.Context(), src, rq.bucket, rq.key, opts)
	if err != nil {
		return err
	}
	lm := res.LastModified
	if lm.IsZero() {
		lm = time.Now()
	}
	if err := writeXML(w, r, copyObjectResult{ETag: `"` + res.ETag + `"`, LastModified: lm.UTC().Format(timeFormatXML)}); err != nil {
		return err
	}
	s.notifyUnsized(w, r, rq, notify.ObjectCreatedCopy, res.ETag)
	return nil
}

// parseCopySource reads x-amz-copy-source: "[/]bucket/key", URL-encoded,
// with an optional "?versionId=".
func parseCopySource(v string) (store.CopySource, error) {
	var src store.CopySource
	raw, query, _ := strings.Cut(v, "?")
	if query != "" {
		q, err := url.ParseQuery(query)
		if err != nil || len(q) != 1 || q.Get("versionId") == "" {
			return src, errInvalidCopySource
		}
		src.VersionID = q.Get("versionId")
	}
	p, err := url.PathUnescape(raw)
	if err != nil {
		return src, errInvalidCopySource
	}
	b, k, err := splitPath(p)
	if err != nil {
		return src, err
	}
	if b == "" || k == "" {
		return src, errInvalidCopySource
	}
	src.Bucket, src.Key = b, k
	return src, nil
}
