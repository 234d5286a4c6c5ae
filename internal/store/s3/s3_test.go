package s3store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/hoard-io/hoard/internal/store"
	"github.com/hoard-io/hoard/internal/testaddr"
)

func TestClassify(t *testing.T) {
	tests := []struct {
		code   string
		status int
		want   error
	}{
		{"NoSuchKey", 404, store.ErrNoSuchKey},
		{"NoSuchBucket", 404, store.ErrNoSuchBucket},
		{"NotModified", 304, store.ErrNotModified},
		{"304 Not Modified", 304, store.ErrNotModified},
		{"PreconditionFailed", 412, store.ErrPreconditionFailed},
		{"412 Precondition Failed", 412, store.ErrPreconditionFailed},
		{"InvalidRange", 416, store.ErrInvalidRange},
		{"416 Requested Range Not Satisfiable", 416, store.ErrInvalidRange},
		{"BucketNotEmpty", 409, store.ErrBucketNotEmpty},
		{"BucketAlreadyOwnedByYou", 409, store.ErrBucketExists},
		{"BucketAlreadyExists", 409, store.ErrBucketExists},
		{"NoSuchUpload", 404, store.ErrNoSuchUpload},
		{"SlowDown", 503, store.ErrUnavailable},
		{"ServiceUnavailable", 503, store.ErrUnavailable},
		{"XMinioServerNotInitialized", 503, store.ErrUnavailable},
		{"InternalError", 500, store.ErrUnavailable},
		{"502 Bad Gateway", 502, store.ErrUnavailable},
		{"RequestTimeout", 400, store.ErrUnavailable},
		{"InvalidPart", 400, nil},
		{"AccessDenied", 403, nil},
		{"EntityTooSmall", 400, nil},
	}
	for _, tc := range tests {
		t.Run(tc.code, func(t *testing.T) {
			if got := classify(tc.code, tc.status); got != tc.want {
				t.Errorf("classify(%q, %d) = %v, want %v", tc.code, tc.status, got, tc.want)
			}
		})
	}
}

func TestMapError(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name    string
		ctx     context.Context
		err     error
		is      error  // errors.Is target, or nil
		apiCode string // *store.APIError code, or ""
	}{
		{"nil", context.Background(), nil, nil, ""},
		{"sentinel", context.Background(), minio.ErrorResponse{Code: "NoSuchKey", StatusCode: 404}, store.ErrNoSuchKey, ""},
		{"api error", context.Background(), minio.ErrorResponse{Code: "InvalidPart", StatusCode: 400, Message: "m"}, nil, "InvalidPart"},
		{"client-side refusal", context.Background(), minio.ErrorResponse{Code: "XMinioInvalidObjectName"}, nil, "XMinioInvalidObjectName"},
		{"wrapped api error", context.Background(), fmt.Errorf("x: %w", minio.ErrorResponse{Code: "SlowDown", StatusCode: 503}), store.ErrUnavailable, ""},
		{"refused", context.Background(), &url.Error{Op: "Get", URL: "http://x", Err: &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}}, store.ErrUnavailable, ""},
		{"reset", context.Background(), fmt.Errorf("read: %w", syscall.ECONNRESET), store.ErrUnavailable, ""},
		{"truncated body", context.Background(), fmt.Errorf("read: %w", io.ErrUnexpectedEOF), store.ErrUnavailable, ""},
		{"caller canceled", canceled, context.Canceled, context.Canceled, ""},
		{"internal deadline", context.Background(), context.DeadlineExceeded, store.ErrUnavailable, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := mapError(tc.ctx, "get", "b", "k", tc.err)
			if tc.err == nil {
				if got != nil {
					t.Fatalf("mapError(nil) = %v", got)
				}
				return
			}
			if tc.is != nil && !errors.Is(got, tc.is) {
				t.Errorf("mapError = %v, want errors.Is %v", got, tc.is)
			}
			var resp minio.ErrorResponse
			if tc.is == store.ErrUnavailable && !errors.As(tc.err, &resp) && !strings.Contains(got.Error(), tc.err.Error()) {
				t.Errorf("mapError = %q lost its cause %q", got, tc.err)
			}
			var apiErr *store.APIError
			if tc.apiCode != "" && (!errors.As(got, &apiErr) || apiErr.Code != tc.apiCode || apiErr.StatusCode == 0) {
				t.Errorf("mapError = %v, want APIError %s with a status", got, tc.apiCode)
			}
			if tc.apiCode == "" && errors.As(got, &apiErr) {
				t.Errorf("mapError = %v: unexpected APIError", got)
			}
		})
	}
}

func TestRangeHeader(t *testing.T) {
	tests := []struct {
		in      store.ByteRange
		want    string
		wantErr bool
	}{
		{store.ByteRange{Start: 0, End: 9}, "bytes=0-9", false},
		{store.ByteRange{Start: 5, End: -1}, "bytes=5-", false},
		{store.ByteRange{Start: 0, End: -1}, "bytes=0-", false},
		{store.ByteRange{Start: -20, End: -1}, "bytes=-20", false},
		{store.ByteRange{Start: 9, End: 3}, "", true},
		{store.ByteRange{Start: -5, End: 3}, "", true},
	}
	for _, tc := range tests {
		got, err := rangeHeader(tc.in)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("rangeHeader(%+v) = %q, %v; want %q (err %v)", tc.in, got, err, tc.want, tc.wantErr)
		}
		if err != nil && !errors.Is(err, store.ErrInvalidRange) {
			t.Errorf("rangeHeader(%+v) error %v is not ErrInvalidRange", tc.in, err)
		}
	}
}

func TestParseContentRange(t *testing.T) {
	tests := []struct {
		in         string
		start, end int64
		total      int64
		wantErr    bool
	}{
		{"bytes 0-9/100", 0, 9, 100, false},
		{"bytes 90-99/100", 90, 99, 100, false},
		{"bytes 0-0/*", 0, 0, -1, false},
		{"bytes 5-4/100", 0, 0, 0, true},
		{"bytes 0-100/100", 0, 0, 0, true},
		{"items 0-1/2", 0, 0, 0, true},
		{"bytes 0-9", 0, 0, 0, true},
		{"bytes a-9/10", 0, 0, 0, true},
	}
	for _, tc := range tests {
		rng, total, err := parseContentRange(tc.in)
		if (err != nil) != tc.wantErr {
			t.Errorf("parseContentRange(%q) error %v, wantErr %v", tc.in, err, tc.wantErr)
			continue
		}
		if !tc.wantErr && (rng.Start != tc.start || rng.End != tc.end || total != tc.total) {
			t.Errorf("parseContentRange(%q) = %+v/%d", tc.in, rng, total)
		}
	}
}

func TestInfoFromHeader(t *testing.T) {
	h := http.Header{}
	h.Set("ETag", `"abc123"`)
	h.Set("Content-Length", "10")
	h.Set("Content-Range", "bytes 10-19/1000")
	h.Set("Last-Modified", "Wed, 21 Oct 2015 07:28:00 GMT")
	h.Set("Content-Type", "text/plain")
	h.Set("Content-Encoding", "aws-chunked,gzip")
	h.Set("Content-Disposition", "inline")
	h.Set("Content-Language", "fr")
	h.Set("Cache-Control", "no-store")
	h.Set("Expires", "0")
	h.Set("X-Amz-Meta-Color", "blue")
	h.Set("x-amz-meta-Other-Key", "v")
	h.Set("X-Amz-Checksum-Crc32", "AAAAAA==")
	h.Set("X-Amz-Checksum-Sha256", "sha")
	h.Set("X-Amz-Checksum-Type", "FULL_OBJECT")
	h.Set("X-Amz-Version-Id", "v1")

	info, rng, err := infoFromHeader("b", "k", http.StatusPartialContent, h)
	if err != nil {
		t.Fatal(err)
	}
	want := store.ObjectInfo{
		Bucket: "b", Key: "k", Size: 1000, ETag: "abc123",
		LastModified: time.Date(2015, 10, 21, 7, 28, 0, 0, time.UTC), VersionID: "v1",
		ContentType: "text/plain", ContentEncoding: "gzip", ContentDisposition: "inline",
		ContentLanguage: "fr", CacheControl: "no-store", Expires: "0",
		UserMetadata: map[string]string{"color": "blue", "other-key": "v"},
		Checksums:    map[string]string{"CRC32": "AAAAAA==", "SHA256": "sha"},
		ChecksumType: "FULL_OBJECT",
	}
	if fmt.Sprint(info) != fmt.Sprint(want) {
		t.Errorf("info =\n%+v\nwant\n%+v", info, want)
	}
	if rng == nil || *rng != (store.ByteRange{Start: 10, End: 19}) {
		t.Errorf("rng = %+v", rng)
	}

	info, rng, err = infoFromHeader("b", "k", http.StatusOK, h)
	if err != nil || rng != nil || info.Size != 10 {
		t.Errorf("200: size %d rng %v err %v; want 10, nil, nil", info.Size, rng, err)
	}
	h.Set("Content-Length", "ten")
	if _, _, err := infoFromHeader("b", "k", http.StatusOK, h); err == nil {
		t.Error("bad Content-Length accepted")
	}
}

func TestETagQuoting(t *testing.T) {
	for _, tc := range []struct{ in, trimmed, quoted string }{
		{`"abc"`, "abc", `"abc"`},
		{"abc", "abc", `"abc"`},
		{`W/"abc"`, "abc", `W/"abc"`},
		{"*", "*", "*"},
		{`"abc-3"`, "abc-3", `"abc-3"`},
	} {
		if got := trimETag(tc.in); got != tc.trimmed {
			t.Errorf("trimETag(%q) = %q, want %q", tc.in, got, tc.trimmed)
		}
		if got := quoteETag(tc.in); got != tc.quoted {
			t.Errorf("quoteETag(%q) = %q, want %q", tc.in, got, tc.quoted)
		}
	}
}

func TestStoredEncoding(t *testing.T) {
	for in, want := range map[string]string{
		"":                      "",
		"gzip":                  "gzip",
		"aws-chunked":           "",
		"aws-chunked,identity":  "identity",
		"gzip, AWS-CHUNKED, br": "gzip,br",
	} {
		if got := storedEncoding(in); got != want {
			t.Errorf("storedEncoding(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPutOptions(t *testing.T) {
	po, err := putOptions(store.PutOptions{
		ContentType: "a/b", Expires: "0",
		UserMetadata: map[string]string{"Content-Type": "not a header", "k": "v"},
	})
	if err != nil {
		t.Fatal(err)
	}
	h := po.Header()
	if h.Get("Content-Type") != "a/b" || h.Get("X-Amz-Meta-Content-Type") != "not a header" ||
		h.Get("X-Amz-Meta-K") != "v" || h.Get("Expires") != "0" {
		t.Errorf("headers = %v", h)
	}
	if _, err := putOptions(store.PutOptions{ChecksumAlgorithm: "MD4"}); err == nil {
		t.Error("unknown checksum algorithm accepted")
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"minimal", Config{Endpoint: "http://127.0.0.1:9000"}, true},
		{"https with keys", Config{Endpoint: "https://s3.example.com", AccessKey: "a", SecretKey: "b"}, true},
		{"no endpoint", Config{}, false},
		{"bad scheme", Config{Endpoint: "ftp://x"}, false},
		{"no host", Config{Endpoint: "http://"}, false},
		{"path", Config{Endpoint: "http://x/bucket"}, false},
		{"half credentials", Config{Endpoint: "http://x", AccessKey: "a"}, false},
		{"negative timeout", Config{Endpoint: "http://x", DialTimeout: -1}, false},
		{"negative attempts", Config{Endpoint: "http://x", MaxAttempts: -1}, false},
	}
	for _, tc := range tests {
		if err := tc.cfg.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: Validate() = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
	d := Config{Endpoint: "http://x"}.withDefaults()
	if d.Region != DefaultRegion || d.MaxIdleConnsPerHost < 64 || d.MaxAttempts != DefaultMaxAttempts {
		t.Errorf("defaults = %+v", d)
	}
	tr := newTransport(d)
	if !tr.DisableCompression || tr.MaxIdleConnsPerHost < 64 || tr.ResponseHeaderTimeout == 0 {
		t.Errorf("transport = %+v", tr)
	}
}

// TestUnavailable: a store nobody listens on fails fast, as ErrUnavailable,
// on every kind of call.
func TestUnavailable(t *testing.T) {
	addr := testaddr.Refused(t)

	st, err := New(Config{Endpoint: "http://" + addr, AccessKey: "ak", SecretKey: "secretkey"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	ctx := t.Context()
	calls := map[string]func() error{
		"Get": func() error {
			_, _, _, err := st.Get(ctx, "bucket", "key", store.GetOptions{})
			return err
		},
		"Stat": func() error { _, err := st.Stat(ctx, "bucket", "key"); return err },
		"Put": func() error {
			_, err := st.Put(ctx, "bucket", "key", strings.NewReader("x"), 1, store.PutOptions{})
			return err
		},
		"List":        func() error { _, err := st.List(ctx, "bucket", store.ListOptions{}); return err },
		"ListBuckets": func() error { _, err := st.ListBuckets(ctx); return err },
		"HeadBucket":  func() error { return st.HeadBucket(ctx, "bucket") },
		"DeleteMany": func() error {
			_, err := st.DeleteMany(ctx, "bucket", []string{"a", "b"})
			return err
		},
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			err := call()
			if !errors.Is(err, store.ErrUnavailable) {
				t.Errorf("error %v, want ErrUnavailable", err)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("took %v to give up", d)
			}
		})
	}
}
