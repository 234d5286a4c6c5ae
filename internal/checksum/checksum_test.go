package checksum

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"net/http"
	"strings"
	"testing"
)

// be32 and be64 spell the published CRC check values in S3's wire form.
func be32(v uint32) string {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v)
	return base64.StdEncoding.EncodeToString(b[:])
}

func be64(v uint64) string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return base64.StdEncoding.EncodeToString(b[:])
}

func TestSumKnownVectors(t *testing.T) {
	// "123456789" is the standard CRC check input; the CRC values are the
	// catalogued check values of CRC-32/ISO-HDLC, CRC-32/ISCSI and
	// CRC-64/NVME, so a byte-order or table mistake cannot pass.
	check := []byte("123456789")
	tests := []struct {
		algo Algorithm
		data []byte
		want string
	}{
		{CRC32, check, be32(0xCBF43926)},
		{CRC32C, check, be32(0xE3069283)},
		{CRC64NVME, check, be64(0xAE8B14860A799888)},
		{SHA1, []byte("abc"), "qZk+NkcGgWq6PiVxeFDCbJzQ2J0="},
		{SHA256, []byte("abc"), "ungWv48Bz+pBQUDeXa4iI7ADYaOWF3qctBD/YfIAFa0="},
		{CRC32, nil, "AAAAAA=="},
		{SHA256, nil, "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="},
	}
	for _, tt := range tests {
		t.Run(string(tt.algo), func(t *testing.T) {
			if got := Sum(tt.algo, tt.data); got != tt.want {
				t.Fatalf("Sum(%s) = %s, want %s", tt.algo, got, tt.want)
			}
			if _, err := ParseValue(tt.algo, tt.want); err != nil {
				t.Fatalf("ParseValue rejects its own output: %v", err)
			}
		})
	}
}

func TestParseAlgorithm(t *testing.T) {
	tests := []struct {
		in      string
		want    Algorithm
		wantErr bool
	}{
		{"CRC32", CRC32, false},
		{"crc32c", CRC32C, false},
		{" Crc64Nvme ", CRC64NVME, false},
		{"sha1", SHA1, false},
		{"SHA256", SHA256, false},
		{"md5", "", true},
		{"crc64", "", true},
		{"", "", true},
	}
	for _, tt := range tests {
		got, err := ParseAlgorithm(tt.in)
		if tt.wantErr {
			if !errors.Is(err, ErrUnsupportedAlgorithm) {
				t.Errorf("ParseAlgorithm(%q) err = %v, want ErrUnsupportedAlgorithm", tt.in, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseAlgorithm(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestHeaderNameRoundTrip(t *testing.T) {
	for _, a := range Algorithms() {
		got, err := ParseHeaderName(a.HeaderName())
		if err != nil || got != a {
			t.Errorf("ParseHeaderName(%q) = %q, %v", a.HeaderName(), got, err)
		}
	}
	if got := CRC64NVME.HeaderName(); got != "x-amz-checksum-crc64nvme" {
		t.Errorf("HeaderName = %q", got)
	}
	if _, err := ParseHeaderName("x-amz-checksum-mode"); !errors.Is(err, ErrUnsupportedAlgorithm) {
		t.Errorf("x-amz-checksum-mode accepted: %v", err)
	}
	if _, err := ParseHeaderName("content-md5"); !errors.Is(err, ErrUnsupportedAlgorithm) {
		t.Errorf("content-md5 accepted: %v", err)
	}
}

func TestNewPanicsOnUndefined(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("New did not panic")
		}
	}()
	New("MD5")
}

func TestParseValue(t *testing.T) {
	tests := []struct {
		algo  Algorithm
		value string
		err   error
	}{
		{CRC32, "AAAAAA==", nil},
		{CRC32, "AAAAAAAAAAA=", ErrInvalidChecksum}, // 8 bytes for a 4-byte digest
		{CRC32, "not base64!", ErrInvalidChecksum},
		{CRC64NVME, "AAAAAAAAAAA=", nil},
		{SHA1, "", ErrInvalidChecksum},
		{"MD5", "AAAAAA==", ErrUnsupportedAlgorithm},
	}
	for _, tt := range tests {
		_, err := ParseValue(tt.algo, tt.value)
		if !errors.Is(err, tt.err) || (tt.err == nil) != (err == nil) {
			t.Errorf("ParseValue(%s, %q) = %v, want %v", tt.algo, tt.value, err, tt.err)
		}
	}
}

func TestParseContentMD5(t *testing.T) {
	if _, err := ParseContentMD5("1B2M2Y8AsgTpgAmY7PhCfg=="); err != nil {
		t.Fatalf("valid MD5 rejected: %v", err)
	}
	for _, bad := range []string{"", "abc", "1B2M2Y8AsgTpgAmY7PhCfg", "AAAAAA=="} {
		if _, err := ParseContentMD5(bad); !errors.Is(err, ErrInvalidDigest) {
			t.Errorf("ParseContentMD5(%q) = %v, want ErrInvalidDigest", bad, err)
		}
	}
}

func TestFromHeaders(t *testing.T) {
	tests := []struct {
		name    string
		headers map[string][]string
		algo    Algorithm
		value   string
		ok      bool
		err     error
	}{
		{name: "none", headers: map[string][]string{"Content-Type": {"x"}}},
		{
			name:    "one",
			headers: map[string][]string{"X-Amz-Checksum-Crc32c": {"4waSgw=="}},
			algo:    CRC32C, value: "4waSgw==", ok: true,
		},
		{
			name: "mode and type headers are not checksums",
			headers: map[string][]string{
				"X-Amz-Checksum-Mode": {"ENABLED"},
				"X-Amz-Checksum-Type": {"FULL_OBJECT"},
				"X-Amz-Checksum-Sha1": {"qZk+NkcGgWq6PiVxeFDCbJzQ2J0="},
			},
			algo: SHA1, value: "qZk+NkcGgWq6PiVxeFDCbJzQ2J0=", ok: true,
		},
		{
			name: "two algorithms",
			headers: map[string][]string{
				"X-Amz-Checksum-Crc32":  {"AAAAAA=="},
				"X-Amz-Checksum-Crc32c": {"AAAAAA=="},
			},
			err: ErrInvalidChecksum,
		},
		{
			name:    "repeated header",
			headers: map[string][]string{"X-Amz-Checksum-Crc32": {"AAAAAA==", "AAAAAA=="}},
			err:     ErrInvalidChecksum,
		},
		{
			name:    "malformed value",
			headers: map[string][]string{"X-Amz-Checksum-Sha256": {"AAAAAA=="}},
			err:     ErrInvalidChecksum,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			algo, value, ok, err := FromHeaders(http.Header(tt.headers))
			if !errors.Is(err, tt.err) || (tt.err == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
			if algo != tt.algo || value != tt.value || ok != tt.ok {
				t.Fatalf("got %q %q %v, want %q %q %v", algo, value, ok, tt.algo, tt.value, tt.ok)
			}
		})
	}
}

// TestHeaderNames keeps the spelled-out header names in step with the
// algorithms: lower case for the wire, net/http's canonical form for
// lookups.
func TestHeaderNames(t *testing.T) {
	for _, a := range Algorithms() {
		want := "x-amz-checksum-" + strings.ToLower(string(a))
		if got := a.HeaderName(); got != want {
			t.Errorf("%s.HeaderName() = %q, want %q", a, got, want)
		}
		if got, want := a.canonicalHeaderName(), http.CanonicalHeaderKey(want); got != want {
			t.Errorf("%s.canonicalHeaderName() = %q, want %q", a, got, want)
		}
		h := http.Header{}
		h.Set(a.HeaderName(), Sum(a, []byte("data")))
		if got, v, ok, err := FromHeaders(h); !ok || err != nil || got != a || v != Sum(a, []byte("data")) {
			t.Errorf("FromHeaders with %s: %s %q %v %v", a.HeaderName(), got, v, ok, err)
		}
	}
	if len(algorithms) != len(Algorithms()) {
		t.Fatalf("algorithms has %d entries, Algorithms() %d", len(algorithms), len(Algorithms()))
	}
}
