package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/redis/go-redis/v9"
)

// Getter fetches a whole object by key and returns how many bytes it read.
// One Getter is used by one goroutine at a time.
type Getter interface {
	Get(ctx context.Context, key string) (int64, error)
}

// readBufSize is the buffer the Go clients read bodies into.
const readBufSize = 256 << 10

// S3Getter GETs objects from one bucket of an S3 endpoint with minio-go's
// Core client, reading each body into a reused buffer.
type S3Getter struct {
	core   *minio.Core
	bucket string
	buf    []byte
	// Expect, when set, is the x-hoard-read header every response must
	// carry (local_hit, local_miss); a response without it fails the Get,
	// so a "warm" figure can never silently be something else.
	Expect string
}

// ConditionalGetter sends conditional GETs straight to an S3 endpoint:
// If-None-Match with the object's ETag (learned once per key, untimed in
// the warm-up), answered 304 without a body. It is what a version check
// costs the store, the least a read under version-check can cost; an
// answer other than 304 fails the Get.
type ConditionalGetter struct {
	Core   *minio.Core
	Bucket string
	etags  map[string]string
}

// Get implements Getter: 0 bytes, once the store answered 304.
func (g *ConditionalGetter) Get(ctx context.Context, key string) (int64, error) {
	etag, ok := g.etags[key]
	if !ok {
		info, err := g.Core.StatObject(ctx, g.Bucket, key, minio.StatObjectOptions{})
		if err != nil {
			return 0, err
		}
		if g.etags == nil {
			g.etags = map[string]string{}
		}
		etag = info.ETag
		g.etags[key] = etag
	}
	var opts minio.GetObjectOptions
	if err := opts.SetMatchETagExcept(etag); err != nil {
		return 0, err
	}
	body, _, _, err := g.Core.GetObject(ctx, g.Bucket, key, opts)
	if err == nil {
		body.Close()
		return 0, fmt.Errorf("bench: conditional GET %s: answered with a body, want 304", key)
	}
	if minio.ToErrorResponse(err).StatusCode != http.StatusNotModified {
		return 0, err
	}
	return 0, nil
}

// NewS3Client returns a minio-go Core client for a plain-HTTP endpoint
// ("http://host:port"), path-style, without retries.
func NewS3Client(endpoint, accessKey, secretKey, region string) (*minio.Core, error) {
	host, secure, err := splitEndpoint(endpoint)
	if err != nil {
		return nil, err
	}
	tr, err := minio.DefaultTransport(secure)
	if err != nil {
		return nil, err
	}
	tr.MaxIdleConnsPerHost = 16
	tr.DisableCompression = true
	return minio.NewCore(host, &minio.Options{
		Creds:        credentials.NewStaticV4(accessKey, secretKey, ""),
		Secure:       secure,
		Region:       region,
		BucketLookup: minio.BucketLookupPath,
		Transport:    tr,
		MaxRetries:   1,
	})
}

func splitEndpoint(endpoint string) (host string, secure bool, err error) {
	switch {
	case len(endpoint) > 7 && endpoint[:7] == "http://":
		return endpoint[7:], false, nil
	case len(endpoint) > 8 && endpoint[:8] == "https://":
		return endpoint[8:], true, nil
	}
	return "", false, fmt.Errorf("bench: endpoint %q is not an http(s) URL", endpoint)
}

// NewS3Getter reads from bucket through core.
func NewS3Getter(core *minio.Core, bucket string) *S3Getter {
	return &S3Getter{core: core, bucket: bucket, buf: make([]byte, readBufSize)}
}

// Get implements Getter.
func (g *S3Getter) Get(ctx context.Context, key string) (int64, error) {
	body, _, hdr, err := g.core.GetObject(ctx, g.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return 0, err
	}
	n, err := drain(body, g.buf)
	body.Close()
	if err != nil {
		return n, err
	}
	if g.Expect != "" {
		if got := hdr.Get("x-hoard-read"); got != g.Expect {
			return n, fmt.Errorf("bench: GET %s was served as %q, expected %q", key, got, g.Expect)
		}
	}
	return n, nil
}

// drain reads r to its end into buf and counts the bytes.
func drain(r io.Reader, buf []byte) (int64, error) {
	var n int64
	for {
		m, err := r.Read(buf)
		n += int64(m)
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// RedisGetter GETs values with go-redis. The client allocates each value.
type RedisGetter struct{ Client *redis.Client }

// Get implements Getter.
func (g RedisGetter) Get(ctx context.Context, key string) (int64, error) {
	b, err := g.Client.Get(ctx, key).Bytes()
	return int64(len(b)), err
}

// NewRedisClient connects to a Redis server at addr with timeouts fit for
// values of hundreds of MiB.
func NewRedisClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:         addr,
		ReadTimeout:  2 * time.Minute,
		WriteTimeout: 2 * time.Minute,
		PoolSize:     4,
	})
}

// TCPServer serves the ceiling baseline: on each connection, for every
// 8-byte big-endian length it reads, it writes that many bytes back.
type TCPServer struct {
	ln    net.Listener
	chunk []byte
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

// StartTCPServer listens on a free loopback port.
func StartTCPServer() (*TCPServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &TCPServer{ln: ln, chunk: make([]byte, 1<<20), conns: map[net.Conn]struct{}{}}
	for i := range s.chunk {
		s.chunk[i] = byte(i)
	}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Addr is the listener's address.
func (s *TCPServer) Addr() string { return s.ln.Addr().String() }

func (s *TCPServer) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go s.serve(c)
	}
}

func (s *TCPServer) serve(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	var hdr [8]byte
	for {
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return
		}
		n := int64(binary.BigEndian.Uint64(hdr[:]))
		for n > 0 {
			w := min(n, int64(len(s.chunk)))
			if _, err := c.Write(s.chunk[:w]); err != nil {
				return
			}
			n -= w
		}
	}
}

// Close stops the listener and every connection.
func (s *TCPServer) Close() error {
	err := s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

// TCPGetter asks a TCPServer for size bytes over one kept-open connection
// and reads them into a reused buffer. The key is ignored.
type TCPGetter struct {
	addr string
	size int64
	conn net.Conn
	buf  []byte
}

// NewTCPGetter reads size bytes per Get from the server at addr.
func NewTCPGetter(addr string, size int64) *TCPGetter {
	return &TCPGetter{addr: addr, size: size, buf: make([]byte, readBufSize)}
}

// Get implements Getter.
func (g *TCPGetter) Get(ctx context.Context, _ string) (int64, error) {
	if g.conn == nil {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", g.addr)
		if err != nil {
			return 0, err
		}
		g.conn = c
	}
	var hdr [8]byte
	binary.BigEndian.PutUint64(hdr[:], uint64(g.size))
	if _, err := g.conn.Write(hdr[:]); err != nil {
		g.Close()
		return 0, err
	}
	n, err := drain(io.LimitReader(g.conn, g.size), g.buf)
	if err == nil && n != g.size {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		g.Close()
	}
	return n, err
}

// Close drops the connection.
func (g *TCPGetter) Close() error {
	if g.conn == nil {
		return nil
	}
	err := g.conn.Close()
	g.conn = nil
	return err
}
