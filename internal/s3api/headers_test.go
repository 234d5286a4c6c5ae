package s3api

import (
	"encoding/xml"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/cachelet"
	"github.com/hoard-io/hoard/internal/store"
)

func TestParseRange(t *testing.T) {
	tests := []struct {
		in     string
		want   store.ByteRange
		wantOK bool
	}{
		{"bytes=0-9", store.ByteRange{Start: 0, End: 9}, true},
		{"bytes=10-", store.ByteRange{Start: 10, End: -1}, true},
		{"bytes=-5", store.ByteRange{Start: -5, End: -1}, true},
		{" bytes=3-3 ", store.ByteRange{Start: 3, End: 3}, true},
		{"bytes=-0", store.ByteRange{Start: 0, End: -2}, true},
		{"bytes=9-3", store.ByteRange{}, false},
		{"bytes=0-1,4-5", store.ByteRange{}, false},
		{"items=0-1", store.ByteRange{}, false},
		{"bytes=a-b", store.ByteRange{}, false},
		{"bytes=-", store.ByteRange{}, false},
		{"bytes=5", store.ByteRange{}, false},
		{"bytes=-1-2", store.ByteRange{}, false},
	}
	for _, tt := range tests {
		got, ok := parseRange(tt.in)
		if ok != tt.wantOK || (ok && got != tt.want) {
			t.Errorf("parseRange(%q) = %+v, %v; want %+v, %v", tt.in, got, ok, tt.want, tt.wantOK)
		}
	}
}

func TestResolveRange(t *testing.T) {
	tests := []struct {
		r       store.ByteRange
		size    int64
		want    store.ByteRange
		wantErr bool
	}{
		{store.ByteRange{Start: 0, End: 9}, 100, store.ByteRange{Start: 0, End: 9}, false},
		{store.ByteRange{Start: 90, End: 200}, 100, store.ByteRange{Start: 90, End: 99}, false},
		{store.ByteRange{Start: 10, End: -1}, 100, store.ByteRange{Start: 10, End: 99}, false},
		{store.ByteRange{Start: -5, End: -1}, 100, store.ByteRange{Start: 95, End: 99}, false},
		{store.ByteRange{Start: -500, End: -1}, 100, store.ByteRange{Start: 0, End: 99}, false},
		{store.ByteRange{Start: 100, End: -1}, 100, store.ByteRange{}, true},
		{store.ByteRange{Start: 0, End: 0}, 0, store.ByteRange{}, true},
		{store.ByteRange{Start: -3, End: -1}, 0, store.ByteRange{}, true},
		{store.ByteRange{Start: 0, End: -2}, 10, store.ByteRange{}, true},
	}
	for _, tt := range tests {
		got, err := cachelet.ResolveRange(tt.r, tt.size)
		if (err != nil) != tt.wantErr || (err == nil && got != tt.want) {
			t.Errorf("ResolveRange(%+v, %d) = %+v, %v; want %+v, err=%v", tt.r, tt.size, got, err, tt.want, tt.wantErr)
		}
	}
}

func FuzzParseRange(f *testing.F) {
	for _, s := range []string{"bytes=0-9", "bytes=-5", "bytes=10-", "bytes=0-1,2-3", "bytes=99999999999999999999-"} {
		f.Add(s, int64(100))
	}
	f.Fuzz(func(t *testing.T, h string, size int64) {
		if size < 0 {
			size = -size
		}
		r, ok := parseRange(h)
		if !ok {
			return
		}
		res, err := cachelet.ResolveRange(r, size)
		if err != nil {
			return
		}
		if res.Start < 0 || res.End < res.Start || res.End >= size {
			t.Fatalf("parseRange(%q) on size %d resolved to %+v", h, size, res)
		}
	})
}

func TestCheckKey(t *testing.T) {
	good := []string{"a", "a/b/c", "dir/", "with space", "ünïcødé/ключ", "a+b=c&d%e", "..a", "a..", "a/.b/c", "tab\there"}
	// The store judges these (they pass through); hoard does not refuse them.
	storeOnly := []string{"ctrl\x01", "del\x7f", "new\nline", string([]byte{0xff, 0xfe}), " ", " \t "}
	bad := []string{"../x", "a/../b", "a/..", "./a", "a/./b", "nul\x00byte", ".", "..", "a/.", "//..", "a//./b"}
	for _, k := range append(good, storeOnly...) {
		if err := checkKey(k); err != nil {
			t.Errorf("checkKey(%q) = %v, want nil", k, err)
		}
	}
	for _, k := range storeOnly {
		if !storeOnlyKey(k) {
			t.Errorf("storeOnlyKey(%q) = false, want true", k)
		}
	}
	for _, k := range good {
		if storeOnlyKey(k) {
			t.Errorf("storeOnlyKey(%q) = true, want false", k)
		}
	}
	for _, k := range bad {
		if err := checkKey(k); err == nil {
			t.Errorf("checkKey(%q) = nil, want an error", k)
		}
	}
	long := make([]byte, maxKeyLen+1)
	for i := range long {
		long[i] = 'k'
	}
	if err := checkKey(string(long)); err != errKeyTooLong {
		t.Errorf("checkKey(1025 bytes) = %v, want errKeyTooLong", err)
	}
}

func TestValidBucketName(t *testing.T) {
	good := []string{"abc", "my-bucket", "my.bucket.1", "a1b", "012"}
	bad := []string{"ab", "ABC", "-abc", "abc-", ".abc", "abc.", "a..b", "a_b", "192.168.1.1", string(make([]byte, 64))}
	for _, b := range good {
		if !validBucketName(b) {
			t.Errorf("validBucketName(%q) = false", b)
		}
	}
	for _, b := range bad {
		if validBucketName(b) {
			t.Errorf("validBucketName(%q) = true", b)
		}
	}
}

func TestCheckConditions(t *testing.T) {
	lm := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	info := store.ObjectInfo{ETag: "abc", LastModified: lm}
	before := lm.Add(-time.Hour).Format(http.TimeFormat)
	after := lm.Add(time.Hour).Format(http.TimeFormat)
	tests := []struct {
		name string
		h    map[string]string
		want condResult
	}{
		{"none", nil, condOK},
		{"if-match hit", map[string]string{"If-Match": `"abc"`}, condOK},
		{"if-match star", map[string]string{"If-Match": `*`}, condOK},
		{"if-match list", map[string]string{"If-Match": `"x", "abc"`}, condOK},
		{"if-match miss", map[string]string{"If-Match": `"xyz"`}, condPreconditionFailed},
		{"if-none-match hit", map[string]string{"If-None-Match": `"abc"`}, condNotModified},
		{"if-none-match miss", map[string]string{"If-None-Match": `"xyz"`}, condOK},
		{"if-modified-since later", map[string]string{"If-Modified-Since": after}, condNotModified},
		{"if-modified-since earlier", map[string]string{"If-Modified-Since": before}, condOK},
		{"if-unmodified-since earlier", map[string]string{"If-Unmodified-Since": before}, condPreconditionFailed},
		{"if-unmodified-since later", map[string]string{"If-Unmodified-Since": after}, condOK},
		{"if-match wins over unmodified-since", map[string]string{"If-Match": `"abc"`, "If-Unmodified-Since": before}, condOK},
		{"if-none-match decides over modified-since", map[string]string{"If-None-Match": `"xyz"`, "If-Modified-Since": after}, condOK},
	}
	for _, tt := range tests {
		h := http.Header{}
		for k, v := range tt.h {
			h.Set(k, v)
		}
		if got := checkConditions(h, info); got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestPutOptionsMetadataLimit(t *testing.T) {
	h := http.Header{}
	h.Set("Content-Type", "text/plain")
	h.Set("Content-Encoding", "aws-chunked,gzip")
	h.Set("X-Amz-Meta-Color", "blue")
	o, err := putOptions(h)
	if err != nil {
		t.Fatal(err)
	}
	if o.ContentEncoding != "gzip" || o.UserMetadata["color"] != "blue" || o.ContentType != "text/plain" {
		t.Fatalf("putOptions = %+v", o)
	}
	big := make([]byte, maxMetaSize)
	for i := range big {
		big[i] = 'x'
	}
	h.Set("X-Amz-Meta-Big", string(big))
	if _, err := putOptions(h); err != errMetadataTooLarge {
		t.Fatalf("oversized metadata: err = %v, want errMetadataTooLarge", err)
	}
}

// FuzzRequestXML feeds arbitrary bytes to the XML request documents: they
// must never panic, and whatever decodes must respect the limits enforced
// after decoding.
func FuzzRequestXML(f *testing.F) {
	f.Add([]byte(`<Delete><Quiet>true</Quiet><Object><Key>a</Key></Object></Delete>`))
	f.Add([]byte(`<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>"x"</ETag><ChecksumCRC32>AAAAAA==</ChecksumCRC32></Part></CompleteMultipartUpload>`))
	f.Add([]byte(`<CreateBucketConfiguration><LocationConstraint>us-east-1</LocationConstraint></CreateBucketConfiguration>`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var d deleteRequest
		_ = xml.Unmarshal(data, &d)
		var c completeMultipartUpload
		if xml.Unmarshal(data, &c) == nil {
			for _, p := range c.Parts {
				_ = p.toMap()
			}
		}
		var b createBucketConfiguration
		_ = xml.Unmarshal(data, &b)
	})
}

func TestSplitPath(t *testing.T) {
	tests := []struct {
		path, bucket, key string
		err               bool
	}{
		{"/", "", "", false},
		{"/bucket", "bucket", "", false},
		{"/bucket/", "bucket", "", false},
		{"/bucket/a/b", "bucket", "a/b", false},
		{"/bucket//lead", "bucket", "lead", false}, // as MinIO names it
		{"/bucket///", "bucket", "//", true},
		{"/Bad_Bucket/x", "Bad_Bucket", "x", true},
		{"/bucket/../etc/passwd", "bucket", "../etc/passwd", true},
	}
	for _, tt := range tests {
		b, k, err := splitPath(tt.path)
		if b != tt.bucket || k != tt.key || (err != nil) != tt.err {
			t.Errorf("splitPath(%q) = %q, %q, %v", tt.path, b, k, err)
		}
	}
}

// TestSplitRawPath checks the path as sent is split as splitPath splits
// its first segment and the rest decoded, on odd spellings and on
// thousands of generated ones.
func TestSplitRawPath(t *testing.T) {
	ref := func(raw string) (string, string, error) {
		rawBucket, rawKey, _ := strings.Cut(strings.TrimPrefix(raw, "/"), "/")
		if strings.Contains(rawBucket, "%") {
			return rawBucket, "", errInvalidBucketName
		}
		k, err := url.PathUnescape(rawKey)
		if err != nil {
			return rawBucket, "", errInvalidKey
		}
		return splitPath("/" + rawBucket + "/" + k)
	}
	tests := []struct {
		raw, bucket, key string
		err              error
	}{
		{"", "", "", nil},
		{"/", "", "", nil},
		{"/bucket", "bucket", "", nil},
		{"/bucket/a%2Fb", "bucket", "a/b", nil},
		{"/bucket/%2F%2Flead", "bucket", "lead", nil},
		{"/b%2Fk", "b%2Fk", "", errInvalidBucketName},
		{"/bucket/%zz", "bucket", "", errInvalidKey},
		{"/bucket/%2e%2e/x", "bucket", "../x", errInvalidKey},
		{"/bucket/a%00b", "bucket", "a\x00b", errInvalidKey},
		{"//k", "", "k", nil},
		{"bucket/k", "bucket", "k", nil},
		{"/bucket/%2F%2F", "bucket", "//", errInvalidKey},
	}
	for _, tt := range tests {
		b, k, err := splitRawPath(tt.raw)
		if b != tt.bucket || k != tt.key || !errors.Is(err, tt.err) || (err == nil) != (tt.err == nil) {
			t.Errorf("splitRawPath(%q) = %q, %q, %v; want %q, %q, %v", tt.raw, b, k, err, tt.bucket, tt.key, tt.err)
		}
	}
	alphabet := []string{"/", "/", "a", "B", ".", "..", "%", "%2F", "%2f", "%00", "%zz", "%2e", "-", "_", "é", "%C3%A9", "+"}
	rng := rand.New(rand.NewPCG(7, 8))
	for range 20000 {
		var raw strings.Builder
		for range rng.IntN(12) {
			raw.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		b, k, err := splitRawPath(raw.String())
		wb, wk, werr := ref(raw.String())
		if b != wb || k != wk || fmt.Sprint(err) != fmt.Sprint(werr) {
			t.Fatalf("splitRawPath(%q) = %q, %q, %v; the concatenation gave %q, %q, %v", raw.String(), b, k, err, wb, wk, werr)
		}
	}
}

var storeGetAll = store.GetOptions{}

// TestRepeatedMetadataHeader: every value of a repeated x-amz-meta-*
// header is kept, joined with "," as S3 and MinIO store them.
func TestRepeatedMetadataHeader(t *testing.T) {
	s := newTestServer(t)
	req, err := http.NewRequest(http.MethodPut, s.URL+"/bkt/k", strings.NewReader("v"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Add("X-Amz-Meta-Tag", "a")
	req.Header.Add("X-Amz-Meta-Tag", "b c")
	req.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
	sign(t, req, "UNSIGNED-PAYLOAD")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("put: %d", resp.StatusCode)
	}
	info, err := s.store.Stat(t.Context(), "bkt", "k")
	if err != nil {
		t.Fatal(err)
	}
	if got := info.UserMetadata["tag"]; got != "a,b c" {
		t.Fatalf("stored x-amz-meta-tag %q, want %q", got, "a,b c")
	}
	if got := s.do(t, http.MethodHead, "/bkt/k", nil, nil).Header.Get("x-amz-meta-tag"); got != "a,b c" {
		t.Fatalf("HEAD x-amz-meta-tag %q", got)
	}
}

// TestHeadResponseOverrides: HEAD honours response-* as GET does.
func TestHeadResponseOverrides(t *testing.T) {
	s := newTestServer(t)
	s.do(t, http.MethodPut, "/bkt/k", []byte("v"), map[string]string{"Content-Type": "text/plain"})
	for _, m := range []string{http.MethodGet, http.MethodHead} {
		resp := s.do(t, m, "/bkt/k?response-content-type=image%2Fpng&response-content-disposition=attachment", nil, nil)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "image/png" || resp.Header.Get("Content-Disposition") != "attachment" {
			t.Fatalf("%s: %d, Content-Type %q, Content-Disposition %q", m, resp.StatusCode,
				resp.Header.Get("Content-Type"), resp.Header.Get("Content-Disposition"))
		}
	}
}
