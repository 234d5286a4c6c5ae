// Package s3store is the S3 backend of store.Store: any S3-compatible
// endpoint (MinIO, versitygw, AWS, Ceph...) reached over HTTP with SigV4.
//
// It is built on minio-go's low-level Core API so that hoard keeps control
// of every request: one PUT per Put when the size is known (no hidden
// multipart, no buffering), raw Range and conditional headers on GET, and
// the store's own response headers parsed into store.ObjectInfo. Errors are
// translated in one place (classify in errors.go).
package s3store

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/s3utils"

	"github.com/hoard-io/hoard/internal/httpfetch"
	"github.com/hoard-io/hoard/internal/store"
)

// unknownSizePartSize is the part size of uploads of unknown length.
const unknownSizePartSize = 16 << 20

// Store is a store.Store backed by an S3-compatible endpoint. Safe for
// concurrent use.
type Store struct {
	core minio.Core
	// listCore serves the page-level list calls, which take no context:
	// its transport bounds each request (deadlineTransport), and it
	// tries once, so that a list fails within the call timeout too.
	listCore  minio.Core
	transport *http.Transport
	region    string
	logger    *slog.Logger
	// callTimeout and idleTimeout: Config's CallTimeout and IdleTimeout.
	callTimeout time.Duration
	idleTimeout time.Duration
	closeOnce   sync.Once

	// What Pass needs to address and sign requests itself.
	endpoint              *url.URL
	virtualHost           bool
	accessKey, secretKey  string
	responseHeaderTimeout time.Duration

	// What Get needs to send its requests itself (get.go): the
	// endpoint's scheme and host (without the scheme's default port, as
	// minio-go signs it), MaxAttempts, and the signer (nil: anonymous).
	scheme, host string
	maxAttempts  int
	signer       *v4Signer
	// fetch sends the read path's GETs and HEADs in the caller's
	// goroutine (ADR 0041), on the same dialer as transport; requests
	// a proxy from the environment applies to go through transport.
	fetch *httpfetch.Transport
}

var _ store.Store = (*Store)(nil)

// New returns a Store for cfg. It does no I/O: an unreachable store shows
// up as store.ErrUnavailable on the first request.
func New(cfg Config, logger *slog.Logger) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if logger == nil {
		logger = slog.Default()
	}
	u, _ := url.Parse(cfg.Endpoint) // Validate parsed it
	transport := newTransport(cfg)
	lookup := minio.BucketLookupPath
	if cfg.VirtualHostStyle {
		lookup = minio.BucketLookupDNS
	}
	var creds *credentials.Credentials
	if cfg.AccessKey != "" {
		creds = credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, "")
	} else {
		creds = credentials.New(&credentials.Static{Value: credentials.Value{SignerType: credentials.SignatureAnonymous}})
	}
	opts := &minio.Options{
		Creds:        creds,
		Secure:       u.Scheme == "https",
		Transport:    rawMetaTransport{rt: transport},
		Region:       cfg.Region,
		BucketLookup: lookup,
		// Off, or minio-go would add a CRC32C trailer to every
		// unsigned upload on its own, turning each PUT into an
		// aws-chunked stream. Checksums hoard asks for are still sent
		// (see Put and UploadPart).
		TrailingHeaders: false,
		MaxRetries:      cfg.MaxAttempts,
	}
	core, err := minio.NewCore(u.Host, opts)
	if err != nil {
		return nil, fmt.Errorf("s3store: client: %w", err)
	}
	lopts := *opts
	lopts.Transport = deadlineTransport{rt: rawMetaTransport{rt: transport}, first: cfg.CallTimeout, idle: cfg.IdleTimeout}
	lopts.MaxRetries = 1
	listCore, err := minio.NewCore(u.Host, &lopts)
	if err != nil {
		return nil, fmt.Errorf("s3store: client: %w", err)
	}
	logger.Debug("s3store: client ready", "endpoint", cfg.Endpoint, "region", cfg.Region)
	var sign *v4Signer
	if cfg.AccessKey != "" {
		sign = &v4Signer{accessKey: cfg.AccessKey, secretKey: cfg.SecretKey, region: cfg.Region}
	}
	return &Store{fetch: newFetchTransport(cfg, u.Scheme, transport), scheme: u.Scheme, host: hostWithoutDefaultPort(u), maxAttempts: max(1, cfg.MaxAttempts), signer: sign,
		core: *core, listCore: *listCore, transport: transport, region: cfg.Region, logger: logger,
		callTimeout: cfg.CallTimeout, idleTimeout: cfg.IdleTimeout,
		endpoint: passEndpoint(cfg.Endpoint), virtualHost: cfg.VirtualHostStyle,
		accessKey: cfg.AccessKey, secretKey: cfg.SecretKey, responseHeaderTimeout: cfg.ResponseHeaderTimeout}, nil
}

// hostWithoutDefaultPort is u's host, less a port that is its scheme's
// default (what net/http sends, and minio-go signs, as the Host).
func hostWithoutDefaultPort(u *url.URL) string {
	if p := u.Port(); (u.Scheme == "http" && p == "80") || (u.Scheme == "https" && p == "443") {
		return strings.TrimSuffix(u.Host, ":"+p)
	}
	return u.Host
}

// Close releases pooled connections. Requests still in flight finish
// normally. Safe to call more than once.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.transport.CloseIdleConnections()
		s.fetch.CloseIdleConnections()
	})
	return nil
}

// Put writes an object. With a known size it is one streaming PUT of
// exactly size bytes; with size < 0 minio-go uploads it in parts (the only
// way S3 takes a body of unknown length), and ChecksumValue cannot be
// honoured because the store checks per-part checksums then.
func (s *Store) Put(ctx context.Context, bucket, key string, r io.Reader, size int64, opts store.PutOptions) (store.PutResult, error) {
	po, err := putOptions(opts)
	if err != nil {
		return store.PutResult{}, fmt.Errorf("s3store: put %s/%s: %w", bucket, key, err)
	}
	if opts.ChecksumAlgorithm != "" {
		ct, _ := minioChecksumType(opts.ChecksumAlgorithm)
		if opts.ChecksumValue != "" {
			po.UserMetadata[checksumHeader(opts.ChecksumAlgorithm)] = opts.ChecksumValue
		} else {
			// The store computes and records it; minio-go streams it
			// as a trailer.
			po.Checksum = ct
		}
	} else if size > 0 && opts.StreamVerified && opts.PayloadSHA256 == "" {
		// A trailing checksum makes the store's commit depend on the
		// whole body arriving and matching: an upload cut short (because
		// a check only hoard makes failed midway) can never be
		// committed, whatever a store does with truncated requests
		// (versitygw commits a body cut short of its Content-Length).
		// The store then records this CRC32C where the client sent no
		// checksum: a deliberate difference (docs/s3-api.md). Any other
		// body is checked by the store itself (its payload hash,
		// Content-MD5, checksum) or by nobody, as without hoard.
		po.Checksum = minio.ChecksumCRC32C
	}
	sha := ""
	if !po.Checksum.IsSet() {
		// The client's signed payload hash: the store verifies it.
		sha = opts.PayloadSHA256
	}
	// UNSIGNED-PAYLOAD: the body is not hashed for the signature. A
	// signed (STREAMING-AWS4-HMAC-SHA256-PAYLOAD) body would cost a
	// SHA-256 pass over every byte and arrives aws-chunked, which some
	// stores (versitygw 1.8) then record as the object's Content-Encoding.
	// Integrity comes from the checksums and Content-MD5 hoard forwards.
	po.DisableContentSha256 = true
	// The upload has no total deadline, only an idle one: the body must
	// keep moving, and the answer come within IdleTimeout of its end.
	cctx, wd := newWatchdog(ctx, s.idleTimeout, s.idleTimeout, errStalled)
	defer wd.stop()
	r = progressOf(r, wd)
	var ui minio.UploadInfo
	if size >= 0 {
		ui, err = s.core.PutObject(cctx, bucket, key, bodyOf(r), size, opts.ContentMD5, sha, po)
	} else {
		if opts.ChecksumValue != "" || opts.ContentMD5 != "" {
			return store.PutResult{}, fmt.Errorf("s3store: put %s/%s: %w", bucket, key, &store.APIError{
				Code: "InvalidRequest", StatusCode: http.StatusBadRequest,
				Message: "a checksum or content-md5 value needs a known content length",
			})
		}
		// Without a part size minio-go sizes parts for the largest
		// possible object (over 500 MiB each) and buffers one per
		// upload; 16 MiB parts cap such objects at 160 GB instead.
		po.PartSize = unknownSizePartSize
		ui, err = s.core.Client.PutObject(cctx, bucket, key, bodyOf(r), -1, po)
	}
	if err != nil {
		return store.PutResult{}, failed(ctx, cctx, "put", bucket, key, err)
	}
	return store.PutResult{
		ETag:      trimETag(ui.ETag),
		VersionID: ui.VersionID,
		Checksums: checksumsOf(ui.ChecksumCRC32, ui.ChecksumCRC32C, ui.ChecksumCRC64NVME, ui.ChecksumSHA1, ui.ChecksumSHA256),
	}, nil
}

// bodyOf hides a Close method of r: minio-go closes a request body that is
// an io.Closer, but the body belongs to Put's caller. A seekable body stays
// seekable so minio-go can rewind it to retry.
func bodyOf(r io.Reader) io.Reader {
	if rs, ok := r.(io.ReadSeeker); ok {
		return struct{ io.ReadSeeker }{rs}
	}
	return struct{ io.Reader }{r}
}

// Delete removes an object; a missing object is not an error.
func (s *Store) Delete(ctx context.Context, bucket, key string) error {
	cctx, cancel := s.small(ctx)
	defer cancel()
	err := s.core.RemoveObject(cctx, bucket, key, minio.RemoveObjectOptions{})
	if err = failed(ctx, cctx, "delete", bucket, key, err); err != nil && !isNoSuchKey(err) {
		return err
	}
	return nil
}

// DeleteMany removes keys with multi-object delete requests, given one
// CallTimeout per hundred keys.
func (s *Store) DeleteMany(ctx context.Context, bucket string, keys []string) (map[string]error, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	objects := make(chan minio.ObjectInfo, len(keys))
	for _, k := range keys {
		objects <- minio.ObjectInfo{Key: k}
	}
	close(objects)
	bad := make(map[string]error)
	var first error
	all := true
	cctx, cancel := s.bounded(ctx, len(keys), deletesPerCall)
	defer cancel()
	for res := range s.core.RemoveObjectsWithResult(cctx, bucket, objects, minio.RemoveObjectsOptions{}) {
		if res.Err == nil {
			all = false
			continue
		}
		err := failed(ctx, cctx, "delete", bucket, res.ObjectName, res.Err)
		if isNoSuchKey(err) {
			all = false
			continue
		}
		bad[res.ObjectName] = err
		if first == nil {
			first = err
		}
	}
	// minio-go reports a failed request as the same error for every key
	// in it; when every key failed that way, the request failed.
	if all && len(bad) == len(keys) && first != nil && requestLevel(first) {
		return nil, first
	}
	if len(bad) == 0 {
		return nil, nil
	}
	return bad, nil
}

// requestLevel reports whether err concerns a whole request rather than
// one key.
func requestLevel(err error) bool {
	return errorIs(err, store.ErrUnavailable, store.ErrNoSuchBucket) || isCtxErr(err) || isAPIError(err, "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch")
}

// Copy copies an object inside the store (one CopyObject request, so at
// most 5 GiB as S3 allows). The source is asked for its size first, within
// the call timeout; the copy's answer then has the call timeout plus the
// size at copyRateFloor (8 MiB/s), at most ResponseHeaderTimeout.
func (s *Store) Copy(ctx context.Context, src store.CopySource, dstBucket, dstKey string, opts store.CopyOptions) (store.CopyResult, error) {
	headers := map[string]string{}
	if opts.ReplaceMetadata {
		po, err := putOptions(opts.Metadata)
		if err != nil {
			return store.CopyResult{}, fmt.Errorf("s3store: copy %s/%s: %w", dstBucket, dstKey, err)
		}
		for k, v := range po.Header() {
			headers[k] = v[0]
		}
		headers["x-amz-metadata-directive"] = "REPLACE"
	} else {
		headers["x-amz-metadata-directive"] = "COPY"
	}
	if src.IfMatch != "" {
		headers["x-amz-copy-source-if-match"] = quoteETag(src.IfMatch)
	}
	if src.IfNoneMatch != "" {
		headers["x-amz-copy-source-if-none-match"] = quoteETag(src.IfNoneMatch)
	}
	// The source's size says how long the copy may take; asking for it
	// also finds a hung store within the call timeout. A source the store
	// will not describe counts as empty: the copy then gets the store's
	// own answer (a HEAD's 404 cannot tell a missing bucket from a
	// missing key; the copy's error document can).
	sctx, cancel := s.small(ctx)
	sopts := minio.StatObjectOptions{VersionID: src.VersionID}
	si, err := s.core.StatObject(sctx, src.Bucket, src.Key, sopts)
	cancel()
	if err != nil {
		if err = failed(ctx, sctx, "copy", src.Bucket, src.Key, err); errors.Is(err, store.ErrUnavailable) || ctx.Err() != nil {
			return store.CopyResult{}, err
		}
		si.Size = 0
	}
	cctx, cancel := context.WithTimeoutCause(ctx, s.copyDeadline(si.Size), errCallDeadline)
	defer cancel()
	oi, err := s.core.CopyObject(cctx, src.Bucket, src.Key, dstBucket, dstKey, headers,
		minio.CopySrcOptions{VersionID: src.VersionID}, minio.PutObjectOptions{})
	if err != nil {
		err = failed(ctx, cctx, "copy", src.Bucket, src.Key, err)
		if errors.Is(err, store.ErrNotModified) {
			// S3 answers a matching x-amz-copy-source-if-none-match
			// with 412; some stores (versitygw) say 304. For a copy
			// both mean the condition failed.
			return store.CopyResult{}, fmt.Errorf("s3store: copy %s/%s: %w", src.Bucket, src.Key, store.ErrPreconditionFailed)
		}
		return store.CopyResult{}, err
	}
	return store.CopyResult{ETag: trimETag(oi.ETag), LastModified: oi.LastModified.UTC()}, nil
}

// List returns one page of a listing. Keys are always requested URL-encoded
// (so any byte survives the XML) and returned decoded; EncodingTypeURL and
// FetchOwner therefore change nothing here.
//
// minio-go's page-level list calls take no context, so ctx is checked
// before the request only; the transport's ResponseHeaderTimeout bounds a
// stalled listing.
func (s *Store) List(ctx context.Context, bucket string, opts store.ListOptions) (store.ListResult, error) {
	if err := ctx.Err(); err != nil {
		return store.ListResult{}, fmt.Errorf("s3store: list %s: %w", bucket, err)
	}
	var out store.ListResult
	if opts.V1 {
		res, err := s.listCore.ListObjects(bucket, opts.Prefix, opts.StartAfter, opts.Delimiter, opts.MaxKeys)
		if err != nil {
			return out, mapError(ctx, "list", bucket, "", err)
		}
		out.Objects = listedObjects(bucket, res.Contents)
		out.CommonPrefixes = prefixesOf(res.CommonPrefixes)
		out.IsTruncated = res.IsTruncated
		out.NextMarker = res.NextMarker
		if out.IsTruncated && out.NextMarker == "" {
			// S3 sends NextMarker only with a delimiter; the next page
			// starts after the last key (or prefix) of this one.
			out.NextMarker = lastListed(out)
		}
		return out, nil
	}
	res, err := s.listCore.ListObjectsV2(bucket, opts.Prefix, opts.StartAfter, opts.ContinuationToken, opts.Delimiter, opts.MaxKeys)
	if err != nil {
		return out, mapError(ctx, "list", bucket, "", err)
	}
	out.Objects = listedObjects(bucket, res.Contents)
	out.CommonPrefixes = prefixesOf(res.CommonPrefixes)
	out.IsTruncated = res.IsTruncated
	out.NextContinuationToken = res.NextContinuationToken
	return out, nil
}

func listedObjects(bucket string, contents []minio.ObjectInfo) []store.ObjectInfo {
	if len(contents) == 0 {
		return nil
	}
	out := make([]store.ObjectInfo, 0, len(contents))
	for _, c := range contents {
		out = append(out, store.ObjectInfo{
			Bucket:       bucket,
			Key:          c.Key,
			Size:         c.Size,
			ETag:         trimETag(c.ETag),
			LastModified: c.LastModified.UTC(),
		})
	}
	return out
}

func prefixesOf(cps []minio.CommonPrefix) []string {
	if len(cps) == 0 {
		return nil
	}
	out := make([]string, 0, len(cps))
	for _, p := range cps {
		out = append(out, p.Prefix)
	}
	return out
}

// lastListed is the greatest name on a V1 page: S3 merges keys and common
// prefixes in one lexical order.
func lastListed(r store.ListResult) string {
	last := ""
	if n := len(r.Objects); n > 0 {
		last = r.Objects[n-1].Key
	}
	if n := len(r.CommonPrefixes); n > 0 && r.CommonPrefixes[n-1] > last {
		last = r.CommonPrefixes[n-1]
	}
	return last
}

// ListBuckets lists the buckets the credentials can see.
func (s *Store) ListBuckets(ctx context.Context) ([]store.BucketInfo, error) {
	cctx, cancel := s.small(ctx)
	defer cancel()
	bs, err := s.core.ListBuckets(cctx)
	if err != nil {
		return nil, failed(ctx, cctx, "list buckets", "", "", err)
	}
	out := make([]store.BucketInfo, 0, len(bs))
	for _, b := range bs {
		out = append(out, store.BucketInfo{Name: b.Name, CreationDate: b.CreationDate.UTC()})
	}
	return out, nil
}

// CreateBucket creates a bucket in region (default: the configured one).
func (s *Store) CreateBucket(ctx context.Context, bucket, region string) error {
	if region == "" {
		region = s.region
	}
	if err := s3utils.CheckValidBucketNameStrict(bucket); err != nil {
		// minio-go refuses the name before asking the store; say what
		// the store would have said.
		return fmt.Errorf("s3store: create bucket %s: %w", bucket, &store.APIError{
			Code: "InvalidBucketName", Message: err.Error(), StatusCode: http.StatusBadRequest,
		})
	}
	cctx, cancel := s.small(ctx)
	defer cancel()
	err := s.core.MakeBucket(cctx, bucket, minio.MakeBucketOptions{Region: region})
	return failed(ctx, cctx, "create bucket", bucket, "", err)
}

// HeadBucket reports whether the bucket exists (ErrNoSuchBucket if not).
func (s *Store) HeadBucket(ctx context.Context, bucket string) error {
	cctx, cancel := s.small(ctx)
	defer cancel()
	ok, err := s.core.BucketExists(cctx, bucket)
	if err != nil {
		return failed(ctx, cctx, "head bucket", bucket, "", err)
	}
	if !ok {
		return fmt.Errorf("s3store: head bucket %s: %w", bucket, store.ErrNoSuchBucket)
	}
	return nil
}

// Versioned reports whether bucket's versioning is Enabled or Suspended
// (its writes then get version ids); ErrNoSuchBucket for a missing
// bucket. A store that does not implement versioning (an error other than
// a missing bucket or unavailability) has none.
func (s *Store) Versioned(ctx context.Context, bucket string) (bool, error) {
	cctx, cancel := s.small(ctx)
	defer cancel()
	cfg, err := s.core.GetBucketVersioning(cctx, bucket)
	if err = failed(ctx, cctx, "get bucket versioning", bucket, "", err); err != nil {
		if errors.Is(err, store.ErrNoSuchBucket) || errors.Is(err, store.ErrUnavailable) || ctx.Err() != nil {
			return false, err
		}
		return false, nil
	}
	return cfg.Status == "Enabled" || cfg.Status == "Suspended", nil
}

// DeleteBucket removes an empty bucket.
func (s *Store) DeleteBucket(ctx context.Context, bucket string) error {
	cctx, cancel := s.small(ctx)
	defer cancel()
	return failed(ctx, cctx, "delete bucket", bucket, "", s.core.RemoveBucket(cctx, bucket))
}

// CreateMultipartUpload starts a multipart upload. opts.ChecksumAlgorithm
// is sent as x-amz-checksum-algorithm, so the store expects (and records)
// that checksum for every part.
func (s *Store) CreateMultipartUpload(ctx context.Context, bucket, key string, opts store.PutOptions) (string, error) {
	po, err := putOptions(opts)
	if err != nil {
		return "", fmt.Errorf("s3store: create multipart %s/%s: %w", bucket, key, err)
	}
	if opts.ChecksumAlgorithm != "" {
		po.UserMetadata["x-amz-checksum-algorithm"] = strings.ToUpper(opts.ChecksumAlgorithm)
	}
	cctx, cancel := s.small(ctx)
	defer cancel()
	id, err := s.core.NewMultipartUpload(cctx, bucket, key, po)
	if err != nil {
		return "", failed(ctx, cctx, "create multipart", bucket, key, err)
	}
	return id, nil
}

// UploadPart uploads one part of exactly size bytes, streaming r. With
// ChecksumAlgorithm and ChecksumValue the store verifies that checksum;
// with only the algorithm, the part's checksum is computed while streaming
// and sent as a trailer.
func (s *Store) UploadPart(ctx context.Context, bucket, key, uploadID string, partNumber int, r io.Reader, size int64, opts store.PutOptions) (store.Part, error) {
	if _, err := putOptions(opts); err != nil {
		return store.Part{}, fmt.Errorf("s3store: upload part %s/%s: %w", bucket, key, err)
	}
	// Unsigned payload, as in Put.
	po := minio.PutObjectPartOptions{Md5Base64: opts.ContentMD5, CustomHeader: make(http.Header), DisableContentSha256: true}
	cctx, wd := newWatchdog(ctx, s.idleTimeout, s.idleTimeout, errStalled)
	defer wd.stop()
	r = progressOf(r, wd)
	body := bodyOf(r)
	if opts.ChecksumAlgorithm != "" {
		name := checksumHeader(opts.ChecksumAlgorithm)
		if opts.ChecksumValue != "" {
			po.CustomHeader.Set(name, opts.ChecksumValue)
		} else if size > 0 {
			ct, _ := minioChecksumType(opts.ChecksumAlgorithm)
			po.Trailer = make(http.Header)
			body = newTrailerHasher(r, ct.Hasher(), po.Trailer, name)
		}
	}
	p, err := s.core.PutObjectPart(cctx, bucket, key, uploadID, partNumber, body, size, po)
	if err != nil {
		return store.Part{}, failed(ctx, cctx, "upload part", bucket, key, err)
	}
	return store.Part{
		PartNumber: p.PartNumber,
		ETag:       trimETag(p.ETag),
		Size:       p.Size,
		Checksums:  checksumsOf(p.ChecksumCRC32, p.ChecksumCRC32C, p.ChecksumCRC64NVME, p.ChecksumSHA1, p.ChecksumSHA256),
	}, nil
}

// trailerHasher hashes a part while it streams and, at EOF, puts the
// result into the trailer the request signer sends after the body.
type trailerHasher struct {
	r       io.Reader
	h       hash.Hash
	trailer http.Header
	name    string
}

func newTrailerHasher(r io.Reader, h hash.Hash, trailer http.Header, name string) *trailerHasher {
	// The signer sizes the aws-chunked stream from the trailer values
	// before sending; a placeholder of the final length keeps it right.
	trailer.Set(name, base64.StdEncoding.EncodeToString(h.Sum(nil)))
	return &trailerHasher{r: r, h: h, trailer: trailer, name: name}
}

func (t *trailerHasher) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	t.h.Write(p[:n])
	if err == io.EOF {
		t.trailer.Set(t.name, base64.StdEncoding.EncodeToString(t.h.Sum(nil)))
	}
	return n, err
}

// CompleteMultipartUpload assembles the parts, forwarding each part's ETag
// and checksums, given one CallTimeout per thousand parts.
func (s *Store) CompleteMultipartUpload(ctx context.Context, bucket, key, uploadID string, parts []store.Part, opts store.CompleteOptions) (store.PutResult, error) {
	cps := make([]minio.CompletePart, 0, len(parts))
	for _, p := range parts {
		cps = append(cps, minio.CompletePart{
			PartNumber:        p.PartNumber,
			ETag:              quoteETag(p.ETag),
			ChecksumCRC32:     p.Checksums["CRC32"],
			ChecksumCRC32C:    p.Checksums["CRC32C"],
			ChecksumCRC64NVME: p.Checksums["CRC64NVME"],
			ChecksumSHA1:      p.Checksums["SHA1"],
			ChecksumSHA256:    p.Checksums["SHA256"],
		})
	}
	var po minio.PutObjectOptions
	if opts.IfMatch != "" {
		po.SetMatchETag(strings.Trim(opts.IfMatch, `"`))
	}
	if opts.IfNoneMatch != "" {
		po.SetMatchETagExcept(strings.Trim(opts.IfNoneMatch, `"`))
	}
	cctx, cancel := s.bounded(ctx, len(parts), partsPerCall)
	defer cancel()
	ui, err := s.core.CompleteMultipartUpload(cctx, bucket, key, uploadID, cps, po)
	if err != nil {
		return store.PutResult{}, failed(ctx, cctx, "complete multipart", bucket, key, err)
	}
	return store.PutResult{
		ETag:      trimETag(ui.ETag),
		VersionID: ui.VersionID,
		Checksums: checksumsOf(ui.ChecksumCRC32, ui.ChecksumCRC32C, ui.ChecksumCRC64NVME, ui.ChecksumSHA1, ui.ChecksumSHA256),
	}, nil
}

// AbortMultipartUpload discards an upload and its parts.
func (s *Store) AbortMultipartUpload(ctx context.Context, bucket, key, uploadID string) error {
	cctx, cancel := s.small(ctx)
	defer cancel()
	return failed(ctx, cctx, "abort multipart", bucket, key, s.core.AbortMultipartUpload(cctx, bucket, key, uploadID))
}

// ListParts returns one page of an upload's parts.
func (s *Store) ListParts(ctx context.Context, bucket, key, uploadID string, partNumberMarker, maxParts int) (store.ListPartsResult, error) {
	cctx, cancel := s.small(ctx)
	defer cancel()
	res, err := s.core.ListObjectParts(cctx, bucket, key, uploadID, partNumberMarker, maxParts)
	if err != nil {
		return store.ListPartsResult{}, failed(ctx, cctx, "list parts", bucket, key, err)
	}
	out := store.ListPartsResult{
		IsTruncated:          res.IsTruncated,
		NextPartNumberMarker: res.NextPartNumberMarker,
		ChecksumAlgorithm:    res.ChecksumAlgorithm,
	}
	for _, p := range res.ObjectParts {
		out.Parts = append(out.Parts, store.Part{
			PartNumber:   p.PartNumber,
			ETag:         trimETag(p.ETag),
			Size:         p.Size,
			LastModified: p.LastModified.UTC(),
			Checksums:    checksumsOf(p.ChecksumCRC32, p.ChecksumCRC32C, p.ChecksumCRC64NVME, p.ChecksumSHA1, p.ChecksumSHA256),
		})
	}
	return out, nil
}
