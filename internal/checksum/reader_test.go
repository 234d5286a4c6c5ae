package checksum

import (
	"bytes"
	"crypto/md5"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestVerifyingReader(t *testing.T) {
	body := []byte(strings.Repeat("hoard verifies what it stores. ", 1000))
	md5OK := md5Of(body)
	tests := []struct {
		name     string
		expected map[Algorithm]string
		md5      string
		err      error // from Read at the end; nil means io.EOF
		initErr  error
	}{
		{name: "no expectations"},
		{name: "all algorithms match", expected: map[Algorithm]string{
			CRC32: Sum(CRC32, body), CRC32C: Sum(CRC32C, body), CRC64NVME: Sum(CRC64NVME, body),
			SHA1: Sum(SHA1, body), SHA256: Sum(SHA256, body),
		}, md5: md5OK},
		{name: "compute only", expected: map[Algorithm]string{CRC64NVME: ""}},
		{name: "crc32 mismatch", expected: map[Algorithm]string{CRC32: Sum(CRC32, body[1:])}, err: ErrChecksumMismatch},
		{name: "sha256 mismatch", expected: map[Algorithm]string{SHA256: Sum(SHA256, nil)}, err: ErrChecksumMismatch},
		{name: "md5 mismatch", md5: "1B2M2Y8AsgTpgAmY7PhCfg==", err: ErrBadDigest},
		{
			name: "md5 reported before checksum", md5: "1B2M2Y8AsgTpgAmY7PhCfg==",
			expected: map[Algorithm]string{CRC32: "AAAAAA=="}, err: ErrBadDigest,
		},
		{name: "malformed md5", md5: "xyz", initErr: ErrInvalidDigest},
		{name: "malformed checksum", expected: map[Algorithm]string{CRC32C: "AAAA"}, initErr: ErrInvalidChecksum},
		{name: "undefined algorithm", expected: map[Algorithm]string{"MD5": ""}, initErr: ErrUnsupportedAlgorithm},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// OneByteReader exercises digest updates across many small reads.
			v, err := NewVerifyingReader(iotest.OneByteReader(bytes.NewReader(body)), tt.expected, tt.md5)
			if tt.initErr != nil {
				if !errors.Is(err, tt.initErr) {
					t.Fatalf("init err = %v, want %v", err, tt.initErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := v.Sum(CRC32); ok {
				t.Fatal("Sum available before EOF")
			}
			got, err := io.ReadAll(v)
			if tt.err == nil {
				if err != nil {
					t.Fatalf("ReadAll err = %v", err)
				}
			} else if !errors.Is(err, tt.err) {
				t.Fatalf("ReadAll err = %v, want %v", err, tt.err)
			}
			if !bytes.Equal(got, body) {
				t.Fatal("body altered in transit")
			}
			if v.BytesRead() != int64(len(body)) {
				t.Fatalf("BytesRead = %d", v.BytesRead())
			}
			// The failure is sticky: a retrying caller must not see EOF.
			if _, again := v.Read(make([]byte, 1)); tt.err != nil && !errors.Is(again, tt.err) {
				t.Fatalf("second read err = %v", again)
			}
			for a := range tt.expected {
				if s, ok := v.Sum(a); !ok || s != Sum(a, body) {
					t.Errorf("Sum(%s) = %q, %v", a, s, ok)
				}
			}
			if len(v.Sums()) != len(tt.expected) {
				t.Errorf("Sums has %d entries, want %d", len(v.Sums()), len(tt.expected))
			}
			if m, ok := v.ContentMD5(); (tt.md5 != "") != ok || (ok && m != md5OK) {
				t.Errorf("ContentMD5 = %q, %v", m, ok)
			}
		})
	}
}

func md5Of(b []byte) string {
	sum := md5.Sum(b)
	return Encode(sum[:])
}

// TestVerifyingReaderDataWithEOF covers sources that return the final bytes
// together with io.EOF, which io.Reader permits.
func TestVerifyingReaderDataWithEOF(t *testing.T) {
	body := []byte("abc")
	v, err := NewVerifyingReader(iotest.DataErrReader(bytes.NewReader(body)),
		map[Algorithm]string{SHA256: Sum(SHA256, body)}, "")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(v)
	if err != nil || string(got) != "abc" {
		t.Fatalf("got %q, %v", got, err)
	}
}

func TestVerifyingReaderSourceError(t *testing.T) {
	boom := errors.New("boom")
	v, err := NewVerifyingReader(iotest.ErrReader(boom), map[Algorithm]string{CRC32: ""}, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Read(make([]byte, 8)); !errors.Is(err, boom) {
		t.Fatalf("err = %v, want source error", err)
	}
	if _, ok := v.Sum(CRC32); ok {
		t.Fatal("sum reported after a failed read")
	}
}

func FuzzVerifyingReader(f *testing.F) {
	f.Add([]byte("hello"), "AAAAAA==", "")
	f.Add([]byte{}, "", "1B2M2Y8AsgTpgAmY7PhCfg==")
	f.Fuzz(func(t *testing.T, body []byte, crc, md5v string) {
		v, err := NewVerifyingReader(bytes.NewReader(body), map[Algorithm]string{CRC32: crc}, md5v)
		if err != nil {
			if !errors.Is(err, ErrInvalidChecksum) && !errors.Is(err, ErrInvalidDigest) {
				t.Fatalf("unexpected init error %v", err)
			}
			return
		}
		got, err := io.ReadAll(v)
		if !bytes.Equal(got, body) {
			t.Fatal("body altered")
		}
		wantCRCOK := crc == "" || Sum(CRC32, body) == Encode(mustParse(t, CRC32, crc))
		wantMD5OK := md5v == "" || md5Of(body) == Encode(mustParseMD5(t, md5v))
		switch {
		case !wantMD5OK:
			if !errors.Is(err, ErrBadDigest) {
				t.Fatalf("err = %v, want ErrBadDigest", err)
			}
		case !wantCRCOK:
			if !errors.Is(err, ErrChecksumMismatch) {
				t.Fatalf("err = %v, want ErrChecksumMismatch", err)
			}
		case err != nil:
			t.Fatalf("err = %v on matching digests", err)
		}
	})
}

func mustParse(t *testing.T, a Algorithm, v string) []byte {
	b, err := ParseValue(a, v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustParseMD5(t *testing.T, v string) []byte {
	b, err := ParseContentMD5(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func BenchmarkVerifyingReader(b *testing.B) {
	body := bytes.Repeat([]byte{'a'}, 1<<20)
	want := map[Algorithm]string{CRC32C: Sum(CRC32C, body)}
	buf := make([]byte, 32<<10)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		v, err := NewVerifyingReader(bytes.NewReader(body), want, "")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.CopyBuffer(io.Discard, v, buf); err != nil {
			b.Fatal(err)
		}
	}
}
