package peer

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/hoard-io/hoard/internal/store"
)

// Ranged downloads and bandwidth probes: the owner of a large object has
// other cachelets each download a byte range of it from the store, and
// measures the instance network with probes (the bandwidth policy, Faa$T
// §4).

// MaxProbeBytes bounds one probe.
const MaxProbeBytes = 64 << 20

// Ranger is implemented by Owners that download byte ranges of objects
// from the store for a peer (the cachelet does).
type Ranger interface {
	// PeerRange returns a body of exactly n bytes of bucket/key from off,
	// read from the store only if the object's ETag is still etag
	// (store.ErrPreconditionFailed otherwise). The bytes are not cached:
	// the caller assembles the object.
	PeerRange(ctx context.Context, bucket, key, etag string, off, n int64) (io.ReadCloser, error)
}

// rangeQuery is the signed query of a range request.
func rangeQuery(bucket, key, etag string, off, n int64) string {
	q := url.Values{}
	q.Set("bucket", bucket)
	q.Set("key", key)
	q.Set("etag", etag)
	q.Set("off", strconv.FormatInt(off, 10))
	q.Set("n", strconv.FormatInt(n, 10))
	return q.Encode()
}

// serveRange answers Client.Range: the range's bytes with a CRC32C
// trailer the client checks.
func (s *Server) serveRange(w http.ResponseWriter, r *http.Request) {
	rg, ok := s.owner.(Ranger)
	if !ok {
		writeError(w, fmt.Errorf("%w: this cachelet does not serve ranges", ErrBadRequest))
		return
	}
	q := r.URL.Query()
	bucket, key, etag := q.Get("bucket"), q.Get("key"), q.Get("etag")
	off, err1 := strconv.ParseInt(q.Get("off"), 10, 64)
	n, err2 := strconv.ParseInt(q.Get("n"), 10, 64)
	if bucket == "" || key == "" || etag == "" || err1 != nil || err2 != nil || off < 0 || n <= 0 {
		writeError(w, fmt.Errorf("%w: a range needs bucket, key, etag, off >= 0 and n > 0", ErrBadRequest))
		return
	}
	body, err := rg.PeerRange(r.Context(), bucket, key, etag, off, n)
	if err != nil {
		writeError(w, err)
		return
	}
	defer body.Close()
	crc := crc32.New(castagnoli)
	h := w.Header()
	h.Set("Trailer", hdrCRC)
	h.Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	sent, err := io.Copy(io.MultiWriter(w, crc), io.LimitReader(body, n))
	if err == nil && sent != n {
		err = fmt.Errorf("store sent %d of %d bytes", sent, n)
	}
	if err != nil {
		// Headers are out: a missing trailer is the signal.
		s.log.Warn("peer range aborted mid-body", "bucket", bucket, "key", key, "off", off, "sent", sent, "err", err)
		panic(http.ErrAbortHandler)
	}
	h.Set(hdrCRC, strconv.FormatUint(uint64(crc.Sum32()), 16))
}

// serveProbe answers Client.Probe: n zero bytes, as fast as the network
// takes them.
func (s *Server) serveProbe(w http.ResponseWriter, r *http.Request) {
	n, err := strconv.ParseInt(r.URL.Query().Get("bytes"), 10, 64)
	if err != nil || n <= 0 || n > MaxProbeBytes {
		writeError(w, fmt.Errorf("%w: a probe needs bytes=N, 0 < N <= %d", ErrBadRequest, MaxProbeBytes))
		return
	}
	w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	zeros := make([]byte, 256<<10)
	for n > 0 {
		k := min(n, int64(len(zeros)))
		if _, err := w.Write(zeros[:k]); err != nil {
			return
		}
		n -= k
	}
}

// Range asks the cachelet at addr to download n bytes of bucket/key from
// off from the store, provided the object's ETag is still etag, and
// returns them as a body of exactly n bytes. The body's Read fails (never
// returns wrong bytes) when the stream was cut short or arrived damaged:
// its CRC32C is checked against the trailer before the last byte is
// returned. Errors: store sentinels (store.ErrPreconditionFailed when the
// object changed), and store.ErrUnavailable when the peer cannot be
// reached.
func (c *Client) Range(ctx context.Context, addr, bucket, key, etag string, off, n int64) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/v1/range?"+rangeQuery(bucket, key, etag, off, n), nil)
	if err != nil {
		return nil, err
	}
	c.auth.Sign(req)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: peer %s: %v", store.ErrUnavailable, addr, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, readError(resp)
	}
	return &rangeBody{resp: resp, remaining: n, crc: crc32.New(castagnoli)}, nil
}

// rangeBody passes exactly remaining bytes and withholds the last read's
// bytes until the trailer's CRC32C matched.
type rangeBody struct {
	resp      *http.Response
	remaining int64
	crc       interface {
		io.Writer
		Sum32() uint32
	}
	err error
}

var errRangeShort = fmt.Errorf("%w: peer range ended early", store.ErrUnavailable)

func (b *rangeBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.remaining == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.remaining {
		p = p[:b.remaining]
	}
	n, err := b.resp.Body.Read(p)
	b.remaining -= int64(n)
	b.crc.Write(p[:n])
	if err != nil && !errors.Is(err, io.EOF) {
		b.err = fmt.Errorf("%w: peer range: %v", store.ErrUnavailable, err)
		return 0, b.err
	}
	if errors.Is(err, io.EOF) && b.remaining > 0 {
		b.err = errRangeShort
		return 0, b.err
	}
	if b.remaining == 0 {
		var one [1]byte
		m, err := io.ReadFull(b.resp.Body, one[:])
		switch {
		case m > 0:
			b.err = fmt.Errorf("%w: peer range longer than asked", store.ErrUnavailable)
			return 0, b.err
		case !errors.Is(err, io.EOF):
			b.err = fmt.Errorf("%w: peer range: %v", store.ErrUnavailable, err)
			return 0, b.err
		}
		if b.resp.Trailer.Get(hdrCRC) != strconv.FormatUint(uint64(b.crc.Sum32()), 16) {
			b.err = fmt.Errorf("%w: peer range arrived damaged (CRC32C)", store.ErrUnavailable)
			return 0, b.err
		}
	}
	return n, nil
}

func (b *rangeBody) Close() error { return b.resp.Body.Close() }

// Probe measures the network to the cachelet at addr: it downloads n
// zero bytes (at most MaxProbeBytes) and returns how long that took from
// the request to the last byte.
func (c *Client) Probe(ctx context.Context, addr string, n int64) (time.Duration, error) {
	if n <= 0 || n > MaxProbeBytes {
		return 0, fmt.Errorf("peer: probe of %d bytes: want 0 < n <= %d", n, MaxProbeBytes)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/v1/probe?bytes="+strconv.FormatInt(n, 10), nil)
	if err != nil {
		return 0, err
	}
	c.auth.Sign(req)
	start := time.Now()
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%w: peer %s: %v", store.ErrUnavailable, addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, readError(resp)
	}
	got, err := io.Copy(io.Discard, resp.Body)
	if err != nil || got != n {
		return 0, fmt.Errorf("%w: peer %s: probe got %d of %d bytes: %v", store.ErrUnavailable, addr, got, n, err)
	}
	return time.Since(start), nil
}
