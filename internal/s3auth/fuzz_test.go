package s3auth

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsv4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/hoard-io/hoard/internal/checksum"
)

// fuzzTime is the signing time of every fuzz template, and the verifiers'
// clock, so templates stay valid forever.
var fuzzTime = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// chunkTemplate is a verified aws-chunked request whose signing context the
// fuzzer reuses with arbitrary bodies.
type chunkTemplate struct {
	cfg chunkedConfig
	raw []byte // a valid body, used as a seed
}

func chunkTemplates(t testing.TB, v *Verifier) []chunkTemplate {
	data := []byte("fuzzing the aws-chunked decoder")
	var out []chunkTemplate
	for _, r := range []*http.Request{
		streamingRequest(t, data, false, fuzzTime),
		streamingRequest(t, data, true, fuzzTime),
		unsignedTrailerRequest(t, data, checksum.Sum(checksum.CRC32, data)),
	} {
		raw, err := io.ReadAll(r.Body)
		if err != nil {
			t.Fatal(err)
		}
		r.Body = io.NopCloser(bytes.NewReader(raw))
		if r.Header.Get("X-Amz-Content-Sha256") == streamingUnsignedTrail {
			// minio-go stamps this one with the wall clock; the fuzzer
			// only needs its framing, not its signature.
			out = append(out, chunkTemplate{
				cfg: chunkedConfig{trailerMode: true, declared: int64(len(data)), trailers: []checksum.Algorithm{checksum.CRC32}},
				raw: raw,
			})
			continue
		}
		req, err := v.Verify(r)
		if err != nil {
			t.Fatal(err)
		}
		c := req.chunked
		cfg := chunkedConfig{
			signed: true, trailerMode: c.trailerMode, declared: c.declared,
			res: &authResult{signingKey: c.key, amzDate: c.amzDate, scope: c.scope, seedSig: string(c.prevSig[:])},
		}
		for _, tr := range c.trailers {
			cfg.trailers = append(cfg.trailers, tr.algo)
		}
		req.Body.Close()
		out = append(out, chunkTemplate{cfg: cfg, raw: raw})
	}
	return out
}

// FuzzChunkedDecoder feeds arbitrary bytes to the aws-chunked decoder in
// each mode. It must never panic, never yield more than the declared length,
// yield exactly that length when it reports success, and fail only with a
// classified error.
func FuzzChunkedDecoder(f *testing.F) {
	v := newTestVerifier(f, fixedClock(fuzzTime))
	templates := chunkTemplates(f, v)
	for i, tpl := range templates {
		f.Add(tpl.raw, uint8(i), uint32(tpl.cfg.declared))
	}
	f.Add([]byte("0\r\n\r\n"), uint8(2), uint32(0))
	f.Add([]byte("3;x\r\nabc\r\n0\r\nx-amz-checksum-crc32:NSRBwg==\r\n\r\n"), uint8(2), uint32(3))
	f.Add([]byte("ffffff\r\n"), uint8(2), uint32(1<<20))

	f.Fuzz(func(t *testing.T, body []byte, mode uint8, declared uint32) {
		tpl := templates[int(mode)%len(templates)]
		cfg := tpl.cfg
		cfg.declared = int64(declared % (1 << 20))
		c := v.newChunkedReader(io.NopCloser(bytes.NewReader(body)), cfg)
		defer c.Close()
		out, err := io.ReadAll(io.LimitReader(c, cfg.declared+1))
		if int64(len(out)) > cfg.declared {
			t.Fatalf("yielded %d bytes, declared %d", len(out), cfg.declared)
		}
		if err == nil {
			if int64(len(out)) != cfg.declared {
				t.Fatalf("success after %d of %d bytes", len(out), cfg.declared)
			}
			return
		}
		if !isKnown(err) {
			t.Fatalf("unclassified error %v", err)
		}
	})
}

// FuzzVerify throws arbitrary request lines and auth headers at Verify. It
// must not panic and must classify every failure.
func FuzzVerify(f *testing.F) {
	v := newTestVerifier(f, fixedClock(fuzzTime))
	// Seed with a genuinely valid request so mutations start deep inside.
	req, err := http.NewRequest(http.MethodGet, "http://"+testHost+"/bucket/k%20y?list-type=2&prefix=a%2Bb", nil)
	if err != nil {
		f.Fatal(err)
	}
	req.Header.Set("X-Amz-Content-Sha256", sha256Hex(nil))
	s := awsv4.NewSigner(func(o *awsv4.SignerOptions) { o.DisableURIPathEscaping = true })
	if err := s.SignHTTP(context.Background(), aws.Credentials{AccessKeyID: testAK, SecretAccessKey: testSK},
		req, sha256Hex(nil), "s3", testRegion, fuzzTime); err != nil {
		f.Fatal(err)
	}
	if _, err := v.Verify(serverSide(f, req)); err != nil {
		f.Fatalf("seed request does not verify: %v", err)
	}
	f.Add("GET", req.URL.EscapedPath(), req.URL.RawQuery, req.Header.Get("Authorization"),
		req.Header.Get("X-Amz-Date"), req.Header.Get("X-Amz-Content-Sha256"), testHost)
	f.Add("GET", "/b/k", "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=a%2F20260102%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20260102T030405Z&X-Amz-Expires=60&X-Amz-SignedHeaders=host&X-Amz-Signature=00",
		"", "", "", testHost)
	f.Add("PUT", "/b/k", "AWSAccessKeyId=AKIAIOSFODNN7EXAMPLE&Expires=1999999999&Signature=abc%3D", "", "", "", testHost)
	f.Add("PUT", "/", "", "AWS "+testAK+":c2lnbmF0dXJl", "", "STREAMING-UNSIGNED-PAYLOAD-TRAILER", "bucket."+testHost)

	f.Fuzz(func(t *testing.T, method, rawPath, rawQuery, authz, amzDate, contentSHA, host string) {
		u, err := url.Parse("http://" + testHost + "/")
		if err != nil {
			t.Fatal(err)
		}
		if p, err := url.PathUnescape(rawPath); err == nil {
			u.Path, u.RawPath = p, rawPath
		}
		u.RawQuery = rawQuery
		r := &http.Request{
			Method: method, URL: u, Host: host, ContentLength: -1,
			Header: http.Header{}, Body: io.NopCloser(bytes.NewReader([]byte("body"))),
		}
		for k, val := range map[string]string{
			"Authorization": authz, "X-Amz-Date": amzDate, "X-Amz-Content-Sha256": contentSHA,
			"X-Amz-Decoded-Content-Length": "4", "Date": amzDate,
		} {
			if val != "" {
				r.Header.Set(k, val)
			}
		}
		vr, err := v.Verify(r)
		if err != nil {
			if !isKnown(err) {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		_, err = io.ReadAll(vr.Body)
		vr.Body.Close()
		if err != nil && !isKnown(err) {
			t.Fatalf("unclassified body error %v", err)
		}
	})
}

func BenchmarkChunkedDecode(b *testing.B) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB in 16 signed chunks
	v := newTestVerifier(b, fixedClock(fuzzTime))
	for _, trailer := range []bool{false, true} {
		name := "signed"
		if trailer {
			name = "signed-trailer"
		}
		b.Run(name, func(b *testing.B) {
			tpl := streamingRequest(b, data, trailer, fuzzTime)
			raw, err := io.ReadAll(tpl.Body)
			if err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, 32<<10)
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				r := *tpl
				r.Body = io.NopCloser(bytes.NewReader(raw))
				req, err := v.Verify(&r)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.CopyBuffer(io.Discard, req.Body, buf); err != nil {
					b.Fatal(err)
				}
				req.Body.Close()
			}
		})
	}
	b.Run("unsigned-trailer", func(b *testing.B) {
		var body bytes.Buffer
		for off := 0; off < len(data); off += 64 << 10 {
			body.WriteString("10000\r\n")
			body.Write(data[off : off+64<<10])
			body.WriteString("\r\n")
		}
		body.WriteString("0\r\nx-amz-checksum-crc32:" + checksum.Sum(checksum.CRC32, data) + "\r\n\r\n")
		raw := body.Bytes()
		cfg := chunkedConfig{trailerMode: true, declared: int64(len(data)), trailers: []checksum.Algorithm{checksum.CRC32}}
		buf := make([]byte, 32<<10)
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			c := v.newChunkedReader(io.NopCloser(bytes.NewReader(raw)), cfg)
			if _, err := io.CopyBuffer(io.Discard, c, buf); err != nil {
				b.Fatal(err)
			}
			c.Close()
		}
	})
}

// BenchmarkVerifyV4Header is a full verification: the memo is off, or
// every request after the second would be answered from it
// (BenchmarkVerifyMemo measures that).
func BenchmarkVerifyV4Header(b *testing.B) {
	v := newMemoVerifier(b, fixedClock(fuzzTime), testCreds(), -1)
	req, err := http.NewRequest(http.MethodGet, "http://"+testHost+"/bucket/some/key%20name.txt?versionId=abc", nil)
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("X-Amz-Content-Sha256", sha256Hex(nil))
	req.Header.Set("Range", "bytes=0-1023")
	s := awsv4.NewSigner(func(o *awsv4.SignerOptions) { o.DisableURIPathEscaping = true })
	if err := s.SignHTTP(context.Background(), aws.Credentials{AccessKeyID: testAK, SecretAccessKey: testSK},
		req, sha256Hex(nil), "s3", testRegion, fuzzTime); err != nil {
		b.Fatal(err)
	}
	r := serverSide(b, req)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.Verify(r); err != nil {
			b.Fatal(err)
		}
	}
}
