package s3auth

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsv4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/minio/minio-go/v7/pkg/signer"

	"github.com/hoard-io/hoard/internal/clock"
)

// awkwardKeys are object keys whose encoding differs between "as sent" and
// "canonical", or between signers.
var awkwardKeys = []string{
	"plain.txt",
	"with space.txt",
	"ünïcödé/ключ/鍵",
	"a+b+c",
	"100%25 literal percent", // the key contains "%25", sent as %2525
	"tilde~and-dash_dot.",
	"eq=ual&amp",
	"!*'()$,;:@",
	"double//slash/",
}

// awkwardQueries exercise canonical query encoding.
var awkwardQueries = []string{
	"",
	"uploads",
	"prefix=a%20b&delimiter=%2F",
	"list-type=2&start-after=%25&prefix=%E2%9C%93",
	"x=%2B&y=~&z=",
	"tagging&versionId=3%2F4",
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// objectURL builds a path-style URL with the key escaped the way Go's
// client would send it.
func objectURL(key, rawQuery string) string {
	u := url.URL{Scheme: "http", Host: testHost, Path: "/bucket/" + key, RawQuery: rawQuery}
	return u.String()
}

func TestV4HeaderMinio(t *testing.T) {
	v := newTestVerifier(t, clock.Real())
	body := []byte("hello, hoard")
	for _, key := range awkwardKeys {
		for _, rq := range awkwardQueries {
			t.Run(key+"?"+rq, func(t *testing.T) {
				req, err := http.NewRequest(http.MethodPut, objectURL(key, rq), bytes.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("X-Amz-Content-Sha256", sha256Hex(body))
				req.Header.Set("X-Amz-Meta-Note", "  spaced   out  ")
				req.Header.Set("Content-Type", "text/plain")
				signed := signer.SignV4(*req, testAK, testSK, "", testRegion)
				got, vr, err := readBody(v, serverSide(t, signed))
				wantErr(t, err, nil)
				if !bytes.Equal(got, body) || vr.Method != V4Header || vr.AccessKey != testAK {
					t.Fatalf("got %q, %+v", got, vr)
				}
			})
		}
	}
}

// TestV4HeaderTamper signs one request and alters one part at a time.
func TestV4HeaderTamper(t *testing.T) {
	body := []byte("the payload")
	sign := func(t *testing.T, region, ak, sk string) *http.Request {
		req, err := http.NewRequest(http.MethodPut, objectURL("dir/key one", "tagging&x=1"), bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Amz-Content-Sha256", sha256Hex(body))
		req.Header.Set("X-Amz-Meta-A", "1")
		req.Header.Set("Content-Type", "application/octet-stream")
		return serverSide(t, signer.SignV4(*req, ak, sk, "", region))
	}
	tests := []struct {
		name   string
		region string
		ak, sk string
		skew   time.Duration
		mutate func(r *http.Request)
		want   error
	}{
		{name: "untouched"},
		{name: "signed header value", mutate: func(r *http.Request) { r.Header.Set("X-Amz-Meta-A", "2") }, want: ErrSignatureDoesNotMatch},
		{name: "content type", mutate: func(r *http.Request) { r.Header.Set("Content-Type", "text/html") }, want: ErrSignatureDoesNotMatch},
		{name: "unsigned x-amz header", mutate: func(r *http.Request) { r.Header.Set("X-Amz-Copy-Source", "/b/k") }, want: ErrAccessDenied},
		{name: "unsigned ordinary header is fine", mutate: func(r *http.Request) { r.Header.Set("X-Forwarded-For", "10.0.0.1") }},
		{name: "query value", mutate: func(r *http.Request) { r.URL.RawQuery = "tagging&x=2" }, want: ErrSignatureDoesNotMatch},
		{name: "query added", mutate: func(r *http.Request) { r.URL.RawQuery += "&acl" }, want: ErrSignatureDoesNotMatch},
		{name: "path", mutate: func(r *http.Request) { r.URL.Path, r.URL.RawPath = "/bucket/dir/key two", "" }, want: ErrSignatureDoesNotMatch},
		{name: "method", mutate: func(r *http.Request) { r.Method = http.MethodPost }, want: ErrSignatureDoesNotMatch},
		{name: "host", mutate: func(r *http.Request) { r.Host = "evil.test" }, want: ErrSignatureDoesNotMatch},
		{name: "body byte", mutate: func(r *http.Request) {
			b := bytes.Clone(body)
			b[3] ^= 1
			r.Body = io.NopCloser(bytes.NewReader(b))
		}, want: ErrContentSHA256Mismatch},
		{name: "content sha256 header", mutate: func(r *http.Request) { r.Header.Set("X-Amz-Content-Sha256", sha256Hex(nil)) }, want: ErrSignatureDoesNotMatch},
		{name: "content sha256 garbage", mutate: func(r *http.Request) { r.Header.Set("X-Amz-Content-Sha256", "nope") }, want: ErrInvalidContentSHA256},
		{name: "content sha256 missing", mutate: func(r *http.Request) { r.Header.Del("X-Amz-Content-Sha256") }, want: ErrMissingContentSHA256},
		{name: "signature", mutate: func(r *http.Request) {
			a := r.Header.Get("Authorization")
			r.Header.Set("Authorization", a[:len(a)-1]+flipHex(a[len(a)-1]))
		}, want: ErrSignatureDoesNotMatch},
		{name: "authorization garbage", mutate: func(r *http.Request) { r.Header.Set("Authorization", "AWS4-HMAC-SHA256 nonsense") }, want: ErrMissingFields},
		{name: "sigv4a", mutate: func(r *http.Request) { r.Header.Set("Authorization", "AWS4-ECDSA-P256-SHA256 Credential=x") }, want: ErrUnsupportedAlgorithm},
		{name: "no auth", mutate: func(r *http.Request) { r.Header.Del("Authorization") }, want: ErrMissingAuth},
		{name: "header and query auth", mutate: func(r *http.Request) { r.URL.RawQuery += "&X-Amz-Signature=00" }, want: ErrAmbiguousAuth},
		{name: "date", mutate: func(r *http.Request) {
			d, _ := time.Parse(iso8601Basic, r.Header.Get("X-Amz-Date"))
			r.Header.Set("X-Amz-Date", d.Add(time.Second).Format(iso8601Basic))
		}, want: ErrSignatureDoesNotMatch},
		{name: "date missing", mutate: func(r *http.Request) { r.Header.Del("X-Amz-Date") }, want: ErrMissingDate},
		{name: "wrong region", region: "eu-west-1", want: ErrAuthHeaderMalformed},
		{name: "unknown key", ak: "AKIDUNKNOWN", want: ErrInvalidAccessKeyID},
		{name: "wrong secret", sk: "not the secret", want: ErrSignatureDoesNotMatch},
		{name: "clock ahead", skew: 16 * time.Minute, want: ErrRequestTimeTooSkewed},
		{name: "clock behind", skew: -16 * time.Minute, want: ErrRequestTimeTooSkewed},
		{name: "clock within skew", skew: 14 * time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			region, ak, sk := testRegion, testAK, testSK
			if tt.region != "" {
				region = tt.region
			}
			if tt.ak != "" {
				ak = tt.ak
			}
			if tt.sk != "" {
				sk = tt.sk
			}
			r := sign(t, region, ak, sk)
			if tt.mutate != nil {
				tt.mutate(r)
			}
			v := newTestVerifier(t, fixedClock(time.Now().Add(tt.skew)))
			got, _, err := readBody(v, r)
			wantErr(t, err, tt.want)
			if tt.want == nil && !bytes.Equal(got, body) {
				t.Fatalf("body %q", got)
			}
		})
	}
}

func flipHex(c byte) string {
	if c == '0' {
		return "1"
	}
	return "0"
}

// TestV4AWSSDKSigner signs with aws-sdk-go-v2's signer, which canonicalizes
// the path as sent (S3 mode) rather than re-encoding it like minio-go.
func TestV4AWSSDKSigner(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	v := newTestVerifier(t, fixedClock(now.Add(time.Minute)))
	s := awsv4.NewSigner(func(o *awsv4.SignerOptions) { o.DisableURIPathEscaping = true })
	creds := aws.Credentials{AccessKeyID: testAK, SecretAccessKey: testSK}
	body := []byte("sdk body")
	for _, key := range awkwardKeys {
		for _, rq := range awkwardQueries {
			t.Run(key+"?"+rq, func(t *testing.T) {
				req, err := http.NewRequest(http.MethodPut, objectURL(key, rq), bytes.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("X-Amz-Content-Sha256", sha256Hex(body))
				req.Header.Set("X-Amz-Meta-Multi", "one")
				req.Header.Add("X-Amz-Meta-Multi", "two")
				if err := s.SignHTTP(context.Background(), creds, req, sha256Hex(body), "s3", testRegion, now); err != nil {
					t.Fatal(err)
				}
				got, _, err := readBody(v, serverSide(t, req))
				wantErr(t, err, nil)
				if !bytes.Equal(got, body) {
					t.Fatalf("body %q", got)
				}
			})
		}
	}
}

func TestV4PresignedAWSSDK(t *testing.T) {
	signedAt := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	presign := func(t *testing.T, key, rq string, expires time.Duration, hdr http.Header) *http.Request {
		return presignedGet(t, key, rq, signedAt, expires, hdr)
	}
	for _, key := range awkwardKeys {
		t.Run(key, func(t *testing.T) {
			v := newTestVerifier(t, fixedClock(signedAt.Add(time.Minute)))
			r := presign(t, key, "response-content-type=text%2Fplain&versionId=v+1", time.Hour,
				http.Header{"X-Amz-Meta-Hoisted": {"yes"}, "Content-Md5": {"1B2M2Y8AsgTpgAmY7PhCfg=="}})
			req, err := v.Verify(r)
			wantErr(t, err, nil)
			if req.Method != V4Presigned {
				t.Fatalf("method %v", req.Method)
			}
		})
	}

	tests := []struct {
		name    string
		now     time.Time
		expires time.Duration
		mutate  func(r *http.Request)
		want    error
	}{
		{name: "valid", now: signedAt.Add(59 * time.Minute), expires: time.Hour},
		{name: "expired", now: signedAt.Add(61 * time.Minute), expires: time.Hour, want: ErrExpired},
		{name: "not yet valid", now: signedAt.Add(-time.Hour), expires: time.Hour, want: ErrAccessDenied},
		{name: "week is the limit", now: signedAt, expires: 7 * 24 * time.Hour},
		{name: "over a week", now: signedAt, expires: 7*24*time.Hour + time.Second, want: ErrMalformedPresign},
		{name: "expires tampered", now: signedAt, expires: time.Hour, mutate: func(r *http.Request) {
			r.URL.RawQuery = strings.Replace(r.URL.RawQuery, "X-Amz-Expires=3600", "X-Amz-Expires=7200", 1)
		}, want: ErrSignatureDoesNotMatch},
		{name: "query tampered", now: signedAt, expires: time.Hour, mutate: func(r *http.Request) {
			r.URL.RawQuery = strings.Replace(r.URL.RawQuery, "versionId=v%201", "versionId=v%202", 1)
		}, want: ErrSignatureDoesNotMatch},
		{name: "path tampered", now: signedAt, expires: time.Hour, mutate: func(r *http.Request) {
			r.URL.Path += "x"
			r.URL.RawPath = ""
		}, want: ErrSignatureDoesNotMatch},
		{name: "signature tampered", now: signedAt, expires: time.Hour, mutate: func(r *http.Request) {
			q := r.URL.Query()
			s := q.Get("X-Amz-Signature")
			q.Set("X-Amz-Signature", s[:63]+flipHex(s[63]))
			r.URL.RawQuery = q.Encode()
		}, want: ErrSignatureDoesNotMatch},
		{name: "signature repeated", now: signedAt, expires: time.Hour, mutate: func(r *http.Request) {
			r.URL.RawQuery += "&X-Amz-Signature=00"
		}, want: ErrMalformedPresign},
		{name: "algorithm", now: signedAt, expires: time.Hour, mutate: func(r *http.Request) {
			r.URL.RawQuery = strings.Replace(r.URL.RawQuery, "AWS4-HMAC-SHA256", "AWS4-HMAC-SHA512", 1)
		}, want: ErrMalformedPresign},
		{name: "region", now: signedAt, expires: time.Hour, mutate: func(r *http.Request) {
			r.URL.RawQuery = strings.Replace(r.URL.RawQuery, "us-east-1", "us-west-2", 1)
		}, want: ErrMalformedPresign},
		{name: "unknown key", now: signedAt, expires: time.Hour, mutate: func(r *http.Request) {
			r.URL.RawQuery = strings.Replace(r.URL.RawQuery, testAK, "AKIDNOBODY", 1)
		}, want: ErrInvalidAccessKeyID},
		{name: "unsigned x-amz header added", now: signedAt, expires: time.Hour, mutate: func(r *http.Request) {
			r.Header.Set("X-Amz-Server-Side-Encryption", "AES256")
		}, want: ErrAccessDenied},
		{name: "signed header changed", now: signedAt, expires: time.Hour, mutate: func(r *http.Request) {
			r.Header.Set("Content-Md5", "AAAAAAAAAAAAAAAAAAAAAA==")
		}, want: ErrSignatureDoesNotMatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := presign(t, "obj", "versionId=v+1", tt.expires, http.Header{"Content-Md5": {"1B2M2Y8AsgTpgAmY7PhCfg=="}})
			if tt.mutate != nil {
				tt.mutate(r)
			}
			_, err := newTestVerifier(t, fixedClock(tt.now)).Verify(r)
			wantErr(t, err, tt.want)
		})
	}
}

func TestV4PresignedMinio(t *testing.T) {
	for _, key := range awkwardKeys {
		for _, rq := range awkwardQueries {
			t.Run(key+"?"+rq, func(t *testing.T) {
				req, err := http.NewRequest(http.MethodGet, objectURL(key, rq), nil)
				if err != nil {
					t.Fatal(err)
				}
				signed := signer.PreSignV4(*req, testAK, testSK, "", testRegion, 600)
				out, err := http.NewRequest(http.MethodGet, signed.URL.String(), nil)
				if err != nil {
					t.Fatal(err)
				}
				v := newTestVerifier(t, clock.Real())
				_, err = v.Verify(serverSide(t, out))
				wantErr(t, err, nil)

				late := newTestVerifier(t, fixedClock(time.Now().Add(11*time.Minute)))
				_, err = late.Verify(serverSide(t, out))
				wantErr(t, err, ErrExpired)
			})
		}
	}
}

func TestNewValidatesConfig(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		creds CredentialStore
		ok    bool
	}{
		{"ok", Config{Region: "us-east-1"}, testCreds(), true},
		{"no region", Config{}, testCreds(), false},
		{"slash in region", Config{Region: "a/b"}, testCreds(), false},
		{"negative skew", Config{Region: "r", MaxSkew: -1}, testCreds(), false},
		{"nil creds", Config{Region: "r"}, nil, false},
		{"empty domain", Config{Region: "r", Domains: []string{"."}}, testCreds(), false},
	}
	for _, tt := range tests {
		_, err := New(tt.cfg, tt.creds)
		if tt.ok != (err == nil) || (err != nil && !errors.Is(err, ErrInvalidConfig)) {
			t.Errorf("%s: err = %v", tt.name, err)
		}
	}
}

func TestCanonicalQuery(t *testing.T) {
	tests := []struct{ raw, want string }{
		{"", ""},
		{"acl", "acl="},
		{"b=2&a=1&a=0", "a=0&a=1&b=2"},
		{"prefix=a+b", "prefix=a%20b"},
		{"k=%7E%2a", "k=~%2A"},
		{"X-Amz-Signature=abc&z=1", "z=1"},
		{"Z=1&a=1", "Z=1&a=1"}, // byte order: upper case sorts first
		{"k=caf%C3%A9", "k=caf%C3%A9"},
	}
	for _, tt := range tests {
		if got := parseQuery(tt.raw).canonical(true); got != tt.want {
			t.Errorf("canonical(%q) = %q, want %q", tt.raw, got, tt.want)
		}
	}
}

func TestEncodePath(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "/"},
		{"/", "/"},
		{"/b/a b+c", "/b/a%20b%2Bc"},
		{"/b/ü~", "/b/%C3%BC~"},
		{"/b//x", "/b//x"},
	}
	for _, tt := range tests {
		if got := encodePath(tt.in); got != tt.want {
			t.Errorf("encodePath(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestTrimAll(t *testing.T) {
	for in, want := range map[string]string{"a": "a", "  a  b   c ": "a b c", "\ta\t": "a", "": ""} {
		if got := trimAll(in); got != want {
			t.Errorf("trimAll(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestLookupHeader checks the allocation-free lookup against net/http's
// own canonicalization for names of every shape.
func TestLookupHeader(t *testing.T) {
	h := http.Header{}
	for _, name := range []string{"x-amz-date", "X-AMZ-META-ABC", "content-md5", "x-amz-meta-a_b", "weird name", "x--y", "-x", "a1-b2"} {
		h[http.CanonicalHeaderKey(name)] = []string{"v-" + name}
	}
	for _, name := range []string{"x-amz-date", "X-Amz-Date", "x-amz-meta-abc", "content-md5", "x-amz-meta-a_b",
		"weird name", "x--y", "-x", "a1-b2", "missing", strings.Repeat("x", 100), ""} {
		got, want := lookupHeader(h, name), h.Values(name)
		if !slices.Equal(got, want) {
			t.Errorf("lookupHeader(%q) = %q, Values says %q", name, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { lookupHeader(h, "x-amz-date") }); n != 0 {
		t.Errorf("lookupHeader allocates %v times", n)
	}
}
