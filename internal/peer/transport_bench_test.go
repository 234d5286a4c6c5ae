package peer

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/store"
)

// The transport benchmarks measure what the design doc argues: the peer
// protocol's HTTP/1.1 against the leanest alternative, a raw TCP framing
// (a length-prefixed key, a length-prefixed body, one kept-alive
// connection, no signature), serving the same in-memory objects in the
// same run:
//
//	go test -run XXX -bench Transport ./internal/peer
//
// The HTTP side includes everything the protocol does: the signed request,
// the signed answer, and the body's CRC32C and its MAC at both ends;
// http-chunks serves the object from 64 KiB chunks, as a cache entry
// holds large objects; the client reads as a fill does, a chunk at a time;
// https is the same over mutual TLS 1.3 (ADR 0017), the handshake made
// once and the connection kept alive.
func BenchmarkTransport(b *testing.B) {
	srvTLS, cliTLS := mutualTLS(b, "app1")
	for _, size := range []int{4 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20} {
		owner := newFakeOwner()
		data := randomBytes(size)
		owner.objects["bkt/k"] = stored{info: store.ObjectInfo{ETag: "e", Size: int64(size)}, data: data}
		chunked := chunkOwner{owner}
		b.Run(fmt.Sprintf("http/%s", sizeName(size)), func(b *testing.B) { benchHTTP(b, owner, size, nil, nil) })
		b.Run(fmt.Sprintf("http-chunks/%s", sizeName(size)), func(b *testing.B) { benchHTTP(b, chunked, size, nil, nil) })
		b.Run(fmt.Sprintf("https/%s", sizeName(size)), func(b *testing.B) { benchHTTP(b, owner, size, srvTLS, cliTLS) })
		b.Run(fmt.Sprintf("rawtcp/%s", sizeName(size)), func(b *testing.B) { benchRawTCP(b, owner, size) })
	}
}

// chunkOwner serves its objects as a cache entry holds large ones: in
// 64 KiB chunks, written to the connection a chunk a write (WriteTo), as
// cache's entry readers do.
type chunkOwner struct{ *fakeOwner }

func (o chunkOwner) PeerGet(ctx context.Context, bucket, key, inm string) (*Object, error) {
	obj, err := o.fakeOwner.PeerGet(ctx, bucket, key, inm)
	if err != nil {
		return nil, err
	}
	data, _ := o.get(bucket, key)
	obj.Body = &chunkBody{bufs: splitChunks(data, 64<<10)}
	return obj, nil
}

type chunkBody struct{ bufs [][]byte }

func (c *chunkBody) Read(p []byte) (int, error) {
	for len(c.bufs) > 0 && len(c.bufs[0]) == 0 {
		c.bufs = c.bufs[1:]
	}
	if len(c.bufs) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.bufs[0])
	c.bufs[0] = c.bufs[0][n:]
	return n, nil
}

func (c *chunkBody) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for ; len(c.bufs) > 0; c.bufs = c.bufs[1:] {
		n, err := w.Write(c.bufs[0])
		total += int64(n)
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

func (c *chunkBody) Close() error { return nil }

func splitChunks(data []byte, size int) [][]byte {
	var out [][]byte
	for len(data) > 0 {
		n := min(size, len(data))
		out = append(out, data[:n])
		data = data[n:]
	}
	return out
}

func sizeName(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%dKiB", n>>10)
}

// cpuTime is the CPU time (user and system) the process used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the process's CPU time per op since start: on a
// shared machine it varies less than the wall time, the owner's and the
// reader's work both counted (they run in this process).
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64((cpuTime()-start).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// benchHTTP fetches the object as a reader's fill does: reads of up to a
// chunk (64 KiB) into its own memory.
func benchHTTP(b *testing.B, owner Owner, size int, srvTLS, cliTLS *tls.Config) {
	auth, _ := NewAuth("app1", []byte(secret), nil)
	srv := httptest.NewUnstartedServer(NewServer(auth, owner, nil))
	if srvTLS != nil {
		srv.Listener = tls.NewListener(srv.Listener, srvTLS) // not StartTLS, which adds a certificate of its own
	}
	srv.Start()
	defer srv.Close()
	cl := NewClient(auth, ClientConfig{TLS: cliTLS})
	defer cl.Close()
	addr := srv.Listener.Addr().String()
	buf := make([]byte, 64<<10)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	start := cpuTime()
	for b.Loop() {
		obj, err := cl.Get(context.Background(), addr, "bkt", "k", "")
		if err != nil {
			b.Fatal(err)
		}
		for left := size; left > 0; {
			n, err := io.ReadFull(obj.Body, buf[:min(left, len(buf))])
			left -= n
			if err != nil {
				b.Fatal(err)
			}
		}
		if n, err := obj.Body.Read(buf); n != 0 || err != io.EOF {
			b.Fatalf("after the body: %d, %v", n, err)
		}
		obj.Body.Close()
	}
	reportCPU(b, start)
}

// benchRawTCP serves the same objects over the minimal framing.
func benchRawTCP(b *testing.B, owner *fakeOwner, size int) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serveRaw(c, owner)
		}
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReaderSize(conn, 64<<10)
	buf := make([]byte, 256<<10)
	key := []byte("bkt/k")
	b.SetBytes(int64(size))
	b.ReportAllocs()
	start := cpuTime()
	defer func() { reportCPU(b, start) }()
	for b.Loop() {
		var hdr [4]byte
		binary.BigEndian.PutUint32(hdr[:], uint32(len(key)))
		if _, err := conn.Write(append(hdr[:], key...)); err != nil {
			b.Fatal(err)
		}
		var n [8]byte
		if _, err := io.ReadFull(br, n[:]); err != nil {
			b.Fatal(err)
		}
		if _, err := io.CopyBuffer(io.Discard, io.LimitReader(br, int64(binary.BigEndian.Uint64(n[:]))), buf); err != nil {
			b.Fatal(err)
		}
	}
}

func serveRaw(c net.Conn, owner *fakeOwner) {
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		var hdr [4]byte
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return
		}
		key := make([]byte, binary.BigEndian.Uint32(hdr[:]))
		if _, err := io.ReadFull(br, key); err != nil {
			return
		}
		bucket, k, _ := strings.Cut(string(key), "/")
		obj, err := owner.PeerGet(context.Background(), bucket, k, "")
		if err != nil {
			return
		}
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(obj.Info.Size))
		if _, err := c.Write(n[:]); err != nil {
			return
		}
		if _, err := io.Copy(c, obj.Body); err != nil {
			return
		}
	}
}
