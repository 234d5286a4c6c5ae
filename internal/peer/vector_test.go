package peer

import (
	"bytes"
	"io"
	"net"
	"testing"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/store"
)

// sawVector records whether WriteTo was handed a destination that takes
// several buffers at once.
type sawVector struct {
	r   io.Reader
	saw bool
}

func (s *sawVector) Read(p []byte) (int, error) { return s.r.Read(p) }

func (s *sawVector) WriteTo(w io.Writer) (int64, error) {
	s.saw = cache.Vector(w) != nil
	return io.Copy(w, s.r)
}

// A TCP connection is a VectorWriter, and so is what its ReadFrom hands a
// source's WriteTo (the path net/http's response takes for a body of a
// known length) once the source is a SocketBody; the entry's bytes arrive
// whole through either. A writer in memory is none.
func TestVectorOfTCP(t *testing.T) {
	const size = 2<<20 + 12345
	c, err := cache.New(cache.Config{Budget: 16 << 20, MaxObjectSize: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, size)
	for i := range want {
		want[i] = byte(i*7 + i>>16)
	}
	e := c.NewEntry(cache.Key{Bucket: "b", Object: "k"}, store.ObjectInfo{Size: size, ETag: "2.1"})
	defer e.Release()
	if _, err := e.ReadFrom(bytes.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan []byte, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer conn.Close()
		b, _ := io.ReadAll(conn)
		got <- b
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	tcp := conn.(*net.TCPConn)
	v := Vector(tcp)
	if v == nil {
		t.Fatal("a *net.TCPConn is no VectorWriter")
	}
	if _, err := e.Reader(0, 1000).(io.WriterTo).WriteTo(v); err != nil {
		t.Fatal(err)
	}
	src := &sawVector{r: e.Reader(1000, size-1000)}
	if n, err := tcp.ReadFrom(SocketBody(src)); err != nil || n != size-1000 {
		t.Fatalf("ReadFrom: %d, %v", n, err)
	}
	if !src.saw {
		t.Error("what TCPConn.ReadFrom hands a SocketBody's WriteTo is no VectorWriter")
	}
	tcp.Close()
	if b := <-got; !bytes.Equal(b, want) {
		t.Fatalf("%d bytes arrived, not the entry's %d", len(b), size)
	}
	for _, w := range []io.Writer{io.Discard, &bytes.Buffer{}} {
		if Vector(w) != nil {
			t.Errorf("%T taken for a socket", w)
		}
	}
}
