// Package s3auth authenticates incoming S3 requests the way AWS S3 does and
// hands back a body that is verified as it is read.
//
// It accepts SigV4 (Authorization header or presigned query string), SigV2
// (header or presigned, still boto3's default for generate_presigned_url)
// and the aws-chunked streaming encodings that SigV4 uploads use, with or
// without per-chunk signatures and with checksum trailers. Anonymous requests
// are refused: a caching proxy that served them would leak whatever any
// credentialed client had cached.
//
// Header checks happen in Verify, before any body byte is read. Payload
// checks (x-amz-content-sha256, chunk and trailer signatures, Content-MD5,
// x-amz-checksum-*) can only happen while the body streams, so Request.Body
// reports a failure from Read in place of io.EOF. Callers must not commit
// anything they read unless they saw io.EOF.
package s3auth

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/hoard-io/hoard/internal/checksum"
	"github.com/hoard-io/hoard/internal/clock"
)

// DefaultMaxSkew is the clock skew S3 tolerates for header-signed requests.
const DefaultMaxSkew = 15 * time.Minute

// CredentialStore looks up the secret for an access key. Implementations
// must be safe for concurrent use; Verify calls Secret once per request.
type CredentialStore interface {
	Secret(accessKey string) (secret string, ok bool)
}

// Config configures a Verifier.
type Config struct {
	// Region is the region clients must sign for, e.g. "us-east-1".
	Region string
	// MaxSkew bounds the difference between a header-signed request's date
	// and Now. Zero means DefaultMaxSkew.
	MaxSkew time.Duration
	// Clock tells the time requests are checked against; nil means the
	// system clock. Tests inject a fixed one.
	Clock clock.Clock
	// Domains lists the base host names (e.g. "s3.example.com") under which
	// virtual-hosted-style requests ("bucket.s3.example.com") arrive. SigV2
	// signs the bucket as part of the resource even when it travels in the
	// Host header, so the verifier must know where the bucket name ends.
	// SigV4 signs the host as sent and does not need this.
	Domains []string
	// MemoEntries bounds the memo of verified SigV4 requests (memo.go),
	// which answers a bodiless GET or HEAD identical to one that verified
	// twice before without computing its signature again. Zero means
	// DefaultMemoEntries; a negative value turns the memo off. It is held
	// to a multiple of 16 (the memo's shards), at least 16.
	MemoEntries int
}

// DefaultMemoEntries is the default bound of the memo of verified
// requests.
const DefaultMemoEntries = memoMaxEntries

// Method says how a request was authenticated.
type Method int

// Authentication methods.
const (
	V4Header    Method = iota + 1 // SigV4 Authorization header
	V4Presigned                   // SigV4 query string (X-Amz-Signature)
	V2Header                      // SigV2 Authorization header ("AWS ak:sig")
	V2Presigned                   // SigV2 query string (AWSAccessKeyId, Signature)
)

// String returns a short name for logs and metrics labels.
func (m Method) String() string {
	switch m {
	case V4Header:
		return "v4-header"
	case V4Presigned:
		return "v4-presigned"
	case V2Header:
		return "v2-header"
	case V2Presigned:
		return "v2-presigned"
	}
	return "unknown"
}

// Request is an authenticated request.
type Request struct {
	// AccessKey is the verified access key.
	AccessKey string
	// Method is how the request was authenticated.
	Method Method
	// Body yields the decoded payload. For aws-chunked uploads it strips the
	// framing and verifies every chunk signature and the trailer; for a hex
	// x-amz-content-sha256 it verifies the SHA-256; x-amz-checksum-* headers
	// and Content-MD5 are verified on the decoded bytes. A mismatch or
	// framing error is returned from Read in place of io.EOF. Body is never
	// nil; Close closes the original body. It is not safe for concurrent use.
	Body io.ReadCloser
	// DecodedLength is the payload length: x-amz-decoded-content-length for
	// aws-chunked bodies, else Content-Length; -1 when unknown.
	DecodedLength int64
	// ContentEncoding is the Content-Encoding header with the aws-chunked
	// coding removed. S3 stores this, not what the client sent, because
	// aws-chunked describes the transfer, not the object.
	ContentEncoding string
	// ChecksumAlgorithm is the checksum the client declared, from an
	// x-amz-checksum-* header or from x-amz-trailer; "" when none.
	ChecksumAlgorithm checksum.Algorithm
	// ChecksumValue is the declared header value. For a trailer it is ""
	// here; TrailerChecksum reports it once Body has reached io.EOF.
	ChecksumValue string

	chunked *chunkedReader
	// undigested is Body without the header checksum and Content-MD5
	// checks (LeaveDigestsToStore); nil when Body has none.
	undigested io.ReadCloser
}

// LeaveDigestsToStore drops this side's check of the body against its
// header checksum (x-amz-checksum-*) and Content-MD5, for a request whose
// body goes on to a store with those same headers: the store checks them
// itself, commits nothing that fails, and its own answer (code, message)
// is the client's. Signatures, a signed payload hash and a trailer's
// checksum stay checked here. Call it before Body is read; it is not safe
// for concurrent use.
func (r *Request) LeaveDigestsToStore() {
	if r.undigested != nil {
		r.Body, r.undigested = r.undigested, nil
	}
}

// TrailerChecksum returns the checksum the client sent in the aws-chunked
// trailer. It is valid only after Body returned io.EOF (so the value has
// been verified); before that, or without a trailer, both results are "".
func (r *Request) TrailerChecksum() (algo checksum.Algorithm, value string) {
	if r.chunked == nil {
		return "", ""
	}
	return r.chunked.trailerChecksum()
}

// Verifier authenticates requests. It is safe for concurrent use.
type Verifier struct {
	region  string
	maxSkew time.Duration
	now     func() time.Time
	domains []string
	creds   CredentialStore

	// Pools live on the Verifier rather than in package variables so that
	// independent verifiers (and tests) share nothing.
	chunkBufs   sync.Pool // *[]byte, one signed chunk each
	bufReaders  sync.Pool // *bufio.Reader over aws-chunked bodies
	bufioSize   int
	maxChunkLen int

	keys sigKeys // derived signing keys (keys.go)
	memo *memo   // verified requests (memo.go); nil when off
}

// Validate checks the config and fills in the defaults (MaxSkew, Clock);
// Domains are lower-cased and trimmed of dots. Errors wrap
// ErrInvalidConfig.
func (c *Config) Validate() error {
	if c.Region == "" || strings.ContainsAny(c.Region, "/ \t\r\n") {
		return fmt.Errorf("%w: region %q", ErrInvalidConfig, c.Region)
	}
	if c.MaxSkew < 0 {
		return fmt.Errorf("%w: negative max skew", ErrInvalidConfig)
	}
	if c.MaxSkew == 0 {
		c.MaxSkew = DefaultMaxSkew
	}
	c.Clock = clock.Or(c.Clock)
	switch {
	case c.MemoEntries == 0:
		c.MemoEntries = DefaultMemoEntries
	case c.MemoEntries > 0:
		c.MemoEntries = max(memoShards, c.MemoEntries/memoShards*memoShards)
	}
	domains := make([]string, 0, len(c.Domains))
	for _, d := range c.Domains {
		d = strings.ToLower(strings.Trim(d, "."))
		if d == "" {
			return fmt.Errorf("%w: empty domain", ErrInvalidConfig)
		}
		domains = append(domains, d)
	}
	c.Domains = domains
	return nil
}

// New validates cfg and returns a Verifier.
func New(cfg Config, creds CredentialStore) (*Verifier, error) {
	if creds == nil {
		return nil, fmt.Errorf("%w: nil credential store", ErrInvalidConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	v := &Verifier{
		region:      cfg.Region,
		maxSkew:     cfg.MaxSkew,
		now:         cfg.Clock.Now,
		domains:     cfg.Domains,
		creds:       creds,
		bufioSize:   16 << 10,
		maxChunkLen: maxChunkSize,
	}
	if cfg.MemoEntries > 0 {
		v.memo = newMemo(cfg.MemoEntries)
	}
	return v, nil
}

// MemoStats reports the memo's hits, misses and size; zero when it is
// off.
func (v *Verifier) MemoStats() MemoStats {
	if v.memo == nil {
		return MemoStats{}
	}
	return v.memo.stats()
}

// authResult is what a signature check establishes about a request.
type authResult struct {
	method    Method
	accessKey string
	// payloadHash is the x-amz-content-sha256 value in force ("" for SigV2
	// without the header).
	payloadHash string
	// The fields below are SigV4-only and seed aws-chunked verification.
	signingKey []byte
	amzDate    string
	scope      string
	seedSig    string
	// What a memo hit checks again (memo.go): the secret the signature
	// was verified with, the signing time, a presigned URL's lifetime (0
	// for a header-signed request) and the signed headers.
	secret        string
	signedAt      time.Time
	expires       time.Duration
	signedHeaders []string
}

// Verify authenticates r and returns the verified request with its body
// wrapped. On error r.Body is left untouched for the caller to drain or
// close. Errors wrap one of this package's sentinels or checksum's.
func (v *Verifier) Verify(r *http.Request) (*Request, error) {
	authz := r.Header.Values("Authorization")
	if v.memo != nil {
		k := getMemoKey()
		defer putMemoKey(k)
		if v.memo.key(k, r, authz) {
			if res := v.memo.lookup(v, k, r); res != nil {
				return v.wrapBody(r, res)
			}
			res, err := v.verify(r, authz)
			if err != nil {
				return nil, err
			}
			v.memo.store(k, res)
			return v.wrapBody(r, res)
		}
	}
	res, err := v.verify(r, authz)
	if err != nil {
		return nil, err
	}
	return v.wrapBody(r, res)
}

// verify checks r's signature.
func (v *Verifier) verify(r *http.Request, authz []string) (*authResult, error) {
	q := parseQuery(r.URL.RawQuery)
	v4q := q.has("X-Amz-Algorithm") || q.has("X-Amz-Credential") || q.has("X-Amz-Signature")
	v2q := q.has("AWSAccessKeyId") || q.has("Signature")

	var (
		res *authResult
		err error
	)
	switch {
	case len(authz) > 1:
		return nil, fmt.Errorf("%w: more than one authorization header", ErrAuthHeaderMalformed)
	case len(authz) == 1 && (v4q || v2q), v4q && v2q:
		return nil, ErrAmbiguousAuth
	case len(authz) == 1:
		res, err = v.verifyHeader(r, q, authz[0])
	case v4q:
		res, err = v.verifyV4Presigned(r, q)
	case v2q:
		res, err = v.verifyV2Presigned(r, q)
	default:
		return nil, ErrMissingAuth
	}
	return res, err
}

func (v *Verifier) verifyHeader(r *http.Request, q query, authz string) (*authResult, error) {
	scheme, rest, _ := strings.Cut(strings.TrimSpace(authz), " ")
	switch scheme {
	case v4Algorithm:
		return v.verifyV4Header(r, q, rest)
	case "AWS":
		return v.verifyV2Header(r, q, rest)
	case "":
		return nil, fmt.Errorf("%w: empty authorization header", ErrAuthHeaderMalformed)
	case "AWS4-ECDSA-P256-SHA256":
		// SigV4a: a signing algorithm of S3's that hoard does not verify.
		return nil, fmt.Errorf("%w: authorization scheme %q", ErrUnsupportedAlgorithm, scheme)
	}
	// S3 and the stores refuse an unknown scheme as they refuse no
	// credentials at all.
	return nil, fmt.Errorf("%w: authorization scheme %q", ErrAccessDenied, truncate(scheme))
}

// lookup resolves an access key to its secret.
func (v *Verifier) lookup(accessKey string) (string, error) {
	if accessKey == "" {
		return "", fmt.Errorf("%w: empty access key", ErrInvalidAccessKeyID)
	}
	secret, ok := v.creds.Secret(accessKey)
	if !ok {
		return "", fmt.Errorf("%w: %q", ErrInvalidAccessKeyID, truncate(accessKey))
	}
	return secret, nil
}

// checkSkew enforces MaxSkew in both directions, as S3 does.
func (v *Verifier) checkSkew(t time.Time) error {
	d := v.now().Sub(t)
	if d > v.maxSkew || d < -v.maxSkew {
		return fmt.Errorf("%w: request time %s", ErrRequestTimeTooSkewed, t.UTC().Format(time.RFC3339))
	}
	return nil
}

func (v *Verifier) getChunkBuf() *[]byte {
	if b, ok := v.chunkBufs.Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, 0, 64<<10)
	return &b
}

func (v *Verifier) putChunkBuf(b *[]byte) {
	// A client may send one 16 MiB chunk; keeping such buffers would pin
	// memory on behalf of rare clients, so only typical sizes return.
	if cap(*b) > 1<<20 {
		return
	}
	*b = (*b)[:0]
	v.chunkBufs.Put(b)
}

func (v *Verifier) getBufReader(r io.Reader) *bufio.Reader {
	if br, ok := v.bufReaders.Get().(*bufio.Reader); ok {
		br.Reset(r)
		return br
	}
	return bufio.NewReaderSize(r, v.bufioSize)
}

func (v *Verifier) putBufReader(br *bufio.Reader) {
	br.Reset(nil)
	v.bufReaders.Put(br)
}

// truncate bounds client-supplied strings quoted in error messages so a
// hostile header cannot bloat logs.
func truncate(s string) string {
	const max = 64
	if len(s) > max {
		return s[:max] + "..."
	}
	return s
}
