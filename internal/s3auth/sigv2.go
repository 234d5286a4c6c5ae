package s3auth

import (
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// isV2SubResource reports whether a query parameter belongs to the SigV2
// canonicalized resource: S3's documented sub-resources plus the later
// additions that botocore and minio-go sign. Other parameters are unsigned.
// A switch rather than a package map keeps the set immutable.
func isV2SubResource(k string) bool {
	switch k {
	case "accelerate", "acl", "analytics", "cors", "defaultObjectAcl", "delete",
		"encryption", "intelligent-tiering", "inventory", "legal-hold",
		"lifecycle", "location", "logging", "metrics", "notification",
		"object-lock", "ownershipControls", "partNumber", "policy",
		"policyStatus", "publicAccessBlock", "replication", "requestPayment",
		"response-cache-control", "response-content-disposition",
		"response-content-encoding", "response-content-language",
		"response-content-type", "response-expires", "restore", "retention",
		"select", "select-type", "storageClass", "tagging", "torrent",
		"uploadId", "uploads", "versionId", "versioning", "versions", "website":
		return true
	}
	return false
}

// verifyV2Header checks "Authorization: AWS AccessKey:Signature".
func (v *Verifier) verifyV2Header(r *http.Request, q query, rest string) (*authResult, error) {
	ak, sig, ok := strings.Cut(strings.TrimSpace(rest), ":")
	if !ok || ak == "" || sig == "" {
		return nil, fmt.Errorf("%w: expected AWS AccessKey:Signature", ErrAuthHeaderMalformed)
	}
	amzDate := r.Header.Get("X-Amz-Date")
	dateHdr := r.Header.Get("Date")
	stamp := amzDate
	if stamp == "" {
		stamp = dateHdr
	}
	if stamp == "" {
		return nil, ErrMissingDate
	}
	t, err := parseV2Date(stamp)
	if err != nil {
		return nil, err
	}
	if err := v.checkSkew(t); err != nil {
		return nil, err
	}
	secret, err := v.lookup(ak)
	if err != nil {
		return nil, err
	}
	// S3 documents an empty Date line when x-amz-date is present, but some
	// signers (minio-go among them) still write the Date header there; both
	// lines are covered by the signature, so either spelling is authentic.
	dates := []string{dateHdr}
	if amzDate != "" && dateHdr != "" {
		dates = []string{"", dateHdr}
	} else if amzDate != "" {
		dates = []string{""}
	}
	if !v.v2Matches(r, q, secret, sig, dates) {
		return nil, ErrSignatureDoesNotMatch
	}
	return &authResult{method: V2Header, accessKey: ak, payloadHash: r.Header.Get("X-Amz-Content-Sha256")}, nil
}

// verifyV2Presigned checks "?AWSAccessKeyId=..&Expires=..&Signature=..".
func (v *Verifier) verifyV2Presigned(r *http.Request, q query) (*authResult, error) {
	get := func(name string) (string, error) {
		vals := q.values(name)
		if len(vals) != 1 || vals[0] == "" {
			return "", fmt.Errorf("%w: %s must appear exactly once", ErrMalformedPresign, name)
		}
		return vals[0], nil
	}
	ak, err := get("AWSAccessKeyId")
	if err != nil {
		return nil, err
	}
	sig, err := get("Signature")
	if err != nil {
		return nil, err
	}
	expires, err := get("Expires")
	if err != nil {
		return nil, err
	}
	exp, err := strconv.ParseInt(expires, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("%w: Expires %q", ErrMalformedPresign, truncate(expires))
	}
	if v.now().Unix() > exp {
		return nil, ErrExpired
	}
	// SigV2 names an expiry time, not a lifetime; one further away than
	// SigV4's limit (a week) is refused, so a leaked URL is not a key
	// for years.
	if exp-v.now().Unix() > int64(maxPresignTTL/time.Second) {
		return nil, fmt.Errorf("%w: Expires must be less than a week away", ErrMalformedPresign)
	}
	secret, err := v.lookup(ak)
	if err != nil {
		return nil, err
	}
	if !v.v2Matches(r, q, secret, sig, []string{expires}) {
		return nil, ErrSignatureDoesNotMatch
	}
	return &authResult{method: V2Presigned, accessKey: ak, payloadHash: r.Header.Get("X-Amz-Content-Sha256")}, nil
}

func parseV2Date(s string) (time.Time, error) {
	if t, ok := parseHTTPDate(s); ok {
		return t, nil
	}
	if t, err := time.Parse(iso8601Basic, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("%w: %q", ErrMissingDate, truncate(s))
}

// parseHTTPDate accepts the HTTP date formats plus RFC 1123 with a numeric
// zone ("+0000"), which older S3 clients and AWS's own examples send.
func parseHTTPDate(s string) (time.Time, bool) {
	if t, err := http.ParseTime(s); err == nil {
		return t, true
	}
	if t, err := time.Parse(time.RFC1123Z, s); err == nil {
		return t, true
	}
	return time.Time{}, false
}

// v2Matches tries each plausible string to sign. SigV2 leaves room for
// interpretation that SigV4 closed: the resource may be the path as sent
// or its canonical encoding, and for virtual-hosted requests the bucket
// comes from the Host. Every candidate is derived from the same request
// target, so accepting any of them authorizes nothing the client did not.
func (v *Verifier) v2Matches(r *http.Request, q query, secret, sig string, dates []string) bool {
	want, err := base64.StdEncoding.DecodeString(sig)
	if err != nil || len(want) != sha1.Size {
		return false
	}
	prefix := r.Method + "\n" + r.Header.Get("Content-Md5") + "\n" + r.Header.Get("Content-Type") + "\n"
	amz := v2AmzHeaders(r)
	sub := v2SubResourceString(q)

	paths := []string{r.URL.EscapedPath()}
	if enc := encodePath(r.URL.Path); enc != paths[0] {
		paths = append(paths, enc)
	}
	// botocore signs a path-style bucket request ("/bkt") with the
	// resource "/bkt/", as AWS accepts; the slash names the same bucket.
	if p := paths[0]; len(p) > 1 && strings.Count(p, "/") == 1 {
		paths = append(paths, p+"/")
	}
	buckets := []string{""}
	if b := v.virtualHostBucket(r.Host); b != "" {
		buckets = append(buckets, "/"+b)
	}
	m := hmac.New(sha1.New, []byte(secret))
	var sum [sha1.Size]byte
	for _, date := range dates {
		for _, bucket := range buckets {
			for _, path := range paths {
				if path == "" {
					path = "/"
				}
				m.Reset()
				m.Write([]byte(prefix))
				m.Write([]byte(date))
				m.Write([]byte{'\n'})
				m.Write([]byte(amz))
				m.Write([]byte(bucket))
				m.Write([]byte(path))
				m.Write([]byte(sub))
				if hmac.Equal(m.Sum(sum[:0]), want) {
					return true
				}
			}
		}
	}
	return false
}

// v2AmzHeaders renders the CanonicalizedAmzHeaders: lower-case x-amz-*
// names, sorted, values trimmed and joined by commas, one per line.
func v2AmzHeaders(r *http.Request) string {
	var names []string
	for name := range r.Header {
		if len(name) >= 6 && strings.EqualFold(name[:6], "x-amz-") {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return ""
	}
	slices.SortFunc(names, func(a, b string) int { return strings.Compare(strings.ToLower(a), strings.ToLower(b)) })
	var b strings.Builder
	for _, name := range names {
		b.WriteString(strings.ToLower(name))
		b.WriteByte(':')
		for i, val := range r.Header[name] {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strings.TrimSpace(val))
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// v2SubResourceString renders "?k&k2=v2" for the signed sub-resources,
// sorted by name, with values decoded as S3 specifies.
func v2SubResourceString(q query) string {
	var pairs []queryPair
	for _, p := range q {
		if isV2SubResource(p.key) {
			pairs = append(pairs, p)
		}
	}
	if len(pairs) == 0 {
		return ""
	}
	slices.SortStableFunc(pairs, func(a, b queryPair) int { return strings.Compare(a.key, b.key) })
	var b strings.Builder
	for i, p := range pairs {
		if i == 0 {
			b.WriteByte('?')
		} else {
			b.WriteByte('&')
		}
		b.WriteString(p.key)
		if p.value != "" {
			b.WriteByte('=')
			b.WriteString(p.value)
		}
	}
	return b.String()
}

// virtualHostBucket returns the bucket named by a virtual-hosted-style
// Host under one of the configured domains, or "".
func (v *Verifier) virtualHostBucket(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.ToLower(host)
	for _, d := range v.domains {
		if b, ok := strings.CutSuffix(host, "."+d); ok && b != "" {
			return b
		}
	}
	return ""
}
