package s3auth

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/hoard-io/hoard/internal/checksum"
)

// wrapBody builds the Request for an authenticated r: it validates the
// payload headers and stacks the readers that verify the body. Everything
// that can be checked before reading the body is checked here, so a client
// with a malformed upload is refused before it sends the bytes.
func (v *Verifier) wrapBody(r *http.Request, res *authResult) (*Request, error) {
	body := r.Body
	if body == nil {
		body = http.NoBody
	}
	req := &Request{
		AccessKey:       res.accessKey,
		Method:          res.method,
		DecodedLength:   r.ContentLength,
		ContentEncoding: stripAWSChunked(r.Header.Values("Content-Encoding")),
	}

	algo, value, hasHeaderSum, err := checksum.FromHeaders(r.Header)
	if err != nil {
		return nil, err
	}
	if hasHeaderSum && describesObject(r) {
		// A CompleteMultipartUpload's checksum header is the whole
		// object's, which the store checks; its body is the parts list.
		hasHeaderSum = false
	}
	if hasHeaderSum {
		req.ChecksumAlgorithm, req.ChecksumValue = algo, value
	}
	trailers, err := parseTrailerHeader(r.Header.Values("X-Amz-Trailer"))
	if err != nil {
		return nil, err
	}

	mode := res.payloadHash
	isV4 := res.method == V4Header || res.method == V4Presigned
	var inner io.ReadCloser = body
	switch {
	case mode == streamingSigned || mode == streamingSignedTrailer || mode == streamingUnsignedTrail:
		signed := mode != streamingUnsignedTrail
		if signed && !isV4 {
			return nil, fmt.Errorf("%w: %s requires SigV4", ErrInvalidContentSHA256, mode)
		}
		trailerMode := mode != streamingSigned
		if len(trailers) > 0 && !trailerMode {
			return nil, fmt.Errorf("%w: %s carries no trailer", ErrInvalidTrailer, mode)
		}
		if len(trailers) > 0 && hasHeaderSum {
			return nil, fmt.Errorf("%w: checksum declared in both a header and a trailer", checksum.ErrInvalidChecksum)
		}
		declared, err := strconv.ParseInt(r.Header.Get("X-Amz-Decoded-Content-Length"), 10, 64)
		if err != nil || declared < 0 {
			return nil, ErrMissingDecodedLength
		}
		cr := v.newChunkedReader(body, chunkedConfig{
			signed: signed, trailerMode: trailerMode, res: res,
			declared: declared, trailers: trailers,
		})
		inner, req.chunked, req.DecodedLength = cr, cr, declared
		if len(trailers) > 0 {
			req.ChecksumAlgorithm = trailers[0]
		}
	case len(trailers) > 0:
		return nil, fmt.Errorf("%w: x-amz-trailer needs a STREAMING-*-TRAILER payload", ErrInvalidTrailer)
	case isHexSHA256(mode):
		want, _ := hex.DecodeString(mode) // validated by checkPayloadMode
		inner = &sha256Reader{src: body, h: sha256.New(), want: want}
	case mode == "" || mode == unsignedPayload:
	default:
		// SigV2 requests skip checkPayloadMode; anything odd lands here.
		if err := checkPayloadMode(mode); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %q", ErrInvalidContentSHA256, truncate(mode))
	}

	md5 := r.Header.Get("Content-Md5")
	if !hasHeaderSum && md5 == "" {
		req.Body = inner
		return req, nil
	}
	var expected map[checksum.Algorithm]string
	if hasHeaderSum {
		expected = map[checksum.Algorithm]string{algo: value}
	}
	vr, err := checksum.NewVerifyingReader(inner, expected, md5)
	if err != nil {
		return nil, err
	}
	req.Body = readCloser{Reader: vr, Closer: inner}
	req.undigested = inner
	return req, nil
}

// describesObject reports whether r's x-amz-checksum-* header is the
// checksum of the object it makes rather than of its body: a
// CompleteMultipartUpload (POST with an uploadId).
func describesObject(r *http.Request) bool {
	return r.Method == http.MethodPost && parseQuery(r.URL.RawQuery).has("uploadId")
}

// parseTrailerHeader reads x-amz-trailer: a comma-separated list in which
// S3 accepts only checksum headers, each at most once.
func parseTrailerHeader(vals []string) ([]checksum.Algorithm, error) {
	var out []checksum.Algorithm
	for _, v := range vals {
		for name := range strings.SplitSeq(v, ",") {
			name = strings.TrimSpace(name)
			if name == "" {
				continue
			}
			a, err := checksum.ParseHeaderName(name)
			if err != nil {
				return nil, fmt.Errorf("%w: %q", ErrInvalidTrailer, truncate(name))
			}
			for _, seen := range out {
				if seen == a {
					return nil, fmt.Errorf("%w: %s repeated", ErrInvalidTrailer, name)
				}
			}
			out = append(out, a)
		}
	}
	return out, nil
}

// stripAWSChunked removes the aws-chunked coding from Content-Encoding
// values, keeping the rest in order.
func stripAWSChunked(vals []string) string {
	var keep []string
	for _, v := range vals {
		for c := range strings.SplitSeq(v, ",") {
			c = strings.TrimSpace(c)
			if c != "" && !strings.EqualFold(c, "aws-chunked") {
				keep = append(keep, c)
			}
		}
	}
	return strings.Join(keep, ",")
}

// sha256Reader enforces a hex x-amz-content-sha256 at the end of the body.
type sha256Reader struct {
	src  io.ReadCloser
	h    hash.Hash
	want []byte
	err  error
}

func (s *sha256Reader) Read(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	n, err := s.src.Read(p)
	s.h.Write(p[:n])
	if errors.Is(err, io.EOF) {
		s.err = io.EOF
		if got := s.h.Sum(nil); !bytes.Equal(got, s.want) {
			s.err = fmt.Errorf("%w: computed %x", ErrContentSHA256Mismatch, got)
		}
		return n, s.err
	}
	return n, err
}

func (s *sha256Reader) Close() error { return s.src.Close() }

// readCloser joins a verifying reader with the Close of what it wraps.
type readCloser struct {
	io.Reader
	io.Closer
}
