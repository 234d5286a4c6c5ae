package peer

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"hash/crc32"
	"io"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"

	"github.com/hoard-io/hoard/internal/onewrite"
	"github.com/hoard-io/hoard/internal/store"
)

// bodyOwner serves one object whose body body makes for each fetch.
type bodyOwner struct {
	fakeOwner
	info store.ObjectInfo
	body func() io.ReadCloser
	fill func(*Object) // when set, completes each answer's Object
}

func (o *bodyOwner) PeerGet(context.Context, string, string, string) (*Object, error) {
	obj := &Object{Info: o.info, Body: o.body(), Outcome: RemoteHit}
	if o.fill != nil {
		o.fill(obj)
	}
	return obj, nil
}

func bodyPair(t *testing.T, o *bodyOwner, tlsOn bool) (*Client, string) {
	t.Helper()
	auth, _ := NewAuth("app1", []byte(secret), nil)
	srv := httptest.NewUnstartedServer(NewServer(auth, o, nil))
	srv.Listener = onewrite.Listen(srv.Listener)
	srv.Config.ConnContext = onewrite.ConnContext
	var cfg ClientConfig
	if tlsOn {
		srvTLS, cliTLS := mutualTLS(t, "app1")
		srv.Listener = tls.NewListener(srv.Listener, srvTLS)
		cfg.TLS = cliTLS
	}
	srv.Start()
	t.Cleanup(srv.Close)
	cl := NewClient(auth, cfg)
	t.Cleanup(cl.Close)
	return cl, srv.Listener.Addr().String()
}

// spans is a body held in separate buffers (as a cache entry holds its
// chunks) that is meant to be written from where it lies: its WriteTo
// writes each buffer; a Read is recorded.
type spans struct {
	mu     sync.Mutex
	bufs   [][]byte
	reads  int
	writes []int
}

func (s *spans) Read(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	for len(s.bufs) > 0 && len(s.bufs[0]) == 0 {
		s.bufs = s.bufs[1:]
	}
	if len(s.bufs) == 0 {
		return 0, io.EOF
	}
	n := copy(p, s.bufs[0])
	s.bufs[0] = s.bufs[0][n:]
	return n, nil
}

func (s *spans) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for len(s.bufs) > 0 {
		b := s.bufs[0]
		s.bufs = s.bufs[1:]
		n, err := w.Write(b)
		total += int64(n)
		s.mu.Lock()
		s.writes = append(s.writes, n)
		s.mu.Unlock()
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

func (s *spans) Close() error { return nil }

func split(data []byte, size int) [][]byte {
	var out [][]byte
	for len(data) > 0 {
		n := min(size, len(data))
		out = append(out, data[:n])
		data = data[n:]
	}
	return out
}

// TestLargeBodyWrittenFromWhereItLies: the owner writes a large object's
// buffers to the connection as they are (the body's WriteTo, a buffer a
// write), never reading it through a buffer of its own, over plain TCP
// and over TLS; the peer gets every byte, verified.
func TestLargeBodyWrittenFromWhereItLies(t *testing.T) {
	for _, tlsOn := range []bool{false, true} {
		data := randomBytes(3<<20 + 12345)
		var last *spans
		o := &bodyOwner{fakeOwner: *newFakeOwner(), info: store.ObjectInfo{ETag: "e", Size: int64(len(data))}}
		o.body = func() io.ReadCloser {
			last = &spans{bufs: split(data, 64<<10)}
			return last
		}
		cl, addr := bodyPair(t, o, tlsOn)
		obj, err := cl.Get(context.Background(), addr, "bkt", "k", "")
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(obj.Body)
		obj.Body.Close()
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("tls %v: %d of %d bytes, %v", tlsOn, len(got), len(data), err)
		}
		if last.reads != 0 || len(last.writes) != len(split(data, 64<<10)) {
			t.Fatalf("tls %v: body read %d times, written in %d writes (want %d, none read)", tlsOn, last.reads, len(last.writes), len(split(data, 64<<10)))
		}
	}
}

// cutBody gives n bytes, then fails.
type cutBody struct {
	data []byte
}

func (c *cutBody) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, errors.New("the owner's fill failed")
	}
	n := copy(p, c.data)
	c.data = c.data[n:]
	return n, nil
}

func (c *cutBody) Close() error { return nil }

// TestAnswerCutMidBody: an owner whose body fails half-way (its own fill
// aborted) cuts the answer; the peer's read fails before the body's end,
// with store.ErrUnavailable, large or small.
func TestAnswerCutMidBody(t *testing.T) {
	for _, size := range []int{4 << 10, 2 << 20} {
		data := randomBytes(size)
		o := &bodyOwner{fakeOwner: *newFakeOwner(), info: store.ObjectInfo{ETag: "e", Size: int64(size)}}
		o.body = func() io.ReadCloser { return &cutBody{data: data[:size/2]} }
		cl, addr := bodyPair(t, o, false)
		obj, err := cl.Get(context.Background(), addr, "bkt", "k", "")
		if err != nil {
			// The headers went out with the first bytes; a small body
			// may fail before them too: a miss either way.
			if !errors.Is(err, store.ErrUnavailable) {
				t.Fatalf("%d: Get: %v", size, err)
			}
			continue
		}
		got, err := io.ReadAll(obj.Body)
		obj.Body.Close()
		if !errors.Is(err, store.ErrUnavailable) || len(got) >= size {
			t.Fatalf("%d: cut answer read as %d bytes, %v", size, len(got), err)
		}
	}
}

// TestKnownBodyCRC: an owner that knows its body's CRC32C has it signed
// without a pass over the body (a wrong one makes the answer fail at the
// reader, never pass); one that does not is told the CRC the server
// computed, once the whole body went out.
func TestKnownBodyCRC(t *testing.T) {
	data := randomBytes(300 << 10)
	crc := crc32.Checksum(data, castagnoli)
	for _, tc := range []struct {
		name  string
		known bool
		value uint32
		ok    bool
	}{
		{"known", true, crc, true},
		{"known wrong", true, crc ^ 1, false},
		{"computed", false, 0, true},
	} {
		var (
			mu       sync.Mutex
			digested []uint32
		)
		o := &bodyOwner{fakeOwner: *newFakeOwner(), info: store.ObjectInfo{ETag: "e", Size: int64(len(data))}}
		o.body = func() io.ReadCloser { return io.NopCloser(bytes.NewReader(data)) }
		o.fill = func(obj *Object) {
			obj.KnownCRC32C, obj.HasCRC32C = tc.value, tc.known
			obj.Digested = func(c uint32) {
				mu.Lock()
				digested = append(digested, c)
				mu.Unlock()
			}
		}
		cl, addr := bodyPair(t, o, false)
		obj, err := cl.Get(context.Background(), addr, "bkt", "k", "")
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(obj.Body)
		obj.Body.Close()
		if tc.ok != (err == nil && bytes.Equal(got, data)) || (!tc.ok && !errors.Is(err, ErrAnswerUnauthenticated)) {
			t.Fatalf("%s: %d bytes, %v", tc.name, len(got), err)
		}
		mu.Lock()
		defer mu.Unlock()
		if tc.known && len(digested) != 0 || !tc.known && !slices.Equal(digested, []uint32{crc}) {
			t.Fatalf("%s: owner told %x (CRC %x)", tc.name, digested, crc)
		}
	}
}
