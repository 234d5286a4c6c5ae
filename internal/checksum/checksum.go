// Package checksum computes and checks the integrity values S3 clients attach
// to request bodies: the x-amz-checksum-* family (CRC32, CRC32C, CRC64NVME,
// SHA1, SHA256) and the older Content-MD5.
//
// S3 sends every one of these as the standard base64 of the big-endian digest,
// so that is the only textual form this package reads or writes. Hoard checks
// them while the body streams past rather than after buffering it, because an
// upload must be rejected before it can be stored or cached.
package checksum

import (
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"net/http"
	"strings"

	"github.com/minio/crc64nvme"
)

// Sentinel errors. Callers wrap or test them with errors.Is; the HTTP layer
// maps each to the S3 error code named in its comment.
var (
	// ErrBadDigest means the body's MD5 differs from its Content-MD5 header.
	// S3: BadDigest, 400.
	ErrBadDigest = errors.New("checksum: content-md5 does not match the body")

	// ErrInvalidDigest means the Content-MD5 header is not the base64 of a
	// 16-byte digest. S3: InvalidDigest, 400.
	ErrInvalidDigest = errors.New("checksum: content-md5 is malformed")

	// ErrChecksumMismatch means the body's digest differs from the value the
	// client declared in an x-amz-checksum-* header or trailer.
	// S3: XAmzContentChecksumMismatch, 400.
	ErrChecksumMismatch = errors.New("checksum: declared checksum does not match the body")

	// ErrInvalidChecksum means an x-amz-checksum-* value is not the base64 of
	// a digest of the right length, or more than one checksum was declared.
	// S3: InvalidRequest, 400.
	ErrInvalidChecksum = errors.New("checksum: checksum value is malformed")

	// ErrUnsupportedAlgorithm means a checksum algorithm name is not one S3
	// defines. S3: InvalidRequest, 400.
	ErrUnsupportedAlgorithm = errors.New("checksum: unsupported checksum algorithm")
)

// Algorithm names an S3 additional-checksum algorithm. Its value is the
// upper-case spelling S3 uses in x-amz-checksum-algorithm and
// x-amz-sdk-checksum-algorithm.
type Algorithm string

// The algorithms S3 defines for additional checksums.
const (
	CRC32     Algorithm = "CRC32"
	CRC32C    Algorithm = "CRC32C"
	CRC64NVME Algorithm = "CRC64NVME"
	SHA1      Algorithm = "SHA1"
	SHA256    Algorithm = "SHA256"
)

// headerPrefix starts every additional-checksum header name.
const headerPrefix = "x-amz-checksum-"

// Algorithms returns every supported algorithm in a fixed order. It returns a
// new slice each call so callers cannot alter the set.
func Algorithms() []Algorithm {
	return []Algorithm{CRC32, CRC32C, CRC64NVME, SHA1, SHA256}
}

// ParseAlgorithm accepts an algorithm name in any letter case, as clients
// are inconsistent about it ("crc32c" in trailers, "CRC32C" in headers).
func ParseAlgorithm(s string) (Algorithm, error) {
	a := Algorithm(strings.ToUpper(strings.TrimSpace(s)))
	if !a.Valid() {
		return "", fmt.Errorf("%w: %q", ErrUnsupportedAlgorithm, s)
	}
	return a, nil
}

// ParseHeaderName maps a header or trailer name such as
// "x-amz-checksum-crc32c" (any case) to its algorithm.
func ParseHeaderName(name string) (Algorithm, error) {
	lower := strings.ToLower(strings.TrimSpace(name))
	suffix, ok := strings.CutPrefix(lower, headerPrefix)
	if !ok {
		return "", fmt.Errorf("%w: %q is not a checksum header", ErrUnsupportedAlgorithm, name)
	}
	return ParseAlgorithm(suffix)
}

// Valid reports whether a is one of the defined algorithms.
func (a Algorithm) Valid() bool {
	switch a {
	case CRC32, CRC32C, CRC64NVME, SHA1, SHA256:
		return true
	}
	return false
}

// String returns the algorithm's S3 spelling.
func (a Algorithm) String() string { return string(a) }

// HeaderName returns the lower-case header that carries a's value, for
// example "x-amz-checksum-crc32". Trailers use the same name.
func (a Algorithm) HeaderName() string {
	switch a { // constants: read on every request
	case CRC32:
		return "x-amz-checksum-crc32"
	case CRC32C:
		return "x-amz-checksum-crc32c"
	case CRC64NVME:
		return "x-amz-checksum-crc64nvme"
	case SHA1:
		return "x-amz-checksum-sha1"
	case SHA256:
		return "x-amz-checksum-sha256"
	}
	return headerPrefix + strings.ToLower(string(a))
}

// canonicalHeaderName is HeaderName as net/http keys it in an
// http.Header ("X-Amz-Checksum-Crc32c"), so that a lookup needs no
// canonicalization.
func (a Algorithm) canonicalHeaderName() string {
	switch a {
	case CRC32:
		return "X-Amz-Checksum-Crc32"
	case CRC32C:
		return "X-Amz-Checksum-Crc32c"
	case CRC64NVME:
		return "X-Amz-Checksum-Crc64nvme"
	case SHA1:
		return "X-Amz-Checksum-Sha1"
	case SHA256:
		return "X-Amz-Checksum-Sha256"
	}
	return http.CanonicalHeaderKey(a.HeaderName())
}

// algorithms is Algorithms without an allocation, for the request path.
var algorithms = [...]Algorithm{CRC32, CRC32C, CRC64NVME, SHA1, SHA256}

// Size returns the digest length in bytes, or 0 for an undefined algorithm.
func (a Algorithm) Size() int {
	switch a {
	case CRC32, CRC32C:
		return crc32.Size
	case CRC64NVME:
		return crc64nvme.Size
	case SHA1:
		return sha1.Size
	case SHA256:
		return sha256.Size
	}
	return 0
}

// New returns a fresh hash for a. Its Sum is the big-endian digest S3
// encodes. New panics on an undefined algorithm, like crypto.Hash.New,
// because callers are expected to have gone through ParseAlgorithm.
func New(a Algorithm) hash.Hash {
	switch a {
	case CRC32:
		return crc32.NewIEEE()
	case CRC32C:
		return crc32.New(crc32.MakeTable(crc32.Castagnoli))
	case CRC64NVME:
		return crc64nvme.New()
	case SHA1:
		return sha1.New()
	case SHA256:
		return sha256.New()
	}
	panic("checksum: New called with undefined algorithm " + string(a))
}

// Encode returns the wire form of a digest: standard base64 with padding.
func Encode(sum []byte) string {
	return base64.StdEncoding.EncodeToString(sum)
}

// Sum returns the wire form of a's digest over data.
func Sum(a Algorithm, data []byte) string {
	h := New(a)
	h.Write(data)
	return Encode(h.Sum(nil))
}

// ParseValue decodes a checksum value and checks that its length suits a,
// so a malformed header is refused before any body is read.
func ParseValue(a Algorithm, value string) ([]byte, error) {
	if !a.Valid() {
		return nil, fmt.Errorf("%w: %q", ErrUnsupportedAlgorithm, string(a))
	}
	sum, err := base64.StdEncoding.DecodeString(strings.TrimSpace(value))
	if err != nil || len(sum) != a.Size() {
		return nil, fmt.Errorf("%w: %s is not a base64 %d-byte digest", ErrInvalidChecksum, a.HeaderName(), a.Size())
	}
	return sum, nil
}

// ParseContentMD5 decodes a Content-MD5 header value.
func ParseContentMD5(value string) ([]byte, error) {
	sum, err := base64.StdEncoding.DecodeString(strings.TrimSpace(value))
	if err != nil || len(sum) != md5.Size {
		return nil, fmt.Errorf("%w: not a base64 16-byte digest", ErrInvalidDigest)
	}
	return sum, nil
}

// FromHeaders finds the single x-amz-checksum-<algorithm> header in h and
// returns its algorithm and value. ok is false when there is none. S3 allows
// one additional checksum per request, so two (or one header repeated) is
// ErrInvalidChecksum; a malformed value is ErrInvalidChecksum too.
//
// Headers such as x-amz-checksum-mode and x-amz-checksum-type share the
// prefix but are not checksums; only names of defined algorithms count.
func FromHeaders(h http.Header) (algo Algorithm, value string, ok bool, err error) {
	for _, a := range algorithms {
		vals := h[a.canonicalHeaderName()]
		if len(vals) == 0 {
			continue
		}
		if ok || len(vals) > 1 {
			return "", "", false, fmt.Errorf("%w: more than one x-amz-checksum header", ErrInvalidChecksum)
		}
		algo, value, ok = a, strings.TrimSpace(vals[0]), true
	}
	if !ok {
		return "", "", false, nil
	}
	if _, err := ParseValue(algo, value); err != nil {
		return "", "", false, err
	}
	return algo, value, true, nil
}
