package cachelet

import (
	"crypto/md5"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"hash/crc32"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/store"
)

// TestVersioningTable: a versioned bucket is remembered, an unversioned
// one for unversionedFor, a forgotten one not at all.
func TestVersioningTable(t *testing.T) {
	var v versioning
	t0 := time.Unix(1000, 0)
	if _, ok := v.lookup("b", t0); ok {
		t.Fatal("an empty table knows b")
	}
	v.note("plain", false, t0)
	v.note("vers", true, t0)
	for _, tc := range []struct {
		bucket        string
		at            time.Duration
		versioned, ok bool
	}{
		{"plain", 0, false, true},
		{"plain", unversionedFor - time.Millisecond, false, true},
		{"plain", unversionedFor, false, false},
		{"vers", 0, true, true},
		{"vers", 24 * time.Hour, true, true},
	} {
		versioned, ok := v.lookup(tc.bucket, t0.Add(tc.at))
		if versioned != tc.versioned || ok != tc.ok {
			t.Errorf("%s after %v: %v %v, want %v %v", tc.bucket, tc.at, versioned, ok, tc.versioned, tc.ok)
		}
	}
	v.forget("vers")
	if _, ok := v.lookup("vers", t0); ok {
		t.Error("a forgotten bucket is still known")
	}
	for i := range maxVersioningEntries + 1 {
		v.note(string(rune('a'+i%26))+time.Duration(i).String(), true, t0)
	}
	if n := len(v.m); n > maxVersioningEntries {
		t.Errorf("table holds %d entries, bound %d", n, maxVersioningEntries)
	}
}

// TestWithChecksum: a write held in memory carries the checksum the store
// will record: the client's value, or the client's algorithm computed here
// (a trailer's); none when the client sent none. Its body, whole and
// verified, is never marked as checked on its way.
func TestWithChecksum(t *testing.T) {
	data := []byte("hello, world")
	var sum [4]byte
	binary.BigEndian.PutUint32(sum[:], crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli)))
	crc32c := base64.StdEncoding.EncodeToString(sum[:])
	binary.BigEndian.PutUint32(sum[:], crc32.ChecksumIEEE(data))
	crc := base64.StdEncoding.EncodeToString(sum[:])
	md5sum := md5.Sum(data)
	etag, md5b64 := hex.EncodeToString(md5sum[:]), base64.StdEncoding.EncodeToString(md5sum[:])
	for _, tc := range []struct {
		name       string
		data       []byte
		in         store.PutOptions
		algo, want string
	}{
		{"none", data, store.PutOptions{StreamVerified: true}, "", ""},
		{"none, empty", nil, store.PutOptions{}, "", ""},
		{"trailer CRC32C", data, store.PutOptions{ChecksumAlgorithm: "CRC32C", StreamVerified: true}, "CRC32C", crc32c},
		{"trailer", data, store.PutOptions{ChecksumAlgorithm: "crc32"}, "CRC32", crc},
		{"header", data, store.PutOptions{ChecksumAlgorithm: "SHA256", ChecksumValue: "given"}, "SHA256", "given"},
		{"unknown algorithm", data, store.PutOptions{ChecksumAlgorithm: "MD4"}, "MD4", ""},
	} {
		got := withChecksum(tc.data, etag, tc.in)
		if got.ContentMD5 != md5b64 {
			t.Errorf("%s: Content-MD5 %q, want the body's %q", tc.name, got.ContentMD5, md5b64)
		}
		if got.StreamVerified {
			t.Errorf("%s: still marked as verified on its way", tc.name)
		}
		if got.ChecksumAlgorithm != tc.algo || got.ChecksumValue != tc.want {
			t.Errorf("%s: %q %q, want %q %q", tc.name, got.ChecksumAlgorithm, got.ChecksumValue, tc.algo, tc.want)
		}
		sums := checksumsOf(got)
		if (tc.want == "") != (sums == nil) {
			t.Errorf("%s: checksums %v", tc.name, sums)
		}
	}
}
