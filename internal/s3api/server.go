// Package s3api is the S3 front of a cachelet: it authenticates every
// request, parses it defensively, routes it to the cachelet or the store,
// and answers in S3's own wire format, including its XML errors.
//
// Requests it does not answer from its cache or through its typed store
// client go to the store as they are, re-signed with the store's identity,
// and the store's answer comes back as it is (pass.go, ADR 0018): nothing
// the store serves is refused, and nothing is answered with a guess.
package s3api

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hoard-io/hoard/internal/cachelet"
	"github.com/hoard-io/hoard/internal/grant"
	"github.com/hoard-io/hoard/internal/onewrite"
	"github.com/hoard-io/hoard/internal/s3auth"
	"github.com/hoard-io/hoard/internal/store"
)

// Limits S3 itself enforces.
const (
	// MaxObjectSize is the largest single PUT (and part) S3 accepts: 5 GiB.
	MaxObjectSize = 5 << 30
	maxKeyLen     = 1024
	maxMetaSize   = 2 << 10
	maxXMLBody    = 4 << 20 // CompleteMultipartUpload with 10,000 parts fits
	maxDeleteKeys = 1000
	maxParts      = 10000
	// maxHeaderSection bounds the request's headers, as S3 does (its own
	// limit is 8 KiB; SDKs stay far below). The HTTP server's hard limit
	// sits above this so that clients get S3's error, not a bare 431.
	maxHeaderSection = 16 << 10
)

// Config configures the S3 front.
type Config struct {
	// Region is reported by GetBucketLocation and used for new buckets.
	// Default "us-east-1".
	Region string
	// Domains are the base host names under which buckets are addressed
	// virtual-host style ("bucket.s3.example.com"). Requests to any other
	// host are path style. Default none.
	Domains []string
	// Notifier, when set, is told of every PutObject, CopyObject and
	// CompleteMultipartUpload answered with success, once answered.
	Notifier Notifier
	// Grants are the buckets the application may reach: any other bucket,
	// and writes to a read-only one, are refused with AccessDenied before
	// the store is asked, and ListBuckets shows granted buckets only.
	// Default nil: every bucket (a standalone cachelet).
	Grants *grant.Set

	// BodyIdleTimeout is how long a request body may send nothing before
	// the request is answered 400 RequestTimeout and its upload aborted.
	// Default DefaultBodyIdleTimeout (10 s); negative: no limit.
	BodyIdleTimeout time.Duration
	// BodyMinRate is, in bytes a second, the slowest average rate a
	// request body may keep once BodyRateGrace has passed since its
	// start; slower bodies are cut off like idle ones. Default
	// DefaultBodyMinRate (16 KiB/s); negative: no minimum.
	BodyMinRate int64
	// BodyRateGrace is the time a body has before BodyMinRate applies.
	// Default DefaultBodyRateGrace (10 s).
	BodyRateGrace time.Duration
}

// Validate fills in defaults.
func (c *Config) Validate() error {
	if c.Region == "" {
		c.Region = "us-east-1"
	}
	if c.BodyIdleTimeout == 0 {
		c.BodyIdleTimeout = DefaultBodyIdleTimeout
	}
	if c.BodyMinRate == 0 {
		c.BodyMinRate = DefaultBodyMinRate
	}
	if c.BodyRateGrace == 0 {
		c.BodyRateGrace = DefaultBodyRateGrace
	}
	if c.BodyRateGrace < 0 {
		return errors.New("s3api: body rate grace must not be negative")
	}
	return nil
}

// Server is an http.Handler serving the S3 API for one cachelet.
type Server struct {
	cfg  Config
	cl   *cachelet.Cachelet
	auth *s3auth.Verifier
	log  *slog.Logger
	m    *serverMetrics
}

// New returns a Server. reg may be nil.
func New(cfg Config, cl *cachelet.Cachelet, auth *s3auth.Verifier, log *slog.Logger, reg prometheus.Registerer) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cl == nil || auth == nil {
		return nil, errors.New("s3api: cachelet and verifier are required")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if reg != nil {
		registerMemoMetrics(reg, auth)
	}
	return &Server{cfg: cfg, cl: cl, auth: auth, log: log, m: newServerMetrics(reg)}, nil
}

// request is one parsed, authenticated S3 request.
type request struct {
	id     string
	op     string
	bucket string
	key    string
	query  url.Values
	auth   *s3auth.Request
	body   *timedBody // nil when bodies are not timed
	hv     [hvSlots]string
}

type handler func(w http.ResponseWriter, r *http.Request, rq *request) error

// exchange is what ServeHTTP allocates for a request, in one allocation:
// its state and its response writer.
type exchange struct {
	sw statusWriter
	rq request
}

// Slots of request.hv: the values of answer headers that most answers
// carry, set without an allocation of their own.
const (
	hvRequestID = iota
	hvServer
	hvContentLength
	hvRead
	hvSlots
)

// headerValue returns v as a header's values, kept in slot i of the
// request (capped at its length, so that an Add copies).
func (rq *request) headerValue(i int, v string) []string {
	rq.hv[i] = v
	return rq.hv[i : i+1 : i+1]
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	if r.ContentLength == 0 && strings.EqualFold(r.Header.Get("Expect"), "100-continue") {
		// S3 answers 100 Continue whenever asked. Go's server skips it
		// for empty bodies and answers at once, and botocore, handed a
		// final answer while it waits for 100, keeps stale state on the
		// kept-alive connection: its next request there hangs until its
		// read timeout.
		w.WriteHeader(http.StatusContinue)
	}
	ex := &exchange{sw: statusWriter{ResponseWriter: w}}
	sw, rq := &ex.sw, &ex.rq
	rq.id = newRequestID()
	h := w.Header()
	h["X-Amz-Request-Id"] = rq.headerValue(hvRequestID, rq.id)
	h["Server"] = rq.headerValue(hvServer, "hoard")
	defer func() {
		d := time.Since(start)
		s.m.observe(rq.op, sw.status, d)
		if s.log.Enabled(r.Context(), slog.LevelDebug) { // its arguments cost allocations
			s.log.Debug("request", "op", rq.op, "bucket", rq.bucket, "key", rq.key, "status", sw.status,
				"seconds", d.Seconds(), "remote", r.RemoteAddr, "request_id", rq.id)
		}
	}()

	bucket, key, perr := s.bucketAndKey(r)
	rq.bucket, rq.key = bucket, key
	q, qerr := parseQuery(r.URL.RawQuery)
	rq.query = q
	op, fn := s.route(r, rq)
	rq.op = op

	if s.cfg.BodyIdleTimeout > 0 && r.Body != nil && r.Body != http.NoBody {
		rq.body = newTimedBody(r.Body, http.NewResponseController(w), &s.cfg, time.Now)
		r.Body = rq.body
	}

	if isPostForm(r, bucket, key) && perr == nil {
		// A browser-form upload carries its signature in the form.
		rq.op = "PostObject"
		if err := s.postObject(sw, r, rq); err != nil {
			s.writeError(sw, r, rq, err)
		}
		return
	}
	ar, err := s.auth.Verify(r)
	if err != nil {
		s.m.authFailures.WithLabelValues(errorCode(err)).Inc()
		s.log.Warn("request refused", "op", op, "bucket", bucket, "remote", r.RemoteAddr,
			"access_key", accessKeyOf(r), "reason", err, "request_id", rq.id)
		s.writeError(sw, r, rq, err)
		return
	}
	rq.auth = ar
	r.Body = ar.Body
	switch {
	case headerSize(r.Header) > maxHeaderSection:
		err = errHeaderTooLarge
	case qerr != nil:
		err = errInvalidArgument
	case perr != nil:
		err = perr
	case !s.granted(r, rq):
		s.log.Warn("request to a bucket not granted", "op", op, "bucket", bucket, "request_id", rq.id)
		err = errBucketNotGranted
	default:
		err = fn(sw, r, rq)
	}
	if err != nil {
		s.writeError(sw, r, rq, err)
	}
	// Drain what the client sent that we did not read, within reason, so
	// the connection can be reused; past that, close it. (A request
	// without a body, as most GETs, has nothing to drain.)
	if r.Body != http.NoBody {
		_, _ = io.CopyN(io.Discard, r.Body, 256<<10)
	}
	_ = r.Body.Close()
}

// route names the operation and picks its handler. Requests the cachelet
// answers itself (reads it caches, writes it caches or invalidates,
// listings, multipart parts) get their typed handler; any other, and any
// typed one carrying a query parameter or an x-amz-* header its handler
// does not honour, goes to the store as it is (pass.go).
func (s *Server) route(r *http.Request, rq *request) (string, handler) {
	if r.Method == http.MethodGet && unpackedRequested(r.Header) {
		// The bytes a block-format object packs: a read of the cache's
		// own (unpacked.go), never the store's answer as it is; what it
		// does not read (a version, a subresource, a header it does
		// not carry, a key only the store may name) is refused, not
		// passed through as the packed object.
		if op, fn := s.typedRoute(r, rq); op == "GetObject" {
			if unknownSubresource(rq.query) != "" || rq.query.Has("versionId") || !carried(op, r.Header) || storeOnlyKey(rq.key) {
				return op, unpackedUnsupported
			}
			return op, fn
		}
	}
	if unknownSubresource(rq.query) != "" {
		return passOp(methodName(r.Method), rq), s.pass
	}
	op, fn := s.typedRoute(r, rq)
	switch {
	case op == "ListBuckets":
		// Always answered here: it shows granted buckets only.
		return op, fn
	case fn == nil, !carried(op, r.Header):
		return op, s.pass
	case storeOnlyKey(rq.key):
		return op, s.pass
	case (op == "GetObject" || op == "HeadObject") && rq.query.Has("partNumber"):
		// One part of a multipart object: the store knows its bounds.
		return op, s.pass
	case storeAnswered[op] && s.canPass():
		return op, s.pass
	case (op == "GetObject" || op == "HeadObject") && unreadRange(r.Header) && s.canPass():
		// A Range the cache does not read (not one bytes=a-b, a-, -n
		// range): stores differ on what it means (RFC 9110 says to
		// ignore it, MinIO answers some with 416), so the store says.
		return op, s.pass
	case op == "PutObject" && (r.Header.Get("If-Match") != "" || r.Header.Get("If-None-Match") != "") && s.canPass():
		// Only the store judges a condition, and its answer, a 412
		// with the current object's ETag and Last-Modified included,
		// is relayed as it is. Not cached: the key is invalidated
		// before and after, its queued writes delivered first.
		return op, s.pass
	}
	return op, fn
}

// storeAnswered are the typed operations the cache does not serve: with
// a store that takes requests as they are, they go to it through
// pass-through, so their answers (headers, documents, errors) are the
// store's own rather than rebuilt from its client's results. Their typed
// handlers answer only in front of a store that cannot (an in-memory
// store in tests). What the typed path adds stays: grants, invalidation
// of the keys a request changes, events (pass.go). A part's body (as
// any body passed through) is still verified here against the client's
// signature or trailer checksum as it streams, and cut short on a
// mismatch: the store must never commit bytes the client did not send,
// and it cannot check a signature it did not make.
var storeAnswered = map[string]bool{
	"GetBucketLocation": true, "HeadBucket": true, "CreateBucket": true, "DeleteBucket": true,
	"ListObjects": true, "ListObjectsV2": true,
	"CreateMultipartUpload": true, "UploadPart": true, "ListParts": true,
	"CompleteMultipartUpload": true, "AbortMultipartUpload": true,
	"CopyObject": true, "DeleteObject": true,
}

// canPass reports whether the store takes requests passed through.
func (s *Server) canPass() bool {
	_, ok := s.cl.Store().(passer)
	return ok
}

// methodName is method as it may appear in an operation's name, which
// labels metrics: one of HTTP's methods, or "OTHER" for any other token a
// client sends, so that clients cannot grow the number of series.
func methodName(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPut, http.MethodPost, http.MethodDelete,
		http.MethodOptions, http.MethodPatch, http.MethodConnect, http.MethodTrace:
		return method
	}
	return "OTHER"
}

// typedRoute names the operation of a request without unknown query
// parameters; a nil handler means only the store answers it.
func (s *Server) typedRoute(r *http.Request, rq *request) (string, handler) {
	q := rq.query
	has := func(k string) bool { _, ok := q[k]; return ok }
	m := methodName(r.Method)
	switch {
	case rq.bucket == "":
		if m == http.MethodGet {
			return "ListBuckets", s.listBuckets
		}
		return "Service" + m, nil
	case rq.key == "":
		switch {
		case m == http.MethodGet && has("location"):
			return "GetBucketLocation", s.getBucketLocation
		case m == http.MethodGet && has("uploads"):
			return "ListMultipartUploads", nil
		case m == http.MethodGet && q.Get("list-type") == "2":
			return "ListObjectsV2", s.listObjectsV2
		case m == http.MethodGet:
			return "ListObjects", s.listObjectsV1
		case m == http.MethodHead:
			return "HeadBucket", s.headBucket
		case m == http.MethodPut:
			return "CreateBucket", s.createBucket
		case m == http.MethodDelete:
			return "DeleteBucket", s.deleteBucket
		case m == http.MethodPost && has("delete"):
			return "DeleteObjects", s.deleteObjects
		}
		return "Bucket" + m, nil
	}
	copySrc := r.Header.Get("X-Amz-Copy-Source") != "" // canonical: no copy of the name made
	switch {
	case m == http.MethodGet && has("uploadId"):
		return "ListParts", s.listParts
	case m == http.MethodGet:
		return "GetObject", s.getObject
	case m == http.MethodHead:
		return "HeadObject", s.headObject
	case m == http.MethodPut && has("uploadId") && copySrc:
		return "UploadPartCopy", nil
	case m == http.MethodPut && has("uploadId"):
		return "UploadPart", s.uploadPart
	case m == http.MethodPut && copySrc:
		return "CopyObject", s.copyObject
	case m == http.MethodPut:
		return "PutObject", s.putObject
	case m == http.MethodDelete && has("uploadId"):
		return "AbortMultipartUpload", s.abortMultipartUpload
	case m == http.MethodDelete:
		return "DeleteObject", s.deleteObject
	case m == http.MethodPost && has("uploads"):
		return "CreateMultipartUpload", s.createMultipartUpload
	case m == http.MethodPost && has("uploadId"):
		return "CompleteMultipartUpload", s.completeMultipartUpload
	}
	return "Object" + m, nil
}

// knownParams are the query parameters the typed operations understand.
// Anything else names a sub-resource or option only the store answers
// (acl, tagging, versionId, versioning, ...): such requests pass through.
var knownParams = map[string]bool{
	// Authentication.
	"X-Amz-Algorithm": true, "X-Amz-Credential": true, "X-Amz-Date": true, "X-Amz-Expires": true,
	"X-Amz-SignedHeaders": true, "X-Amz-Signature": true, "X-Amz-Security-Token": true,
	"X-Amz-Content-Sha256": true, "AWSAccessKeyId": true, "Signature": true, "Expires": true,
	// SDK bookkeeping the SDKs sign into presigned URLs: the operation's
	// name, the checksum mode of a GET or HEAD (aws-sdk-go-v2 writes it
	// X-Amz-Checksum-Mode, others lower case) and the algorithm of a PUT's
	// checksum, whose value travels in a header. None changes the answer.
	"x-id": true, "X-Amz-Checksum-Mode": true, "x-amz-checksum-mode": true,
	"X-Amz-Sdk-Checksum-Algorithm": true, "x-amz-sdk-checksum-algorithm": true,
	"X-Amz-User-Agent": true, "x-amz-user-agent": true,
	// Listing.
	"prefix": true, "delimiter": true, "max-keys": true, "marker": true, "list-type": true,
	"continuation-token": true, "start-after": true, "fetch-owner": true, "encoding-type": true,
	// Buckets and multipart.
	"location": true, "delete": true, "uploads": true, "uploadId": true, "partNumber": true,
	"max-parts": true, "part-number-marker": true,
	// GetObject response overrides.
	"response-content-type": true, "response-content-language": true, "response-expires": true,
	"response-cache-control": true, "response-content-disposition": true, "response-content-encoding": true,
}

func unknownSubresource(q url.Values) string {
	for k := range q {
		if !knownParams[k] {
			return k
		}
	}
	return ""
}

// bucketAndKey finds the bucket in the Host (virtual-host style, under one
// of the configured domains) or in the path (path style).
func (s *Server) bucketAndKey(r *http.Request) (bucket, key string, err error) {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.ToLower(host)
	for _, d := range s.cfg.Domains {
		if b, ok := strings.CutSuffix(host, "."+d); ok && b != "" {
			key, err := canonicalKey(strings.TrimPrefix(r.URL.Path, "/"))
			switch {
			case err != nil:
				return b, key, err
			case !validBucketName(b):
				return b, key, errInvalidBucketName
			case key != "":
				return b, key, checkKey(key)
			}
			return b, key, nil
		}
	}
	return splitRawPath(r.URL.EscapedPath())
}

// splitRawPath is splitPath on the path as sent: the bucket is its first
// segment as it stands, as the store takes it (MinIO finds the bucket
// before decoding, so "/b%2Fk" names the bucket "b%2Fk", which is not a
// valid name, and never the key k of bucket b); the rest is the key,
// decoded.
func splitRawPath(raw string) (bucket, key string, err error) {
	rawBucket, rawKey, _ := strings.Cut(strings.TrimPrefix(raw, "/"), "/")
	if strings.Contains(rawBucket, "%") {
		return rawBucket, "", errInvalidBucketName
	}
	k, err := url.PathUnescape(rawKey)
	if err != nil {
		return rawBucket, "", errInvalidKey
	}
	return checkBucketAndKey(rawBucket, k)
}

// canonicalKey is the key as the store names it: MinIO takes /bucket//k
// for the key "k", so hoard caches and asks for "k" too, and a write to
// one name is seen by reads of the other. A key of slashes only would name
// no object: refused.
func canonicalKey(k string) (string, error) {
	c := strings.TrimLeft(k, "/")
	if c == "" && k != "" {
		return k, errInvalidKey
	}
	return c, nil
}

func headerSize(h http.Header) int {
	n := 0
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

// splitPath turns a path-style request path into bucket and key, checking
// both: keys never carry NUL, "." or ".." segments (checkKey).
func splitPath(p string) (bucket, key string, err error) {
	bucket, key, _ = strings.Cut(strings.TrimPrefix(p, "/"), "/")
	return checkBucketAndKey(bucket, key)
}

// checkBucketAndKey is splitPath's check of the two parts, the key
// decoded: the key made canonical (canonicalKey), then both checked.
func checkBucketAndKey(bucket, key string) (_, _ string, err error) {
	if key, err = canonicalKey(key); err != nil {
		return bucket, key, err
	}
	if bucket != "" && !validBucketName(bucket) {
		return bucket, key, errInvalidBucketName
	}
	if key != "" {
		if err := checkKey(key); err != nil {
			return bucket, key, err
		}
	}
	return bucket, key, nil
}

func (s *Server) writeError(w http.ResponseWriter, r *http.Request, rq *request, err error) {
	if rq.body.timedOut() {
		// Whatever the store or the verifier made of the cut-off body,
		// the cause is the client's pace.
		err = errRequestTimeout
	}
	ae, serverFault := toAPIError(err)
	if serverFault {
		s.log.Error("request failed", "op", rq.op, "bucket", rq.bucket, "key", rq.key, "code", ae.Code,
			"err", err, "request_id", rq.id)
	} else {
		s.log.Debug("request rejected", "op", rq.op, "bucket", rq.bucket, "key", rq.key, "code", ae.Code,
			"err", err, "request_id", rq.id)
	}
	if sw, ok := w.(*statusWriter); ok && sw.wrote {
		// Headers are out: the only honest signal left is a broken body.
		panic(http.ErrAbortHandler)
	}
	h := w.Header()
	if ae.Status == http.StatusServiceUnavailable {
		h.Set("Retry-After", "1")
	}
	var dm *store.DeleteMarkerError
	if errors.As(err, &dm) {
		// The key's latest version is a delete marker: S3 says so.
		h.Set("x-amz-delete-marker", "true")
		if dm.VersionID != "" {
			h.Set("x-amz-version-id", dm.VersionID)
		}
	}
	if r.Method == http.MethodHead {
		w.WriteHeader(ae.Status)
		return
	}
	body, _ := xml.Marshal(errorResponse{
		Code: ae.Code, Message: ae.Message, Resource: r.URL.Path, RequestID: rq.id,
		BucketName: rq.bucket, Key: rq.key,
	})
	h.Set("Content-Type", "application/xml")
	h.Set("Content-Length", fmt.Sprint(len(xml.Header)+len(body)))
	w.WriteHeader(ae.Status)
	_, _ = io.WriteString(w, xml.Header)
	_, _ = w.Write(body)
}

// writeXML sends a 200 with an XML document.
func writeXML(w http.ResponseWriter, r *http.Request, v any) error {
	body, err := xml.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode response: %w", err)
	}
	n := len(xml.Header) + len(body)
	h := w.Header()
	h.Set("Content-Type", "application/xml")
	h.Set("Content-Length", strconv.Itoa(n))
	w.WriteHeader(http.StatusOK)
	defer onewrite.Hold(w, r, int64(n))() // a listing of a few KiB in one write
	_, _ = io.WriteString(w, xml.Header)
	_, _ = w.Write(body)
	return nil
}

// readXML decodes a request body of at most maxXMLBody bytes into v.
func readXML(r *http.Request, v any) error {
	_, err := readXMLData(r, v)
	return err
}

// readXMLData is readXML that returns the body read, too.
func readXMLData(r *http.Request, v any) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r.Body, maxXMLBody+1))
	if err != nil {
		return nil, err // payload verification errors surface here
	}
	if len(data) > maxXMLBody {
		return nil, apiErr("MaxMessageLengthExceeded", http.StatusBadRequest, "Your request was too big.")
	}
	if err := xml.Unmarshal(data, v); err != nil {
		return data, errMalformedXML // the body as read, for who passes it on
	}
	return data, nil
}

func newRequestID() string {
	// Sixteen upper-case hex digits, as S3's. An id names a request in
	// logs; it is no secret, so the runtime's fast generator will do.
	const digits = "0123456789ABCDEF"
	var b [16]byte
	for i, v := 0, mrand.Uint64(); i < len(b); i, v = i+1, v>>4 {
		b[i] = digits[v&0xf]
	}
	return string(b[:])
}

// accessKeyOf extracts the access key id a request claims, for logs; never
// the signature or a secret.
func accessKeyOf(r *http.Request) string {
	if ak := r.URL.Query().Get("AWSAccessKeyId"); ak != "" {
		return ak
	}
	if cred := r.URL.Query().Get("X-Amz-Credential"); cred != "" {
		ak, _, _ := strings.Cut(cred, "/")
		return ak
	}
	a := r.Header.Get("Authorization")
	if i := strings.Index(a, "Credential="); i >= 0 {
		ak, _, _ := strings.Cut(a[i+len("Credential="):], "/")
		return ak
	}
	if rest, ok := strings.CutPrefix(a, "AWS "); ok {
		ak, _, _ := strings.Cut(rest, ":")
		return ak
	}
	return ""
}

// errorCode is the S3 code an error maps to, for metric labels.
func errorCode(err error) string {
	ae, _ := toAPIError(err)
	return ae.Code
}

// statusWriter remembers the status sent, and whether headers are out.
type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if !w.wrote {
		w.status, w.wrote = http.StatusOK, true
	}
	return w.ResponseWriter.Write(p)
}

// ReadFrom keeps net/http's sendfile/splice path and large writes direct.
func (w *statusWriter) ReadFrom(r io.Reader) (int64, error) {
	if !w.wrote {
		w.status, w.wrote = http.StatusOK, true
	}
	if rf, ok := w.ResponseWriter.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(w.ResponseWriter, r)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
