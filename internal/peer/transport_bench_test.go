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
	"testing"

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
// the signed answer, and the body's SHA-256 and its MAC at both ends;
// https is the same over mutual TLS 1.3 (ADR 0017), the handshake made
// once and the connection kept alive.
func BenchmarkTransport(b *testing.B) {
	srvTLS, cliTLS := mutualTLS(b, "app1")
	for _, size := range []int{4 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20} {
		owner := newFakeOwner()
		data := randomBytes(size)
		owner.objects["bkt/k"] = stored{info: store.ObjectInfo{ETag: "e", Size: int64(size)}, data: data}
		b.Run(fmt.Sprintf("http/%s", sizeName(size)), func(b *testing.B) { benchHTTP(b, owner, size, nil, nil) })
		b.Run(fmt.Sprintf("https/%s", sizeName(size)), func(b *testing.B) { benchHTTP(b, owner, size, srvTLS, cliTLS) })
		b.Run(fmt.Sprintf("rawtcp/%s", sizeName(size)), func(b *testing.B) { benchRawTCP(b, owner, size) })
	}
}

func sizeName(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%dKiB", n>>10)
}

func benchHTTP(b *testing.B, owner *fakeOwner, size int, srvTLS, cliTLS *tls.Config) {
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
	buf := make([]byte, 256<<10)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	for b.Loop() {
		obj, err := cl.Get(context.Background(), addr, "bkt", "k", "")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{obj.Body}, buf); err != nil {
			b.Fatal(err)
		}
		obj.Body.Close()
	}
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
