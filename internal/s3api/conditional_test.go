package s3api

import (
	"io"
	"testing"
)

// TestConditionalPut: If-Match and If-None-Match on PutObject reach the
// store; a refused write changes nothing, in the store or in what reads see.
func TestConditionalPut(t *testing.T) {
	s := newTestServer(t)
	put := func(body string, hdr map[string]string) (int, string) {
		resp := s.do(t, "PUT", "/bkt/k", []byte(body), hdr)
		if resp.StatusCode == 200 {
			return 200, resp.Header.Get("ETag")
		}
		return resp.StatusCode, errorCodeOf(t, resp)
	}
	read := func() string {
		resp := s.do(t, "GET", "/bkt/k", nil, nil)
		data, _ := io.ReadAll(resp.Body)
		return string(data)
	}
	if code, got := put("v1", map[string]string{"If-Match": `"bad"`}); code != 404 || got != "NoSuchKey" {
		t.Fatalf("If-Match on a missing object: %d %s", code, got)
	}
	if code, _ := put("v1", map[string]string{"If-None-Match": "*"}); code != 200 {
		t.Fatalf("If-None-Match * on a missing object: %d", code)
	}
	if got := read(); got != "v1" { // now cached
		t.Fatalf("read %q", got)
	}
	for _, hdr := range []map[string]string{
		{"If-Match": `"bad"`},
		{"If-None-Match": "*"},
	} {
		if code, got := put("v2", hdr); code != 412 || got != "PreconditionFailed" {
			t.Fatalf("%v: %d %s", hdr, code, got)
		}
		if got, stored := read(), s.object(t, "k"); got != "v1" || stored != "v1" {
			t.Fatalf("%v: refused write left %q read, %q stored", hdr, got, stored)
		}
	}
	etag := s.do(t, "HEAD", "/bkt/k", nil, nil).Header.Get("ETag")
	if code, _ := put("v3", map[string]string{"If-Match": etag}); code != 200 {
		t.Fatalf("If-Match %s: %d", etag, code)
	}
	if got := read(); got != "v3" {
		t.Fatalf("read %q after a matching If-Match", got)
	}
}
