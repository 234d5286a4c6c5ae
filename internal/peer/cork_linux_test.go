package peer

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"syscall"
	"testing"

	"github.com/hoard-io/hoard/internal/store"
)

// Small answers are corked while they are written and sent whole: every
// size around the bounds arrives intact on kept-alive connections, and
// each connection is uncorked once its answer is done (else the next
// answer on it would wait for the kernel's cork timeout).
func TestSmallAnswersCorked(t *testing.T) {
	auth, err := NewAuth("app1", []byte(secret), nil)
	if err != nil {
		t.Fatal(err)
	}
	owner := newFakeOwner()
	srv := httptest.NewUnstartedServer(NewServer(auth, owner, nil))
	srv.Config.ConnContext = ConnContext
	var mu sync.Mutex
	var idle int
	var stuck []string
	srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		if s != http.StateIdle {
			return
		}
		v, err := corkOf(c.(*net.TCPConn))
		mu.Lock()
		defer mu.Unlock()
		idle++
		if err != nil || v != 0 {
			stuck = append(stuck, c.RemoteAddr().String())
		}
	}
	srv.Start()
	defer srv.Close()
	cl := NewClient(auth, ClientConfig{})
	defer cl.Close()
	addr := srv.Listener.Addr().String()
	ctx := context.Background()
	for _, size := range []int{100, corkFrom - 1, corkFrom, 4 << 10, 5000, corkTo - 1, corkTo, 200 << 10} {
		data := randomBytes(size)
		if _, err := cl.Put(ctx, addr, "bkt", "k", bytes.NewReader(data), int64(size), store.PutOptions{}, PersistSync); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			obj, err := cl.Get(ctx, addr, "bkt", "k", "")
			if err != nil {
				t.Fatalf("%d bytes: %v", size, err)
			}
			got, err := io.ReadAll(obj.Body)
			obj.Body.Close()
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("%d bytes: got %d, %v", size, len(got), err)
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if idle == 0 || len(stuck) > 0 {
		t.Fatalf("%d idle connections seen, corked when idle: %v", idle, stuck)
	}
}

// corkOf reads TCP_CORK of c.
func corkOf(c *net.TCPConn) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var v int
	var gerr error
	if err := rc.Control(func(fd uintptr) {
		v, gerr = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_CORK)
	}); err != nil {
		return 0, err
	}
	return v, gerr
}
