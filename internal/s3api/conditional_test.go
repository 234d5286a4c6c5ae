package s3api

import (
	"encoding/xml"
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

// TestConditionalCompleteMultipartUpload: the conditions of a completion
// reach the store; a refused one changes nothing reads see.
func TestConditionalCompleteMultipartUpload(t *testing.T) {
	s := newTestServer(t)
	s.do(t, "PUT", "/bkt/k", []byte("v1"), nil)
	s.do(t, "GET", "/bkt/k", nil, nil) // cached
	var created struct{ UploadId string }
	resp := s.do(t, "POST", "/bkt/k?uploads", nil, nil)
	if err := xml.NewDecoder(resp.Body).Decode(&created); err != nil || created.UploadId == "" {
		t.Fatalf("CreateMultipartUpload: %d %v", resp.StatusCode, err)
	}
	resp = s.do(t, "PUT", "/bkt/k?partNumber=1&uploadId="+created.UploadId, []byte("v2"), nil)
	etag := resp.Header.Get("ETag")
	complete := []byte(`<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>` + etag + `</ETag></Part></CompleteMultipartUpload>`)
	for _, hdr := range []map[string]string{{"If-None-Match": "*"}, {"If-Match": `"bad"`}} {
		resp := s.do(t, "POST", "/bkt/k?uploadId="+created.UploadId, complete, hdr)
		if resp.StatusCode != 412 || errorCodeOf(t, resp) != "PreconditionFailed" {
			t.Fatalf("%v: status %d", hdr, resp.StatusCode)
		}
		data, _ := io.ReadAll(s.do(t, "GET", "/bkt/k", nil, nil).Body)
		if string(data) != "v1" || s.object(t, "k") != "v1" {
			t.Fatalf("%v: refused completion left %q read, %q stored", hdr, data, s.object(t, "k"))
		}
	}
	if resp := s.do(t, "POST", "/bkt/k?uploadId="+created.UploadId, complete, nil); resp.StatusCode != 200 {
		t.Fatalf("unconditional completion: %d", resp.StatusCode)
	}
	if data, _ := io.ReadAll(s.do(t, "GET", "/bkt/k", nil, nil).Body); string(data) != "v2" {
		t.Fatalf("read %q after completion", data)
	}
}

// TestConditionalReadValidators: a 304 or 412 to a GET or HEAD carries the
// object's ETag and Last-Modified, as the stores' answers do.
func TestConditionalReadValidators(t *testing.T) {
	s := newTestServer(t)
	s.do(t, "PUT", "/bkt/k", []byte("v1"), nil)
	etag := s.do(t, "HEAD", "/bkt/k", nil, nil).Header.Get("ETag")
	for _, method := range []string{"GET", "HEAD"} {
		for _, tc := range []struct {
			hdr  map[string]string
			want int
		}{
			{map[string]string{"If-None-Match": etag}, 304},
			{map[string]string{"If-Match": `"bad"`}, 412},
			{map[string]string{"If-Unmodified-Since": "Sat, 01 Jan 2000 00:00:00 GMT"}, 412},
		} {
			resp := s.do(t, method, "/bkt/k", nil, tc.hdr)
			if resp.StatusCode != tc.want {
				t.Fatalf("%s %v: status %d, want %d", method, tc.hdr, resp.StatusCode, tc.want)
			}
			if got := resp.Header.Get("ETag"); got != etag {
				t.Errorf("%s %v: ETag %q, want %q", method, tc.hdr, got, etag)
			}
			if resp.Header.Get("Last-Modified") == "" {
				t.Errorf("%s %v: no Last-Modified", method, tc.hdr)
			}
		}
	}
}
