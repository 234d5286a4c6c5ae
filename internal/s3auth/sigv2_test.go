package s3auth

import (
	"bytes"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7/pkg/signer"

	"github.com/hoard-io/hoard/internal/clock"
)

// TestV2AWSExample is the classic object GET example from the S3 SigV2
// documentation: virtual-hosted bucket "johnsmith".
func TestV2AWSExample(t *testing.T) {
	v, err := New(Config{
		Region:  "us-east-1",
		Clock:   fixedClock(time.Date(2007, 3, 27, 19, 40, 0, 0, time.UTC)),
		Domains: []string{"s3.amazonaws.com"},
	}, staticCreds{testAK: testSK})
	if err != nil {
		t.Fatal(err)
	}
	r, err := http.NewRequest(http.MethodGet, "http://johnsmith.s3.amazonaws.com/photos/puppy.jpg", nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Date", "Tue, 27 Mar 2007 19:36:42 +0000")
	r.Header.Set("Authorization", "AWS "+testAK+":bWq2s1WEIj+Ydj0vQ697zp+IXMU=")
	req, err := v.Verify(serverSide(t, r))
	wantErr(t, err, nil)
	if req.Method != V2Header {
		t.Fatalf("method %v", req.Method)
	}
}

func TestV2HeaderMinio(t *testing.T) {
	v := newTestVerifier(t, clock.Real())
	body := []byte("v2 body")
	for _, virtual := range []bool{false, true} {
		for _, key := range awkwardKeys {
			for _, rq := range []string{"", "acl", "uploadId=u%2B1&partNumber=3", "prefix=x&delimiter=%2F", "response-content-type=text%2Fplain%3B%20charset%3Dutf-8"} {
				t.Run(strconv.FormatBool(virtual)+"/"+key+"?"+rq, func(t *testing.T) {
					u := objectURL(key, rq)
					if virtual {
						u = (&url.URL{Scheme: "http", Host: "bucket." + testHost, Path: "/" + key, RawQuery: rq}).String()
					}
					req, err := http.NewRequest(http.MethodPut, u, bytes.NewReader(body))
					if err != nil {
						t.Fatal(err)
					}
					req.Header.Set("Content-Type", "text/plain")
					req.Header.Set("X-Amz-Meta-B", "2")
					req.Header.Set("X-Amz-Meta-A", "1")
					signed := signer.SignV2(*req, testAK, testSK, virtual)
					got, vr, err := readBody(v, serverSide(t, signed))
					wantErr(t, err, nil)
					if !bytes.Equal(got, body) || vr.Method != V2Header {
						t.Fatalf("got %q %v", got, vr.Method)
					}
				})
			}
		}
	}
}

func TestV2HeaderTamper(t *testing.T) {
	sign := func(t *testing.T, ak, sk string) *http.Request {
		req, err := http.NewRequest(http.MethodGet, objectURL("k k", "acl&max-keys=5"), nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "text/plain")
		req.Header.Set("X-Amz-Meta-A", "1")
		return serverSide(t, signer.SignV2(*req, ak, sk, false))
	}
	tests := []struct {
		name   string
		ak, sk string
		skew   time.Duration
		mutate func(*http.Request)
		want   error
	}{
		{name: "untouched"},
		{name: "x-amz header", mutate: func(r *http.Request) { r.Header.Set("X-Amz-Meta-A", "2") }, want: ErrSignatureDoesNotMatch},
		{name: "x-amz header added", mutate: func(r *http.Request) { r.Header.Set("X-Amz-Copy-Source", "/x/y") }, want: ErrSignatureDoesNotMatch},
		{name: "content type", mutate: func(r *http.Request) { r.Header.Set("Content-Type", "text/html") }, want: ErrSignatureDoesNotMatch},
		{name: "sub-resource", mutate: func(r *http.Request) { r.URL.RawQuery = "policy&max-keys=5" }, want: ErrSignatureDoesNotMatch},
		// SigV2 never signed ordinary query parameters; S3 behaves the same.
		{name: "ordinary query parameter", mutate: func(r *http.Request) { r.URL.RawQuery = "acl&max-keys=6" }},
		{name: "path", mutate: func(r *http.Request) { r.URL.Path, r.URL.RawPath = "/bucket/k j", "" }, want: ErrSignatureDoesNotMatch},
		{name: "method", mutate: func(r *http.Request) { r.Method = http.MethodDelete }, want: ErrSignatureDoesNotMatch},
		{name: "date", mutate: func(r *http.Request) {
			d, _ := http.ParseTime(r.Header.Get("Date"))
			r.Header.Set("Date", d.Add(time.Second).Format(http.TimeFormat))
		}, want: ErrSignatureDoesNotMatch},
		{name: "no date", mutate: func(r *http.Request) { r.Header.Del("Date") }, want: ErrMissingDate},
		{name: "signature", mutate: func(r *http.Request) {
			r.Header.Set("Authorization", "AWS "+testAK+":AAAAAAAAAAAAAAAAAAAAAAAAAAA=")
		}, want: ErrSignatureDoesNotMatch},
		{name: "malformed", mutate: func(r *http.Request) { r.Header.Set("Authorization", "AWS nocolon") }, want: ErrAuthHeaderMalformed},
		{name: "unknown scheme", mutate: func(r *http.Request) { r.Header.Set("Authorization", "Bearer x") }, want: ErrAccessDenied},
		{name: "unknown key", ak: "AKIDNOBODY", want: ErrInvalidAccessKeyID},
		{name: "wrong secret", sk: "nope", want: ErrSignatureDoesNotMatch},
		{name: "skewed", skew: time.Hour, want: ErrRequestTimeTooSkewed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ak, sk := testAK, testSK
			if tt.ak != "" {
				ak = tt.ak
			}
			if tt.sk != "" {
				sk = tt.sk
			}
			r := sign(t, ak, sk)
			if tt.mutate != nil {
				tt.mutate(r)
			}
			_, err := newTestVerifier(t, fixedClock(time.Now().Add(tt.skew))).Verify(r)
			wantErr(t, err, tt.want)
		})
	}
}

// TestV2AmzDate covers x-amz-date with an empty Date line (the documented
// form) and with the Date header written anyway (what minio-go does).
func TestV2AmzDate(t *testing.T) {
	now := time.Now().UTC()
	v := newTestVerifier(t, fixedClock(now))
	stamp := now.Format(http.TimeFormat)
	for _, dateLine := range []string{"", stamp} {
		r, err := http.NewRequest(http.MethodGet, objectURL("k", ""), nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set("X-Amz-Date", stamp)
		if dateLine != "" {
			r.Header.Set("Date", dateLine)
		}
		sts := "GET\n\n\n" + dateLine + "\nx-amz-date:" + stamp + "\n/bucket/k"
		r.Header.Set("Authorization", "AWS "+testAK+":"+hmacSHA1B64(testSK, sts))
		_, err = v.Verify(serverSide(t, r))
		wantErr(t, err, nil)
	}
}

func TestV2Presigned(t *testing.T) {
	for _, virtual := range []bool{false, true} {
		for _, key := range awkwardKeys {
			t.Run(strconv.FormatBool(virtual)+"/"+key, func(t *testing.T) {
				u := objectURL(key, "response-content-disposition=attachment%3B%20filename%3D%22a%20b%22")
				if virtual {
					u = (&url.URL{Scheme: "http", Host: "bucket." + testHost + ":9000", Path: "/" + key,
						RawQuery: "versionId=7"}).String()
				}
				req, err := http.NewRequest(http.MethodGet, u, nil)
				if err != nil {
					t.Fatal(err)
				}
				signed := signer.PreSignV2(*req, testAK, testSK, 300, virtual)
				out, err := http.NewRequest(http.MethodGet, signed.URL.String(), nil)
				if err != nil {
					t.Fatal(err)
				}
				r := serverSide(t, out)
				vr, err := newTestVerifier(t, clock.Real()).Verify(r)
				wantErr(t, err, nil)
				if vr.Method != V2Presigned {
					t.Fatalf("method %v", vr.Method)
				}
				_, err = newTestVerifier(t, fixedClock(time.Now().Add(6*time.Minute))).Verify(r)
				wantErr(t, err, ErrExpired)
			})
		}
	}

	base := func(t *testing.T) *http.Request {
		req, _ := http.NewRequest(http.MethodGet, objectURL("obj", "versionId=1"), nil)
		signed := signer.PreSignV2(*req, testAK, testSK, 300, false)
		out, _ := http.NewRequest(http.MethodGet, signed.URL.String(), nil)
		return serverSide(t, out)
	}
	tests := []struct {
		name   string
		mutate func(*http.Request)
		want   error
	}{
		{"expires extended", func(r *http.Request) {
			q := r.URL.Query()
			e, _ := strconv.ParseInt(q.Get("Expires"), 10, 64)
			q.Set("Expires", strconv.FormatInt(e+3600, 10))
			r.URL.RawQuery = q.Encode()
		}, ErrSignatureDoesNotMatch},
		{"expires garbage", func(r *http.Request) {
			q := r.URL.Query()
			q.Set("Expires", "soon")
			r.URL.RawQuery = q.Encode()
		}, ErrMalformedPresign},
		{"signature missing", func(r *http.Request) {
			q := r.URL.Query()
			q.Del("Signature")
			r.URL.RawQuery = q.Encode()
		}, ErrMalformedPresign},
		{"version changed", func(r *http.Request) {
			r.URL.RawQuery = strings.Replace(r.URL.RawQuery, "versionId=1", "versionId=2", 1)
		}, ErrSignatureDoesNotMatch},
		{"unknown key", func(r *http.Request) {
			r.URL.RawQuery = strings.Replace(r.URL.RawQuery, testAK, "AKIDNOBODY", 1)
		}, ErrInvalidAccessKeyID},
		{"mixed with v4", func(r *http.Request) { r.URL.RawQuery += "&X-Amz-Algorithm=AWS4-HMAC-SHA256" }, ErrAmbiguousAuth},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := base(t)
			tt.mutate(r)
			_, err := newTestVerifier(t, clock.Real()).Verify(r)
			wantErr(t, err, tt.want)
		})
	}
}

// A SigV2 presigned URL may not expire more than a week away, as SigV4's
// X-Amz-Expires may not exceed a week: validly signed, it is refused.
func TestV2PresignedExpiryCap(t *testing.T) {
	for _, tc := range []struct {
		ttl  int64
		want error
	}{
		{int64(maxPresignTTL/time.Second) - 60, nil},
		{int64(maxPresignTTL/time.Second) + 60, ErrMalformedPresign},
		{10 * 365 * 24 * 3600, ErrMalformedPresign},
	} {
		req, _ := http.NewRequest(http.MethodGet, objectURL("obj", ""), nil)
		signed := signer.PreSignV2(*req, testAK, testSK, tc.ttl, false)
		out, _ := http.NewRequest(http.MethodGet, signed.URL.String(), nil)
		_, err := newTestVerifier(t, clock.Real()).Verify(serverSide(t, out))
		wantErr(t, err, tc.want)
	}
}

func TestVirtualHostBucket(t *testing.T) {
	v := newTestVerifier(t, clock.Real())
	tests := map[string]string{
		"bucket." + testHost:           "bucket",
		"Bucket." + testHost + ":443":  "bucket",
		"my.dotted.bucket." + testHost: "my.dotted.bucket",
		testHost:                       "",
		"bucket.elsewhere.test":        "",
		"[::1]:9000":                   "",
	}
	for host, want := range tests {
		if got := v.virtualHostBucket(host); got != want {
			t.Errorf("virtualHostBucket(%q) = %q, want %q", host, got, want)
		}
	}
}
