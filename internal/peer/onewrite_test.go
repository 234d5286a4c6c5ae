package peer

import (
	"bytes"
	"context"
	"io"
	"net/http/httptest"
	"testing"

	"github.com/hoard-io/hoard/internal/onewrite"
	"github.com/hoard-io/hoard/internal/onewrite/onewritetest"
	"github.com/hoard-io/hoard/internal/store"
)

// A small answer (a body of onewrite.From to onewrite.To bytes, its
// headers and its MAC) leaves the owner in one write; every size around
// the bounds arrives intact on kept-alive connections, and answers
// outside them are sent as written.
func TestSmallAnswersInOneWrite(t *testing.T) {
	auth, err := NewAuth("app1", []byte(secret), nil)
	if err != nil {
		t.Fatal(err)
	}
	owner := newFakeOwner()
	srv := httptest.NewUnstartedServer(NewServer(auth, owner, nil))
	counter := onewritetest.NewCounter(srv.Listener)
	srv.Listener = onewrite.Listen(counter)
	srv.Config.ConnContext = onewrite.ConnContext
	srv.Start()
	defer srv.Close()
	cl := NewClient(auth, ClientConfig{})
	defer cl.Close()
	addr := srv.Listener.Addr().String()
	ctx := context.Background()
	for _, size := range []int{100, onewrite.From - 1, onewrite.From, 4 << 10, 5000, onewrite.To - 1, onewrite.To, 200 << 10} {
		data := randomBytes(size)
		if _, err := cl.Put(ctx, addr, "bkt", "k", bytes.NewReader(data), int64(size), store.PutOptions{}, PersistSync); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			before := counter.Writes()
			obj, err := cl.Get(ctx, addr, "bkt", "k", "")
			if err != nil {
				t.Fatalf("%d bytes: %v", size, err)
			}
			got, err := io.ReadAll(obj.Body)
			obj.Body.Close()
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("%d bytes: got %d, %v", size, len(got), err)
			}
			w := counter.Writes() - before
			switch held := size >= onewrite.From && size < onewrite.To; {
			case held && w != 1:
				t.Errorf("%d bytes: the answer took %d writes, want 1", size, w)
			case !held && size > 8<<10 && w < 2:
				t.Errorf("%d bytes: %d writes, not held it takes several", size, w)
			}
		}
	}
}
