package peer

import (
	"context"
	"fmt"
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

// serveRange answers Client.Range: the range's bytes, streamed with the
// body MAC trailer the client checks.
func (s *Server) serveRange(a answer, r *http.Request) {
	rg, ok := s.owner.(Ranger)
	if !ok {
		a.error(fmt.Errorf("%w: this cachelet does not serve ranges", ErrBadRequest))
		return
	}
	q := r.URL.Query()
	bucket, key, etag := q.Get("bucket"), q.Get("key"), q.Get("etag")
	off, err1 := strconv.ParseInt(q.Get("off"), 10, 64)
	n, err2 := strconv.ParseInt(q.Get("n"), 10, 64)
	if bucket == "" || key == "" || etag == "" || err1 != nil || err2 != nil || off < 0 || n <= 0 {
		a.error(fmt.Errorf("%w: a range needs bucket, key, etag, off >= 0 and n > 0", ErrBadRequest))
		return
	}
	body, err := rg.PeerRange(r.Context(), bucket, key, etag, off, n)
	if err != nil {
		a.error(err)
		return
	}
	defer body.Close()
	a.w.Header().Set("Content-Type", "application/octet-stream")
	sw := a.stream(n)
	sent, err := sw.copyFrom(io.LimitReader(body, n))
	if err == nil && sent != n {
		err = fmt.Errorf("store sent %d of %d bytes", sent, n)
	}
	if err == nil {
		_, err = sw.finish()
	}
	if err != nil {
		// Headers are out: a missing trailer is the signal.
		s.log.Warn("peer range aborted mid-body", "bucket", bucket, "key", key, "off", off, "sent", sent, "err", err)
		panic(http.ErrAbortHandler)
	}
	sw.finish()
}

// serveProbe answers Client.Probe: n zero bytes, as fast as the network
// takes them.
func (s *Server) serveProbe(a answer, r *http.Request) {
	n, err := strconv.ParseInt(r.URL.Query().Get("bytes"), 10, 64)
	if err != nil || n <= 0 || n > MaxProbeBytes {
		a.error(fmt.Errorf("%w: a probe needs bytes=N, 0 < N <= %d", ErrBadRequest, MaxProbeBytes))
		return
	}
	a.w.Header().Set("Content-Type", "application/octet-stream")
	sw := a.stream(n)
	zeros := make([]byte, 256<<10)
	for n > 0 {
		k := min(n, int64(len(zeros)))
		if _, err := sw.Write(zeros[:k]); err != nil {
			return
		}
		n -= k
	}
	_, _ = sw.finish()
}

// Range asks the cachelet at addr to download n bytes of bucket/key from
// off from the store, provided the object's ETag is still etag, and
// returns them as a body of exactly n bytes. The body's Read fails (never
// returns the whole of wrong bytes) when the stream was cut short, arrived
// damaged or does not match the answer's signature: the MAC that follows it
// is checked before the last bytes are returned. Errors: store sentinels (store.ErrPreconditionFailed when the
// object changed), and store.ErrUnavailable when the peer cannot be
// reached.
func (c *Client) Range(ctx context.Context, addr, bucket, key, etag string, off, n int64) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.scheme+addr+"/v1/range?"+rangeQuery(bucket, key, etag, off, n), nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.do(c.http, req, addr)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, readError(resp)
	}
	return c.streamed(resp, addr, n, "range")
}

// Probe measures the network to the cachelet at addr: it downloads n
// zero bytes (at most MaxProbeBytes) and returns how long that took from
// the request to the last byte.
func (c *Client) Probe(ctx context.Context, addr string, n int64) (time.Duration, error) {
	if n <= 0 || n > MaxProbeBytes {
		return 0, fmt.Errorf("peer: probe of %d bytes: want 0 < n <= %d", n, MaxProbeBytes)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.scheme+addr+"/v1/probe?bytes="+strconv.FormatInt(n, 10), nil)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	resp, err := c.do(c.http, req, addr)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, readError(resp)
	}
	body, err := c.streamed(resp, addr, n, "probe")
	if err != nil {
		return 0, err
	}
	got, err := io.Copy(io.Discard, body)
	if err != nil || got != n {
		return 0, fmt.Errorf("%w: peer %s: probe got %d of %d bytes: %v", store.ErrUnavailable, addr, got, n, err)
	}
	return time.Since(start), nil
}
