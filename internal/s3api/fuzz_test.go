package s3api

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/hoard-io/hoard/internal/store"
)

// validHeader reports whether a header could be sent on the wire at all:
// a token for a name, no control characters but tab in the value.
func validHeader(name, value string) bool {
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	for i := 0; i < len(value); i++ {
		if c := value[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return name != ""
}

// FuzzServeHTTP sends authenticated requests with arbitrary paths,
// queries, headers and bodies through the whole S3 front (over an
// in-memory store). Whatever arrives, the server must neither panic nor
// answer 500: every bad input is the client's error, with an S3 code.
func FuzzServeHTTP(f *testing.F) {
	seeds := []struct {
		method, path, query, hname, hval string
		body                             []byte
	}{
		{"GET", "/bkt/k", "", "Range", "bytes=0-3", nil},
		{"PUT", "/bkt/k", "", "Content-MD5", "AAAAAAAAAAAAAAAAAAAAAA==", []byte("data")},
		{"POST", "/bkt", "delete", "", "", []byte("<Delete><Object><Key>k</Key></Object></Delete>")},
		{"POST", "/bkt/k", "uploadId=x", "", "", []byte("<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>x</ETag></Part></CompleteMultipartUpload>")},
		{"GET", "/bkt", "list-type=2&max-keys=2&encoding-type=url", "", "", nil},
		{"PUT", "/bkt/k2", "", "x-amz-copy-source", "/bkt/k", nil},
		{"PUT", "/bkt/k", "partNumber=1&uploadId=abc", "x-amz-checksum-crc32", "AAAAAA==", []byte("x")},
		{"HEAD", "/bkt/k", "", "If-None-Match", "*", nil},
		{"PUT", "/newbkt", "", "", "", []byte("<CreateBucketConfiguration><LocationConstraint>x</LocationConstraint></CreateBucketConfiguration>")},
	}
	for _, s := range seeds {
		f.Add(s.method, s.path, s.query, s.hname, s.hval, s.body)
	}
	srv := newTestServer(f)
	if _, err := srv.store.Put(f.Context(), "bkt", "k", bytes.NewReader([]byte("0123456789")), 10, store.PutOptions{}); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, method, path, query, hname, hval string, body []byte) {
		switch method {
		case "GET", "PUT", "POST", "DELETE", "HEAD":
		default:
			method = "GET"
		}
		u := &url.URL{Path: path, RawQuery: query}
		if len(path) == 0 || path[0] != '/' {
			u.Path = "/" + path
		}
		req, err := http.NewRequest(method, "http://hoard.test"+u.EscapedPath()+"?"+u.RawQuery, bytes.NewReader(body))
		if err != nil {
			return
		}
		if hname != "" && validHeader(hname, hval) {
			req.Header.Set(hname, hval)
		}
		sum := sha256.Sum256(body)
		hash := hex.EncodeToString(sum[:])
		req.Header.Set("X-Amz-Content-Sha256", hash)
		sign(t, req, hash)
		rec := httptest.NewRecorder()
		func() {
			defer func() {
				if r := recover(); r != nil && r != http.ErrAbortHandler {
					t.Fatalf("%s %s?%s [%s: %s]: panic: %v", method, path, query, hname, hval, r)
				}
			}()
			srv.api.ServeHTTP(rec, req)
		}()
		if rec.Code >= 500 && rec.Code != http.StatusNotImplemented {
			t.Fatalf("%s %q?%q [%s: %s] = %d: %s", method, path, query, hname, hval, rec.Code, rec.Body)
		}
	})
}
