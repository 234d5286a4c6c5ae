package s3api

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/xml"
	"hash/crc32"
	"testing"
)

// TestPutResultChecksumType: a PutObject answer that carries a checksum
// says it covers the whole object, as the stores' answers do.
func TestPutResultChecksumType(t *testing.T) {
	s := newTestServer(t)
	body := []byte("checksummed")
	var sum [4]byte
	binary.BigEndian.PutUint32(sum[:], crc32.ChecksumIEEE(body))
	resp := s.do(t, "PUT", "/bkt/k", body, map[string]string{"x-amz-checksum-crc32": base64.StdEncoding.EncodeToString(sum[:])})
	if resp.StatusCode != 200 {
		t.Fatalf("PUT: status %d", resp.StatusCode)
	}
	if got := resp.Header.Get("x-amz-checksum-crc32"); got == "" {
		t.Fatal("no x-amz-checksum-crc32 in the answer")
	}
	if got := resp.Header.Get("x-amz-checksum-type"); got != "FULL_OBJECT" {
		t.Errorf("x-amz-checksum-type %q, want FULL_OBJECT", got)
	}
	resp = s.do(t, "PUT", "/bkt/plain", body, nil)
	if resp.Header.Get("x-amz-checksum-crc32") == "" && resp.Header.Get("x-amz-checksum-type") != "" {
		t.Errorf("x-amz-checksum-type %q without a checksum", resp.Header.Get("x-amz-checksum-type"))
	}
}

// TestCopyResultETagHeader: CopyObject's answer carries the new ETag as a
// header too, equal to the document's.
func TestCopyResultETagHeader(t *testing.T) {
	s := newTestServer(t)
	s.do(t, "PUT", "/bkt/src", []byte("source"), nil)
	resp := s.do(t, "PUT", "/bkt/dst", nil, map[string]string{"x-amz-copy-source": "/bkt/src"})
	if resp.StatusCode != 200 {
		t.Fatalf("copy: status %d", resp.StatusCode)
	}
	var res copyObjectResult
	if err := xml.NewDecoder(resp.Body).Decode(&res); err != nil {
		t.Fatal(err)
	}
	if got := resp.Header.Get("ETag"); got == "" || got != res.ETag {
		t.Errorf("ETag header %q, document's %q", got, res.ETag)
	}
}
