package s3api

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hoard-io/hoard/internal/checksum"
	"github.com/hoard-io/hoard/internal/store"
)

// validBucketName applies S3's naming rules for new-style buckets:
// 3-63 characters of lower-case letters, digits, '.' and '-', starting and
// ending with a letter or digit, no "..", not an IP address.
func validBucketName(b string) bool {
	if len(b) < 3 || len(b) > 63 {
		return false
	}
	dots := 0
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-':
			if i == 0 || i == len(b)-1 {
				return false
			}
		case c == '.':
			if i == 0 || i == len(b)-1 || b[i-1] == '.' {
				return false
			}
			dots++
		default:
			return false
		}
	}
	if dots == 3 {
		allDigits := true
		for _, p := range strings.Split(b, ".") {
			if _, err := strconv.Atoi(p); err != nil {
				allDigits = false
			}
		}
		if allDigits {
			return false
		}
	}
	return true
}

// checkKey refuses keys that are too long or that could turn into a path
// outside their bucket anywhere downstream (stores on file systems): NUL,
// "." and ".." segments. MinIO refuses them too (with its own codes);
// hoard refuses them whatever its store would do.
func checkKey(k string) error {
	if len(k) > maxKeyLen {
		return errKeyTooLong
	}
	if strings.IndexByte(k, 0) >= 0 {
		return errInvalidKey
	}
	for rest := k; ; {
		seg, tail, more := strings.Cut(rest, "/")
		if seg == "." || seg == ".." {
			return errInvalidKey
		}
		if !more {
			return nil
		}
		rest = tail
	}
}

// storeOnlyKey reports whether a key is the store's alone to judge: keys
// of white space only, with control characters (tab aside), or not valid UTF-8 (MinIO
// takes the first two and refuses the last, which its typed client and
// the cache's peers do not carry as they are). Requests naming one pass
// through, uncached, and the store answers them.
func storeOnlyKey(k string) bool {
	if k == "" {
		return false
	}
	if strings.TrimSpace(k) == "" || !utf8.ValidString(k) {
		return true
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 && k[i] != '\t' || k[i] == 0x7f {
			return true
		}
	}
	return false
}

// parseRange reads a Range header. Per RFC 9110 a header that does not
// parse, or asks for several ranges (which S3 does not serve), is ignored:
// the whole object is sent. ok is false in that case.
func parseRange(h string) (r store.ByteRange, ok bool) {
	spec, found := strings.CutPrefix(strings.TrimSpace(h), "bytes=")
	if !found || strings.Contains(spec, ",") {
		return r, false
	}
	first, last, found := strings.Cut(strings.TrimSpace(spec), "-")
	if !found {
		return r, false
	}
	if first == "" { // suffix
		n, err := strconv.ParseInt(last, 10, 64)
		if err != nil || n < 0 {
			return r, false
		}
		if n == 0 {
			// "bytes=-0" is syntactically fine and never satisfiable.
			return store.ByteRange{Start: 0, End: -2}, true
		}
		return store.ByteRange{Start: -n, End: -1}, true
	}
	start, err := strconv.ParseInt(first, 10, 64)
	if err != nil || start < 0 {
		return r, false
	}
	end := int64(-1)
	if last != "" {
		if end, err = strconv.ParseInt(last, 10, 64); err != nil || end < start {
			return r, false
		}
	}
	return store.ByteRange{Start: start, End: end}, true
}

// unreadRange reports whether h has a Range header parseRange cannot
// read.
func unreadRange(h http.Header) bool {
	v, ok := h["Range"]
	if !ok {
		return false
	}
	if len(v) != 1 {
		return true
	}
	_, parsed := parseRange(v[0])
	return !parsed
}

// condResult is the outcome of evaluating conditional request headers.
type condResult int

const (
	condOK condResult = iota
	condNotModified
	condPreconditionFailed
)

// checkConditions evaluates If-Match, If-Unmodified-Since, If-None-Match and
// If-Modified-Since against an object, in RFC 9110's order.
func checkConditions(h http.Header, info store.ObjectInfo) condResult {
	lm := info.LastModified.Truncate(time.Second)
	if im := h.Get("If-Match"); im != "" {
		if !etagListMatches(im, info.ETag) {
			return condPreconditionFailed
		}
	} else if ius := h.Get("If-Unmodified-Since"); ius != "" {
		if t, err := http.ParseTime(ius); err == nil && lm.After(t) {
			return condPreconditionFailed
		}
	}
	if inm := h.Get("If-None-Match"); inm != "" {
		if etagListMatches(inm, info.ETag) {
			return condNotModified
		}
	} else if ims := h.Get("If-Modified-Since"); ims != "" {
		if t, err := http.ParseTime(ims); err == nil && !lm.After(t) {
			return condNotModified
		}
	}
	return condOK
}

func etagListMatches(list, etag string) bool {
	for _, t := range strings.Split(list, ",") {
		t = strings.TrimSpace(t)
		if t == "*" {
			return true
		}
		t = strings.TrimPrefix(t, "W/")
		if strings.Trim(t, `"`) == etag {
			return true
		}
	}
	return false
}

// putOptions reads what a PutObject or CreateMultipartUpload sets.
func putOptions(h http.Header) (store.PutOptions, error) {
	o := store.PutOptions{
		ContentType:        h.Get("Content-Type"),
		ContentEncoding:    h.Get("Content-Encoding"),
		ContentDisposition: h.Get("Content-Disposition"),
		ContentLanguage:    h.Get("Content-Language"),
		CacheControl:       h.Get("Cache-Control"),
		Expires:            h.Get("Expires"),
		ContentMD5:         h.Get("Content-MD5"),
	}
	// aws-chunked is the transport framing, not the object's encoding.
	var encs []string
	for _, e := range strings.Split(o.ContentEncoding, ",") {
		if e = strings.TrimSpace(e); e != "" && !strings.EqualFold(e, "aws-chunked") {
			encs = append(encs, e)
		}
	}
	o.ContentEncoding = strings.Join(encs, ",")
	size := 0
	for name, vals := range h {
		lname := strings.ToLower(name)
		if m, ok := strings.CutPrefix(lname, "x-amz-meta-"); ok && len(vals) > 0 {
			if o.UserMetadata == nil {
				o.UserMetadata = map[string]string{}
			}
			// A repeated header keeps every value, joined as S3 and
			// MinIO join them.
			v := strings.Join(vals, ",")
			o.UserMetadata[m] = v
			size += len(m) + len(v)
		}
	}
	if size > maxMetaSize {
		return o, errMetadataTooLarge
	}
	algo, value, ok, err := checksum.FromHeaders(h)
	if err != nil {
		return o, err
	}
	if ok {
		o.ChecksumAlgorithm, o.ChecksumValue = string(algo), value
	} else if a := declaredChecksumAlgorithm(h); a != "" {
		o.ChecksumAlgorithm = a
	}
	return o, nil
}

// declaredChecksumAlgorithm is the algorithm a client announced without a
// value up front: in a trailer, or for a multipart upload.
func declaredChecksumAlgorithm(h http.Header) string {
	for _, name := range []string{"x-amz-checksum-algorithm", "x-amz-sdk-checksum-algorithm"} {
		if v := h.Get(name); v != "" {
			if a, err := checksum.ParseAlgorithm(v); err == nil {
				return string(a)
			}
		}
	}
	if t := h.Get("x-amz-trailer"); t != "" {
		if a, err := checksum.ParseHeaderName(strings.TrimSpace(t)); err == nil {
			return string(a)
		}
	}
	return ""
}

// setObjectHeaders writes an object's metadata as response headers.
func setObjectHeaders(h http.Header, info store.ObjectInfo) {
	// Keys in net/http's canonical form, assigned directly: this runs on
	// every hit, and Set would canonicalize each name again.
	// The values share one backing array, as net/http's own header
	// parsing does, each capped at its length so that an Add copies.
	vals := make([]string, 0, 10)
	set := func(k, v string) {
		vals = append(vals, v)
		h[k] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	set("Etag", `"`+info.ETag+`"`)
	if !info.LastModified.IsZero() {
		set("Last-Modified", httpDate(info.LastModified))
	}
	set("Accept-Ranges", "bytes")
	ct := info.ContentType
	if ct == "" {
		ct = "binary/octet-stream"
	}
	set("Content-Type", ct)
	for _, f := range [...]struct{ name, v string }{
		{"Content-Encoding", info.ContentEncoding},
		{"Content-Disposition", info.ContentDisposition},
		{"Content-Language", info.ContentLanguage},
		{"Cache-Control", info.CacheControl},
		{"Expires", info.Expires},
		{"X-Amz-Version-Id", info.VersionID},
	} {
		if f.v != "" {
			set(f.name, f.v)
		}
	}
	for k, v := range info.Headers {
		h.Set(k, v)
	}
	for k, v := range info.UserMetadata {
		// Lower case as S3 sends them: SDKs hand the suffix to the user
		// as is, and Go would otherwise canonicalize it to "X-Amz-Meta-K".
		h["x-amz-meta-"+strings.ToLower(k)] = []string{v}
	}
}

// setChecksumHeaders sends the object's checksums: only for whole-object
// responses, where they describe the bytes sent, and only when asked: in
// the header, or in the query of a presigned URL.
func setChecksumHeaders(h http.Header, r *http.Request, q url.Values, info store.ObjectInfo) {
	mode := r.Header.Get("X-Amz-Checksum-Mode")
	if mode == "" {
		mode = q.Get("X-Amz-Checksum-Mode") + q.Get("x-amz-checksum-mode")
	}
	if !strings.EqualFold(mode, "ENABLED") {
		return
	}
	for algo, v := range info.Checksums {
		a, err := checksum.ParseAlgorithm(algo)
		if err != nil || v == "" {
			continue
		}
		h.Set(a.HeaderName(), v)
	}
	if info.ChecksumType != "" && len(info.Checksums) > 0 {
		h.Set("x-amz-checksum-type", info.ChecksumType)
	}
}

// applyOverrides honours the response-* query parameters of GetObject and
// HeadObject.
func applyOverrides(h http.Header, rq *request) {
	if len(rq.query) == 0 {
		return
	}
	for _, o := range [...]struct{ param, header string }{
		{"response-content-type", "Content-Type"},
		{"response-content-language", "Content-Language"},
		{"response-expires", "Expires"},
		{"response-cache-control", "Cache-Control"},
		{"response-content-disposition", "Content-Disposition"},
		{"response-content-encoding", "Content-Encoding"},
	} {
		if v := rq.query.Get(o.param); v != "" {
			h[o.header] = []string{v}
		}
	}
}

func contentRange(r store.ByteRange, size int64) string {
	return fmt.Sprintf("bytes %d-%d/%d", r.Start, r.End, size)
}
