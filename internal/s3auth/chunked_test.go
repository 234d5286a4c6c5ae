package s3auth

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/minio/minio-go/v7/pkg/signer"

	"github.com/hoard-io/hoard/internal/checksum"
	"github.com/hoard-io/hoard/internal/clock"
)

// TestAWSStreamingExample is the worked example from the S3 API reference
// ("Signature Calculations for the Authorization Header: Transferring
// Payload in Multiple Chunks"): 66560 bytes of 'a' in a 64 KiB chunk, a
// 1 KiB chunk and the final chunk, with the published signatures.
func TestAWSStreamingExample(t *testing.T) {
	const (
		seed   = "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9"
		chunk1 = "ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648"
		chunk2 = "0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497"
		final  = "b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9"
	)
	build := func(sig1 string, data1 []byte) *http.Request {
		var body bytes.Buffer
		fmt.Fprintf(&body, "10000;chunk-signature=%s\r\n", sig1)
		body.Write(data1)
		fmt.Fprintf(&body, "\r\n400;chunk-signature=%s\r\n", chunk2)
		body.Write(bytes.Repeat([]byte{'a'}, 1024))
		fmt.Fprintf(&body, "\r\n0;chunk-signature=%s\r\n\r\n", final)
		raw := "PUT /examplebucket/chunkObject.txt HTTP/1.1\r\n" +
			"Host: s3.amazonaws.com\r\n" +
			"x-amz-date: 20130524T000000Z\r\n" +
			"x-amz-storage-class: REDUCED_REDUNDANCY\r\n" +
			"Authorization: AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request," +
			"SignedHeaders=content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;x-amz-decoded-content-length;x-amz-storage-class," +
			"Signature=" + seed + "\r\n" +
			"x-amz-content-sha256: STREAMING-AWS4-HMAC-SHA256-PAYLOAD\r\n" +
			"Content-Encoding: aws-chunked\r\n" +
			"x-amz-decoded-content-length: 66560\r\n" +
			fmt.Sprintf("Content-Length: %d\r\n\r\n", body.Len())
		r, err := http.ReadRequest(bufio.NewReader(io.MultiReader(strings.NewReader(raw), &body)))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	v := newTestVerifier(t, fixedClock(time.Date(2013, 5, 24, 0, 5, 0, 0, time.UTC)))
	a64k := bytes.Repeat([]byte{'a'}, 65536)

	r := build(chunk1, a64k)
	if r.ContentLength != 66824 {
		t.Fatalf("example body is %d bytes, AWS documents 66824", r.ContentLength)
	}
	got, req, err := readBody(v, r)
	wantErr(t, err, nil)
	if !bytes.Equal(got, bytes.Repeat([]byte{'a'}, 66560)) {
		t.Fatalf("decoded %d bytes", len(got))
	}
	if req.DecodedLength != 66560 || req.ContentEncoding != "" {
		t.Fatalf("request %+v", req)
	}

	// One flipped byte in the first chunk must be caught before any of
	// that chunk is released.
	bad := bytes.Clone(a64k)
	bad[100] = 'b'
	req, err = v.Verify(build(chunk1, bad))
	wantErr(t, err, nil)
	n, err := io.Copy(io.Discard, req.Body)
	wantErr(t, err, ErrSignatureDoesNotMatch)
	if n != 0 {
		t.Fatalf("%d unverified bytes released", n)
	}
}

// TestAWSTrailerSignatureExample checks the trailer string-to-sign against
// the S3 reference example for signed trailers.
func TestAWSTrailerSignatureExample(t *testing.T) {
	v := newTestVerifier(t, clock.Real())
	res := &authResult{
		signingKey: signingKey(testSK, "20130524", "us-east-1", "s3"),
		amzDate:    "20130524T000000Z",
		scope:      "20130524/us-east-1/s3/aws4_request",
		seedSig:    "e05ab64fe1dfdbf0b5870abbaabdb063c371d4e96f2767e6934d90529c5ae850",
	}
	c := v.newChunkedReader(io.NopCloser(strings.NewReader("")), chunkedConfig{signed: true, trailerMode: true, res: res})
	defer c.Close()
	if !c.verifyTrailer([]byte("x-amz-checksum-crc32c:wdBDMA==\n"),
		[]byte("41e14ac611e27a8bb3d66c3bad6856f209297767d5dd4fc87d8fa9e422e03faf")) {
		t.Fatal("published trailer signature rejected")
	}
}

// streamingRequest signs an upload with minio-go's streaming signer. With
// trailer set, the body ends in a signed x-amz-checksum-crc32c trailer.
func streamingRequest(t testing.TB, data []byte, trailer bool, at time.Time) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, objectURL("stream/ob ject+1", ""), io.NopCloser(bytes.NewReader(data)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Amz-Meta-Origin", "test")
	if trailer {
		req.Trailer = http.Header{"x-amz-checksum-crc32c": {checksum.Sum(checksum.CRC32C, data)}}
	}
	signed := signer.StreamingSignV4(req, testAK, testSK, "", testRegion, int64(len(data)), at, newSHA256Hasher())
	return serverSide(t, signed)
}

// unsignedTrailerRequest signs a header-only request whose aws-chunked body
// carries an unsigned CRC32 trailer, as minio-go does over TLS.
func unsignedTrailerRequest(t testing.TB, data []byte, trailerValue string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, objectURL("unsigned/trailer", ""), bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = int64(len(data))
	req.Header.Set("X-Amz-Content-Sha256", streamingUnsignedTrail)
	signed := signer.SignV4Trailer(*req, testAK, testSK, "", testRegion, http.Header{"x-amz-checksum-crc32": {trailerValue}})
	return serverSide(t, signed)
}

func TestStreamingMinio(t *testing.T) {
	at := time.Now().UTC()
	v := newTestVerifier(t, clock.Real())
	for _, size := range []int{0, 1, 65535, 65536, 65537, 3*65536 + 17} {
		for _, trailer := range []bool{false, true} {
			t.Run(fmt.Sprintf("%d/trailer=%v", size, trailer), func(t *testing.T) {
				data := bytes.Repeat([]byte("0123456789abcdef"), size/16+1)[:size]
				r := streamingRequest(t, data, trailer, at)
				req, err := v.Verify(r)
				wantErr(t, err, nil)
				// One-byte reads stress the hand-off between chunks.
				got, err := io.ReadAll(iotest.OneByteReader(req.Body))
				wantErr(t, err, nil)
				if !bytes.Equal(got, data) {
					t.Fatalf("decoded %d bytes, want %d", len(got), len(data))
				}
				algo, val := req.TrailerChecksum()
				if trailer && (algo != checksum.CRC32C || val != checksum.Sum(checksum.CRC32C, data)) {
					t.Fatalf("TrailerChecksum = %s %s", algo, val)
				}
				if !trailer && algo != "" {
					t.Fatalf("unexpected trailer %s", algo)
				}
			})
		}
	}
}

func TestUnsignedTrailerMinio(t *testing.T) {
	v := newTestVerifier(t, clock.Real())
	for _, size := range []int{0, 10, 65536, 200000} {
		data := bytes.Repeat([]byte{'z'}, size)
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			got, req, err := readBody(v, unsignedTrailerRequest(t, data, checksum.Sum(checksum.CRC32, data)))
			wantErr(t, err, nil)
			if !bytes.Equal(got, data) {
				t.Fatalf("decoded %d bytes", len(got))
			}
			if a, val := req.TrailerChecksum(); a != checksum.CRC32 || val != checksum.Sum(checksum.CRC32, data) {
				t.Fatalf("trailer %s %s", a, val)
			}
			if req.ChecksumAlgorithm != checksum.CRC32 {
				t.Fatalf("ChecksumAlgorithm %q", req.ChecksumAlgorithm)
			}
		})
	}
	t.Run("wrong trailer value", func(t *testing.T) {
		data := []byte("payload")
		_, _, err := readBody(v, unsignedTrailerRequest(t, data, checksum.Sum(checksum.CRC32, []byte("other"))))
		wantErr(t, err, checksum.ErrChecksumMismatch)
	})
	t.Run("malformed trailer value", func(t *testing.T) {
		_, _, err := readBody(v, unsignedTrailerRequest(t, []byte("x"), "!!"))
		wantErr(t, err, checksum.ErrInvalidChecksum)
	})
}

// TestStreamingTamper corrupts a signed aws-chunked body in specific places.
func TestStreamingTamper(t *testing.T) {
	at := time.Now().UTC()
	data := bytes.Repeat([]byte("x"), 70000) // a full chunk and a partial one
	body := func(trailer bool) (*http.Request, []byte) {
		r := streamingRequest(t, data, trailer, at)
		raw, err := io.ReadAll(r.Body)
		if err != nil {
			t.Fatal(err)
		}
		return r, raw
	}
	replace := func(old, new string) func([]byte) []byte {
		return func(b []byte) []byte {
			if !bytes.Contains(b, []byte(old)) {
				panic("test body lacks " + old)
			}
			return bytes.Replace(b, []byte(old), []byte(new), 1)
		}
	}
	tests := []struct {
		name     string
		trailer  bool
		edit     func([]byte) []byte
		header   func(http.Header)
		declared int64 // overrides the signed length inside the decoder
		want     error
	}{
		{name: "untouched"},
		{name: "untouched with trailer", trailer: true},
		{name: "data byte", edit: func(b []byte) []byte { b[200] ^= 1; return b }, want: ErrSignatureDoesNotMatch},
		{name: "chunk signature", edit: func(b []byte) []byte { b[30] = flipHex(b[30])[0]; return b }, want: ErrSignatureDoesNotMatch},
		{name: "chunk size not hex", edit: replace("10000;", "1000g;"), want: ErrMalformedChunk},
		{name: "missing chunk signature", edit: replace("10000;chunk-signature=", "10000;chunk-signatur="), want: ErrMalformedChunk},
		{name: "LF instead of CRLF", edit: func(b []byte) []byte {
			i := bytes.Index(b, []byte("\r\n"))
			return append(b[:i:i], b[i+1:]...)
		}, want: ErrMalformedChunk},
		{name: "truncated", edit: func(b []byte) []byte { return b[:len(b)/2] }, want: ErrIncompleteBody},
		{name: "final chunk dropped", edit: func(b []byte) []byte {
			return b[:bytes.LastIndex(b, []byte("0;chunk-signature="))]
		}, want: ErrIncompleteBody},
		{name: "junk after final chunk", edit: func(b []byte) []byte { return append(b, "junk\r\n"...) }, want: ErrMalformedChunk},
		{name: "declared length too small", declared: 69999, want: ErrIncompleteBody},
		{name: "declared length too large", declared: 70001, want: ErrIncompleteBody},
		{name: "trailer value", trailer: true, edit: func(b []byte) []byte {
			i := bytes.Index(b, []byte("x-amz-checksum-crc32c:")) + len("x-amz-checksum-crc32c:")
			b[i] ^= 1
			return b
		}, want: ErrSignatureDoesNotMatch},
		{name: "trailer signature", trailer: true, edit: func(b []byte) []byte {
			i := bytes.Index(b, []byte("x-amz-trailer-signature:")) + len("x-amz-trailer-signature:")
			b[i] = flipHex(b[i])[0]
			return b
		}, want: ErrSignatureDoesNotMatch},
		{name: "trailer signature removed", trailer: true, edit: func(b []byte) []byte {
			i := bytes.Index(b, []byte("x-amz-trailer-signature:"))
			return append(b[:i:i], "\r\n"...)
		}, want: ErrMalformedChunk},
		{name: "trailer header is signed", trailer: true, header: func(h http.Header) { h.Set("X-Amz-Trailer", "x-amz-checksum-sha1") }, want: ErrSignatureDoesNotMatch},
		{name: "decoded length is signed", header: func(h http.Header) { h.Set("X-Amz-Decoded-Content-Length", "1") }, want: ErrSignatureDoesNotMatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, raw := body(tt.trailer)
			if tt.edit != nil {
				raw = tt.edit(raw)
			}
			r.Body = io.NopCloser(bytes.NewReader(raw))
			if tt.header != nil {
				tt.header(r.Header)
			}
			req, err := newTestVerifier(t, clock.Real()).Verify(r)
			var got []byte
			if err == nil {
				if tt.declared != 0 {
					// The length header is signed, so a client cannot lie
					// about it without breaking the seed signature; the
					// decoder's own check is exercised from inside.
					req.chunked.declared = tt.declared
				}
				got, err = io.ReadAll(req.Body)
			}
			wantErr(t, err, tt.want)
			if tt.want == nil && !bytes.Equal(got, data) {
				t.Fatal("payload differs")
			}
			if len(got) > len(data) {
				t.Fatal("decoder yielded more than declared")
			}
		})
	}
}

// TestChunkedLineEndings feeds trailer sections in the spellings seen from
// different clients.
func TestChunkedLineEndings(t *testing.T) {
	data := []byte("hello")
	crc := checksum.Sum(checksum.CRC32, data)
	tests := []struct {
		name string
		body string
		want error
	}{
		{"aws sdk", "5\r\nhello\r\n0\r\nx-amz-checksum-crc32:" + crc + "\r\n\r\n", nil},
		{"minio-go", "5\r\nhello\r\n0\r\nx-amz-checksum-crc32:" + crc + "\n\r\n\r\n", nil},
		{"no final CRLF", "5\r\nhello\r\n0\r\nx-amz-checksum-crc32:" + crc + "\r\n", nil},
		{"chunk extension ignored", "5;ext=1\r\nhello\r\n0\r\nx-amz-checksum-crc32:" + crc + "\r\n\r\n", nil},
		{"upper-case trailer name", "5\r\nhello\r\n0\r\nX-Amz-Checksum-CRC32:" + crc + "\r\n\r\n", nil},
		{"missing trailer", "5\r\nhello\r\n0\r\n\r\n", ErrMalformedChunk},
		{"repeated trailer", "5\r\nhello\r\n0\r\nx-amz-checksum-crc32:" + crc + "\r\nx-amz-checksum-crc32:" + crc + "\r\n\r\n", ErrMalformedChunk},
		{"signature on unsigned", "5\r\nhello\r\n0\r\nx-amz-checksum-crc32:" + crc + "\r\nx-amz-trailer-signature:00\r\n\r\n", ErrMalformedChunk},
		{"no colon", "5\r\nhello\r\n0\r\nx-amz-checksum-crc32\r\n\r\n", ErrMalformedChunk},
		{"oversized chunk", "1000001\r\n", ErrMalformedChunk},
		{"chunk beyond declared", "6\r\nhello!\r\n0\r\n\r\n", ErrIncompleteBody},
		{"data without CRLF", "5\r\nhelloXX0\r\n", ErrMalformedChunk},
		{"empty size", ";x\r\n", ErrMalformedChunk},
		{"long line", strings.Repeat("0", 20000), ErrMalformedChunk},
		{"empty body", "", ErrIncompleteBody},
	}
	v := newTestVerifier(t, clock.Real())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := unsignedTrailerRequest(t, data, crc)
			r.Body = io.NopCloser(strings.NewReader(tt.body))
			got, _, err := readBody(v, r)
			wantErr(t, err, tt.want)
			if tt.want == nil && string(got) != "hello" {
				t.Fatalf("got %q", got)
			}
		})
	}
}

// TestChunkedWithHeaderChecksums checks that x-amz-checksum-* and
// Content-MD5 headers apply to the decoded payload of a streaming upload.
func TestChunkedWithHeaderChecksums(t *testing.T) {
	data := bytes.Repeat([]byte("q"), 100000)
	at := time.Now().UTC()
	sign := func(hdr http.Header) *http.Request {
		req, err := http.NewRequest(http.MethodPut, objectURL("k", ""), io.NopCloser(bytes.NewReader(data)))
		if err != nil {
			t.Fatal(err)
		}
		for k, vs := range hdr {
			req.Header[k] = vs
		}
		return serverSide(t, signer.StreamingSignV4(req, testAK, testSK, "", testRegion, int64(len(data)), at, newSHA256Hasher()))
	}
	v := newTestVerifier(t, clock.Real())
	_, req, err := readBody(v, sign(http.Header{"X-Amz-Checksum-Sha256": {checksum.Sum(checksum.SHA256, data)}}))
	wantErr(t, err, nil)
	if req.ChecksumAlgorithm != checksum.SHA256 {
		t.Fatalf("ChecksumAlgorithm = %q", req.ChecksumAlgorithm)
	}
	_, _, err = readBody(v, sign(http.Header{"X-Amz-Checksum-Sha256": {checksum.Sum(checksum.SHA256, data[1:])}}))
	wantErr(t, err, checksum.ErrChecksumMismatch)
	_, _, err = readBody(v, sign(http.Header{"Content-Md5": {"1B2M2Y8AsgTpgAmY7PhCfg=="}}))
	wantErr(t, err, checksum.ErrBadDigest)
	_, err = v.Verify(sign(http.Header{"Content-Md5": {"short"}}))
	wantErr(t, err, checksum.ErrInvalidDigest)
}

func TestChunkedCloseEarly(t *testing.T) {
	data := bytes.Repeat([]byte("c"), 200000)
	v := newTestVerifier(t, clock.Real())
	req, err := v.Verify(streamingRequest(t, data, true, time.Now().UTC()))
	wantErr(t, err, nil)
	if _, err := req.Body.Read(make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	if err := req.Body.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := req.Body.Read(make([]byte, 10)); err == nil {
		t.Fatal("read after close succeeded")
	}
	if a, _ := req.TrailerChecksum(); a != "" {
		t.Fatal("trailer reported for an unfinished body")
	}
}

func TestPayloadModes(t *testing.T) {
	v := newTestVerifier(t, clock.Real())
	sign := func(mode string, hdr http.Header) *http.Request {
		req, err := http.NewRequest(http.MethodPut, objectURL("m", ""), strings.NewReader("abc"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Amz-Content-Sha256", mode)
		for k, vs := range hdr {
			req.Header[k] = vs
		}
		return serverSide(t, signer.SignV4(*req, testAK, testSK, "", testRegion))
	}
	tests := []struct {
		name string
		mode string
		hdr  http.Header
		want error
	}{
		{"unsigned payload", unsignedPayload, nil, nil},
		{"unsigned payload with md5", unsignedPayload, http.Header{"Content-Md5": {"kAFQmDzST7DWlj99KOF/cg=="}}, nil},
		{"unsigned payload bad md5", unsignedPayload, http.Header{"Content-Md5": {"1B2M2Y8AsgTpgAmY7PhCfg=="}}, checksum.ErrBadDigest},
		{"crc32 header", unsignedPayload, http.Header{"X-Amz-Checksum-Crc32": {checksum.Sum(checksum.CRC32, []byte("abc"))}}, nil},
		{"crc32 header wrong", unsignedPayload, http.Header{"X-Amz-Checksum-Crc32": {"AAAAAA=="}}, checksum.ErrChecksumMismatch},
		{"two checksum headers", unsignedPayload, http.Header{"X-Amz-Checksum-Crc32": {"AAAAAA=="}, "X-Amz-Checksum-Crc32c": {"AAAAAA=="}}, checksum.ErrInvalidChecksum},
		{"trailer without streaming", unsignedPayload, http.Header{"X-Amz-Trailer": {"x-amz-checksum-crc32"}}, ErrInvalidTrailer},
		{"sigv4a streaming", "STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD", nil, ErrUnsupportedAlgorithm},
		{"upper-case hex sha256", strings.ToUpper(sha256Hex([]byte("abc"))), nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _, err := readBody(v, sign(tt.mode, tt.hdr))
			wantErr(t, err, tt.want)
			if tt.want == nil && string(got) != "abc" {
				t.Fatalf("got %q", got)
			}
		})
	}
}

func TestStripAWSChunked(t *testing.T) {
	tests := []struct {
		in   []string
		want string
	}{
		{nil, ""},
		{[]string{"aws-chunked"}, ""},
		{[]string{"aws-chunked,gzip"}, "gzip"},
		{[]string{"gzip", "AWS-Chunked", "br"}, "gzip,br"},
	}
	for _, tt := range tests {
		if got := stripAWSChunked(tt.in); got != tt.want {
			t.Errorf("stripAWSChunked(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestWrapBodyHeaders covers payload header checks that a signature would
// otherwise mask, by calling wrapBody with an already-authenticated result.
func TestWrapBodyHeaders(t *testing.T) {
	v := newTestVerifier(t, clock.Real())
	tests := []struct {
		name   string
		method Method
		mode   string
		hdr    map[string]string
		want   error
	}{
		{"decoded length missing", V4Header, streamingUnsignedTrail, nil, ErrMissingDecodedLength},
		{"decoded length negative", V4Header, streamingUnsignedTrail, map[string]string{"X-Amz-Decoded-Content-Length": "-1"}, ErrMissingDecodedLength},
		{"trailer not a checksum", V4Header, streamingUnsignedTrail, map[string]string{
			"X-Amz-Decoded-Content-Length": "1", "X-Amz-Trailer": "x-amz-meta-a",
		}, ErrInvalidTrailer},
		{"trailer repeated", V4Header, streamingUnsignedTrail, map[string]string{
			"X-Amz-Decoded-Content-Length": "1", "X-Amz-Trailer": "x-amz-checksum-crc32, x-amz-checksum-crc32",
		}, ErrInvalidTrailer},
		{"trailer on non-trailer mode", V4Header, streamingSigned, map[string]string{
			"X-Amz-Decoded-Content-Length": "1", "X-Amz-Trailer": "x-amz-checksum-crc32",
		}, ErrInvalidTrailer},
		{"header and trailer checksum", V4Header, streamingUnsignedTrail, map[string]string{
			"X-Amz-Decoded-Content-Length": "1", "X-Amz-Trailer": "x-amz-checksum-crc32",
			"X-Amz-Checksum-Crc32": "AAAAAA==",
		}, checksum.ErrInvalidChecksum},
		{"signed streaming under sigv2", V2Header, streamingSigned, map[string]string{"X-Amz-Decoded-Content-Length": "1"}, ErrInvalidContentSHA256},
		{"unsigned streaming under sigv2", V2Header, streamingUnsignedTrail, map[string]string{"X-Amz-Decoded-Content-Length": "1"}, nil},
		{"garbage mode under sigv2", V2Header, "garbage", nil, ErrInvalidContentSHA256},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := http.NewRequest(http.MethodPut, objectURL("k", ""), strings.NewReader("x"))
			if err != nil {
				t.Fatal(err)
			}
			for k, val := range tt.hdr {
				r.Header.Set(k, val)
			}
			_, err = v.wrapBody(r, &authResult{method: tt.method, payloadHash: tt.mode})
			wantErr(t, err, tt.want)
		})
	}
}

// TestCompleteChecksumDescribesObject: the x-amz-checksum-* header of a
// CompleteMultipartUpload is the whole object's (the store checks it), not
// its body's, so it is not verified against the body; on any other
// request it is.
func TestCompleteChecksumDescribesObject(t *testing.T) {
	v := newTestVerifier(t, clock.Real())
	body := "<CompleteMultipartUpload/>"
	for _, tc := range []struct {
		method, query string
		want          error
	}{
		{http.MethodPost, "uploadId=u1", nil},
		{http.MethodPost, "uploads", checksum.ErrChecksumMismatch},
		{http.MethodPut, "partNumber=1&uploadId=u1", checksum.ErrChecksumMismatch},
	} {
		req, err := http.NewRequest(tc.method, objectURL("m", tc.query), strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Amz-Content-Sha256", unsignedPayload)
		req.Header.Set("X-Amz-Checksum-Crc32", checksum.Sum(checksum.CRC32, []byte("the whole object")))
		got, ar, err := readBody(v, serverSide(t, signer.SignV4(*req, testAK, testSK, "", testRegion)))
		wantErr(t, err, tc.want)
		if tc.want == nil && (string(got) != body || ar.ChecksumValue != "") {
			t.Errorf("%s ?%s: body %q, checksum %q", tc.method, tc.query, got, ar.ChecksumValue)
		}
	}
}
