package peer

import (
	"bytes"
	"io"
	"net/http/httptest"
	"testing"

	"github.com/hoard-io/hoard/internal/store"
)

// FuzzStreamedAnswer: a signed streamed answer verifies with exactly its
// body, and any change to one byte of the body, or to the ETag, is
// refused: by verifyAnswer for the header, before the body's end for the
// body.
func FuzzStreamedAnswer(f *testing.F) {
	f.Add([]byte("hello"), uint(0), byte(0), "etag", false)
	f.Add([]byte("hello"), uint(4), byte(1), "etag", false)
	f.Add(bytes.Repeat([]byte{7}, 70<<10), uint(65<<10), byte(0x80), "e\nt", true)
	f.Add([]byte{}, uint(0), byte(0), "", true)
	auth, _ := NewAuth("app1", []byte(secret), nil)
	f.Fuzz(func(t *testing.T, body []byte, pos uint, x byte, etag string, changeETag bool) {
		rec := httptest.NewRecorder()
		setInfoHeaders(rec.Header(), store.ObjectInfo{ETag: etag, Size: int64(len(body)), UserMetadata: map[string]string{"m": etag}})
		sw := answer{w: rec, auth: auth, reqSig: "request-signature"}.stream(int64(len(body)))
		_, _ = sw.Write(body)
		if _, err := sw.finish(); err != nil {
			t.Fatal(err)
		}
		resp := rec.Result()
		sent := bytes.Clone(rec.Body.Bytes()) // the body, then its MAC
		if len(sent) != len(body)+bodyMACLen {
			t.Fatalf("answer of %d bytes for a body of %d", len(sent), len(body))
		}
		bodyChanged := len(body) > 0 && x != 0
		if bodyChanged {
			sent[pos%uint(len(body))] ^= x
		}
		resp.Body = io.NopCloser(bytes.NewReader(sent))
		if changeETag {
			resp.Header.Set("ETag", `"`+etag+`x"`)
		}
		err := auth.verifyAnswer(resp, "request-signature")
		if changeETag {
			if err == nil {
				t.Fatal("a changed ETag verified")
			}
			return
		}
		if err != nil {
			t.Fatalf("a signed answer refused: %v", err)
		}
		got, err := io.ReadAll(newVerifiedBody(auth, resp, int64(len(body)), "object"))
		switch {
		case bodyChanged && err == nil:
			t.Fatal("a changed body verified")
		case bodyChanged && len(got) >= len(body):
			t.Fatalf("a changed body gave all %d bytes", len(got))
		case !bodyChanged && (err != nil || !bytes.Equal(got, body)):
			t.Fatalf("the signed body: %d of %d bytes, %v", len(got), len(body), err)
		}
	})
}
