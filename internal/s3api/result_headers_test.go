package s3api

import (
	"encoding/base64"
	"encoding/binary"
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
