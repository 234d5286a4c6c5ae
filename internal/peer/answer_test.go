package peer

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/hoard-io/hoard/internal/store"
)

// recorded is a peer's answer as an on-path attacker holds it.
type recorded struct {
	status  int
	header  http.Header
	body    []byte
	trailer http.Header
}

// relay sends r on to the peer at target and returns its whole answer.
func relay(t *testing.T, target string, r *http.Request) recorded {
	t.Helper()
	out, _ := http.NewRequest(r.Method, target+r.URL.RequestURI(), r.Body)
	out.Header = r.Header.Clone()
	if r.ContentLength >= 0 {
		out.ContentLength = r.ContentLength
	}
	resp, err := http.DefaultTransport.RoundTrip(out)
	if err != nil {
		t.Errorf("relay: %v", err)
		return recorded{status: http.StatusBadGateway, header: http.Header{}}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return recorded{status: resp.StatusCode, header: resp.Header.Clone(), body: body, trailer: resp.Trailer.Clone()}
}

// write sends a recorded answer, trailers included.
func (a recorded) write(w http.ResponseWriter) {
	h := w.Header()
	for k, v := range a.header {
		if k != "Content-Length" {
			h[k] = v
		}
	}
	var names []string
	for k := range a.trailer {
		names = append(names, k)
	}
	if len(names) > 0 {
		h.Set("Trailer", strings.Join(names, ", "))
	}
	w.WriteHeader(a.status)
	_, _ = w.Write(a.body)
	for k, v := range a.trailer {
		h[k] = v
	}
}

// onPath starts a server between the client and a real peer server that
// lets change rewrite each answer.
func onPath(t *testing.T, change func(*recorded)) (*Client, *fakeOwner, string) {
	t.Helper()
	cl, owner, real := newPair(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := relay(t, "http://"+real, r)
		change(&a)
		a.write(w)
	}))
	t.Cleanup(srv.Close)
	return cl, owner, strings.TrimPrefix(srv.URL, "http://")
}

func putObject(owner *fakeOwner, key string, data []byte) {
	owner.mu.Lock()
	owner.objects["bkt/"+key] = stored{info: store.ObjectInfo{Bucket: "bkt", Key: key, Size: int64(len(data)), ETag: "etag-" + key,
		ContentType: "text/plain", UserMetadata: map[string]string{"color": "blue"}}, data: data}
	owner.mu.Unlock()
}

// TestAnswerThroughARelay: an on-path relay that changes nothing changes
// nothing: answers verify end to end.
func TestAnswerThroughARelay(t *testing.T) {
	cl, owner, addr := onPath(t, func(*recorded) {})
	data := randomBytes(300 << 10)
	putObject(owner, "k", data)
	obj, err := cl.Get(context.Background(), addr, "bkt", "k", "")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(obj.Body)
	obj.Body.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("%d bytes, %v", len(got), err)
	}
	if _, err := cl.Get(context.Background(), addr, "bkt", "missing", ""); !errors.Is(err, store.ErrNoSuchKey) {
		t.Fatalf("missing key through the relay: %v", err)
	}
}

// TestTamperedAnswersRefused: whatever part of an answer is changed on the
// way, the client refuses it: headers and status before Get returns, the
// body before its last bytes.
func TestTamperedAnswersRefused(t *testing.T) {
	data := randomBytes(300 << 10)
	for _, tc := range []struct {
		name   string
		key    string
		change func(*recorded)
		body   bool // refused while reading the body rather than by Get
	}{
		{"status of an error", "missing", func(a *recorded) { a.status = http.StatusPreconditionFailed }, false},
		{"error turned into not-modified", "missing", func(a *recorded) { a.status, a.body = http.StatusNotModified, nil }, false},
		{"etag", "k", func(a *recorded) { a.header.Set("ETag", `"forged"`) }, false},
		{"size", "k", func(a *recorded) { a.header.Set(hdrSize, "10") }, false},
		{"content type", "k", func(a *recorded) { a.header.Set("Content-Type", "text/html") }, false},
		{"metadata added", "k", func(a *recorded) { a.header.Set("X-Amz-Meta-Evil", "1") }, false},
		{"checksum added", "k", func(a *recorded) { a.header.Set("X-Amz-Checksum-Crc32c", "AAAAAA==") }, false},
		{"outcome", "k", func(a *recorded) { a.header.Set(hdrRead, string(RemoteMiss)) }, false},
		{"signature removed", "k", func(a *recorded) { a.header.Del(hdrAnswer) }, false},
		{"one body byte", "k", func(a *recorded) { a.body[len(a.body)/2] ^= 1 }, true},
		{"last body byte", "k", func(a *recorded) { a.body[len(a.body)-1] ^= 1 }, true},
		{"body truncated", "k", func(a *recorded) { a.body = a.body[:len(a.body)-1] }, true},
		{"body extended", "k", func(a *recorded) { a.body = append(a.body, 'x') }, true},
		{"body MAC changed", "k", func(a *recorded) { copy(a.body[len(a.body)-bodyMACLen:], strings.Repeat("0", bodyMACLen)) }, true},
		{"body MAC removed", "k", func(a *recorded) { a.body = a.body[:len(a.body)-bodyMACLen] }, true},
		{"body MAC only", "k", func(a *recorded) { a.body = a.body[len(a.body)-bodyMACLen:] }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, owner, addr := onPath(t, tc.change)
			putObject(owner, "k", data)
			obj, err := cl.Get(context.Background(), addr, "bkt", tc.key, "")
			if !tc.body {
				if !errors.Is(err, ErrAnswerUnauthenticated) || !errors.Is(err, store.ErrUnavailable) {
					t.Fatalf("Get: %v, want ErrAnswerUnauthenticated", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Get: %v", err)
			}
			defer obj.Body.Close()
			got, err := io.ReadAll(obj.Body)
			if err == nil || !errors.Is(err, store.ErrUnavailable) {
				t.Fatalf("body read to the end without error (%d bytes)", len(got))
			}
			if len(got) >= len(data) {
				t.Fatalf("a refused body gave all %d bytes", len(got))
			}
		})
	}
}

// TestReplayedAnswerRefused: an answer recorded for one request and
// replayed to another fails, though it is the peer's own signed answer.
func TestReplayedAnswerRefused(t *testing.T) {
	var mu sync.Mutex
	var first *recorded
	cl, owner, addr := onPath(t, func(a *recorded) {
		mu.Lock()
		defer mu.Unlock()
		if first == nil {
			c := *a
			c.body = bytes.Clone(a.body)
			first = &c
			return
		}
		*a = *first
	})
	old, cur := randomBytes(100<<10), randomBytes(100<<10)
	putObject(owner, "k", old)
	ctx := context.Background()
	obj, err := cl.Get(ctx, addr, "bkt", "k", "")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(obj.Body); err != nil || !bytes.Equal(got, old) {
		t.Fatalf("first read: %d bytes, %v", len(got), err)
	}
	obj.Body.Close()
	putObject(owner, "k", cur) // the object changes; the attacker replays the old answer
	if _, err := cl.Get(ctx, addr, "bkt", "k", ""); !errors.Is(err, ErrAnswerUnauthenticated) {
		t.Fatalf("replayed answer: %v", err)
	}
	// A replayed not-modified answer cannot confirm a stale copy either.
	mu.Lock()
	first = nil
	mu.Unlock()
	if _, err := cl.Get(ctx, addr, "bkt", "k", "etag-k"); !errors.Is(err, store.ErrNotModified) {
		t.Fatalf("conditional get: %v", err)
	}
	if _, err := cl.Get(ctx, addr, "bkt", "k", "etag-k"); !errors.Is(err, ErrAnswerUnauthenticated) {
		t.Fatalf("replayed 304: %v", err)
	}
}

// rogue answers every fetch with bytes of its own and the object's real
// headers, signing with whatever secret it has (none: unsigned).
func rogue(t *testing.T, secret string, data []byte) string {
	t.Helper()
	var auth *Auth
	if secret != "" {
		auth, _ = NewAuth("app1", []byte(secret), nil)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		setInfoHeaders(w.Header(), store.ObjectInfo{ETag: "etag-k", Size: int64(len(data))})
		w.Header().Set(hdrRead, string(RemoteHit))
		if auth == nil {
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write(data)
			return
		}
		sw := answer{w: w, auth: auth, reqSig: r.Header.Get(hdrSignature)}.stream(int64(len(data)))
		_, _ = sw.Write(data)
		_, _ = sw.finish()
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// TestAnswerFromAServerWithoutTheSecret: a member that never knew the
// application's secret cannot answer, whether it signs with another secret
// or not at all; every kind of request is refused.
func TestAnswerFromAServerWithoutTheSecret(t *testing.T) {
	auth, _ := NewAuth("app1", []byte(secret), nil)
	cl := NewClient(auth, ClientConfig{})
	defer cl.Close()
	ctx := context.Background()
	for _, s := range []string{"", "another-secret-0123456789"} {
		addr := rogue(t, s, []byte("the attacker's bytes"))
		if _, err := cl.Get(ctx, addr, "bkt", "k", ""); !errors.Is(err, ErrAnswerUnauthenticated) {
			t.Errorf("secret %q: Get: %v", s, err)
		}
		if _, err := cl.Range(ctx, addr, "bkt", "k", "etag-k", 0, 4); !errors.Is(err, ErrAnswerUnauthenticated) {
			t.Errorf("secret %q: Range: %v", s, err)
		}
		if _, err := cl.Put(ctx, addr, "bkt", "k", strings.NewReader("x"), 1, store.PutOptions{}, PersistSync); !errors.Is(err, ErrAnswerUnauthenticated) {
			t.Errorf("secret %q: Put: %v", s, err)
		}
		if err := cl.Invalidate(ctx, addr, []Key{{"bkt", "k"}}); !errors.Is(err, ErrAnswerUnauthenticated) {
			t.Errorf("secret %q: Invalidate: %v", s, err)
		}
		if err := cl.Flush(ctx, addr, 0); !errors.Is(err, ErrAnswerUnauthenticated) {
			t.Errorf("secret %q: Flush: %v", s, err)
		}
		if _, err := cl.Probe(ctx, addr, 1<<10); !errors.Is(err, ErrAnswerUnauthenticated) {
			t.Errorf("secret %q: Probe: %v", s, err)
		}
	}
}

// TestTamperedAcksAndRanges: acknowledgements and ranges are signed too.
func TestTamperedAcksAndRanges(t *testing.T) {
	ctx := context.Background()
	t.Run("put ack etag", func(t *testing.T) {
		cl, _, addr := onPath(t, func(a *recorded) { a.header.Set("ETag", `"forged"`) })
		if _, err := cl.Put(ctx, addr, "bkt", "k", strings.NewReader("x"), 1, store.PutOptions{}, PersistSync); !errors.Is(err, ErrAnswerUnauthenticated) {
			t.Fatalf("Put: %v", err)
		}
	})
	t.Run("flush refused turned into done", func(t *testing.T) {
		cl, _, addr := onPath(t, func(a *recorded) {
			a.status, a.body = http.StatusNoContent, nil
		})
		// A bad request (unknown path) answered 400, rewritten as 204.
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/nothing", nil)
		if _, err := cl.do(cl.http, req, addr); !errors.Is(err, ErrAnswerUnauthenticated) {
			t.Fatalf("rewritten status: %v", err)
		}
	})
	t.Run("range body", func(t *testing.T) {
		cl, owner, addr := onPath(t, func(a *recorded) {
			if len(a.body) > 0 {
				a.body[0] ^= 0xff
			}
		})
		data := randomBytes(1 << 20)
		putObject(owner, "k", data)
		body, err := cl.Range(ctx, addr, "bkt", "k", "etag-k", 0, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		defer body.Close()
		got, err := io.ReadAll(body)
		if !errors.Is(err, ErrAnswerUnauthenticated) || len(got) == len(data) {
			t.Fatalf("tampered range: %d bytes, %v", len(got), err)
		}
	})
}

// TestEmptyObjectAnswer: an empty body's signature is checked by Get
// itself, there being no last byte to withhold.
func TestEmptyObjectAnswer(t *testing.T) {
	cl, owner, addr := onPath(t, func(a *recorded) {
		if a.status == http.StatusOK {
			a.body = nil // the MAC that follows the empty body
		}
	})
	putObject(owner, "empty", nil)
	if _, err := cl.Get(context.Background(), addr, "bkt", "empty", ""); !errors.Is(err, ErrAnswerUnauthenticated) {
		t.Fatalf("empty object without its MAC: %v", err)
	}
}

// TestMACAllocations keeps a request's signature and an answer's MAC to
// the one string each returns.
func TestMACAllocations(t *testing.T) {
	a, err := NewAuth("app", []byte("0123456789abcdef0123456789abcdef"), nil)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, "http://peer/v1/objects/b/k", nil)
	a.Sign(req)
	h := http.Header{}
	h.Set("Content-Type", "text/plain")
	h.Set("X-Hoard-Read", "local_hit")
	h.Set("Etag", `"abc"`)
	h.Set("Server", "hoard")
	a.answerMAC("sig", 200, h) // the pool's first MAC is keyed here
	if raceEnabled {
		// The pool keeps nothing reliably; the MACs must still agree.
		if a.signature(req) != req.Header.Get(hdrSignature) {
			t.Error("a request's signature changed between two computations")
		}
		return
	}
	if n := testing.AllocsPerRun(200, func() { a.signature(req) }); n > 1 {
		t.Errorf("signature allocates %v times, want 1", n)
	}
	if n := testing.AllocsPerRun(200, func() { a.answerMAC("sig", 200, h) }); n > 1 {
		t.Errorf("answerMAC allocates %v times, want 1", n)
	}
}
