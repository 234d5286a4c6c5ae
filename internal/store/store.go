// Package store is hoard's view of the remote object store that sits behind
// every cachelet: any S3-compatible endpoint reached with its own credentials.
//
// The cache trusts nothing it cannot check against the store, so the types
// here carry what checking needs: the store's ETag is the version, and
// conditional reads (IfNoneMatch) let a cachelet confirm a cached copy without
// moving its bytes.
package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Sentinel errors. Backends wrap them (errors.Is works); s3api maps each to
// one S3 error code in its single table.
var (
	// ErrNoSuchKey: the object does not exist.
	ErrNoSuchKey = errors.New("store: no such key")
	// ErrNoSuchBucket: the bucket does not exist.
	ErrNoSuchBucket = errors.New("store: no such bucket")
	// ErrNotModified: a conditional read found the version asked about
	// (IfNoneMatch matched); no body was transferred.
	ErrNotModified = errors.New("store: not modified")
	// ErrPreconditionFailed: IfMatch did not match.
	ErrPreconditionFailed = errors.New("store: precondition failed")
	// ErrInvalidRange: the requested range does not overlap the object.
	ErrInvalidRange = errors.New("store: invalid range")
	// ErrBucketNotEmpty: DeleteBucket on a bucket that still has objects.
	ErrBucketNotEmpty = errors.New("store: bucket not empty")
	// ErrBucketExists: CreateBucket of a bucket that already exists.
	ErrBucketExists = errors.New("store: bucket already exists")
	// ErrNoSuchUpload: unknown multipart upload id.
	ErrNoSuchUpload = errors.New("store: no such upload")
	// ErrUnavailable: the store could not be reached or answered 5xx.
	// Callers must not cache anything derived from such a request.
	ErrUnavailable = errors.New("store: unavailable")
)

// APIError is an S3 error the store returned that has no sentinel above
// (InvalidBucketName, EntityTooSmall, InvalidPart, ...). s3api relays it to
// the client as is: the store is the authority on these.
type APIError struct {
	Code       string // S3 error code, e.g. "InvalidPart"
	Message    string
	StatusCode int // HTTP status the store answered
}

func (e *APIError) Error() string {
	return fmt.Sprintf("store: %s (%d): %s", e.Code, e.StatusCode, e.Message)
}

// ByteRange is a resolved or requested byte range, both ends inclusive, as in
// HTTP. Start < 0 means a suffix range: the last -Start bytes. End < 0 means
// "to the end".
type ByteRange struct {
	Start, End int64
}

// ObjectInfo describes one version of an object as the store reports it.
type ObjectInfo struct {
	Bucket       string
	Key          string
	Size         int64  // size of the whole object, even for a ranged read
	ETag         string // without quotes; the version the cache checks
	LastModified time.Time
	VersionID    string

	ContentType        string
	ContentEncoding    string
	ContentDisposition string
	ContentLanguage    string
	CacheControl       string
	Expires            string // raw header value

	// UserMetadata holds x-amz-meta-* values keyed by the lower-case name
	// without the prefix.
	UserMetadata map[string]string

	// Checksums of the whole object keyed by algorithm ("CRC32", "CRC32C",
	// "CRC64NVME", "SHA1", "SHA256"), base64 as S3 sends them. Only set when
	// the store reported them. ChecksumType is "FULL_OBJECT" or "COMPOSITE".
	Checksums    map[string]string
	ChecksumType string

	// Headers are the store's other response headers that describe the
	// object (IsObjectHeader: object lock, tagging count, storage class,
	// server-side encryption, ...), keyed by lower-case name, to be served
	// as the store sent them.
	Headers map[string]string
}

// DeleteMarkerError is ErrNoSuchKey for a key whose latest version is a
// delete marker: VersionID is the marker's, which S3 sends with the 404
// (x-amz-delete-marker, x-amz-version-id). errors.Is(err, ErrNoSuchKey)
// holds for it.
type DeleteMarkerError struct {
	VersionID string
}

func (e *DeleteMarkerError) Error() string {
	return "store: no such key (a delete marker, version " + e.VersionID + ")"
}

// Unwrap makes a DeleteMarkerError an ErrNoSuchKey.
func (e *DeleteMarkerError) Unwrap() error { return ErrNoSuchKey }

// IsObjectHeader reports whether name (lower case) is a response header
// that describes an object beyond ObjectInfo's own fields, kept in
// ObjectInfo.Headers.
func IsObjectHeader(name string) bool {
	return slices.Contains(objectHeaders[:], name)
}

// objectHeaders are the names IsObjectHeader accepts.
var objectHeaders = [...]string{
	"x-amz-object-lock-mode", "x-amz-object-lock-retain-until-date", "x-amz-object-lock-legal-hold",
	"x-amz-tagging-count", "x-amz-storage-class", "x-amz-website-redirect-location",
	"x-amz-server-side-encryption", "x-amz-server-side-encryption-aws-kms-key-id",
	"x-amz-server-side-encryption-bucket-key-enabled", "x-amz-server-side-encryption-customer-algorithm",
	"x-amz-server-side-encryption-customer-key-md5", "x-amz-replication-status", "x-amz-restore",
	"x-amz-expiration", "x-amz-mp-parts-count",
}

// ObjectHeaderFold is IsObjectHeader of a name in any case (net/http's
// canonical one, say), returning the lower-case name without making one.
func ObjectHeaderFold(name string) (string, bool) {
	for _, h := range objectHeaders {
		if strings.EqualFold(h, name) {
			return h, true
		}
	}
	return "", false
}

// GetOptions qualifies a read.
type GetOptions struct {
	Range *ByteRange // nil reads the whole object
	// IfNoneMatch, when set, makes the read conditional: if the object's
	// ETag equals it, Get returns ErrNotModified and moves no data.
	IfNoneMatch string
	// IfMatch, when set, makes Get fail with ErrPreconditionFailed unless
	// the object's ETag equals it.
	IfMatch string
	// ChecksumMode asks the store to report the object's checksums.
	ChecksumMode bool
}

// PutOptions carries what a PutObject (or CreateMultipartUpload) sets.
type PutOptions struct {
	ContentType        string
	ContentEncoding    string
	ContentDisposition string
	ContentLanguage    string
	CacheControl       string
	Expires            string
	UserMetadata       map[string]string // without the x-amz-meta- prefix
	// Checksum, when set, is forwarded to the store, which verifies it too:
	// algorithm ("CRC32", ...) and base64 value. For CreateMultipartUpload
	// only Algorithm is used.
	ChecksumAlgorithm string
	ChecksumValue     string
	// ContentMD5 (base64), forwarded when the client sent one.
	ContentMD5 string
	// PayloadSHA256 is the body's SHA-256 (hex) as the client signed it
	// (x-amz-content-sha256), forwarded so that the store verifies it too.
	PayloadSHA256 string
	// StreamVerified says the body is verified as it streams by
	// something the store cannot check (aws-chunked chunk signatures, a
	// peer's CRC32C), whose failure cuts it short. Without a checksum of
	// the client's the store client then sends one of its own, so that
	// no store commits a body cut short (versitygw commits a body that
	// ends before its Content-Length).
	StreamVerified bool
	// IfMatch and IfNoneMatch make Put conditional, as the HTTP headers of
	// those names do: Put fails with ErrPreconditionFailed, committing
	// nothing, unless the current object's ETag matches IfMatch, or when
	// it matches IfNoneMatch ("*": any current object). Quotes are
	// optional. Only Put honours them.
	IfMatch, IfNoneMatch string
}

// CompleteOptions parameterise CompleteMultipartUpload: its conditions on
// the object it replaces, judged as PutOptions' IfMatch and IfNoneMatch
// (a refused completion leaves the upload in place).
type CompleteOptions struct {
	IfMatch, IfNoneMatch string
}

// PutResult is what the store answered to a write.
type PutResult struct {
	ETag      string // without quotes
	VersionID string
	Checksums map[string]string
}

// ListOptions parameterise ListObjects (V1 and V2).
type ListOptions struct {
	Prefix     string
	Delimiter  string
	MaxKeys    int    // 0 means the store's default (1000)
	StartAfter string // V2 start-after, V1 marker
	// ContinuationToken is V2's token; empty for V1.
	ContinuationToken string
	FetchOwner        bool
	EncodingTypeURL   bool // ask for URL-encoded keys; results are decoded
	V1                bool // use ListObjects (V1) instead of V2
}

// ListResult is one page of a listing. Keys are never URL-encoded here.
type ListResult struct {
	Objects               []ObjectInfo // Bucket, Key, Size, ETag, LastModified set
	CommonPrefixes        []string
	IsTruncated           bool
	NextContinuationToken string // V2
	NextMarker            string // V1
}

// BucketInfo is one entry of ListBuckets.
type BucketInfo struct {
	Name         string
	CreationDate time.Time
}

// Part is one uploaded part of a multipart upload.
type Part struct {
	PartNumber   int
	ETag         string // without quotes
	Size         int64
	LastModified time.Time
	Checksums    map[string]string
}

// ListPartsResult is one page of ListParts.
type ListPartsResult struct {
	Parts                []Part
	IsTruncated          bool
	NextPartNumberMarker int
	ChecksumAlgorithm    string
}

// CopySource names the source of a CopyObject.
type CopySource struct {
	Bucket, Key string
	VersionID   string
	IfMatch     string
	IfNoneMatch string
}

// CopyOptions says what the copy's metadata is.
type CopyOptions struct {
	// ReplaceMetadata: use Metadata instead of the source's (S3's
	// x-amz-metadata-directive: REPLACE).
	ReplaceMetadata bool
	Metadata        PutOptions
}

// CopyResult is what the store answered to CopyObject.
type CopyResult struct {
	ETag         string
	LastModified time.Time
}

// Store is a remote S3-compatible object store. Implementations are safe for
// concurrent use by any number of goroutines.
type Store interface {
	// Get opens an object for reading. The caller owns and must Close the
	// returned body. info.Size is the whole object's size; the body holds
	// only the requested range. Errors: ErrNoSuchKey, ErrNoSuchBucket,
	// ErrNotModified, ErrPreconditionFailed, ErrInvalidRange,
	// ErrUnavailable, *APIError.
	Get(ctx context.Context, bucket, key string, opts GetOptions) (body io.ReadCloser, info ObjectInfo, rng *ByteRange, err error)
	// Stat returns an object's info without its body.
	Stat(ctx context.Context, bucket, key string) (ObjectInfo, error)
	// Put writes an object of the given size from r (size < 0 when unknown).
	Put(ctx context.Context, bucket, key string, r io.Reader, size int64, opts PutOptions) (PutResult, error)
	// Delete removes an object; deleting a missing object is not an error.
	Delete(ctx context.Context, bucket, key string) error
	// DeleteMany removes up to 1000 objects in one request. The map holds
	// a per-key error for keys that could not be removed; err is set only
	// when the request as a whole failed.
	DeleteMany(ctx context.Context, bucket string, keys []string) (failed map[string]error, err error)
	// Copy copies an object inside the store.
	Copy(ctx context.Context, src CopySource, dstBucket, dstKey string, opts CopyOptions) (CopyResult, error)
	// List returns one page of a bucket listing.
	List(ctx context.Context, bucket string, opts ListOptions) (ListResult, error)

	ListBuckets(ctx context.Context) ([]BucketInfo, error)
	CreateBucket(ctx context.Context, bucket, region string) error
	HeadBucket(ctx context.Context, bucket string) error
	DeleteBucket(ctx context.Context, bucket string) error

	// Multipart upload.
	CreateMultipartUpload(ctx context.Context, bucket, key string, opts PutOptions) (uploadID string, err error)
	UploadPart(ctx context.Context, bucket, key, uploadID string, partNumber int, r io.Reader, size int64, opts PutOptions) (Part, error)
	CompleteMultipartUpload(ctx context.Context, bucket, key, uploadID string, parts []Part, opts CompleteOptions) (PutResult, error)
	AbortMultipartUpload(ctx context.Context, bucket, key, uploadID string) error
	ListParts(ctx context.Context, bucket, key, uploadID string, partNumberMarker, maxParts int) (ListPartsResult, error)
}
