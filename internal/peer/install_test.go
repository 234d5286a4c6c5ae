package peer

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"hash/crc32"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hoard-io/hoard/internal/store"
)

// fakeInstaller is a fakeOwner that keeps offered copies whose body
// reads to its end without an error, unless refuse is set.
type fakeInstaller struct {
	*fakeOwner
	refuse bool
}

func (f *fakeInstaller) PeerInstall(_ context.Context, info store.ObjectInfo, body io.Reader) error {
	data, err := io.ReadAll(body)
	if err != nil {
		return err // nothing kept
	}
	if f.refuse {
		return ErrRefused
	}
	f.mu.Lock()
	f.objects[info.Bucket+"/"+info.Key] = stored{info: info, data: data}
	f.mu.Unlock()
	return nil
}

func newInstallPair(t *testing.T) (*Client, *fakeInstaller, string, *Auth) {
	t.Helper()
	auth, err := NewAuth("app1", []byte(secret), nil)
	if err != nil {
		t.Fatal(err)
	}
	inst := &fakeInstaller{fakeOwner: newFakeOwner()}
	srv := httptest.NewServer(NewServer(auth, inst, nil))
	t.Cleanup(srv.Close)
	cl := NewClient(auth, ClientConfig{})
	t.Cleanup(cl.Close)
	return cl, inst, strings.TrimPrefix(srv.URL, "http://"), auth
}

func offered(key string, data []byte) store.ObjectInfo {
	return store.ObjectInfo{Bucket: "bk", Key: key, Size: int64(len(data)), ETag: "v1-" + key,
		VersionID: "ver1", ContentType: "image/png", UserMetadata: map[string]string{"k": "v"}}
}

func TestInstallRoundTrip(t *testing.T) {
	cl, inst, addr, _ := newInstallPair(t)
	data := randomBytes(300 << 10)
	info := offered("dir/a b", data)
	if err := cl.Install(context.Background(), addr, info, bytes.NewReader(data), crc32.Checksum(data, castagnoli)); err != nil {
		t.Fatalf("Install: %v", err)
	}
	inst.mu.Lock()
	got := inst.objects["bk/dir/a b"]
	inst.mu.Unlock()
	if !bytes.Equal(got.data, data) || got.info.ETag != info.ETag || got.info.VersionID != "ver1" ||
		got.info.ContentType != "image/png" || got.info.UserMetadata["k"] != "v" {
		t.Fatalf("installed %d bytes with %+v", len(got.data), got.info)
	}
	inst.refuse = true
	err := cl.Install(context.Background(), addr, offered("b", data), bytes.NewReader(data), crc32.Checksum(data, castagnoli))
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("Install to a peer that refuses: %v, want ErrRefused", err)
	}
}

// A body that does not match the CRC32C the sender signed is never
// kept, even though its trailer matches it (the trailer is not keyed).
func TestInstallBodyMustMatchSignedCRC(t *testing.T) {
	cl, inst, addr, _ := newInstallPair(t)
	data := randomBytes(4096)
	other := append([]byte(nil), data...)
	other[100] ^= 1
	err := cl.Install(context.Background(), addr, offered("a", data), bytes.NewReader(other), crc32.Checksum(data, castagnoli))
	if err == nil {
		t.Fatal("Install of bytes other than those signed succeeded")
	}
	if _, ok := inst.get("bk", "a"); ok {
		t.Fatal("bytes other than those signed were kept")
	}
	// Short: fewer bytes than the size signed.
	err = cl.Install(context.Background(), addr, offered("a", data), bytes.NewReader(data[:100]), crc32.Checksum(data, castagnoli))
	if err == nil {
		t.Fatal("Install of a short body succeeded")
	}
	if _, ok := inst.get("bk", "a"); ok {
		t.Fatal("a short body was kept")
	}
}

// Nobody without the application's key can offer a copy: an unsigned
// request, one signed with another key, and a signed one whose offered
// version was changed on the way are all refused, and nothing is kept.
func TestInstallNeedsTheKey(t *testing.T) {
	_, inst, addr, auth := newInstallPair(t)
	data := []byte("forged bytes")
	info := offered("a", data)
	crc := crc32.Checksum(data, castagnoli)

	otherAuth, err := NewAuth("app1", []byte("another-secret-of-16-bytes"), nil)
	if err != nil {
		t.Fatal(err)
	}
	other := NewClient(otherAuth, ClientConfig{})
	defer other.Close()
	if err := other.Install(context.Background(), addr, info, bytes.NewReader(data), crc); err == nil {
		t.Fatal("Install signed with another key succeeded")
	}

	build := func() *http.Request {
		raw, _ := json.Marshal(offer{Info: info, CRC32C: crc})
		req, _ := http.NewRequest(http.MethodPut, "http://"+addr+installPrefix+"bk/a", bytes.NewReader(data))
		req.Header.Set(hdrSize, "12")
		req.Header.Set(hdrInstall, base64.RawURLEncoding.EncodeToString(raw))
		return req
	}
	resp, err := http.DefaultClient.Do(build()) // unsigned
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("unsigned install answered %d, want 403", resp.StatusCode)
	}

	req := build()
	auth.Sign(req)
	forged := info
	forged.ETag = "v2-a"
	raw, _ := json.Marshal(offer{Info: forged, CRC32C: crc})
	req.Header.Set(hdrInstall, base64.RawURLEncoding.EncodeToString(raw)) // after signing
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("install with its version changed after signing answered %d, want 403", resp.StatusCode)
	}
	if _, ok := inst.get("bk", "a"); ok {
		t.Fatal("an install without the key was kept")
	}
}

// A peer that takes no copies answers an install as a bad request.
func TestInstallToAnOwnerThatTakesNone(t *testing.T) {
	cl, owner, addr := newPair(t)
	data := []byte("x")
	err := cl.Install(context.Background(), addr, offered("a", data), bytes.NewReader(data), crc32.Checksum(data, castagnoli))
	if !errors.Is(err, ErrBadRequest) {
		t.Fatalf("Install to a plain Owner: %v, want ErrBadRequest", err)
	}
	if _, ok := owner.get("bk", "a"); ok {
		t.Fatal("kept")
	}
}
