package s3auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

const (
	v4Algorithm     = "AWS4-HMAC-SHA256"
	v4aAlgorithm    = "AWS4-ECDSA-P256-SHA256"
	iso8601Basic    = "20060102T150405Z"
	scopeDateLayout = "20060102"
	scopeService    = "s3"
	scopeTerminator = "aws4_request"
	maxPresignTTL   = 7 * 24 * time.Hour // 604800 s, S3's limit on X-Amz-Expires

	// emptySHA256 is hex(sha256("")), which chunk strings-to-sign carry in
	// place of the (absent) chunk headers.
	emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
)

// Payload modes carried by x-amz-content-sha256.
const (
	unsignedPayload        = "UNSIGNED-PAYLOAD"
	streamingSigned        = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
	streamingSignedTrailer = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
	streamingUnsignedTrail = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
	streamingV4APrefix     = "STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD"
)

// v4Params are the signature inputs common to header and query signing.
type v4Params struct {
	accessKey     string
	date          string // as the scope spells it, yyyymmdd
	region        string
	service       string
	scope         string // date/region/service/aws4_request, a part of the credential
	signedHeaders []string
	signedRaw     string // the SignedHeaders list exactly as sent
	signature     string
}

// verifyV4Header checks an "AWS4-HMAC-SHA256 Credential=...,
// SignedHeaders=..., Signature=..." request.
func (v *Verifier) verifyV4Header(r *http.Request, q query, rest string) (*authResult, error) {
	p, err := parseV4Authorization(rest)
	if err != nil {
		return nil, err
	}
	if err := v.checkScope(p, ErrAuthHeaderMalformed); err != nil {
		return nil, err
	}
	t, amzDate, err := requestDate(r)
	if err != nil {
		return nil, err
	}
	if !sameDate(t, p.date) {
		return nil, fmt.Errorf("%w: credential date %q does not match request date %q", ErrAuthHeaderMalformed, p.date, amzDate)
	}
	if err := v.checkSkew(t); err != nil {
		return nil, err
	}
	payload := r.Header.Get("X-Amz-Content-Sha256")
	if payload == "" {
		return nil, ErrMissingContentSHA256
	}
	if err := checkPayloadMode(payload); err != nil {
		return nil, err
	}
	if err := checkSignedHeaders(r, p.signedHeaders); err != nil {
		return nil, err
	}
	secret, err := v.lookup(p.accessKey)
	if err != nil {
		return nil, err
	}
	key := v.keys.get(secret, p.date, p.region, p.service)
	scope := p.scope
	if !v4Matches(r, q, p, key, amzDate, scope, payload, false) {
		return nil, ErrSignatureDoesNotMatch
	}
	return &authResult{
		method: V4Header, accessKey: p.accessKey, payloadHash: payload,
		signingKey: key.key, amzDate: amzDate, scope: scope, seedSig: p.signature,
		secret: secret, signedAt: t, signedHeaders: p.signedHeaders,
	}, nil
}

// verifyV4Presigned checks a query-string-signed request (X-Amz-*).
func (v *Verifier) verifyV4Presigned(r *http.Request, q query) (*authResult, error) {
	get := func(name string) (string, error) {
		vals := q.values(name)
		if len(vals) != 1 || vals[0] == "" {
			return "", fmt.Errorf("%w: %s must appear exactly once", ErrMalformedPresign, name)
		}
		return vals[0], nil
	}
	algo, err := get("X-Amz-Algorithm")
	if err != nil {
		return nil, err
	}
	switch algo {
	case v4Algorithm:
	case v4aAlgorithm:
		return nil, fmt.Errorf("%w: %s", ErrUnsupportedAlgorithm, algo)
	default:
		return nil, fmt.Errorf("%w: X-Amz-Algorithm %q", ErrMalformedPresign, truncate(algo))
	}
	var p v4Params
	cred, err := get("X-Amz-Credential")
	if err != nil {
		return nil, err
	}
	if err := parseCredential(cred, &p, ErrMalformedPresign); err != nil {
		return nil, err
	}
	amzDate, err := get("X-Amz-Date")
	if err != nil {
		return nil, err
	}
	t, err := parseBasicTime(amzDate, false)
	if err != nil {
		return nil, fmt.Errorf("%w: X-Amz-Date %q", ErrMalformedPresign, truncate(amzDate))
	}
	expStr, err := get("X-Amz-Expires")
	if err != nil {
		return nil, err
	}
	exp, err := strconv.ParseInt(expStr, 10, 64)
	if err != nil || exp < 0 {
		return nil, fmt.Errorf("%w: X-Amz-Expires %q", ErrMalformedPresign, truncate(expStr))
	}
	if exp > int64(maxPresignTTL/time.Second) {
		return nil, fmt.Errorf("%w: X-Amz-Expires must be less than a week", ErrMalformedPresign)
	}
	p.signedRaw, err = get("X-Amz-SignedHeaders")
	if err != nil {
		return nil, err
	}
	p.signedHeaders = strings.Split(p.signedRaw, ";")
	if p.signature, err = get("X-Amz-Signature"); err != nil {
		return nil, err
	}
	if err := v.checkScope(&p, ErrMalformedPresign); err != nil {
		return nil, err
	}
	if !sameDate(t, p.date) {
		return nil, fmt.Errorf("%w: credential date %q does not match X-Amz-Date", ErrMalformedPresign, p.date)
	}
	if !slices.Contains(p.signedHeaders, "host") {
		return nil, fmt.Errorf("%w: host must be a signed header", ErrMalformedPresign)
	}
	// The key is judged before the time, as S3 and MinIO do: an unknown
	// key is InvalidAccessKeyId however old the URL.
	secret, err := v.lookup(p.accessKey)
	if err != nil {
		return nil, err
	}
	ttl := time.Duration(exp) * time.Second
	if err := v.checkPresignedWindow(t, ttl); err != nil {
		return nil, err
	}
	// A presigned URL normally leaves the payload unsigned, but a client
	// that also sends x-amz-content-sha256 (signed, as every x-amz-* header
	// must be) commits to a body hash S3 then enforces.
	payload := unsignedPayload
	if h := r.Header.Get("X-Amz-Content-Sha256"); h != "" {
		payload = h
	} else if qv := q.values("X-Amz-Content-Sha256"); len(qv) == 1 {
		payload = qv[0]
	}
	if err := checkPayloadMode(payload); err != nil {
		return nil, err
	}
	if err := checkSignedHeaders(r, p.signedHeaders); err != nil {
		return nil, err
	}
	key := v.keys.get(secret, p.date, p.region, p.service)
	scope := p.scope
	if !v4Matches(r, q, &p, key, amzDate, scope, payload, true) {
		return nil, ErrSignatureDoesNotMatch
	}
	return &authResult{
		method: V4Presigned, accessKey: p.accessKey, payloadHash: payload,
		signingKey: key.key, amzDate: amzDate, scope: scope, seedSig: p.signature,
		secret: secret, signedAt: t, expires: ttl, signedHeaders: p.signedHeaders,
	}, nil
}

// checkPresignedWindow enforces a presigned URL's validity: from its
// signing time t (less MaxSkew, for clocks behind the client's) to t+ttl.
func (v *Verifier) checkPresignedWindow(t time.Time, ttl time.Duration) error {
	now := v.now()
	if now.Before(t.Add(-v.maxSkew)) {
		return fmt.Errorf("%w: request is not valid yet", ErrAccessDenied)
	}
	if now.After(t.Add(ttl)) {
		return ErrExpired
	}
	return nil
}

// parseV4Authorization parses the part of the header after the algorithm.
func parseV4Authorization(rest string) (*v4Params, error) {
	var p v4Params
	var haveCred, haveSigned, haveSig bool
	for part := range strings.SplitSeq(rest, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return nil, fmt.Errorf("%w: component %q", ErrMissingFields, truncate(part))
		}
		var seen *bool
		switch k {
		case "Credential":
			seen = &haveCred
			if err := parseCredential(val, &p, ErrAuthHeaderMalformed); err != nil {
				return nil, err
			}
		case "SignedHeaders":
			seen = &haveSigned
			p.signedRaw = val
			p.signedHeaders = strings.Split(val, ";")
		case "Signature":
			seen = &haveSig
			p.signature = val
		default:
			return nil, fmt.Errorf("%w: unknown component %q", ErrMissingFields, truncate(k))
		}
		if *seen {
			return nil, fmt.Errorf("%w: repeated %s", ErrMissingFields, k)
		}
		*seen = true
	}
	if !haveCred || !haveSigned || !haveSig {
		return nil, fmt.Errorf("%w: Credential, SignedHeaders and Signature are required", ErrMissingFields)
	}
	if !slices.Contains(p.signedHeaders, "host") {
		return nil, fmt.Errorf("%w: host must be a signed header", ErrAuthHeaderMalformed)
	}
	return &p, nil
}

// parseCredential splits "AK/yyyymmdd/region/service/aws4_request". The
// access key is whatever precedes the last four fields.
func parseCredential(cred string, p *v4Params, sentinel error) error {
	// The last four fields, cut from the end: no slice of parts made on
	// every request.
	var fields [4]string
	rest := cred
	for i := len(fields) - 1; i >= 0; i-- {
		j := strings.LastIndexByte(rest, '/')
		if j < 0 {
			return fmt.Errorf("%w: credential %q is not AK/date/region/service/aws4_request", sentinel, truncate(cred))
		}
		fields[i], rest = rest[j+1:], rest[:j]
	}
	p.accessKey = rest
	p.date, p.region, p.service = fields[0], fields[1], fields[2]
	p.scope = cred[len(rest)+1:]
	if fields[3] != scopeTerminator {
		return fmt.Errorf("%w: credential must end in %s", sentinel, scopeTerminator)
	}
	if _, err := parseBasicTime(p.date, true); err != nil {
		return fmt.Errorf("%w: credential date %q", sentinel, truncate(p.date))
	}
	return nil
}

// sameDate reports whether t falls on the scope's date (yyyymmdd), with no
// string made for the comparison.
func sameDate(t time.Time, date string) bool {
	var buf [len(scopeDateLayout)]byte
	return string(t.AppendFormat(buf[:0], scopeDateLayout)) == date
}

// checkScope enforces the region and service a client signed for.
func (v *Verifier) checkScope(p *v4Params, sentinel error) error {
	if p.region != v.region {
		return fmt.Errorf("%w: the region %q is wrong; expecting %q", sentinel, truncate(p.region), v.region)
	}
	if p.service != scopeService {
		return fmt.Errorf("%w: the service %q is wrong; expecting %q", sentinel, truncate(p.service), scopeService)
	}
	return nil
}

// requestDate returns the signing time of a header-signed request and its
// ISO 8601 basic spelling, which is what the string to sign carries.
func requestDate(r *http.Request) (time.Time, string, error) {
	if s := r.Header.Get("X-Amz-Date"); s != "" {
		if t, err := parseBasicTime(s, false); err == nil {
			return t, s, nil
		}
		if t, ok := parseHTTPDate(s); ok {
			return t, t.UTC().Format(iso8601Basic), nil
		}
		return time.Time{}, "", fmt.Errorf("%w: x-amz-date %q", ErrMissingDate, truncate(s))
	}
	if s := r.Header.Get("Date"); s != "" {
		if t, ok := parseHTTPDate(s); ok {
			return t, t.UTC().Format(iso8601Basic), nil
		}
		return time.Time{}, "", fmt.Errorf("%w: date %q", ErrMissingDate, truncate(s))
	}
	return time.Time{}, "", ErrMissingDate
}

// checkPayloadMode validates an x-amz-content-sha256 value up front.
func checkPayloadMode(v string) error {
	switch v {
	case unsignedPayload, streamingSigned, streamingSignedTrailer, streamingUnsignedTrail:
		return nil
	}
	if strings.HasPrefix(v, streamingV4APrefix) {
		return fmt.Errorf("%w: %s", ErrUnsupportedAlgorithm, v)
	}
	if isHexSHA256(v) {
		return nil
	}
	return fmt.Errorf("%w: %q", ErrInvalidContentSHA256, truncate(v))
}

func isHexSHA256(s string) bool {
	if len(s) != 2*sha256.Size {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// checkSignedHeaders refuses x-amz-* headers the client did not sign: S3
// does the same, and without it anyone on the path could add, say,
// x-amz-copy-source to a signed request.
func checkSignedHeaders(r *http.Request, signed []string) error {
	for name := range r.Header {
		if len(name) < 6 || !strings.EqualFold(name[:6], "x-amz-") {
			continue
		}
		if !slices.ContainsFunc(signed, func(s string) bool { return isLower(s, name) }) {
			lower := strings.ToLower(name)
			return fmt.Errorf("%w: header %s is present but not signed", ErrAccessDenied, truncate(lower))
		}
	}
	return nil
}

// isLower reports whether lower is strings.ToLower(name), byte for byte,
// with no string made (header names are ASCII tokens; anything else is
// compared as ToLower would leave it).
func isLower(lower, name string) bool {
	if len(lower) != len(name) {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c >= 0x80 {
			return lower == strings.ToLower(name)
		}
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if lower[i] != c {
			return false
		}
	}
	return true
}

// v4Matches computes the expected signature and compares it in constant
// time. The canonical URI is S3's single encoding of the decoded path; when
// the path on the wire is spelled differently (a client that leaves "+" or
// "!" unescaped signs what it sends), that spelling is tried too. Both name
// the same key, so accepting either grants nothing extra. Not so for an
// encoded slash (%2F): the stores check only the decoded path's encoding,
// in which it is a slash, and refuse a signature over "%2F" as it is sent,
// so hoard does too.
func v4Matches(r *http.Request, q query, p *v4Params, key *sigKey, amzDate, scope, payload string, presigned bool) bool {
	sc := scratches.Get().(*scratch)
	defer scratches.Put(sc)
	sc.headers = appendCanonicalHeaders(sc.headers[:0], r, p.signedHeaders)
	sc.query = appendCanonicalQuery(sc.query[:0], r.URL.RawQuery, q, presigned)
	want := []byte(p.signature)
	primary := encodePath(r.URL.Path)
	if sig := key.v4Signature(sc, r.Method, primary, p.signedRaw, payload, amzDate, scope); hmac.Equal(want, sig[:]) {
		return true
	}
	if raw := r.URL.EscapedPath(); raw != "" && raw != primary && !encodedSlash(raw) {
		sig := key.v4Signature(sc, r.Method, raw, p.signedRaw, payload, amzDate, scope)
		return hmac.Equal(want, sig[:])
	}
	return false
}

// encodedSlash reports whether an escaped path holds %2F (any case).
func encodedSlash(p string) bool {
	return strings.Contains(p, "%2F") || strings.Contains(p, "%2f")
}

// signingKey derives the SigV4 key for one day, region and service.
func signingKey(secret, date, region, service string) []byte {
	k := hmacSHA256([]byte("AWS4"+secret), date)
	k = hmacSHA256(k, region)
	k = hmacSHA256(k, service)
	return hmacSHA256(k, scopeTerminator)
}

func hmacSHA256(key []byte, data string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}

// appendCanonicalHeaders appends "name:value\n" for each signed header
// in the order the client listed them, which is the order it signed them
// in.
func appendCanonicalHeaders(b []byte, r *http.Request, signed []string) []byte {
	for _, name := range signed {
		b = append(b, name...)
		b = append(b, ':')
		if name == "host" { // signed by every request: no slice for it
			b = appendTrimmed(b, r.Host)
			b = append(b, '\n')
			continue
		}
		for i, val := range headerValues(r, name) {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendTrimmed(b, val)
		}
		b = append(b, '\n')
	}
	return b
}

// appendTrimmed appends s trimmed of spaces and tabs at both ends, with
// runs of spaces inside collapsed to one.
func appendTrimmed(b []byte, s string) []byte {
	s = strings.Trim(s, " \t")
	prevSpace := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == ' ' {
			if prevSpace {
				continue
			}
			prevSpace = true
		} else {
			prevSpace = false
		}
		b = append(b, c)
	}
	return b
}

func headerValues(r *http.Request, name string) []string {
	switch name {
	case "host":
		return []string{r.Host}
	case "transfer-encoding":
		if len(r.TransferEncoding) > 0 {
			return []string{strings.Join(r.TransferEncoding, ",")}
		}
	case "content-length":
		if vals := r.Header.Values(name); len(vals) > 0 {
			return vals
		}
		if r.ContentLength >= 0 {
			return []string{strconv.FormatInt(r.ContentLength, 10)}
		}
	}
	return lookupHeader(r.Header, name)
}

// lookupHeader is h.Values(name) without the string that canonicalizing
// name makes: the canonical key is built in a buffer on the stack and
// the map is indexed by it directly. Names too long for the buffer, or
// not tokens (which net/http keeps as they came), take Values.
func lookupHeader(h http.Header, name string) []string {
	var buf [64]byte
	if len(name) > len(buf) {
		return h.Values(name)
	}
	upper := true
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !isTokenByte(c) {
			return h.Values(name)
		}
		switch {
		case upper && 'a' <= c && c <= 'z':
			c -= 'a' - 'A'
		case !upper && 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		}
		buf[i] = c
		upper = c == '-'
	}
	return h[string(buf[:len(name)])]
}

// isTokenByte reports whether c may appear in a header name (RFC 9110's
// tchar), as net/textproto decides whether to canonicalize one.
func isTokenByte(c byte) bool { return tokenBytes[c] }

var tokenBytes = func() (t [256]bool) {
	for c := range 256 {
		b := byte(c)
		t[c] = 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' ||
			strings.IndexByte("!#$%&'*+-.^_`|~", b) >= 0
	}
	return t
}()

// trimAll trims surrounding spaces and collapses runs of spaces, the
// "Trimall" of the SigV4 specification.
func trimAll(s string) string { return string(appendTrimmed(nil, s)) }

// query is a decoded query string in wire order. It is parsed by hand
// because url.ParseQuery drops pairs containing ";" and loses order.
type query []queryPair

type queryPair struct{ key, value string }

func parseQuery(raw string) query {
	if raw == "" {
		return nil
	}
	q := make(query, 0, strings.Count(raw, "&")+1)
	for part := range strings.SplitSeq(raw, "&") {
		if part == "" {
			continue
		}
		k, val, _ := strings.Cut(part, "=")
		q = append(q, queryPair{unescapeQuery(k), unescapeQuery(val)})
	}
	return q
}

// unescapeQuerySlow is unescapeQuery's general case.
func unescapeQuerySlow(s string) string {
	if u, err := url.QueryUnescape(s); err == nil {
		return u
	}
	return s
}

func (q query) has(key string) bool {
	for _, p := range q {
		if p.key == key {
			return true
		}
	}
	return false
}

func (q query) values(key string) []string {
	var out []string
	for _, p := range q {
		if p.key == key {
			out = append(out, p.value)
		}
	}
	return out
}

// canonical renders the SigV4 canonical query string: every pair encoded
// per RFC 3986, sorted by encoded key then value, "k=" for empty values.
// A presigned request's own signature is not part of what it signs.
func (q query) canonical(presigned bool) string {
	if len(q) == 0 {
		return ""
	}
	pairs := make([]queryPair, 0, len(q))
	for _, p := range q {
		if presigned && p.key == "X-Amz-Signature" {
			continue
		}
		pairs = append(pairs, queryPair{encodeComponent(p.key), encodeComponent(p.value)})
	}
	slices.SortFunc(pairs, func(a, b queryPair) int {
		if c := strings.Compare(a.key, b.key); c != 0 {
			return c
		}
		return strings.Compare(a.value, b.value)
	})
	var b strings.Builder
	for i, p := range pairs {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(p.key)
		b.WriteByte('=')
		b.WriteString(p.value)
	}
	return b.String()
}

// encodeComponent percent-encodes everything but RFC 3986 unreserved
// characters, with upper-case hex, as SigV4 requires.
func encodeComponent(s string) string { return encode(s, false) }

// encodePath is encodeComponent that keeps "/". S3 encodes the path once
// (unlike other services, which encode it twice).
func encodePath(s string) string {
	if s == "" {
		return "/"
	}
	return encode(s, true)
}

func encode(s string, keepSlash bool) string {
	n := 0
	for i := 0; i < len(s); i++ {
		if !unreserved(s[i]) && !(keepSlash && s[i] == '/') {
			n++
		}
	}
	if n == 0 {
		return s
	}
	const hexUpper = "0123456789ABCDEF"
	b := make([]byte, 0, len(s)+2*n)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if unreserved(c) || keepSlash && c == '/' {
			b = append(b, c)
			continue
		}
		b = append(b, '%', hexUpper[c>>4], hexUpper[c&15])
	}
	return string(b)
}

func unreserved(c byte) bool {
	return 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' ||
		c == '-' || c == '_' || c == '.' || c == '~'
}
