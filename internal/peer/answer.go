package peer

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/store"
)

// Answers are authenticated like requests. Every answer to a verified
// request carries
//
//	X-Hoard-Peer-Answer-Body: stream-v2 | <hex SHA-256 of the whole body>
//	X-Hoard-Peer-Answer:      hex HMAC-SHA256(secret, "hoard-peer-answer-v1" \n
//	                              request signature \n status \n
//	                              name:value \n ... (the signed headers))
//
// The request's signature covers its nonce and date, so an answer is bound
// to the one request it answers: replayed to another, it fails. The signed
// headers are every object header a client reads (ETag, Last-Modified,
// the Content-* family but Content-Length, Cache-Control, Expires) and
// every X-Amz-* and X-Hoard-* header but the MAC itself: lower-case names,
// values trimmed, one line per value, sorted by name. Bodies known up front
// (errors, acknowledgements: small) are covered by their SHA-256 in the
// signed X-Hoard-Peer-Answer-Body. A streamed body ("stream-v2": objects,
// ranges, probes; its length is the signed X-Hoard-Peer-Size or the
// request's) is followed, within the answer's Content-Length, by its MAC
//
//	hex HMAC-SHA256(secret, "hoard-peer-body-v1" \n answer MAC \n
//	                length \n hex CRC32C of the body)
//
// which the client checks before it returns the body's last bytes, so a
// reader of a forged, damaged or cut body sees it end early, never
// complete. (Format 1, "stream", sent the same MAC as a chunked trailer:
// a body of a known length needs no chunking, and without it the owner
// hands its cached chunks to the socket as they lie, see copyFrom, and
// the client reads them straight into its own entry. An answer in format
// 1 fails verification here: a miss, never wrong bytes.)
//
// Why CRC32C and not SHA-256 under the body's MAC: the MAC is what a
// member without the secret cannot make, for any body; the digest only has
// to tie the bytes to it. SHA-256 would also stop an attacker who sits on
// the path and changes a live answer's bytes keeping their CRC, but it
// costs ~0.75 GB/s of CPU at each end (remote hits of large objects 3-8x
// slower in BenchmarkTransport) where CRC32C runs at ~20 GB/s; an on-path
// attacker could read every object anyway, and TLS is the transport's
// answer to both (docs/adr/0008-peer-transport.md).
//
// Answers to requests that failed authentication are not signed (the
// server is no signing oracle); the client refuses every answer that does
// not verify with ErrAnswerUnauthenticated, which callers treat like an
// unreachable peer (they read the store). Redirects are not followed.

// Header names of answers.
const (
	hdrAnswer     = "X-Hoard-Peer-Answer"
	hdrAnswerBody = "X-Hoard-Peer-Answer-Body"
)

// bodyStreamed is X-Hoard-Peer-Answer-Body for a body followed by its MAC
// (format 2; format 1, "stream", sent the MAC as a chunked trailer, and
// is refused: the answer then fails verification, a miss).
const bodyStreamed = "stream-v2"

// bodyMACLen is the length of the MAC that follows a streamed body: hex
// HMAC-SHA256.
const bodyMACLen = 2 * sha256.Size

// maxWholeAnswer bounds the bodies of answers that are not streamed
// (errors, acknowledgements).
const maxWholeAnswer = 1 << 20

// ErrAnswerUnauthenticated: a peer's answer (its status, headers or body)
// did not verify with the application's secret: sent by something that
// does not hold it, replayed from another request, or damaged on the way.
// It wraps store.ErrUnavailable, so callers fall back to the store.
var ErrAnswerUnauthenticated = fmt.Errorf("%w: peer answer not authenticated", store.ErrUnavailable)

// signedObjectHeaders are the object headers an answer's MAC covers,
// besides the prefixes in signedAnswerHeader.
var signedObjectHeaders = []string{
	"etag", "last-modified", "content-type", "content-encoding", "content-disposition",
	"content-language", "cache-control", "expires",
}

// signedAnswerHeader reports whether an answer's MAC covers the header
// with lower-case name n.
func signedAnswerHeader(n string) bool {
	switch {
	case n == "x-hoard-peer-answer":
		return false
	case strings.HasPrefix(n, "x-hoard-"), strings.HasPrefix(n, "x-amz-"):
		return true
	}
	return slices.Contains(signedObjectHeaders, n)
}

// signedAnswerHeaderFold is signedAnswerHeader of a name in any case
// (net/http's canonical one, say), without lowering it.
func signedAnswerHeaderFold(name string) bool {
	hasPrefixFold := func(p string) bool { return len(name) >= len(p) && strings.EqualFold(name[:len(p)], p) }
	switch {
	case strings.EqualFold(name, "x-hoard-peer-answer"):
		return false
	case hasPrefixFold("x-hoard-"), hasPrefixFold("x-amz-"):
		return true
	}
	return slices.ContainsFunc(signedObjectHeaders, func(s string) bool { return strings.EqualFold(s, name) })
}

// isASCII reports whether s is all ASCII.
func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// lowerASCII lowers one ASCII letter; other bytes stay.
func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// appendLowerASCII appends s with its ASCII letters lowered.
func appendLowerASCII(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		b = append(b, lowerASCII(s[i]))
	}
	return b
}

// compareLowerASCII is strings.Compare of x and y with their ASCII
// letters lowered.
func compareLowerASCII(x, y string) int {
	for i := 0; i < len(x) && i < len(y); i++ {
		if cx, cy := lowerASCII(x[i]), lowerASCII(y[i]); cx != cy {
			if cx < cy {
				return -1
			}
			return 1
		}
	}
	switch {
	case len(x) < len(y):
		return -1
	case len(x) > len(y):
		return 1
	}
	return 0
}

// headerValue is a header value as the other end reads it: net/http's
// server turns line breaks into spaces and its client trims the ends.
var headerValue = strings.NewReplacer("\r", " ", "\n", " ")

// answerMAC is the MAC of an answer with status and headers h to the
// request signed reqSig.
func (a *Auth) answerMAC(reqSig string, status int, h http.Header) string {
	type field struct{ name, value string }
	var room [16]field
	fields := room[:0]
	for name, vals := range h {
		if !signedAnswerHeaderFold(name) {
			continue // most of an answer's headers
		}
		n := name // an ASCII name is lowered as it is written: no copy made
		if !isASCII(name) {
			if n = strings.ToLower(name); !signedAnswerHeader(n) { // the exact rule: folding is only the sieve
				continue
			}
		}
		for _, v := range vals {
			fields = append(fields, field{n, strings.TrimSpace(headerValue.Replace(v))})
		}
	}
	// By lower-cased name, stably (an insertion sort: answers carry a
	// handful of signed headers, and a sort function would move the
	// fields to the heap).
	for i := 1; i < len(fields); i++ {
		for j := i; j > 0 && compareLowerASCII(fields[j-1].name, fields[j].name) > 0; j-- {
			fields[j-1], fields[j] = fields[j], fields[j-1]
		}
	}
	return a.withMAC(func(b []byte) []byte {
		b = append(b, "hoard-peer-answer-v1\n"...)
		b = append(b, reqSig...)
		b = append(b, '\n')
		b = strconv.AppendInt(b, int64(status), 10)
		b = append(b, '\n')
		for _, f := range fields {
			b = appendLowerASCII(b, f.name)
			b = append(b, ':')
			b = append(b, f.value...)
			b = append(b, '\n')
		}
		return b
	})
}

// bodyMAC is the MAC of a streamed body of n bytes with digest sum (its
// CRC32C), in the answer whose MAC is answerMAC.
func (a *Auth) bodyMAC(answerMAC string, n int64, sum []byte) string {
	return a.withMAC(func(b []byte) []byte {
		b = append(b, "hoard-peer-body-v1\n"...)
		b = append(b, answerMAC...)
		b = append(b, '\n')
		b = strconv.AppendInt(b, n, 10)
		b = append(b, '\n')
		return hex.AppendEncode(b, sum[:min(len(sum), 64)])
	})
}

// answer writes the signed answers to one verified request.
type answer struct {
	w      http.ResponseWriter
	auth   *Auth
	reqSig string
}

// whole sends an answer whose body (possibly empty) is known up front.
func (a answer) whole(status int, body []byte) {
	h := a.w.Header()
	sum := sha256.Sum256(body)
	h.Set(hdrAnswerBody, hex.EncodeToString(sum[:]))
	if status != http.StatusNoContent && status != http.StatusNotModified {
		h.Set("Content-Length", strconv.Itoa(len(body)))
	}
	if _, ok := h["Content-Type"]; !ok {
		h["Content-Type"] = nil // no sniffing: the MAC covers what is set
	}
	h.Set(hdrAnswer, a.auth.answerMAC(a.reqSig, status, h))
	a.w.WriteHeader(status)
	if len(body) > 0 {
		_, _ = a.w.Write(body)
	}
}

// error sends err as the protocol's error answer.
func (a answer) error(err error) {
	status, body := errorAnswer(err)
	if body != nil {
		a.w.Header().Set("Content-Type", "application/json")
	}
	a.whole(status, body)
}

// stream starts a 200 answer whose body of size bytes is followed by its
// MAC (bodyMACLen bytes); the caller sends the body with copyFrom (or
// Write) and then calls finish.
func (a answer) stream(size int64) *streamWriter {
	h := a.w.Header()
	h.Set("Content-Length", strconv.FormatInt(size+bodyMACLen, 10))
	h.Set(hdrAnswerBody, bodyStreamed)
	if _, ok := h["Content-Type"]; !ok {
		h["Content-Type"] = nil
	}
	mac := a.auth.answerMAC(a.reqSig, http.StatusOK, h)
	h.Set(hdrAnswer, mac)
	a.w.WriteHeader(http.StatusOK)
	return &streamWriter{a: a, mac: mac, sum: crc32.New(castagnoli), size: size}
}

// streamWriter digests a streamed answer's body as it is written.
type streamWriter struct {
	a    answer
	mac  string
	sum  hash.Hash32
	size int64 // announced
	n    int64 // written
}

func (s *streamWriter) Write(p []byte) (int, error) {
	n, err := s.a.w.Write(p)
	s.sum.Write(p[:n])
	s.n += int64(n)
	return n, err
}

// directCopy is the body size from which copyFrom hands the body to the
// connection (see there); smaller bodies go through the server's buffer
// with the headers and the MAC, flushed together when the answer ends.
const directCopy = 64 << 10

// copyFrom sends r's bytes as the body. A large body goes to the
// connection itself: net/http's response hands a body of a known length
// to the TCP connection's ReadFrom, which calls r's WriteTo with the
// connection, so that a cache entry's reader writes its chunks straight
// from the entry to the socket, a chunk a write, no copy through a
// buffer. The digest is taken of the bytes as they are written.
func (s *streamWriter) copyFrom(r io.Reader) (int64, error) {
	if rf, ok := s.a.w.(io.ReaderFrom); ok && s.size >= directCopy {
		// The headers first, on their own: ReadFrom would otherwise copy
		// the body's first bytes through a buffer, to send them with
		// the headers.
		if err := http.NewResponseController(s.a.w).Flush(); err != nil {
			return 0, err
		}
		return rf.ReadFrom(digesting{r: r, s: s})
	}
	return io.Copy(s, r)
}

// digesting passes a body's bytes to the connection, digesting them on
// the way, keeping the body's WriteTo.
type digesting struct {
	r io.Reader
	s *streamWriter
}

func (d digesting) Read(p []byte) (int, error) {
	n, err := d.r.Read(p)
	d.s.sum.Write(p[:n])
	d.s.n += int64(n)
	return n, err
}

func (d digesting) WriteTo(w io.Writer) (int64, error) {
	if v := Vector(w); v != nil {
		// A TCP socket: a cache entry's chunks go to it several at a
		// time (writev), as they lie.
		return io.Copy(vectorDigester{v: v, s: d.s}, d.r)
	}
	return io.Copy(digestingWriter{w: w, s: d.s}, d.r)
}

// vectorDigester is digestingWriter for a destination that takes several
// buffers at once (cache.VectorWriter).
type vectorDigester struct {
	v cache.VectorWriter
	s *streamWriter
}

func (d vectorDigester) Write(p []byte) (int, error) {
	n, err := d.v.Write(p)
	d.s.sum.Write(p[:n])
	d.s.n += int64(n)
	return n, err
}

// WriteVector digests bufs before they are written (the destination may
// change their slice headers); when the write fails, the answer is cut
// and its digest never sent.
func (d vectorDigester) WriteVector(bufs [][]byte) (int64, error) {
	for _, b := range bufs {
		d.s.sum.Write(b)
	}
	n, err := d.v.WriteVector(bufs)
	d.s.n += n
	return n, err
}

type digestingWriter struct {
	w io.Writer
	s *streamWriter
}

func (d digestingWriter) Write(p []byte) (int, error) {
	n, err := d.w.Write(p)
	d.s.sum.Write(p[:n])
	d.s.n += int64(n)
	return n, err
}

// known says that the body's CRC32C is crc: copyFrom then sends the body
// without digesting it.
func (s *streamWriter) known(crc uint32) {
	s.sum = knownSum(crc)
}

// knownSum is a CRC32C digest that was computed before: writes to it do
// nothing.
type knownSum uint32

func (knownSum) Write(p []byte) (int, error) { return len(p), nil }
func (k knownSum) Sum(b []byte) []byte       { return binary.BigEndian.AppendUint32(b, uint32(k)) }
func (k knownSum) Sum32() uint32             { return uint32(k) }
func (knownSum) Reset()                      {}
func (knownSum) Size() int                   { return crc32.Size }
func (knownSum) BlockSize() int              { return 1 }

// finish sends the body's MAC, once the whole body was sent, and returns
// the body's CRC32C.
func (s *streamWriter) finish() (uint32, error) { return s.finishDigested(nil) }

// finishDigested is finish, giving digested the body's CRC32C before the
// MAC goes out: the reader cannot have the whole answer before it is
// recorded.
func (s *streamWriter) finishDigested(digested func(uint32)) (uint32, error) {
	if s.n != s.size {
		return 0, fmt.Errorf("peer: sent %d bytes of a body of %d", s.n, s.size)
	}
	if digested != nil {
		digested(s.sum.Sum32())
	}
	var sum [4]byte
	_, err := io.WriteString(s.a.w, s.a.auth.bodyMAC(s.mac, s.n, s.sum.Sum(sum[:0])))
	return s.sum.Sum32(), err
}

// verifyAnswer checks resp's status and headers against the MAC for the
// request signed reqSig. A body sent whole is read and checked too, and
// put back in resp.Body; a streamed one is left for verifiedBody. An
// answer that does not verify is closed and refused with
// ErrAnswerUnauthenticated (wrapping ErrUnauthenticated as well when it is
// the 403 a server gives a request it could not authenticate: the two
// ends do not share the secret).
func (a *Auth) verifyAnswer(resp *http.Response, reqSig string) (err error) {
	defer func() {
		if err != nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusForbidden {
				err = fmt.Errorf("%w (%w)", err, ErrUnauthenticated)
			}
		}
	}()
	mac := resp.Header.Get(hdrAnswer)
	if mac == "" {
		return fmt.Errorf("%w: answer %d not signed", ErrAnswerUnauthenticated, resp.StatusCode)
	}
	if !hmac.Equal([]byte(mac), []byte(a.answerMAC(reqSig, resp.StatusCode, resp.Header))) {
		return fmt.Errorf("%w: answer %d does not match its signature", ErrAnswerUnauthenticated, resp.StatusCode)
	}
	spec := resp.Header.Get(hdrAnswerBody)
	if spec == bodyStreamed {
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%w: streamed answer with status %d", ErrAnswerUnauthenticated, resp.StatusCode)
		}
		return nil
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxWholeAnswer+1))
	resp.Body.Close()
	if err != nil {
		return fmt.Errorf("%w: reading the answer: %v", store.ErrUnavailable, err)
	}
	sum := sha256.Sum256(body)
	if len(body) > maxWholeAnswer || spec != hex.EncodeToString(sum[:]) {
		return fmt.Errorf("%w: answer body does not match its signature", ErrAnswerUnauthenticated)
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return nil
}

// verifiedBody passes exactly size bytes of a streamed answer's body
// and withholds the last read's bytes until the MAC that follows them
// matched the body's digest: a reader never sees the end of a body that
// fails.
type verifiedBody struct {
	resp      *http.Response
	auth      *Auth
	mac       string // the answer's MAC
	size      int64
	remaining int64
	sum       hash.Hash32
	checked   bool
	err       error
	what      string // "object" or "range", for errors
}

func newVerifiedBody(a *Auth, resp *http.Response, size int64, what string) *verifiedBody {
	return &verifiedBody{resp: resp, auth: a, mac: resp.Header.Get(hdrAnswer), size: size, remaining: size, sum: crc32.New(castagnoli), what: what}
}

// errShort: a streamed answer ended before its announced size.
var errShort = fmt.Errorf("%w: peer body ended early", store.ErrUnavailable)

func (b *verifiedBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.checked {
		return 0, io.EOF
	}
	var n int
	if b.remaining > 0 {
		if int64(len(p)) > b.remaining {
			p = p[:b.remaining]
		}
		var err error
		n, err = b.resp.Body.Read(p)
		b.remaining -= int64(n)
		b.sum.Write(p[:n])
		if err != nil && !errors.Is(err, io.EOF) {
			b.err = fmt.Errorf("%w: peer %s: %v", store.ErrUnavailable, b.what, err)
			return 0, b.err
		}
		if errors.Is(err, io.EOF) {
			b.err = errShort // the MAC, at least, must follow
			return 0, b.err
		}
		if b.remaining > 0 {
			return n, nil
		}
	}
	if err := b.end(); err != nil {
		b.err = err
		return 0, err
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

// end reads the MAC that follows the body, checks it, and that nothing
// follows it.
func (b *verifiedBody) end() error {
	var got [bodyMACLen + 1]byte
	m, err := io.ReadFull(b.resp.Body, got[:])
	switch {
	case m > bodyMACLen:
		return fmt.Errorf("%w: peer %s longer than announced", store.ErrUnavailable, b.what)
	case m < bodyMACLen:
		if err == nil || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return fmt.Errorf("%w: %s body without its signature", ErrAnswerUnauthenticated, b.what)
		}
		return fmt.Errorf("%w: peer %s: %v", store.ErrUnavailable, b.what, err)
	case !errors.Is(err, io.ErrUnexpectedEOF):
		// bodyMACLen bytes then the end: ReadFull says ErrUnexpectedEOF.
		return fmt.Errorf("%w: peer %s: %v", store.ErrUnavailable, b.what, err)
	}
	var sum [4]byte
	want := b.auth.bodyMAC(b.mac, b.size, b.sum.Sum(sum[:0]))
	if !hmac.Equal(got[:bodyMACLen], []byte(want)) {
		return fmt.Errorf("%w: %s body does not match its signature", ErrAnswerUnauthenticated, b.what)
	}
	b.checked = true
	return nil
}

func (b *verifiedBody) Close() error { return b.resp.Body.Close() }
