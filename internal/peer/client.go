package peer

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/hoard-io/hoard/internal/httpfetch"
	"github.com/hoard-io/hoard/internal/store"
)

// ClientConfig configures a Client.
type ClientConfig struct {
	// MaxIdleConnsPerPeer is the keep-alive pool per peer; default 64.
	MaxIdleConnsPerPeer int
	// DialTimeout bounds connecting to a peer; default 1 s. A peer that
	// cannot be reached quickly is treated as down: callers fall back to
	// the store.
	DialTimeout time.Duration
	// GetTimeout bounds the wait for an owner's answer to a fetch (its
	// headers; the body then streams). Default 2 s: an owner that is
	// alive but stuck (paused, overloaded) must not stall readers, who
	// fall back to the store after this long. A remote miss whose store
	// answers slower than this is read from the store by the reader too.
	GetTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for the answer to a write,
	// flush or invalidation once the request was sent; default 30 s (an
	// owner persisting synchronously answers after the store did).
	ResponseHeaderTimeout time.Duration
	// TLS, when set, makes the client speak the protocol over TLS
	// (https): with the platform's CA, the cachelet's own certificate
	// (mutual TLS) and the check that the peer dialled is a cachelet of
	// the same application (pki.ClientConfig with pki.AppOrPlatform).
	// Default nil: plain HTTP, the peer MACs alone authenticating. The
	// client clones it.
	TLS *tls.Config
}

// Validate checks the config and fills in the defaults.
func (c *ClientConfig) Validate() error {
	if c.MaxIdleConnsPerPeer < 0 || c.DialTimeout < 0 || c.GetTimeout < 0 || c.ResponseHeaderTimeout < 0 {
		return errors.New("peer: client pool size and timeouts must not be negative")
	}
	if c.MaxIdleConnsPerPeer == 0 {
		c.MaxIdleConnsPerPeer = 64
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = time.Second
	}
	if c.GetTimeout == 0 {
		c.GetTimeout = 2 * time.Second
	}
	if c.ResponseHeaderTimeout == 0 {
		c.ResponseHeaderTimeout = 30 * time.Second
	}
	return nil
}

// getReadBuffer is the connection read buffer of fetches (see NewClient).
const getReadBuffer = 8 << 10

// Client speaks the peer protocol to the other cachelets of one
// application. Safe for concurrent use.
type Client struct {
	auth   *Auth
	http   *http.Client // writes, flushes, invalidations
	get    *http.Client // fetches: a short wait for the answer
	tr     *http.Transport
	getT   *httpfetch.Transport
	scheme string // "http://" or "https://"
}

// NewClient returns a Client signing with auth. A config that does not
// validate (a negative timeout) gets the defaults instead: callers
// validate it first when it comes from outside.
func NewClient(auth *Auth, cfg ClientConfig) *Client {
	if cfg.Validate() != nil {
		cfg = ClientConfig{}
		_ = cfg.Validate()
	}
	d := &net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second}
	transport := func(headerTimeout time.Duration, readBuf int) *http.Transport {
		var tc *tls.Config
		if cfg.TLS != nil {
			tc = cfg.TLS.Clone()
		}
		return &http.Transport{
			TLSClientConfig:       tc,
			TLSHandshakeTimeout:   cfg.DialTimeout,
			DialContext:           d.DialContext,
			MaxIdleConnsPerHost:   cfg.MaxIdleConnsPerPeer,
			IdleConnTimeout:       90 * time.Second,
			ResponseHeaderTimeout: headerTimeout,
			DisableCompression:    true,
			WriteBufferSize:       64 << 10,
			ReadBufferSize:        readBuf,
		}
	}
	// Fetches read objects into the reader's cache entry in reads of up
	// to a chunk (cache.ChunkSize): a connection buffer smaller than that
	// lets them go straight from the socket into the entry (bufio.Reader
	// reads a large read directly once it holds nothing), where a larger
	// one would take every byte through it, a second copy. It holds the
	// answer's headers and the chunk framing. Fetches go on connections
	// of their own, answered in the caller's goroutine (httpfetch, ADR
	// 0040).
	tr := transport(cfg.ResponseHeaderTimeout, 64<<10)
	getT := httpfetch.New(httpfetch.Config{Dial: d.DialContext, TLS: cfg.TLS, DialTimeout: cfg.DialTimeout,
		HeaderTimeout: cfg.GetTimeout, MaxIdlePerHost: cfg.MaxIdleConnsPerPeer, ReadBuffer: getReadBuffer})
	scheme := "http://"
	if cfg.TLS != nil {
		scheme = "https://"
	}
	// A redirect is an answer like any other: unsigned, it is refused
	// rather than followed.
	noRedirect := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &Client{auth: auth, http: &http.Client{Transport: tr, CheckRedirect: noRedirect},
		get: &http.Client{Transport: getT, CheckRedirect: noRedirect}, tr: tr, getT: getT, scheme: scheme}
}

// do signs req, sends it with hc, and verifies the answer's signature
// (status and headers, and a body sent whole) before anything of it is
// used. Errors: store.ErrUnavailable when the peer cannot be reached,
// ErrAnswerUnauthenticated when its answer does not verify.
func (c *Client) do(hc *http.Client, req *http.Request, addr string) (*http.Response, error) {
	c.auth.Sign(req)
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: peer %s: %v", store.ErrUnavailable, addr, err)
	}
	if err := c.auth.verifyAnswer(resp, req.Header.Get(hdrSignature)); err != nil {
		return nil, fmt.Errorf("peer %s: %w", addr, err)
	}
	return resp, nil
}

// streamed checks that a verified 200 answer streams its body (followed by
// its MAC) and returns that body, verified as it is read.
func (c *Client) streamed(resp *http.Response, addr string, size int64, what string) (*verifiedBody, error) {
	if resp.Header.Get(hdrAnswerBody) != bodyStreamed {
		resp.Body.Close()
		return nil, fmt.Errorf("peer %s: %w: %s sent whole", addr, ErrAnswerUnauthenticated, what)
	}
	return newVerifiedBody(c.auth, resp, size, what), nil
}

// Close drops pooled connections.
func (c *Client) Close() {
	c.tr.CloseIdleConnections()
	c.getT.CloseIdleConnections()
}

// Get fetches a whole object from its owner at addr ("host:port"). With
// ifNoneMatch set and current, it returns store.ErrNotModified. The
// answer's status and headers are verified before Get returns; the body's
// Read fails before its last bytes (never returns a complete wrong body)
// when the body does not match the answer's signature, or arrives short
// or long. Errors: store sentinels, ErrNotOwner, ErrAnswerUnauthenticated
// (which wraps store.ErrUnavailable), and store.ErrUnavailable when the
// peer cannot be reached.
func (c *Client) Get(ctx context.Context, addr, bucket, key, ifNoneMatch string) (*Object, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.scheme+addr+objectPath(bucket, key), nil)
	if err != nil {
		return nil, err
	}
	if ifNoneMatch != "" {
		req.Header.Set("If-None-Match", `"`+ifNoneMatch+`"`)
	}
	resp, err := c.do(c.get, req, addr)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, readError(resp)
	}
	info, err := infoFromHeaders(bucket, key, resp.Header)
	if err != nil {
		resp.Body.Close()
		return nil, err
	}
	body, err := c.streamed(resp, addr, info.Size, "object")
	if err != nil {
		return nil, err
	}
	if info.Size == 0 {
		// Nothing to withhold: check the trailer now.
		if _, err := body.Read(nil); !errors.Is(err, io.EOF) {
			body.Close()
			return nil, err
		}
	}
	return &Object{Info: info, Body: body, Outcome: Outcome(resp.Header.Get(hdrRead))}, nil
}

// Put writes an object through to its owner at addr. body must hold
// exactly size bytes; it streams with a CRC32C trailer the owner checks
// before it commits anything.
func (c *Client) Put(ctx context.Context, addr, bucket, key string, body io.Reader, size int64, opts store.PutOptions, persist Persist) (store.PutResult, error) {
	cb := &crcBody{r: body, crc: crc32.New(castagnoli)}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, c.scheme+addr+objectPath(bucket, key), cb)
	if err != nil {
		return store.PutResult{}, err
	}
	req.ContentLength = -1 // chunked, so the trailer can follow
	req.Trailer = http.Header{hdrCRC: nil}
	cb.req = req
	info := store.ObjectInfo{
		Size: size, ContentType: opts.ContentType, ContentEncoding: opts.ContentEncoding,
		ContentDisposition: opts.ContentDisposition, ContentLanguage: opts.ContentLanguage,
		CacheControl: opts.CacheControl, Expires: opts.Expires, UserMetadata: opts.UserMetadata,
	}
	if opts.ChecksumAlgorithm != "" && opts.ChecksumValue != "" {
		// The whole object's checksum, which the owner hands on to the
		// store (that verifies it) and reports with its copy.
		info.Checksums = map[string]string{opts.ChecksumAlgorithm: opts.ChecksumValue}
	}
	setInfoHeaders(req.Header, info)
	req.Header.Del("ETag")
	req.Header.Set(hdrPersist, string(persist))
	resp, err := c.do(c.http, req, addr)
	if err != nil {
		if cb.err != nil {
			return store.PutResult{}, cb.err
		}
		return store.PutResult{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return store.PutResult{}, readError(resp)
	}
	return store.PutResult{ETag: trimQuotes(resp.Header.Get("ETag"))}, nil
}

// Invalidate asks the peer at addr to drop its copies of keys.
func (c *Client) Invalidate(ctx context.Context, addr string, keys []Key) error {
	data, err := json.Marshal(keys)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.scheme+addr+"/v1/invalidate", bytes.NewReader(data))
	if err != nil {
		return err
	}
	resp, err := c.do(c.http, req, addr)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return readError(resp)
	}
	return nil
}

// Flush asks the peer at addr to persist everything it has queued, once it
// has seen membership revision (when positive).
func (c *Client) Flush(ctx context.Context, addr string, revision int64) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.scheme+addr+"/v1/flush", nil)
	if err != nil {
		return err
	}
	if revision > 0 {
		req.Header.Set(hdrRevision, strconv.FormatInt(revision, 10))
	}
	resp, err := c.do(c.http, req, addr)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return readError(resp)
	}
	return nil
}

// crcBody computes the CRC32C of what it passes and sets it as the
// request's trailer at EOF.
type crcBody struct {
	r   io.Reader
	req *http.Request
	crc interface {
		io.Writer
		Sum32() uint32
	}
	err error
}

func (b *crcBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.crc.Write(p[:n])
	if err == io.EOF {
		b.req.Trailer.Set(hdrCRC, strconv.FormatUint(uint64(b.crc.Sum32()), 16))
	} else if err != nil {
		b.err = err
	}
	return n, err
}

func trimQuotes(s string) string {
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		return s[1 : len(s)-1]
	}
	return s
}
