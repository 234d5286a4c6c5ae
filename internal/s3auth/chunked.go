package s3auth

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"

	"github.com/hoard-io/hoard/internal/checksum"
)

// Limits on aws-chunked framing. They bound what a client can make the
// decoder hold: one chunk, one header line, one trailer section.
const (
	// maxChunkSize is the largest chunk accepted. SDKs send 64 KiB to 1 MiB;
	// 16 MiB is what S3-compatible servers commonly allow.
	maxChunkSize = 16 << 20
	// maxChunkLine bounds a chunk header line. A signed one is under 100
	// bytes; the slack allows chunk extensions on unsigned chunks.
	maxChunkLine = 4 << 10
	// maxTrailerBytes and maxTrailerLines bound the trailer section.
	maxTrailerBytes = 8 << 10
	maxTrailerLines = 32

	trailerSignatureName = "x-amz-trailer-signature"
	chunkSignaturePrefix = "chunk-signature="
)

// errClosed is returned by Read after Close. It is not a sentinel clients
// see: only a handler that misuses its own body can meet it.
var errClosed = errors.New("s3auth: read from closed body")

// trailerSum tracks one checksum the client promised in x-amz-trailer.
type trailerSum struct {
	algo  checksum.Algorithm
	h     hash.Hash
	value string // as received, once the trailer section is parsed
	seen  bool
}

// chunkedReader decodes an aws-chunked body. In signed mode it holds each
// chunk until that chunk's signature verifies, so no unverified byte ever
// reaches the caller; in unsigned mode it streams chunk data straight
// through and the trailer checksum is the only integrity check.
type chunkedReader struct {
	v    *Verifier
	body io.Closer
	src  *bufio.Reader

	signed      bool // chunk-signature on every chunk
	trailerMode bool // a trailer section follows the final chunk

	// SigV4 context for chunk and trailer signatures.
	key     []byte
	amzDate string
	scope   string
	prevSig [2 * sha256.Size]byte
	mac     hash.Hash
	sha     hash.Hash
	// chunkHead and chunkMid are the constant parts of every chunk's
	// string to sign, built once so per-chunk work allocates nothing.
	chunkHead []byte
	chunkMid  []byte
	scratch   [sha256.Size]byte

	trailers []trailerSum

	declared int64 // x-amz-decoded-content-length
	decoded  int64 // payload bytes delivered or held so far

	buf       *[]byte // pooled; holds the current signed chunk
	pending   []byte  // verified chunk bytes not yet read
	remaining int64   // unsigned: data bytes left in the current chunk
	needCRLF  bool    // unsigned: the current chunk's closing CRLF is due

	done bool  // final chunk and trailers verified
	err  error // sticky: io.EOF, a verification error or a source error
}

// chunkedConfig carries what newChunkedReader needs from Verify.
type chunkedConfig struct {
	signed, trailerMode bool
	res                 *authResult // nil in unsigned mode
	declared            int64
	trailers            []checksum.Algorithm
}

func (v *Verifier) newChunkedReader(body io.ReadCloser, cfg chunkedConfig) *chunkedReader {
	c := &chunkedReader{
		v:           v,
		body:        body,
		src:         v.getBufReader(body),
		signed:      cfg.signed,
		trailerMode: cfg.trailerMode,
		declared:    cfg.declared,
	}
	if cfg.signed {
		c.key = cfg.res.signingKey
		c.amzDate = cfg.res.amzDate
		c.scope = cfg.res.scope
		copy(c.prevSig[:], cfg.res.seedSig)
		c.mac = hmac.New(sha256.New, c.key)
		c.sha = sha256.New()
		c.chunkHead = []byte("AWS4-HMAC-SHA256-PAYLOAD\n" + c.amzDate + "\n" + c.scope + "\n")
		c.chunkMid = []byte("\n" + emptySHA256 + "\n")
		c.buf = v.getChunkBuf()
	}
	for _, a := range cfg.trailers {
		c.trailers = append(c.trailers, trailerSum{algo: a, h: checksum.New(a)})
	}
	return c
}

// Read implements io.Reader.
func (c *chunkedReader) Read(p []byte) (int, error) {
	for {
		if c.err != nil {
			return 0, c.err
		}
		if len(c.pending) > 0 {
			n := copy(p, c.pending)
			c.pending = c.pending[n:]
			return n, nil
		}
		if c.remaining > 0 {
			return c.readUnsigned(p)
		}
		if len(p) == 0 {
			return 0, nil
		}
		if err := c.nextChunk(); err != nil {
			c.fail(err)
		}
	}
}

// readUnsigned streams part of an unsigned chunk straight from the source.
func (c *chunkedReader) readUnsigned(p []byte) (int, error) {
	if int64(len(p)) > c.remaining {
		p = p[:c.remaining]
	}
	n, err := c.src.Read(p)
	if n > 0 {
		c.remaining -= int64(n)
		c.decoded += int64(n)
		c.hashTrailers(p[:n])
	}
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = fmt.Errorf("%w: body ended inside a chunk", ErrIncompleteBody)
		}
		c.fail(err)
		if n > 0 {
			// Deliver what arrived; the failure follows on the next Read.
			return n, nil
		}
		return 0, c.err
	}
	return n, nil
}

// fail records a terminal state and returns pooled memory.
func (c *chunkedReader) fail(err error) {
	if c.err == nil {
		c.err = err
	}
	c.release()
}

func (c *chunkedReader) release() {
	if c.buf != nil {
		c.v.putChunkBuf(c.buf)
		c.buf = nil
		c.pending = nil
	}
	if c.src != nil {
		c.v.putBufReader(c.src)
		c.src = nil
	}
}

// Close releases pooled buffers and closes the original body.
func (c *chunkedReader) Close() error {
	if c.err == nil {
		c.err = errClosed
	}
	c.release()
	return c.body.Close()
}

// nextChunk reads one chunk header and, in signed mode, the whole chunk.
// After the final (zero-length) chunk it parses the trailer section and
// returns io.EOF if everything verified.
func (c *chunkedReader) nextChunk() error {
	if c.needCRLF {
		if err := c.readCRLF(); err != nil {
			return err
		}
		c.needCRLF = false
	}
	line, err := c.readLine()
	if err != nil {
		return err
	}
	size, sigRef, err := parseChunkHeader(line, c.signed)
	if err != nil {
		return err
	}
	// sigRef points into the bufio buffer, which reading the chunk data
	// overwrites; keep a copy.
	var sig [2 * sha256.Size]byte
	copy(sig[:], sigRef)
	if size > c.declared-c.decoded {
		return fmt.Errorf("%w: chunks exceed x-amz-decoded-content-length %d", ErrIncompleteBody, c.declared)
	}
	if !c.signed {
		if size == 0 {
			return c.finish()
		}
		c.remaining = size
		c.needCRLF = true
		return nil
	}

	if int64(cap(*c.buf)) < size {
		*c.buf = make([]byte, size)
	}
	data := (*c.buf)[:size]
	if _, err := io.ReadFull(c.src, data); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("%w: body ended inside a chunk", ErrIncompleteBody)
		}
		return err
	}
	if size > 0 {
		if err := c.readCRLF(); err != nil {
			return err
		}
	}
	if !c.verifyChunk(data, sig[:]) {
		return fmt.Errorf("%w: chunk signature at decoded offset %d", ErrSignatureDoesNotMatch, c.decoded)
	}
	if size == 0 {
		return c.finish()
	}
	c.decoded += size
	c.hashTrailers(data)
	c.pending = data
	return nil
}

// verifyChunk checks one chunk signature and, if it matches, makes it the
// previous signature the next chunk chains from.
func (c *chunkedReader) verifyChunk(data, sig []byte) bool {
	var dataHex [2 * sha256.Size]byte
	c.sha.Reset()
	c.sha.Write(data)
	hex.Encode(dataHex[:], c.sha.Sum(c.scratch[:0]))

	c.mac.Reset()
	c.mac.Write(c.chunkHead)
	c.mac.Write(c.prevSig[:])
	c.mac.Write(c.chunkMid)
	c.mac.Write(dataHex[:])
	var got [2 * sha256.Size]byte
	hex.Encode(got[:], c.mac.Sum(c.scratch[:0]))
	if !hmac.Equal(got[:], sig) {
		return false
	}
	c.prevSig = got
	return true
}

func (c *chunkedReader) hashTrailers(p []byte) {
	for i := range c.trailers {
		c.trailers[i].h.Write(p)
	}
}

// readLine returns one CRLF-terminated line without its terminator. The
// slice is only valid until the next read from src.
func (c *chunkedReader) readLine() ([]byte, error) {
	line, err := c.src.ReadSlice('\n')
	switch {
	case errors.Is(err, bufio.ErrBufferFull):
		return nil, fmt.Errorf("%w: chunk header line too long", ErrMalformedChunk)
	case errors.Is(err, io.EOF):
		return nil, fmt.Errorf("%w: body ended before the final chunk", ErrIncompleteBody)
	case err != nil:
		return nil, err
	}
	if len(line) > maxChunkLine {
		return nil, fmt.Errorf("%w: chunk header line too long", ErrMalformedChunk)
	}
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("%w: chunk header line not terminated by CRLF", ErrMalformedChunk)
	}
	return line[:len(line)-2], nil
}

func (c *chunkedReader) readCRLF() error {
	var crlf [2]byte
	if _, err := io.ReadFull(c.src, crlf[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("%w: body ended after chunk data", ErrIncompleteBody)
		}
		return err
	}
	if crlf != [2]byte{'\r', '\n'} {
		return fmt.Errorf("%w: chunk data not followed by CRLF", ErrMalformedChunk)
	}
	return nil
}

// parseChunkHeader parses "<hex-size>[;chunk-signature=<sig>]". Signed
// chunks must carry exactly a 64-hex-digit signature; unsigned chunks may
// carry extensions, which are ignored as HTTP chunked coding allows.
func parseChunkHeader(line []byte, signed bool) (size int64, sig []byte, err error) {
	sizePart, ext, hasExt := bytes.Cut(line, []byte{';'})
	if len(sizePart) == 0 || len(sizePart) > 16 {
		return 0, nil, fmt.Errorf("%w: bad chunk size", ErrMalformedChunk)
	}
	for _, b := range sizePart {
		var d byte
		switch {
		case '0' <= b && b <= '9':
			d = b - '0'
		case 'a' <= b && b <= 'f':
			d = b - 'a' + 10
		case 'A' <= b && b <= 'F':
			d = b - 'A' + 10
		default:
			return 0, nil, fmt.Errorf("%w: bad chunk size", ErrMalformedChunk)
		}
		size = size<<4 | int64(d)
		if size > maxChunkSize {
			return 0, nil, fmt.Errorf("%w: chunk larger than %d bytes", ErrMalformedChunk, maxChunkSize)
		}
	}
	if !signed {
		return size, nil, nil
	}
	if !hasExt {
		return 0, nil, fmt.Errorf("%w: chunk has no signature", ErrMalformedChunk)
	}
	ext = bytes.TrimRight(ext, " \t")
	sig, ok := bytes.CutPrefix(ext, []byte(chunkSignaturePrefix))
	if !ok || len(sig) != 2*sha256.Size {
		return 0, nil, fmt.Errorf("%w: malformed chunk signature", ErrMalformedChunk)
	}
	return size, sig, nil
}

// finish runs after the final chunk: it checks the decoded length, reads
// the trailer section to the end of the body and verifies the trailer
// signature and checksums. It returns io.EOF when all is well.
func (c *chunkedReader) finish() error {
	if c.decoded != c.declared {
		return fmt.Errorf("%w: decoded %d bytes, x-amz-decoded-content-length is %d", ErrIncompleteBody, c.decoded, c.declared)
	}
	canon, sig, err := c.readTrailerSection()
	if err != nil {
		return err
	}
	if c.signed && c.trailerMode {
		if sig == nil {
			return fmt.Errorf("%w: missing %s", ErrMalformedChunk, trailerSignatureName)
		}
		if !c.verifyTrailer(canon, sig) {
			return fmt.Errorf("%w: trailer signature", ErrSignatureDoesNotMatch)
		}
	}
	for i := range c.trailers {
		t := &c.trailers[i]
		if !t.seen {
			return fmt.Errorf("%w: trailer %s declared but not sent", ErrMalformedChunk, t.algo.HeaderName())
		}
		want, err := checksum.ParseValue(t.algo, t.value)
		if err != nil {
			return err
		}
		if got := t.h.Sum(nil); !bytes.Equal(got, want) {
			return fmt.Errorf("%w: %s computed %s, trailer sent %s",
				checksum.ErrChecksumMismatch, t.algo.HeaderName(), checksum.Encode(got), t.value)
		}
	}
	c.done = true
	return io.EOF
}

// readTrailerSection reads everything after the final chunk header up to
// the end of the body. It tolerates the line-ending variations real
// clients produce (minio-go ends trailer lines with a bare LF, then adds a
// CRLF) by skipping empty lines, and refuses anything it was not promised.
// canon is the trailer lines as signed: "name:value\n" each.
func (c *chunkedReader) readTrailerSection() (canon, sig []byte, err error) {
	total, lines := 0, 0
	for {
		line, rerr := c.src.ReadSlice('\n')
		total += len(line)
		if errors.Is(rerr, bufio.ErrBufferFull) || total > maxTrailerBytes {
			return nil, nil, fmt.Errorf("%w: trailer section too long", ErrMalformedChunk)
		}
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			return nil, nil, rerr
		}
		content := bytes.TrimRight(line, "\r\n")
		if len(content) > 0 {
			lines++
			if lines > maxTrailerLines || !c.trailerMode || sig != nil {
				return nil, nil, fmt.Errorf("%w: unexpected data after the final chunk", ErrMalformedChunk)
			}
			name, value, ok := bytes.Cut(content, []byte{':'})
			if !ok {
				return nil, nil, fmt.Errorf("%w: trailer line without a colon", ErrMalformedChunk)
			}
			name = bytes.ToLower(bytes.TrimSpace(name))
			value = bytes.TrimSpace(value)
			if string(name) == trailerSignatureName {
				if !c.signed {
					return nil, nil, fmt.Errorf("%w: trailer signature on an unsigned body", ErrMalformedChunk)
				}
				sig = bytes.Clone(value)
			} else {
				if err := c.recordTrailer(name, value); err != nil {
					return nil, nil, err
				}
				canon = append(canon, name...)
				canon = append(canon, ':')
				canon = append(canon, value...)
				canon = append(canon, '\n')
			}
		}
		if rerr != nil { // io.EOF
			return canon, sig, nil
		}
	}
}

func (c *chunkedReader) recordTrailer(name, value []byte) error {
	for i := range c.trailers {
		t := &c.trailers[i]
		if t.algo.HeaderName() != string(name) {
			continue
		}
		if t.seen {
			return fmt.Errorf("%w: trailer %s repeated", ErrMalformedChunk, name)
		}
		t.seen = true
		t.value = string(value)
		return nil
	}
	return fmt.Errorf("%w: trailer %q not declared in x-amz-trailer", ErrMalformedChunk, truncate(string(name)))
}

func (c *chunkedReader) verifyTrailer(canon, sig []byte) bool {
	sum := sha256.Sum256(canon)
	var canonHex [2 * sha256.Size]byte
	hex.Encode(canonHex[:], sum[:])
	c.mac.Reset()
	c.mac.Write([]byte("AWS4-HMAC-SHA256-TRAILER\n"))
	c.mac.Write([]byte(c.amzDate))
	c.mac.Write([]byte{'\n'})
	c.mac.Write([]byte(c.scope))
	c.mac.Write([]byte{'\n'})
	c.mac.Write(c.prevSig[:])
	c.mac.Write([]byte{'\n'})
	c.mac.Write(canonHex[:])
	var got [2 * sha256.Size]byte
	hex.Encode(got[:], c.mac.Sum(nil))
	return hmac.Equal(got[:], sig)
}

// trailerChecksum reports the first declared trailer once verified.
func (c *chunkedReader) trailerChecksum() (checksum.Algorithm, string) {
	if !c.done || len(c.trailers) == 0 {
		return "", ""
	}
	return c.trailers[0].algo, c.trailers[0].value
}
