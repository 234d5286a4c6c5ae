package s3store

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// emptySHA256 is hex(sha256("")): the payload hash of a request without
// a body.
const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// v4Signer signs the requests hoard builds itself on the read path (GET)
// with SigV4, in one pass over a reused buffer: minio-go's signer builds
// the canonical request from maps and derives the signing key anew for
// every request, a third of a small GET's client-side cost. The signing
// key is derived once a day (the scope's date) and kept.
type v4Signer struct {
	accessKey, secretKey, region string
	day                          atomic.Pointer[dayKey]
}

// dayKey is the signing key of one scope date.
type dayKey struct {
	date  string // yyyymmdd
	scope string // date/region/s3/aws4_request
	key   []byte
	// macs holds HMAC-SHA256s keyed with key: a new one hashes the
	// key's two pads, and allocates, on every request.
	macs sync.Pool
}

// mac returns an HMAC-SHA256 keyed with k.key, reset; give it back with
// k.macs.Put.
func (k *dayKey) mac() hash.Hash {
	if h, ok := k.macs.Get().(hash.Hash); ok {
		h.Reset()
		return h
	}
	return hmac.New(sha256.New, k.key)
}

// signedHeader is one header a request is signed with: its name in lower
// case, as the canonical request spells it, and in canonical form, as
// http.Header keys it, and the value sent.
type signedHeader struct{ name, header, value string }

// key returns the signing key and credential scope of date (yyyymmdd).
func (s *v4Signer) key(date string) *dayKey {
	if k := s.day.Load(); k != nil && k.date == date {
		return k
	}
	mac := func(key []byte, data string) []byte {
		h := hmac.New(sha256.New, key)
		h.Write([]byte(data))
		return h.Sum(nil)
	}
	k := mac([]byte("AWS4"+s.secretKey), date)
	k = mac(k, s.region)
	k = mac(k, "s3")
	k = mac(k, "aws4_request")
	dk := &dayKey{date: date, scope: date + "/" + s.region + "/s3/aws4_request", key: k}
	s.day.Store(dk)
	return dk
}

// sign adds X-Amz-Date, X-Amz-Content-Sha256 (the empty body's hash) and
// Authorization to req, a request without a body or query whose URL's
// escaped path is escapedPath. headers are the other headers to sign,
// already set on req, sorted by name, every name after "host" and before
// "x-amz-content-sha256"; host is the Host header sent.
func (s *v4Signer) sign(req *http.Request, now time.Time, host, escapedPath string, headers []signedHeader) {
	var stamp [16]byte
	amzDate := string(now.UTC().AppendFormat(stamp[:0], "20060102T150405Z"))
	dk := s.key(amzDate[:8])

	var buf [512]byte
	b := append(buf[:0], req.Method...)
	b = append(b, '\n')
	b = append(b, escapedPath...)
	b = append(b, "\n\nhost:"...)
	b = append(b, host...)
	b = append(b, '\n')
	for _, h := range headers {
		b = append(b, h.name...)
		b = append(b, ':')
		b = appendCanonicalValue(b, h.value)
		b = append(b, '\n')
	}
	b = append(b, "x-amz-content-sha256:"+emptySHA256+"\nx-amz-date:"...)
	b = append(b, amzDate...)
	b = append(b, "\n\n"...)
	signedStart := len(b)
	b = append(b, "host;"...)
	for _, h := range headers {
		b = append(b, h.name...)
		b = append(b, ';')
	}
	b = append(b, "x-amz-content-sha256;x-amz-date"...)
	signed := string(b[signedStart:])
	b = append(b, '\n')
	b = append(b, emptySHA256...)
	canonical := sha256.Sum256(b)

	b = append(b[:0], "AWS4-HMAC-SHA256\n"...)
	b = append(b, amzDate...)
	b = append(b, '\n')
	b = append(b, dk.scope...)
	b = append(b, '\n')
	b = hex.AppendEncode(b, canonical[:])
	h := dk.mac()
	h.Write(b)
	var sum [sha256.Size]byte
	sig := h.Sum(sum[:0])
	dk.macs.Put(h)

	b = append(b[:0], "AWS4-HMAC-SHA256 Credential="...)
	b = append(b, s.accessKey...)
	b = append(b, '/')
	b = append(b, dk.scope...)
	b = append(b, ", SignedHeaders="...)
	b = append(b, signed...)
	b = append(b, ", Signature="...)
	b = hex.AppendEncode(b, sig)

	req.Header["X-Amz-Date"] = []string{amzDate}
	req.Header["X-Amz-Content-Sha256"] = []string{emptySHA256}
	req.Header["Authorization"] = []string{string(b)}
}

// appendCanonicalValue appends v as SigV4's canonical headers spell a
// value: without leading or trailing spaces, each run of spaces inside
// made one.
func appendCanonicalValue(dst []byte, v string) []byte {
	v = strings.Trim(v, " \t")
	space := false
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c == ' ' || c == '\t' {
			space = true
			continue
		}
		if space {
			dst = append(dst, ' ')
			space = false
		}
		dst = append(dst, c)
	}
	return dst
}

// appendEscapedPath appends p escaped as S3 escapes a path (and
// s3utils.EncodePath does, for valid UTF-8): every byte but A-Z a-z 0-9
// - _ . ~ / as %XX in upper case.
func appendEscapedPath(dst []byte, p string) []byte {
	const hexDigits = "0123456789ABCDEF"
	for i := 0; i < len(p); i++ {
		c := p[i]
		if 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' ||
			c == '-' || c == '_' || c == '.' || c == '~' || c == '/' {
			dst = append(dst, c)
			continue
		}
		dst = append(dst, '%', hexDigits[c>>4], hexDigits[c&15])
	}
	return dst
}
