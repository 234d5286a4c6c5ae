package s3store

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/minio/minio-go/v7"

	"github.com/hoard-io/hoard/internal/store"
)

// checksumAlgorithms are the S3 checksum algorithms hoard knows, in the
// upper-case spelling S3 uses in x-amz-checksum-algorithm and XML.
func checksumAlgorithms() []string {
	return []string{"CRC32", "CRC32C", "CRC64NVME", "SHA1", "SHA256"}
}

// checksumHeader is the x-amz-checksum-<algo> header of an algorithm.
func checksumHeader(algo string) string {
	return "x-amz-checksum-" + strings.ToLower(algo)
}

// minioChecksumType maps an S3 algorithm name to minio-go's type; ok is
// false for algorithms hoard does not know.
func minioChecksumType(algo string) (minio.ChecksumType, bool) {
	switch strings.ToUpper(algo) {
	case "CRC32":
		return minio.ChecksumCRC32, true
	case "CRC32C":
		return minio.ChecksumCRC32C, true
	case "CRC64NVME":
		return minio.ChecksumCRC64NVME, true
	case "SHA1":
		return minio.ChecksumSHA1, true
	case "SHA256":
		return minio.ChecksumSHA256, true
	}
	return minio.ChecksumNone, false
}

// trimETag strips the quotes (and a weak-validator prefix) S3 puts around
// ETags; hoard compares bare values.
func trimETag(etag string) string {
	etag = strings.TrimPrefix(strings.TrimSpace(etag), "W/")
	return strings.Trim(etag, `"`)
}

// quoteETag is the form an ETag takes in If-Match / If-None-Match: quoted,
// unless it is the "*" wildcard or already quoted.
func quoteETag(etag string) string {
	if etag == "*" || strings.HasPrefix(etag, `"`) || strings.HasPrefix(etag, `W/"`) {
		return etag
	}
	return `"` + etag + `"`
}

// rangeHeader renders r as an HTTP Range header value.
func rangeHeader(r store.ByteRange) (string, error) {
	switch {
	case r.Start < 0:
		if r.End >= 0 {
			return "", fmt.Errorf("suffix range %d with end %d: %w", r.Start, r.End, store.ErrInvalidRange)
		}
		return "bytes=" + strconv.FormatInt(r.Start, 10), nil // "-n"
	case r.End < 0:
		return "bytes=" + strconv.FormatInt(r.Start, 10) + "-", nil
	case r.End < r.Start:
		return "", fmt.Errorf("range %d-%d: %w", r.Start, r.End, store.ErrInvalidRange)
	}
	return fmt.Sprintf("bytes=%d-%d", r.Start, r.End), nil
}

// parseContentRange parses "bytes a-b/total" (total may be "*", reported
// as -1).
func parseContentRange(v string) (rng store.ByteRange, total int64, err error) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(v), "bytes ")
	if !ok {
		return rng, 0, fmt.Errorf("content-range %q: not a byte range", v)
	}
	span, size, ok := strings.Cut(rest, "/")
	if !ok {
		return rng, 0, fmt.Errorf("content-range %q: no total", v)
	}
	first, last, ok := strings.Cut(span, "-")
	if !ok {
		return rng, 0, fmt.Errorf("content-range %q: no span", v)
	}
	if rng.Start, err = strconv.ParseInt(first, 10, 64); err != nil {
		return rng, 0, fmt.Errorf("content-range %q: %w", v, err)
	}
	if rng.End, err = strconv.ParseInt(last, 10, 64); err != nil {
		return rng, 0, fmt.Errorf("content-range %q: %w", v, err)
	}
	if rng.Start < 0 || rng.End < rng.Start {
		return rng, 0, fmt.Errorf("content-range %q: bad span", v)
	}
	total = -1
	if size != "*" {
		if total, err = strconv.ParseInt(size, 10, 64); err != nil {
			return rng, 0, fmt.Errorf("content-range %q: %w", v, err)
		}
		if total <= rng.End {
			return rng, 0, fmt.Errorf("content-range %q: span beyond total", v)
		}
	}
	return rng, total, nil
}

// infoFromHeader reads an object's description from the headers of a GET
// or HEAD answer. For a 206 the size comes from Content-Range's total and
// rng is the range the body holds; otherwise rng is nil and the size is
// Content-Length.
func infoFromHeader(bucket, key string, status int, h http.Header) (info store.ObjectInfo, rng *store.ByteRange, err error) {
	info = store.ObjectInfo{
		Bucket:             bucket,
		Key:                key,
		Size:               -1,
		ETag:               trimETag(h.Get("ETag")),
		VersionID:          h.Get("x-amz-version-id"),
		ContentType:        h.Get("Content-Type"),
		ContentEncoding:    storedEncoding(h.Get("Content-Encoding")),
		ContentDisposition: h.Get("Content-Disposition"),
		ContentLanguage:    h.Get("Content-Language"),
		CacheControl:       h.Get("Cache-Control"),
		Expires:            h.Get("Expires"),
		ChecksumType:       h.Get("x-amz-checksum-type"),
	}
	if v := h.Get("Last-Modified"); v != "" {
		// A malformed date is not worth failing a read over; the ETag
		// is what hoard validates with.
		if t, perr := http.ParseTime(v); perr == nil {
			info.LastModified = t.UTC()
		}
	}
	if status == http.StatusPartialContent {
		r, total, perr := parseContentRange(h.Get("Content-Range"))
		if perr != nil {
			return info, nil, perr
		}
		rng, info.Size = &r, total
	} else if v := h.Get("Content-Length"); v != "" {
		if info.Size, err = strconv.ParseInt(v, 10, 64); err != nil || info.Size < 0 {
			return info, nil, fmt.Errorf("content-length %q: invalid", v)
		}
	}
	for name, vals := range h {
		lower := strings.ToLower(name)
		if len(vals) == 0 {
			continue
		}
		if meta, ok := strings.CutPrefix(lower, "x-amz-meta-"); ok {
			if info.UserMetadata == nil {
				info.UserMetadata = make(map[string]string)
			}
			info.UserMetadata[meta] = strings.TrimPrefix(vals[0], rawMetaMark)
		} else if store.IsObjectHeader(lower) {
			if info.Headers == nil {
				info.Headers = make(map[string]string)
			}
			info.Headers[lower] = vals[0]
		}
	}
	for _, algo := range checksumAlgorithms() {
		if v := h.Get(checksumHeader(algo)); v != "" {
			if info.Checksums == nil {
				info.Checksums = make(map[string]string)
			}
			info.Checksums[algo] = v
		}
	}
	return info, rng, nil
}

// checksumsOf collects the checksums minio-go parsed into separate fields.
func checksumsOf(crc32, crc32c, crc64nvme, sha1, sha256 string) map[string]string {
	var m map[string]string
	for algo, v := range map[string]string{
		"CRC32": crc32, "CRC32C": crc32c, "CRC64NVME": crc64nvme, "SHA1": sha1, "SHA256": sha256,
	} {
		if v == "" {
			continue
		}
		if m == nil {
			m = make(map[string]string)
		}
		m[algo] = v
	}
	return m
}

// defaultContentType is what S3 records for an object written without a
// Content-Type.
const defaultContentType = "binary/octet-stream"

// putOptions translates hoard's write options into minio-go's. User
// metadata keys are sent with their x-amz-meta- prefix already on, so
// minio-go never mistakes one for a standard header. The raw Expires
// value is sent as is (S3 stores any string there).
func putOptions(o store.PutOptions) (minio.PutObjectOptions, error) {
	ct := o.ContentType
	if ct == "" {
		// minio-go never sends a write without a Content-Type and would
		// send application/octet-stream; S3 and MinIO record this for a
		// write that has none.
		ct = defaultContentType
	}
	po := minio.PutObjectOptions{
		ContentType:        ct,
		ContentEncoding:    o.ContentEncoding,
		ContentDisposition: o.ContentDisposition,
		ContentLanguage:    o.ContentLanguage,
		CacheControl:       o.CacheControl,
		UserMetadata:       make(map[string]string, len(o.UserMetadata)+2),
	}
	for k, v := range o.UserMetadata {
		po.UserMetadata["x-amz-meta-"+strings.ToLower(k)] = v
	}
	if o.Expires != "" {
		po.UserMetadata["Expires"] = o.Expires
	}
	// minio-go quotes what it is given: trimming the outer quotes keeps a
	// list ("a", "b") intact.
	if o.IfMatch != "" {
		po.SetMatchETag(strings.Trim(o.IfMatch, `"`))
	}
	if o.IfNoneMatch != "" {
		po.SetMatchETagExcept(strings.Trim(o.IfNoneMatch, `"`))
	}
	if o.ChecksumAlgorithm != "" {
		if _, ok := minioChecksumType(o.ChecksumAlgorithm); !ok {
			return po, &store.APIError{
				Code: "InvalidRequest", StatusCode: http.StatusBadRequest,
				Message: "unsupported checksum algorithm " + o.ChecksumAlgorithm,
			}
		}
	}
	return po, nil
}

// storedEncoding drops "aws-chunked" from a Content-Encoding: it describes
// how an upload was framed, and S3 stores objects without it, but some
// stores (versitygw 1.8) keep it.
func storedEncoding(v string) string {
	if !strings.Contains(strings.ToLower(v), "aws-chunked") {
		return v
	}
	var keep []string
	for _, tok := range strings.Split(v, ",") {
		if tok = strings.TrimSpace(tok); tok != "" && !strings.EqualFold(tok, "aws-chunked") {
			keep = append(keep, tok)
		}
	}
	return strings.Join(keep, ",")
}

// rawMetaMark prefixes, on their way from the store to minio-go, the
// x-amz-meta-* values that look MIME-encoded (RFC 2047, "=?charset?..."):
// minio-go decodes such values in place, in the headers it parses and in
// those it hands back, where S3 and the stores keep and send the encoded
// word as it was written. Marked, they pass minio-go as they are, and
// infoFromHeader takes the mark off. A header value cannot hold a NUL on
// the wire, so no value of the store's starts with the mark.
const rawMetaMark = "\x00raw:"

// rawMetaTransport marks the MIME-encoded-looking metadata values of the
// store's answers (rawMetaMark) for the typed client; requests passed
// through use the transport beneath it and see the answers as they are.
type rawMetaTransport struct{ rt http.RoundTripper }

func (t rawMetaTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.rt.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	for name, vals := range resp.Header {
		if len(name) < len("X-Amz-Meta-") || !strings.EqualFold(name[:len("X-Amz-Meta-")], "X-Amz-Meta-") {
			continue
		}
		for i, v := range vals {
			if strings.HasPrefix(v, "=?") {
				vals[i] = rawMetaMark + v
			}
		}
	}
	return resp, nil
}
