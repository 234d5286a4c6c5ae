package s3api

import (
	"net/http"
	"testing"
)

// TestUnreadRange: a Range the cache cannot read goes to the store, which
// says what it means; one it reads, or none, stays with the cache.
func TestUnreadRange(t *testing.T) {
	for _, tc := range []struct {
		vals []string
		want bool
	}{
		{nil, false},
		{[]string{"bytes=0-1"}, false},
		{[]string{"bytes=5-"}, false},
		{[]string{"bytes=-3"}, false},
		{[]string{"bytes=5-2"}, true},
		{[]string{"bytes=x-y"}, true},
		{[]string{"chars=0-1"}, true},
		{[]string{"bytes=-"}, true},
		{[]string{"bytes=0-1,4-5"}, true},
		{[]string{""}, true},
		{[]string{"bytes=0-1", "bytes=2-3"}, true},
	} {
		h := http.Header{}
		if tc.vals != nil {
			h["Range"] = tc.vals
		}
		if got := unreadRange(h); got != tc.want {
			t.Errorf("Range %q: unread %v, want %v", tc.vals, got, tc.want)
		}
	}
}

// TestHasDigest: a DeleteObjects without a digest the store can check is
// the store's to refuse; any digest, header or trailer, makes it hoard's.
func TestHasDigest(t *testing.T) {
	for _, tc := range []struct {
		hdr  map[string]string
		want bool
	}{
		{nil, false},
		{map[string]string{"Content-MD5": "x"}, true},
		{map[string]string{"x-amz-checksum-crc32": "x"}, true},
		{map[string]string{"X-Amz-Checksum-Sha256": "x"}, true},
		{map[string]string{"x-amz-trailer": "x-amz-checksum-crc32c"}, true},
		{map[string]string{"x-amz-sdk-checksum-algorithm": "CRC32"}, true},
		{map[string]string{"x-amz-checksum-type": "FULL_OBJECT"}, false},
		{map[string]string{"x-amz-checksum-mode": "ENABLED"}, false},
	} {
		h := http.Header{}
		for k, v := range tc.hdr {
			h.Set(k, v)
		}
		if got := hasDigest(h); got != tc.want {
			t.Errorf("%v: %v, want %v", tc.hdr, got, tc.want)
		}
	}
}
