package checksum

import (
	"bytes"
	"crypto/md5"
	"errors"
	"fmt"
	"hash"
	"io"
)

// VerifyingReader passes a body through unchanged while digesting it, and at
// the end of the body reports ErrBadDigest or ErrChecksumMismatch in place of
// io.EOF when a digest disagrees with what the client declared.
//
// The bytes before the error have already been handed to the caller, so a
// consumer must treat everything it read as void unless it sees io.EOF. That
// is the price of streaming: the alternative is buffering whole objects.
type VerifyingReader struct {
	r io.Reader

	md5     hash.Hash // nil unless a Content-MD5 was declared
	wantMD5 []byte

	sums []digest // in Algorithms() order, so results are deterministic

	n    int64
	done bool  // the underlying reader reached io.EOF and sums are final
	err  error // sticky: io.EOF or the verification failure
}

type digest struct {
	algo Algorithm
	h    hash.Hash
	want []byte // nil: compute only
	got  []byte // set at EOF
}

// NewVerifyingReader wraps r. expected maps each algorithm to compute to the
// base64 value the client declared; an empty value means "compute, do not
// check", which lets the caller learn a digest it will store. contentMD5 is
// the Content-MD5 header value, or "" when there is none.
//
// Malformed declared values are refused here (ErrInvalidChecksum,
// ErrInvalidDigest, ErrUnsupportedAlgorithm) so a request can be rejected
// before its body is touched.
func NewVerifyingReader(r io.Reader, expected map[Algorithm]string, contentMD5 string) (*VerifyingReader, error) {
	v := &VerifyingReader{r: r}
	if contentMD5 != "" {
		want, err := ParseContentMD5(contentMD5)
		if err != nil {
			return nil, err
		}
		v.md5, v.wantMD5 = md5.New(), want
	}
	for a := range expected {
		if !a.Valid() {
			return nil, fmt.Errorf("%w: %q", ErrUnsupportedAlgorithm, string(a))
		}
	}
	for _, a := range Algorithms() {
		value, ok := expected[a]
		if !ok {
			continue
		}
		d := digest{algo: a, h: New(a)}
		if value != "" {
			want, err := ParseValue(a, value)
			if err != nil {
				return nil, err
			}
			d.want = want
		}
		v.sums = append(v.sums, d)
	}
	return v, nil
}

// Read implements io.Reader. See the type comment for the error contract.
func (v *VerifyingReader) Read(p []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	n, err := v.r.Read(p)
	if n > 0 {
		v.n += int64(n)
		if v.md5 != nil {
			v.md5.Write(p[:n])
		}
		for i := range v.sums {
			v.sums[i].h.Write(p[:n])
		}
	}
	if errors.Is(err, io.EOF) {
		v.err = v.finish()
		return n, v.err
	}
	if err != nil {
		// Not sticky: a transient error from the source is the source's to
		// report again, and the digests are unaffected by a zero-byte read.
		return n, err
	}
	return n, nil
}

// finish computes the final digests and compares them. Content-MD5 is
// checked first because S3 reports BadDigest ahead of checksum mismatches.
func (v *VerifyingReader) finish() error {
	v.done = true
	var md5Err error
	if v.md5 != nil {
		if got := v.md5.Sum(nil); !bytes.Equal(got, v.wantMD5) {
			md5Err = fmt.Errorf("%w: computed %s, declared %s", ErrBadDigest, Encode(got), Encode(v.wantMD5))
		}
	}
	var sumErr error
	for i := range v.sums {
		d := &v.sums[i]
		d.got = d.h.Sum(nil)
		if d.want != nil && sumErr == nil && !bytes.Equal(d.got, d.want) {
			sumErr = fmt.Errorf("%w: %s computed %s, declared %s",
				ErrChecksumMismatch, d.algo.HeaderName(), Encode(d.got), Encode(d.want))
		}
	}
	if md5Err != nil {
		return md5Err
	}
	if sumErr != nil {
		return sumErr
	}
	return io.EOF
}

// BytesRead returns how many bytes have passed through so far.
func (v *VerifyingReader) BytesRead() int64 { return v.n }

// Sum returns the base64 digest computed for a, once the body has been read
// to its end; ok is false before then or when a was not requested.
func (v *VerifyingReader) Sum(a Algorithm) (value string, ok bool) {
	if !v.done {
		return "", false
	}
	for _, d := range v.sums {
		if d.algo == a {
			return Encode(d.got), true
		}
	}
	return "", false
}

// Sums returns every computed digest after the end of the body, or nil
// before then. The map is new on each call.
func (v *VerifyingReader) Sums() map[Algorithm]string {
	if !v.done {
		return nil
	}
	out := make(map[Algorithm]string, len(v.sums))
	for _, d := range v.sums {
		out[d.algo] = Encode(d.got)
	}
	return out
}

// ContentMD5 returns the base64 MD5 of the body after its end, when a
// Content-MD5 was declared; ok is false otherwise.
func (v *VerifyingReader) ContentMD5() (value string, ok bool) {
	if !v.done || v.md5 == nil {
		return "", false
	}
	return Encode(v.md5.Sum(nil)), true
}
